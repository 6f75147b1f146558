// --energy's method (llmc/profiler/energy.h, report.h fill_energy) against a scripted energy counter
// (test/scripted_energy.h): a device whose counter advances by a known power per sub-block in 100 ms updates.
#include <gtest/gtest.h>

#include <cmath>

#include "llmc/profiler/energy.h"
#include "llmc/profiler/findings.h"
#include "llmc/profiler/report.h"
#include "llmc/profiler/writers.h"
#include "test/scripted_energy.h"

using namespace llmc;
using namespace llmc::prof;
using testutil::ScriptedEnergyDevice;
using testutil::ScriptedPart;

namespace {

// A step of sub-blocks from 40 us to 3 ms, at 150 to 650 W on a device idling at 90 W.
const std::vector<ScriptedPart> kParts = {
    {"encoder", "fwd", 40e-6, 150}, {"qkv", "fwd", 900e-6, 600},      {"attention", "fwd", 1.2e-3, 520},
    {"fc", "fwd", 1.8e-3, 650},     {"classifier", "bwd", 3e-3, 630}, {"ln1", "bwd", 300e-6, 300},
    {"optimizer", "opt", 2e-3, 400}};
constexpr double kIdleW = 90, kPeriod = 0.1;

struct Measured {
    Report report;
    double virtual_s = 0;
};

Measured measure(double noise, double budget_s, int min_repeats = 5, unsigned seed = 7) {
    ScriptedEnergyDevice dev(kIdleW, kPeriod, noise, seed);
    std::vector<ReplayTarget> targets = testutil::scripted_targets(dev, kParts);
    targets.insert(targets.begin(), ReplayTarget{"idle", "-", "-", EnergyKind::idle, nullptr});
    EnergyOptions opt;
    opt.budget_s = budget_s;
    opt.min_repeats = min_repeats;
    Measured m;
    fill_energy(m.report, measure_energy(targets, dev, dev.clock(), opt));
    m.virtual_s = dev.now();
    return m;
}

const EnergyRow& row(const Report& r, const std::string& subblock) {
    for (const EnergyRow& e : r.energy.rows)
        if (e.subblock == subblock) return e;
    throw Error("no energy row " + subblock);
}

} // namespace

// Without noise the method recovers every part's joules per step, its joules above idle and the idle power within
// 1% (the edges of a measurement are known to one batch, 1/50 of its window), and the parts sum to the step.
TEST(EnergyMethod, RecoversEachSubBlocksJoulesOnNoiseFreeInput) {
    const Measured m = measure(0, 20);
    const EnergySummary& e = m.report.energy;
    ASSERT_TRUE(e.measured);
    EXPECT_NEAR(e.counter_period_ms, kPeriod * 1e3, 2); // polled every millisecond
    EXPECT_DOUBLE_EQ(e.window_s, 0.3);                 // max(0.3 s, 3 updates of 100 ms)
    EXPECT_NEAR(e.idle_w, kIdleW, 0.01 * kIdleW);
    double step_j = 0;
    for (const ScriptedPart& p : kParts) {
        const EnergyRow& r = row(m.report, p.subblock);
        const double j = p.seconds * p.watts, above = p.seconds * (p.watts - kIdleW);
        step_j += j;
        EXPECT_NEAR(r.j_per_step, j, 0.01 * j) << p.subblock;
        EXPECT_NEAR(r.j_above_idle, above, 0.01 * j) << p.subblock;
        EXPECT_NEAR(r.watts, p.watts, 0.01 * p.watts) << p.subblock;
        EXPECT_NEAR(r.s_per_step, p.seconds, 0.01 * p.seconds) << p.subblock;
        EXPECT_EQ(r.phase, p.phase);
        EXPECT_GE(r.repeats, 5);
    }
    EXPECT_NEAR(row(m.report, "step").j_per_step, step_j, 0.01 * step_j);
    EXPECT_LT(std::fabs(e.diff_pct), 1.0) << e.sum_j << " vs " << e.step_j;
    // Idle over the step's time: its row is the idle power times the step's replayed time.
    EXPECT_NEAR(row(m.report, "idle").j_per_step, kIdleW * row(m.report, "step").s_per_step, 1e-3 * step_j);
    // Rows: the parts in the order given, then the step, then idle.
    ASSERT_EQ(e.rows.size(), kParts.size() + 2);
    EXPECT_EQ(e.rows[0].subblock, "encoder");
    EXPECT_EQ(e.rows[kParts.size()].subblock, "step");
    EXPECT_EQ(e.rows.back().subblock, "idle");
}

