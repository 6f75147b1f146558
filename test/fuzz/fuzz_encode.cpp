// GPT-2 encoding of arbitrary bytes with the real vocabulary ($LLMC_DATA/gpt2, default the repository's
// dev/data/gpt2; `make fuzz` runs from the repository root):
// invalid UTF-8 is an llmc::Error; anything accepted gives ids below the vocabulary size and decodes back to
// the input.
#include <cstdlib>
#include <memory>

#include "llmc/io/tokenizer.h"
#include "test/fuzz/fuzz_util.h"

static std::unique_ptr<llmc::GPT2Tokenizer> tokenizer;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* d = getenv("LLMC_DATA");
    std::string dir = d && *d ? std::string(d) + "/gpt2" : "dev/data/gpt2";
    tokenizer = std::make_unique<llmc::GPT2Tokenizer>(
        llmc::GPT2Tokenizer::from_gpt2_files(dir + "/encoder.json", dir + "/vocab.bpe"));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text((const char*)data, size);
    fuzz::expect_only_llmc_errors([&] {
        std::vector<int> ids = tokenizer->encode(text);
        for (int id : ids)
            fuzz::check(id >= 0 && id < tokenizer->vocab_size(), "encode gave an id outside the vocabulary");
        fuzz::check(tokenizer->decode(ids) == text, "decode(encode(text)) != text");
    });
    return 0;
}
