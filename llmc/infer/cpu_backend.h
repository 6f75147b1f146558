// infer_gpt2's backend (llmc/infer/driver.h): the fp32 KV-cache decoder of the CPU reference
// (llmc/cpu/gpt2_decoder.h), tokens chosen by pick_token (llmc/infer/pick_token.h).
#pragma once
#include <memory>

#include "llmc/infer/driver.h"

namespace llmc {

std::unique_ptr<InferBackend> make_cpu_infer_backend(const GPT2Config& c, int B, int longest, int max_len);

} // namespace llmc
