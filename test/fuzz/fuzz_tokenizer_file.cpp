// llm.c tokenizer files (llmc/io/tokenizer.h from_llmc_file): header, token lengths, the size check before
// allocation. Every token of an accepted file decodes to its bytes.
#include "llmc/io/tokenizer.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz::write_input("tokenizer.bin", data, size);
    fuzz::expect_only_llmc_errors([&] {
        llmc::GPT2Tokenizer t = llmc::GPT2Tokenizer::from_llmc_file(path);
        fuzz::check(t.eot() >= 0 && t.eot() < t.vocab_size(), "EOT outside the vocabulary");
        for (int id = 0; id < t.vocab_size(); id++)
            fuzz::check(t.decode({id}) == t.token_bytes(id) && !t.token_bytes(id).empty(), "token decode");
    });
    return 0;
}
