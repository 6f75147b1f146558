// Helpers shared by the tests: data paths, temp dirs, running the built programs.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace testutil {

// Root of the shared test data (tinyshakespeare/input.txt, gpt2/{encoder.json,vocab.bpe}).
inline std::string data_dir() {
    const char* d = getenv("LLMC_DATA");
    return d ? d : "../shared/data";
}

// A fresh directory under /tmp, removed when the object dies.
struct TempDir {
    std::string path;
    TempDir() {
        char tmpl[] = "/tmp/llmc_test_XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { (void)!system(("rm -rf '" + path + "'").c_str()); }
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct RunResult {
    int exit_code;
    std::string output; // stdout and stderr together
};

// Runs a shell command and captures its output and exit status.
inline RunResult run(const std::string& cmd) {
    RunResult r{-1, ""};
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
    int status = pclose(p);
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

} // namespace testutil
