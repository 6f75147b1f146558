// Helpers shared by the tests: data paths, temp dirs, running the built programs.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

namespace testutil {

// GPT-2's vocabulary (encoder.json, vocab.bpe): the repository's copy, or $LLMC_DATA/gpt2 where LLMC_DATA is set.
inline std::string vocab_dir() {
    const char* d = getenv("LLMC_DATA");
    return d && *d ? std::string(d) + "/gpt2" : "dev/data/gpt2";
}

// The tinyshakespeare text the tokenizer and data tests read, and the prefix of its facts in
// test/data/tokenizer_vectors.txt: the whole text from $LLMC_DATA/tinyshakespeare/input.txt where LLMC_DATA is set,
// else the excerpt the repository ships (its first sections, enough for both splits).
struct Corpus {
    std::string path, facts;
};
inline Corpus shakespeare() {
    const char* d = getenv("LLMC_DATA");
    if (d && *d) return {std::string(d) + "/tinyshakespeare/input.txt", "shakespeare"};
    return {"test/data/tinyshakespeare_excerpt.txt", "excerpt"};
}

// The whole file as bytes ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// RFC 4180 rows, header included: quoted fields may hold commas and doubled quotes (kernel names do).
inline std::vector<std::vector<std::string>> read_csv_rows(const std::string& path) {
    std::vector<std::vector<std::string>> rows(1);
    std::string text = slurp(path), cell;
    bool quoted = false;
    for (size_t i = 0; i < text.size(); i++) {
        char c = text[i];
        if (quoted) {
            if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') cell += '"', i++;
            else if (c == '"') quoted = false;
            else cell += c;
        } else if (c == '"') {
            quoted = true;
        } else if (c == ',') {
            rows.back().push_back(cell), cell.clear();
        } else if (c == '\n') {
            rows.back().push_back(cell), cell.clear();
            rows.emplace_back();
        } else {
            cell += c;
        }
    }
    if (rows.back().empty()) rows.pop_back();
    return rows;
}

// The data rows of a CSV, each keyed by the header's column names.
inline std::vector<std::map<std::string, std::string>> read_csv(const std::string& path) {
    std::vector<std::vector<std::string>> rows = read_csv_rows(path);
    std::vector<std::map<std::string, std::string>> out;
    for (size_t r = 1; r < rows.size(); r++) {
        std::map<std::string, std::string> row;
        for (size_t i = 0; i < rows[0].size() && i < rows[r].size(); i++) row[rows[0][i]] = rows[r][i];
        out.push_back(row);
    }
    return out;
}

// Whether text contains part (program output, messages, file contents).
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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

// A command line handed to a parser or a driver in-process: argc and argv over its own copy of the words.
class CommandLine {
public:
    explicit CommandLine(std::vector<std::string> words) : words_(std::move(words)) {
        for (std::string& w : words_) argv_.push_back(&w[0]);
    }
    int argc() const { return (int)argv_.size(); }
    char** argv() { return argv_.data(); }

private:
    std::vector<std::string> words_;
    std::vector<char*> argv_;
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

// A non-empty file that starts with the PNG signature.
inline bool is_png(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    char sig[8] = {};
    f.read(sig, 8);
    return f.gcount() == 8 && std::string(sig, 8) == "\x89PNG\r\n\x1a\n";
}

} // namespace testutil

// For the tests that run the scripts/ plotters: skips (LLMC_SKIP_PLOT_TESTS=1) or fails, naming what to install,
// without python3 and matplotlib.
#define REQUIRE_MATPLOTLIB()                                                                                   \
    do {                                                                                                       \
        const char* skip = getenv("LLMC_SKIP_PLOT_TESTS");                                                     \
        if (skip && std::string(skip) == "1") GTEST_SKIP() << "LLMC_SKIP_PLOT_TESTS=1";                        \
        ASSERT_EQ(testutil::run("python3 --version").exit_code, 0)                                             \
            << "python3 not found: install python3 and matplotlib (or set LLMC_SKIP_PLOT_TESTS=1)";             \
        ASSERT_EQ(testutil::run("python3 -c 'import matplotlib'").exit_code, 0)                                \
            << "matplotlib not found: python3 -m pip install matplotlib (or set LLMC_SKIP_PLOT_TESTS=1)";      \
    } while (0)
