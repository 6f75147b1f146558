// The training driver's pieces that do not depend on where the model runs (llmc/train/common.h).
#include "llmc/train/common.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace llmc {

std::string dirname_of(const std::string& path) {
    size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string find_val_spec(const TrainOptions& opt, const std::string& first_train_file) {
    if (!opt.val_data.empty()) return opt.val_data;
    std::string dir = is_directory(opt.train_data) ? opt.train_data : dirname_of(first_train_file);
    return glob_files(dir + "/*val*.bin").empty() ? "" : dir;
}

std::unique_ptr<GPT2Tokenizer> find_sample_tokenizer(const std::string& first_train_file) {
    for (const std::string& p : {dirname_of(first_train_file) + "/gpt2_tokenizer.bin", std::string("gpt2_tokenizer.bin")})
        if (file_exists(p)) return std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_llmc_file(p));
    return nullptr;
}

void print_subblock_table(const SubBlockTimes& t, int steps, FILE* out) {
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
        for (int p : {(int)Phase::fwd, (int)Phase::bwd, (int)Phase::opt}) { // training's phases
            if (t.calls[s][p]) fprintf(out, " %10.3f", 1e3 * t.seconds[s][p] / steps);
            else fprintf(out, " %10s", "-");
        }
        fprintf(out, " %6.1f%%\n", 100.0 * row / total);
    }
    fprintf(out, "%-12s %32.3f\n", "total", 1e3 * total / steps);
}

TrainLog::TrainLog(const std::string& dir, int64_t resume_step) {
    if (dir.empty()) return;
    const std::string path = dir + "/main.log";
    if (resume_step >= 0 && file_exists(path)) {
        std::string text = detail::read_text_file(path), kept;
        for (size_t pos = 0; pos < text.size();) {
            size_t eol = std::min(text.find('\n', pos), text.size());
            std::string line = text.substr(pos, eol - pos);
            pos = eol + 1;
            long long step;
            char kind[4];
            bool ours = sscanf(line.c_str(), "s:%lld %3[a-z]:", &step, kind) == 2;
            if (!ours || step < resume_step || (step == resume_step && strcmp(kind, "trl") == 0))
                kept += line + "\n";
        }
        AtomicFile f(path);
        f.write(kept.data(), kept.size());
        f.commit();
    }
    file_ = std::make_unique<File>(path, resume_step >= 0 ? "a" : "w");
}

void TrainLog::train(int step, float loss, float lr, float norm) {
    if (file_) line(strprintf("s:%d trl:%.6f lr:%.6e norm:%.6f\n", step, loss, lr, norm));
}

void TrainLog::val(int step, float loss) {
    if (file_) line(strprintf("s:%d tel:%.6f\n", step, loss));
}

void TrainLog::line(const std::string& s) {
    try {
        file_->write(s.data(), s.size());
        if (fflush(file_->get()) != 0)
            throw Error(strprintf("%s: write failed (%s)", file_->path().c_str(), strerror(errno)));
    } catch (const Error& e) {
        fflush(stdout); // the line lands between the step lines, not inside one
        fprintf(stderr, "error: %s; training goes on without its log, and the run will exit with status 1\n", e.what());
        file_.reset(); // what fclose still has to write is lost with the rest
        failed_ = true;
    }
}

} // namespace llmc
