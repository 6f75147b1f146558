/*
 * Pieces of the training driver that do not depend on where the model runs: output directory and log
 * file, val-data lookup, the tokenizer used to print samples, and the per-sub-block timing table.
 */
#pragma once
#include <cstdio>
#include <memory>
#include <string>

#include "llmc/train/options.h"
#include "llmc/io/dataloader.h"
#include "llmc/profiler/cpu_timers.h"
#include "llmc/io/tokenizer.h"

namespace llmc {

std::string dirname_of(const std::string& path);

/*
 * Val shards: -j when given (must exist); otherwise *val*.bin in the train directory (or beside the first
 * train file), and no val loss at all when there are none. Returns "" for "no val data".
 */
std::string find_val_spec(const TrainOptions& opt, const std::string& first_train_file);

// gpt2_tokenizer.bin beside the train data, else in the working directory; null when neither exists.
std::unique_ptr<GPT2Tokenizer> find_sample_tokenizer(const std::string& first_train_file);

/*
 * Appends llm.c-style lines ("s:N trl:L", "s:N tel:L") to <dir>/main.log; a no-op without -o. A fresh run
 * (resume_step < 0) starts the log over. A run resumed from the checkpoint at step R first cuts the log back to
 * what had been logged when that checkpoint was written, the train lines up to step R and the val lines before
 * it (the resumed run logs step R's val loss again), so that the log reads as one uninterrupted run however far
 * the interrupted run got past its checkpoint. The log is an output like any other (a regular file or a new
 * name, never followed through a link). A write that fails (a full disk) is reported once, on stderr, and the
 * log stops there; training and its checkpoints go on, and failed() tells the driver to exit 1 at the end.
 */
class TrainLog {
public:
    TrainLog(const std::string& dir, int64_t resume_step);
    void train(int step, float loss, float lr, float norm);
    void val(int step, float loss);
    bool failed() const { return failed_; }

private:
    void line(const std::string& s);
    std::unique_ptr<File> file_;
    bool failed_ = false;
};

// Mean milliseconds per step for each sub-block, forward and backward side by side, plus the optimizer.
void print_subblock_table(const SubBlockTimes& t, int steps, FILE* out = stdout);

} // namespace llmc
