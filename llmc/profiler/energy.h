/*
 * Joules per sub-block (--energy; doc/profiling.md, "Energy per sub-block"): the collection side. A sub-block runs
 * for tens to hundreds of microseconds, while the energy counters update every few tens of milliseconds (NVML's
 * about every 100 ms), so a step's energy cannot be split by time honestly. Instead each target is replayed on the
 * step's own buffers (the GPU: a CUDA graph of its launches, llmc/gpu/step_graphs.cuh; the CPU: its sub-block
 * functions) long enough for the counter, in repeated measurements:
 *
 *   1. the counter's update period: polled with nothing queued until it has advanced a few times;
 *   2. each target's time per replay (doubling replay counts until 20 ms), and from it a batch: the replays of
 *      1/batches_per_window of the window, queued and waited for between two readings of the counter (a target
 *      whose replay is long gets a window of min_replays_per_window replays);
 *   3. rounds: every target once per round, round-robin (the idle baseline first, the whole step last), so that drift
 *      in temperature and clocks spreads over all of them. One measurement waits a random part of a batch, runs
 *      batches until the counter advances (its start), then until it has advanced ceil(window / period) more times
 *      (its end): the counter's advance between two of its own updates over the replays and the time between them.
 *      The edges are known to a batch; the random start makes where the updates fall in their batches uniform, so
 *      the two edges' errors cancel on average. The window is max(min_window_s, min_counter_updates periods).
 *
 * The repetitions give each target's mean and a 95% interval (llmc/profiler/report.h fill_energy). Nothing here
 * knows a device: the counter, the clock and the waits are given, so tests drive the method with a scripted counter.
 */
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmc/profiler/records.h"

namespace llmc::prof {

// A cumulative energy counter and what is read beside it.
class EnergyCounter {
public:
    virtual ~EnergyCounter() = default;
    // "" when it can be read; else why not (one line: no NVML, no counter on this GPU, RAPL not readable).
    virtual std::string status() const = 0;
    virtual std::string name() const = 0; // "NVML total energy counter"
    virtual double joules() = 0;          // since some origin; NaN when a reading fails
    virtual void clocks(int* sm_clock_mhz, int* temperature_c) { *sm_clock_mhz = 0, *temperature_c = 0; }
    virtual bool synthetic() const { return false; }
};

// The GPU's counter (nvmlDeviceGetTotalEnergyConsumption) for the device with this PCI bus id ("": device 0).
std::unique_ptr<EnergyCounter> nvml_energy_counter(const std::string& pci_bus_id);
// The CPU's: RAPL's package counters under powercap_root (llmc/profiler/rapl.h).
std::unique_ptr<EnergyCounter> rapl_energy_counter(const std::string& powercap_root);

// What is replayed. replay(n) queues n replays of the target's work (parts and the step; unused for idle).
struct ReplayTarget {
    std::string subblock, phase, layers;
    EnergyKind kind = EnergyKind::part;
    std::function<void(long)> replay;
};

// The device's time: a clock (seconds), a wait for the queued work, and a wait with nothing queued.
struct EnergyClock {
    std::function<double()> now_s;
    std::function<void()> sync;
    std::function<void(double)> idle;
};

struct EnergyOptions {
    double budget_s = 60;          // --energy-seconds: the measurements, all told
    double min_window_s = 0.3;     // a measurement spans at least this ...
    int min_counter_updates = 3;   // ... and this many counter updates
    int min_repeats = 5;           // per target, whatever the budget
    int batches_per_window = 100;  // the resolution of a measurement's edges
    int min_replays_per_window = 20; // a target whose replay is long measures at least this many
    double calibrate_s = 0.02;     // a target's replays timed for at least this long
    std::function<void(const std::string&)> progress; // a line per round
};

// The window one measurement spans for a counter updating every period_s.
double energy_window_s(double period_s, const EnergyOptions& opt);
// The repetitions per target that fit the budget (at least min_repeats) for a round of round_s: each measurement
// takes about its window plus one counter period (waiting for the counter's update at each edge).
int energy_repeats(double round_s, const EnergyOptions& opt);

// The counter's update period: polled every millisecond with nothing queued until it has advanced
// min_counter_updates times. Error when it does not advance twice within max_wait_s.
double counter_period_s(EnergyCounter& counter, const EnergyClock& clock, double max_wait_s = 2.0);

// Measures every target (idle, parts, step, in any order given; measured in that order each round) as above.
// Error when the counter stops advancing.
EnergyRecords measure_energy(const std::vector<ReplayTarget>& targets, EnergyCounter& counter,
                             const EnergyClock& clock, const EnergyOptions& opt);

} // namespace llmc::prof
