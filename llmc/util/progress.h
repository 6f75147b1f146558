/*
 * Progress for long stretches of work: durations as people read them ("42 s", "3m 05s", "2h 07m"), the ETA
 * of the step lines, and Progress, which prints "<what>: batch 3/20, 12 s elapsed, ETA 1m 08s" at most once every
 * few seconds, so that work with no other output (a long val loss, a step of many micro-batches, a
 * calibration) still shows that it moves and how long it has left. Quick work prints nothing.
 */
#pragma once
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "llmc/util/utils.h"

namespace llmc {

// Seconds as "0.4 s", "42 s", "3m 05s", "2h 07m"; "-" for a negative or non-finite value.
inline std::string format_duration(double s) {
    if (!std::isfinite(s) || s < 0) return "-";
    if (s < 10) return strprintf("%.1f s", s);
    long n = std::lround(s);
    if (n < 60) return strprintf("%ld s", n);
    if (n < 3600) return strprintf("%ldm %02lds", n / 60, n % 60);
    return strprintf("%ldh %02ldm", n / 3600, n % 3600 / 60);
}

// "12 s elapsed, ETA 1m 08s": the remaining items at the mean pace of those done; no ETA before the first.
inline std::string elapsed_and_eta(double elapsed_s, long done, long total) {
    std::string s = format_duration(elapsed_s) + " elapsed";
    if (done > 0 && total >= done) s += ", ETA " + format_duration(elapsed_s / done * (total - done));
    return s;
}

/*
 * The step lines' ETA: the steps left at the mean step time so far, plus the work at step boundaries still to
 * come (val losses, samples, checkpoints), each kind at the mean it has cost so far. Start-up and a long val
 * loss before the first step are not spread over the steps (they made step 1's ETA ten times too long).
 */
class RunEta {
public:
    enum Kind { val, sample, checkpoint, kinds };
    void step(double s) { step_s_ += s, steps_++; }
    void boundary(Kind k, double s) { kind_s_[k] += s, kind_n_[k]++; }
    // After step `done` of `last`: steps done+1..last, and each kind's boundaries at steps done..last that are a
    // multiple of every[kind] or the last step (every 0: none).
    double eta(long done, long last, const long (&every)[kinds]) const {
        double s = steps_ ? step_s_ / steps_ * (double)(last - done) : 0.0;
        for (int k = 0; k < kinds; k++) {
            if (every[k] <= 0 || kind_n_[k] == 0) continue;
            const long n = last / every[k] - (done - 1) / every[k] + (last % every[k] != 0 ? 1 : 0);
            s += kind_s_[k] / kind_n_[k] * (double)n;
        }
        return s;
    }

private:
    double step_s_ = 0, kind_s_[kinds] = {};
    long steps_ = 0, kind_n_[kinds] = {};
};

class Progress {
public:
    using Clock = std::function<double()>; // seconds, monotonic
    static double steady_seconds() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    // what: the work ("val loss"); unit: what is counted ("batch": "val loss: batch 3/20", never read as a value
    // of 3/20); every_s: the most time between two lines. out and clock are for tests.
    explicit Progress(std::string what, std::string unit, double every_s = 5.0, FILE* out = stdout,
                      Clock clock = steady_seconds)
        : what_(std::move(what)), unit_(std::move(unit)), every_s_(every_s), out_(out), clock_(std::move(clock)),
          start_(clock_()), last_(start_) {}

    // `done` of `total` items are finished; prints a line when the last one (or the start) is every_s old.
    void tick(long done, long total) {
        double now = clock_();
        if (now - last_ < every_s_ || done >= total) return; // the finished work has a line of its own
        last_ = now;
        fprintf(out_, "%s: %s %ld/%ld, %s\n", what_.c_str(), unit_.c_str(), done, total,
                elapsed_and_eta(now - start_, done, total).c_str());
        fflush(out_);
    }

private:
    std::string what_, unit_;
    double every_s_;
    FILE* out_;
    Clock clock_;
    double start_, last_;
};

} // namespace llmc
