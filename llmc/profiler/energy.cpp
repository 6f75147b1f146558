// Joules per sub-block: the measurement (llmc/profiler/energy.h).
#include "llmc/profiler/energy.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "llmc/profiler/nvml_sampler.h"
#include "llmc/profiler/rapl.h"
#include "llmc/util/utils.h"

namespace llmc::prof {

namespace {

class NvmlEnergyCounter : public EnergyCounter {
public:
    explicit NvmlEnergyCounter(const std::string& pci_bus_id) : nvml_([] { return uint64_t(0); }, 100, pci_bus_id) {}
    std::string status() const override {
        if (!nvml_.available()) return nvml_.status();
        return nvml_.has_energy_counter() ? "" : "this GPU or driver has no energy counter "
                                                 "(nvmlDeviceGetTotalEnergyConsumption: Volta or newer)";
    }
    std::string name() const override { return "NVML total energy counter"; }
    double joules() override { return nvml_.energy_joules(); }
    void clocks(int* sm_clock_mhz, int* temperature_c) override { nvml_.clocks(sm_clock_mhz, temperature_c); }

private:
    PowerSampler nvml_;
};

class RaplEnergyCounter : public EnergyCounter {
public:
    explicit RaplEnergyCounter(const std::string& root) : rapl_(root) {}
    std::string status() const override { return rapl_.ok() ? "" : "RAPL not readable: " + rapl_.status(); }
    std::string name() const override {
        return strprintf("RAPL package counter%s", rapl_.packages() == 1 ? "" : "s");
    }
    double joules() override { return rapl_.joules(); }

private:
    RaplReader rapl_;
};

double read(EnergyCounter& counter) {
    const double j = counter.joules();
    if (!std::isfinite(j)) throw Error("--energy: the " + counter.name() + " could not be read");
    return j;
}

// A target's time per replay, measured by doubling the count until calibrate_s.
double replay_seconds(const ReplayTarget& t, const EnergyClock& clock, const EnergyOptions& opt) {
    t.replay(1); // warm
    clock.sync();
    long n = 1;
    double dt = 0;
    for (;; n *= 2) {
        const double t0 = clock.now_s();
        t.replay(n);
        clock.sync();
        dt = clock.now_s() - t0;
        if (dt >= opt.calibrate_s || n >= (1L << 24)) break;
    }
    return std::max(dt / n, 1e-9);
}

Error stalled(EnergyCounter& counter, const ReplayTarget& t, double seconds) {
    return Error(strprintf("--energy: the %s did not advance in %.1f s (measuring %s %s)", counter.name().c_str(),
                           seconds, t.subblock.c_str(), t.phase.c_str()));
}

/*
 * One measurement: batches until the counter advances (the start), then until it has advanced ceil(window / period)
 * more times (the end). The replays counted are those of the batches after the start's through the end's. The end is
 * a count of updates, not a time: stopping at the first update past a time would pick the end by where the updates
 * fell in their batches, and bias the count.
 */
EnergyRun measure_once(const ReplayTarget& t, long batch, EnergyCounter& counter, const EnergyClock& clock,
                       double window_s, double period_s, const EnergyOptions& opt, std::mt19937& rng) {
    const double batch_s = window_s / opt.batches_per_window; // idle's batch
    // A wait of a random part of a batch first: where the counter's updates fall in the batches is then uniform,
    // not tied to where the last measurement ended, and the edges' errors cancel on average.
    clock.idle(std::uniform_real_distribution<double>(0, batch_s)(rng));
    auto run_batch = [&] {
        if (t.kind == EnergyKind::idle) return clock.idle(batch_s);
        t.replay(batch);
        clock.sync(); // the counter is read after the work it should count
    };
    const double give_up = 2 * window_s + 10 * period_s + 1.0;
    double last = read(counter);
    const double t_first = clock.now_s();
    for (;;) {
        run_batch();
        const double e = read(counter);
        if (e != last) {
            last = e;
            break;
        }
        if (clock.now_s() - t_first > give_up) throw stalled(counter, t, give_up);
    }
    const double t_start = clock.now_s(), e_start = last;
    const long updates = std::max(1L, (long)std::ceil(window_s / period_s - 1e-6));
    long replays = 0, seen = 0;
    double t_change = t_start;
    for (;;) {
        run_batch();
        replays += t.kind == EnergyKind::idle ? 1 : batch;
        const double e = read(counter), now = clock.now_s();
        if (e != last) {
            // A batch longer than the period spans several updates: those since the last change seen, by time.
            seen += std::max(1L, std::lround((now - t_change) / period_s));
            last = e, t_change = now;
            if (seen >= updates) {
                EnergyRun r{e - e_start, now - t_start, replays};
                counter.clocks(&r.sm_clock_mhz, &r.temperature_c);
                return r;
            }
        }
        if (now - t_start > give_up) throw stalled(counter, t, give_up);
    }
}

} // namespace

std::unique_ptr<EnergyCounter> nvml_energy_counter(const std::string& pci_bus_id) {
    return std::make_unique<NvmlEnergyCounter>(pci_bus_id);
}

std::unique_ptr<EnergyCounter> rapl_energy_counter(const std::string& powercap_root) {
    return std::make_unique<RaplEnergyCounter>(powercap_root);
}

double energy_window_s(double period_s, const EnergyOptions& opt) {
    return std::max(opt.min_window_s, opt.min_counter_updates * period_s);
}

int energy_repeats(double round_s, const EnergyOptions& opt) {
    return std::max(opt.min_repeats, (int)std::floor(opt.budget_s / round_s));
}

double counter_period_s(EnergyCounter& counter, const EnergyClock& clock, double max_wait_s) {
    double last = read(counter);
    std::vector<double> changes;
    const double t0 = clock.now_s();
    while ((int)changes.size() < 4 && clock.now_s() - t0 < max_wait_s) {
        clock.idle(1e-3);
        const double e = read(counter);
        if (e != last) changes.push_back(clock.now_s()), last = e;
    }
    if (changes.size() < 2)
        throw Error(strprintf("--energy: the %s did not advance twice in %.1f s", counter.name().c_str(), max_wait_s));
    return (changes.back() - changes.front()) / (double)(changes.size() - 1);
}

EnergyRecords measure_energy(const std::vector<ReplayTarget>& targets, EnergyCounter& counter,
                             const EnergyClock& clock, const EnergyOptions& opt) {
    EnergyRecords rec;
    rec.requested = true;
    rec.source = counter.name();
    rec.synthetic = counter.synthetic();
    rec.budget_s = opt.budget_s;
    clock.sync();
    rec.counter_period_s = counter_period_s(counter, clock);
    rec.window_s = energy_window_s(rec.counter_period_s, opt);
    // Per target: a batch of replays, 1/batches_per_window of its window; a target whose replay is long gets a
    // window of min_replays_per_window replays, so that one batch (one replay) stays a small part of it.
    std::vector<long> batch(targets.size(), 1);
    std::vector<double> window(targets.size(), rec.window_s);
    double round_s = 0;
    for (size_t i = 0; i < targets.size(); i++) {
        const ReplayTarget& t = targets[i];
        rec.targets.push_back({t.subblock, t.phase, t.layers, t.kind, {}, 0});
        const double t0 = clock.now_s();
        if (t.kind != EnergyKind::idle) {
            const double per_replay = replay_seconds(t, clock, opt);
            window[i] = std::max(rec.window_s, opt.min_replays_per_window * per_replay);
            batch[i] = std::max(1L, std::lround(window[i] / opt.batches_per_window / per_replay));
        }
        rec.targets[i].seconds_spent += clock.now_s() - t0;
        round_s += window[i] + rec.counter_period_s;
    }
    const int repeats = energy_repeats(round_s, opt);
    std::mt19937 rng(1337); // the start delays: a fixed sequence, so a scripted counter gives the same figures
    for (int round = 0; round < repeats; round++) {
        if (opt.progress)
            opt.progress(strprintf("energy: round %d of %d (%zu targets, %.2f s each, counter every %.0f ms)",
                                   round + 1, repeats, targets.size(), rec.window_s, rec.counter_period_s * 1e3));
        for (size_t i = 0; i < targets.size(); i++) {
            const double t0 = clock.now_s();
            rec.targets[i].runs.push_back(
                measure_once(targets[i], batch[i], counter, clock, window[i], rec.counter_period_s, opt, rng));
            rec.targets[i].seconds_spent += clock.now_s() - t0;
        }
    }
    return rec;
}

} // namespace llmc::prof
