/*
 * Pieces of the training driver that do not depend on where the model runs: output directory and log
 * file, val-data lookup, the tokenizer used to print samples, and the per-sub-block timing table.
 */
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <sys/stat.h>

#include "llmc/cli.h"
#include "llmc/dataloader.h"
#include "llmc/profiler/cpu_timers.h"
#include "llmc/tokenizer.h"

namespace llmc {

inline std::string dirname_of(const std::string& path) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

/*
 * Val shards: -j when given (must exist); otherwise *val*.bin in the train directory (or beside the first
 * train file), and no val loss at all when there are none. Returns "" for "no val data".
 */
inline std::string find_val_spec(const TrainOptions& opt, const std::string& first_train_file) {
    if (!opt.val_data.empty()) return opt.val_data;
    std::string dir = is_directory(opt.train_data) ? opt.train_data : dirname_of(first_train_file);
    return glob_files(dir + "/*val*.bin").empty() ? "" : dir;
}

// gpt2_tokenizer.bin beside the train data, else in the working directory; null when neither exists.
inline std::unique_ptr<GPT2Tokenizer> find_sample_tokenizer(const std::string& first_train_file) {
    for (const std::string& p : {dirname_of(first_train_file) + "/gpt2_tokenizer.bin", std::string("gpt2_tokenizer.bin")})
        if (file_exists(p)) return std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_llmc_file(p));
    return nullptr;
}

// Appends llm.c-style lines ("s:N trl:L", "s:N tel:L") to <dir>/main.log; a no-op without -o.
class TrainLog {
public:
    explicit TrainLog(const std::string& dir, bool append) {
        if (dir.empty()) return;
        file_ = std::make_unique<File>(dir + "/main.log", append ? "a" : "w");
    }
    void train(int step, float loss, float lr, float norm) {
        if (file_) line(strprintf("s:%d trl:%.6f lr:%.6e norm:%.6f\n", step, loss, lr, norm));
    }
    void val(int step, float loss) {
        if (file_) line(strprintf("s:%d tel:%.6f\n", step, loss));
    }

private:
    void line(const std::string& s) {
        file_->write(s.data(), s.size());
        fflush(file_->get());
    }
    std::unique_ptr<File> file_;
};

// Mean milliseconds per step for each sub-block, forward and backward side by side, plus the optimizer.
inline void print_subblock_table(const SubBlockTimes& t, int steps, FILE* out = stdout) {
    if (steps <= 0) return;
    double total = 0;
    for (auto& row : t.seconds)
        for (double s : row) total += s;
    fprintf(out, "\nper-step time by sub-block (mean over %d steps, ms)\n", steps);
    fprintf(out, "%-12s %10s %10s %10s %7s\n", "sub-block", "fwd", "bwd", "opt", "share");
    for (int s = 0; s < NUM_SUBBLOCKS; s++) {
        double row = 0;
        for (double x : t.seconds[s]) row += x;
        if (row == 0) continue;
        fprintf(out, "%-12s", subblock_name((SubBlock)s));
        for (int p = 0; p < NUM_PHASES; p++) {
            if (t.calls[s][p]) fprintf(out, " %10.3f", 1e3 * t.seconds[s][p] / steps);
            else fprintf(out, " %10s", "-");
        }
        fprintf(out, " %6.1f%%\n", 100.0 * row / total);
    }
    fprintf(out, "%-12s %32.3f\n", "total", 1e3 * total / steps);
}

} // namespace llmc
