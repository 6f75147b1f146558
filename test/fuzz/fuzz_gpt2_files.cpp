// GPT-2's vocabulary files (llmc/io/tokenizer.h from_gpt2_files): the input is encoder.json, a NUL byte, then
// vocab.bpe. A vocabulary that loads must encode text (here the vocab.bpe part, when it is UTF-8) to ids below
// its size that decode back to the text.
#include <cstring>

#include "llmc/io/tokenizer.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    if (!nul) return 0;
    size_t json_size = nul - data;
    std::string enc = fuzz::write_input("encoder.json", data, json_size);
    std::string bpe = fuzz::write_input("vocab.bpe", nul + 1, size - json_size - 1);
    fuzz::expect_only_llmc_errors([&] {
        llmc::GPT2Tokenizer t = llmc::GPT2Tokenizer::from_gpt2_files(enc, bpe);
        std::string_view text((const char*)nul + 1, size - json_size - 1);
        std::vector<int> ids = t.encode(text);
        for (int id : ids) fuzz::check(id >= 0 && id < t.vocab_size(), "encode gave an id outside the vocabulary");
        fuzz::check(t.decode(ids) == text, "decode(encode(text)) != text");
    });
    return 0;
}