// With each counter update off by 5% (noise), the true joules lie inside the 95% intervals (all but at most one of
// the seven parts and the step, for this seed), and more repetitions narrow the intervals.
TEST(EnergyMethod, IntervalsHoldTheTruthAndShrinkWithRepetitions) {
    const Measured few = measure(0.05, 0, 5), many = measure(0.05, 0, 40);
    int outside = 0;
    double width_few = 0, width_many = 0;
    for (const ScriptedPart& p : kParts) {
        const double j = p.seconds * p.watts;
        const EnergyRow &a = row(few.report, p.subblock), &b = row(many.report, p.subblock);
        EXPECT_EQ(a.repeats, 5);
        EXPECT_EQ(b.repeats, 40);
        EXPECT_LT(a.ci95_low, a.j_per_step);
        EXPECT_GT(a.ci95_high, a.j_per_step);
        outside += j < a.ci95_low || j > a.ci95_high;
        outside += j < b.ci95_low || j > b.ci95_high;
        width_few += (a.ci95_high - a.ci95_low) / j;
        width_many += (b.ci95_high - b.ci95_low) / j;
    }
    EXPECT_LE(outside, 2);
    // sqrt(40/5) = 2.8 times narrower in expectation, and t(4) = 2.78 against t(39) = 2.02 on top.
    EXPECT_LT(width_many, width_few / 2.5) << width_many << " vs " << width_few;
}

// The budget: repetitions are what fits (at least five), each measurement about its window plus one counter
// period; the default 60 s fits d12's 24 targets six times over, and the run stays near its budget.
TEST(EnergyMethod, RepetitionsFitTheBudget) {
    EnergyOptions opt;
    EXPECT_EQ(energy_repeats(24 * (0.3 + 0.1), opt), 6); // 60 s over 24 targets of a 0.3 s window
    opt.budget_s = 10;
    EXPECT_EQ(energy_repeats(24 * (0.3 + 0.1), opt), 5); // the minimum, whatever the budget
    EXPECT_DOUBLE_EQ(energy_window_s(0.02, opt), 0.3);
    EXPECT_DOUBLE_EQ(energy_window_s(0.25, opt), 0.75);
    // Here the step (9.24 ms a replay) fits 20 replays in the 0.3 s window: a round is 9 * (0.3 + 0.1) s.
    const Measured m = measure(0, 40);
    EXPECT_EQ(m.report.energy.repeats, 11);
    EXPECT_LT(m.virtual_s, 40 * 1.15) << "measured for " << m.virtual_s << " s";
    EXPECT_GT(m.virtual_s, 40 * 0.6);
}

// A counter that never advances is refused in one line, not turned into zeros.
TEST(EnergyMethod, ACounterThatStandsStillIsAnError) {
    struct Still : ScriptedEnergyDevice {
        Still() : ScriptedEnergyDevice(90, 0.1, 0) {}
        double joules() override { return 5.0; }
    } dev;
    std::vector<ReplayTarget> targets = testutil::scripted_targets(dev, kParts);
    try {
        measure_energy(targets, dev, dev.clock(), EnergyOptions{});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "--energy: the synthetic (scripted counter) did not advance twice in 2.0 s");
    }
}

// The closure finding: more than 10% between the parts' sum and the step is a finding, ranked first with the
// records one; within 10% none.
TEST(EnergyMethod, ClosureAbove10PercentIsAFinding) {
    Measured m = measure(0, 20);
    const ProfileRecords rec;
    EXPECT_TRUE(energy_closure_rule(FindingInput(m.report, rec)).empty());
    m.report.energy.diff_pct = -14.2;
    const std::vector<Finding> f = energy_closure_rule(FindingInput(m.report, rec));
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].rule, "energy_closure");
    EXPECT_EQ(f[0].what, "the sub-blocks' energies sum to -14% of the whole step's");
}

// energy.csv and profile.json's "energy" carry the rows with the columns doc/profiling.md lists; summary.txt the
// table and the closure.
TEST(EnergyMethod, WrittenAsCsvJsonAndSummary) {
    Measured m = measure(0, 20);
    const std::string csv = energy_csv(m.report);
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "sub_block,phase,layers,j_per_step,ci95_low,ci95_high,watts,j_above_idle,flop_per_j,repeats,seconds,"
              "sm_clock_mhz,temp_c");
    EXPECT_NE(csv.find("\nqkv,fwd,-,"), std::string::npos) << csv;
    EXPECT_NE(csv.find("\nidle,-,-,"), std::string::npos) << csv;
    const std::string json = profile_json(m.report);
    EXPECT_NE(json.find("\"energy\""), std::string::npos);
    EXPECT_NE(json.find("\"synthetic\": true"), std::string::npos);
    EXPECT_NE(json.find("\"diff_pct\""), std::string::npos);
    const std::string summary = format_summary(m.report);
    EXPECT_NE(summary.find("== Energy per sub-block"), std::string::npos) << summary;
    EXPECT_NE(summary.find("synthetic (scripted counter), not a device, updated every 100.0 ms"),
              std::string::npos)
        << summary;
    EXPECT_NE(summary.find("  closure: the sub-blocks sum to "), std::string::npos) << summary;
}
