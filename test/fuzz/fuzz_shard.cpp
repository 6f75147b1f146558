// Data shards (llmc/io/dataloader.h): the header check against the file size, the token-id check, batches across
// the shard end and a position restore.
#include "llmc/io/dataloader.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz::write_input("shard.bin", data, size);
    fuzz::expect_only_llmc_errors([&] {
        llmc::DataLoader dl(path, "train", 2, 3, llmc::GPT2_VOCAB_SIZE);
        for (int i = 0; i < 5; i++) {
            dl.next_batch();
            for (int j = 0; j < 6; j++)
                fuzz::check(dl.inputs()[j] < llmc::GPT2_VOCAB_SIZE && dl.targets()[j] < llmc::GPT2_VOCAB_SIZE,
                            "a batch holds a token id >= the vocabulary size");
        }
        llmc::DataPosition p = dl.position();
        dl.restore(p);
    });
    return 0;
}
