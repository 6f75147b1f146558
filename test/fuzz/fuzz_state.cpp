// Training-state files (llmc/io/checkpoint.h load_state) and checkpoint file names. The parameter count and step
// the loader is asked for come from the input's own header, so that the size arithmetic sees any value.
#include <cstring>

#include "llmc/io/checkpoint.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A checkpoint name is accepted only in the spelling the writer gives its step.
    std::string name((const char*)data, std::min<size_t>(size, 32));
    int64_t step = llmc::checkpoint_step_of(name, "state_");
    if (step >= 0) fuzz::check(llmc::checkpoint_state_path(".", step) == "./" + name, "checkpoint name round trip");

    llmc::Header h{};
    memcpy(h.data(), data, std::min(size, llmc::HEADER_BYTES));
    std::string path = fuzz::write_input("state.bin", data, size);
    fuzz::expect_only_llmc_errors([&] {
        size_t n = llmc::header_get64(h, llmc::ST_NPARAMS);
        llmc::TrainState s = llmc::load_state(path, n, (int64_t)llmc::header_get64(h, llmc::ST_STEP));
        fuzz::check(s.m.size() == n && s.v.size() == n && (s.master.empty() || s.master.size() == n),
                    "moment sizes differ from the parameter count");
    });
    return 0;
}
