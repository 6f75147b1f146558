// Shared by the libFuzzer targets in this directory (run them with `make fuzz`, see doc/testing.md).
//
// The parsers read files, so each input is written to a scratch file first. Bad input may end in llmc::Error
// and in nothing else: another exception, a crash, a sanitizer report, a hang (-timeout) or an allocation over
// libFuzzer's -malloc_limit_mb is a finding. check() states a property the target expects of accepted input.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

#include "llmc/util/utils.h"

namespace fuzz {

// $TMPDIR/llmc_fuzz_<pid>_<name> holding `data`; rewritten for every input, removed when the process exits.
inline std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
    struct Scratch {
        std::string path;
        ~Scratch() { unlink(path.c_str()); }
    };
    static Scratch scratch[4];
    const char* tmp = getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/llmc_fuzz_" + std::to_string(getpid()) + "_" + name;
    for (Scratch& s : scratch)
        if (s.path.empty() || s.path == path) {
            s.path = path;
            break;
        }
    llmc::File f(path, "wb");
    f.write(data, size);
    f.close();
    return path;
}

// Runs fn; the one exception bad input may cause is llmc::Error.
template <typename Fn> void expect_only_llmc_errors(Fn&& fn) {
    try {
        fn();
    } catch (const llmc::Error&) {
    }
}

inline void check(bool ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "fuzz property violated: %s\n", what);
        abort();
    }
}

} // namespace fuzz
