// A scripted device for --energy's method (llmc/profiler/energy.h): a virtual clock, a queue of work that runs
// after the host queues it (as a GPU's stream does), and an energy counter that integrates a known power per
// target and updates only every `period_s`, each update's increment off by a relative noise. Used by
// test/test_energy.cpp and the sample profile's synthetic energy.csv (dev/sample_profile.cpp).
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "llmc/profiler/energy.h"

namespace llmc::testutil {

class ScriptedEnergyDevice : public prof::EnergyCounter {
public:
    ScriptedEnergyDevice(double idle_w, double period_s, double noise, unsigned seed = 1)
        : idle_w_(idle_w), period_s_(period_s), noise_(noise), rng_(seed) {}

    std::string status() const override { return ""; }
    std::string name() const override { return "synthetic (scripted counter)"; }
    bool synthetic() const override { return true; }
    // The value of the last update at or before the host's time.
    double joules() override {
        const long k = (long)std::floor(host_s_ / period_s_ + 1e-12);
        while ((long)updates_.size() <= k) {
            const double exact = energy_until((double)updates_.size() * period_s_);
            const double prev = updates_.empty() ? 0 : updates_.back();
            updates_.push_back(prev + (exact - exact_) * (1 + noise_ * normal_(rng_)));
            exact_ = exact;
        }
        return updates_[k];
    }
    void clocks(int* sm_clock_mhz, int* temperature_c) override { *sm_clock_mhz = 1980, *temperature_c = 60; }

    // Queues n runs of d_s seconds at watts each: they start when the queue is free, the host moves on at once
    // (1 us per launch).
    void queue(long n, double d_s, double watts) {
        const double start = std::max(host_s_, busy_until_);
        busy_until_ = start + n * d_s;
        work_.push_back({start, busy_until_, watts});
        host_s_ += n * 1e-6;
    }
    prof::EnergyClock clock() {
        return {[this] { return host_s_; }, [this] { host_s_ = std::max(host_s_, busy_until_); },
                [this](double s) { host_s_ += s; }};
    }
    double now() const { return host_s_; }

private:
    struct Work {
        double start, end, watts;
    };
    // Joules from time 0 to t: idle power throughout, plus each queued work's excess over idle while it runs.
    // Reads come in increasing t, so work that ended before the last t is folded into settled_.
    double energy_until(double t) {
        while (first_ < work_.size() && work_[first_].end <= t) {
            const Work& w = work_[first_++];
            settled_ += (w.watts - idle_w_) * (w.end - w.start);
        }
        double e = idle_w_ * t + settled_;
        for (size_t i = first_; i < work_.size(); i++) {
            const Work& w = work_[i];
            if (w.start < t) e += (w.watts - idle_w_) * (std::min(t, w.end) - w.start);
        }
        return e;
    }

    double idle_w_, period_s_, noise_;
    std::mt19937 rng_;
    std::normal_distribution<double> normal_{0.0, 1.0};
    double host_s_ = 0, busy_until_ = 0;
    std::vector<Work> work_;
    size_t first_ = 0;
    double settled_ = 0;
    std::vector<double> updates_; // the counter's values, one per update
    double exact_ = 0;            // the exact energy at the last update
};

// A step of parts, each replay one step's worth of a sub-block: its time and its power on the scripted device.
struct ScriptedPart {
    const char* subblock;
    const char* phase;
    double seconds, watts;
};

// The targets for measure_energy: the parts, then the whole step (every part in turn).
inline std::vector<prof::ReplayTarget> scripted_targets(ScriptedEnergyDevice& dev,
                                                       const std::vector<ScriptedPart>& parts) {
    std::vector<prof::ReplayTarget> targets;
    for (const ScriptedPart& p : parts)
        targets.push_back({p.subblock, p.phase, "-", prof::EnergyKind::part,
                           [&dev, p](long n) { dev.queue(n, p.seconds, p.watts); }});
    targets.push_back({"step", "all", "-", prof::EnergyKind::step, [&dev, parts](long n) {
                           for (long i = 0; i < n; i++)
                               for (const ScriptedPart& p : parts) dev.queue(1, p.seconds, p.watts);
                       }});
    return targets;
}

} // namespace llmc::testutil
