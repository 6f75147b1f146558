/*
 * Progress for long stretches of work: durations as people read them ("42 s", "3m 05s", "2h 07m"), the ETA
 * of the step lines, and Progress, which prints "<what>: 3/20, 12 s elapsed, ETA 1m 08s" at most once every
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

#include "llmc/utils.h"

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

class Progress {
public:
    using Clock = std::function<double()>; // seconds, monotonic
    static double steady_seconds() {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    // what: the work ("val loss"); every_s: the most time between two lines. out and clock are for tests.
    explicit Progress(std::string what, double every_s = 5.0, FILE* out = stdout, Clock clock = steady_seconds)
        : what_(std::move(what)), every_s_(every_s), out_(out), clock_(std::move(clock)), start_(clock_()),
          last_(start_) {}

    // `done` of `total` items are finished; prints a line when the last one (or the start) is every_s old.
    void tick(long done, long total) {
        double now = clock_();
        if (now - last_ < every_s_ || done >= total) return; // the finished work has a line of its own
        last_ = now;
        fprintf(out_, "%s: %ld/%ld, %s\n", what_.c_str(), done, total, elapsed_and_eta(now - start_, done, total).c_str());
        fflush(out_);
    }

private:
    std::string what_;
    double every_s_;
    FILE* out_;
    Clock clock_;
    double start_, last_;
};

} // namespace llmc
