// Power and energy (llmc/profiler/nvml_sampler.h, step energy and efficiency in llmc/profiler/report.h) from a fake
// NVML function table and synthetic records: no GPU, no NVML needed. Times are nanoseconds.
#include <atomic>
#include <cmath>
#include <fstream>
#include <gtest/gtest.h>
#include <string>
#include <vector>

#include "llmc/profiler/nvml_sampler.h"
#include "llmc/profiler/cpu_source.h"
#include "llmc/profiler/rapl.h"
#include "llmc/profiler/findings.h"
#include "llmc/profiler/writers.h"
#include "llmc/profiler/writers.h"
#include "test/test_util.h"

using namespace llmc;
using namespace llmc::prof;

namespace {

constexpr uint64_t MS = 1000000;

// The fake GPU: readings the test sets, and the clock it advances. NVML entry points are plain function
// pointers, so the fake's state is global.
struct FakeGpu {
    std::atomic<uint64_t> now{0};
    std::atomic<unsigned> power_mw{250000}, sm_mhz{1980}, mem_mhz{2619}, temp_c{55};
    std::atomic<unsigned long long> reasons{0}, energy_mj{0};
    std::atomic<unsigned> instant_mw{0}; // 0: the driver has no instantaneous power field
    nvmlReturn_t init_rc = NVML_SUCCESS, power_rc = NVML_SUCCESS;
    bool has_energy = true;
    int inits = 0, shutdowns = 0;
};
FakeGpu* fake = nullptr;
nvmlDevice_t const FAKE_DEVICE = reinterpret_cast<nvmlDevice_t>(0x1234);

NvmlApi fake_api() {
    NvmlApi a;
    a.init = [] { return fake->inits++, fake->init_rc; };
    a.shutdown = [] { return fake->shutdowns++, NVML_SUCCESS; };
    a.error_string = [](nvmlReturn_t rc) { return rc == 9 ? "Driver Not Loaded" : "Unknown Error"; };
    a.handle_by_index = [](unsigned i, nvmlDevice_t* d) { return *d = FAKE_DEVICE, i == 0 ? NVML_SUCCESS : 2; };
    a.power_usage = [](nvmlDevice_t, unsigned* mw) { return *mw = fake->power_mw, fake->power_rc; };
    a.clock_info = [](nvmlDevice_t, int type, unsigned* v) {
        return *v = type == NVML_CLOCK_SM ? fake->sm_mhz.load() : fake->mem_mhz.load(), NVML_SUCCESS;
    };
    a.max_clock_info = [](nvmlDevice_t, int, unsigned* v) { return *v = 1980, NVML_SUCCESS; };
    a.temperature = [](nvmlDevice_t, int, unsigned* v) { return *v = fake->temp_c, NVML_SUCCESS; };
    a.clocks_event_reasons = [](nvmlDevice_t, unsigned long long* v) { return *v = fake->reasons, NVML_SUCCESS; };
    a.total_energy = [](nvmlDevice_t, unsigned long long* mj) {
        return *mj = fake->energy_mj, fake->has_energy ? NVML_SUCCESS : 3;
    };
    a.field_values = [](nvmlDevice_t, int n, NvmlFieldValue* f) {
        if (n != 1 || f->field_id != NVML_FI_DEV_POWER_INSTANT) return 2; // invalid argument
        f->nvml_return = fake->instant_mw ? NVML_SUCCESS : 3;             // not supported
        f->value.ui = fake->instant_mw;
        return NVML_SUCCESS;
    };
    return a;
}

class ProfilerPowerTest : public ::testing::Test {
protected:
    void SetUp() override { fake = &gpu; }
    void TearDown() override { fake = nullptr; }
    PowerSampler::Clock clock() {
        return [this] { return gpu.now.load(); };
    }
    FakeGpu gpu;
};

StepRecord step(int n, uint64_t start, uint64_t end, long tokens) {
    StepRecord s;
    s.step = n, s.start_ns = start, s.end_ns = end, s.tokens = tokens;
    return s;
}

} // namespace

TEST_F(ProfilerPowerTest, MarkRecordsSampleAndEnergyInTheClockTimebase) {
    {
        PowerSampler p(fake_api(), clock(), 100);
        ASSERT_TRUE(p.available());
        EXPECT_EQ(p.status(), "");
        gpu.now = 5 * MS, gpu.energy_mj = 1000, gpu.reasons = 0x4, gpu.power_mw = 301500;
        p.mark();
        gpu.now = 45 * MS, gpu.energy_mj = 13000;
        p.mark();
        ProfileRecords r;
        p.take_into(r);
        ASSERT_EQ(r.power.size(), 2u);
        EXPECT_EQ(r.power[0].t_ns, 5 * MS);
        EXPECT_DOUBLE_EQ(r.power[0].power_w, 301.5);
        EXPECT_EQ(r.power[0].sm_clock_mhz, 1980);
        EXPECT_EQ(r.power[0].mem_clock_mhz, 2619);
        EXPECT_EQ(r.power[0].temperature_c, 55);
        EXPECT_EQ(r.power[0].throttle_reasons, 0x4u);
        ASSERT_EQ(r.energy.size(), 2u);
        EXPECT_EQ(r.energy[1].t_ns, 45 * MS);
        EXPECT_DOUBLE_EQ(r.energy[1].joules - r.energy[0].joules, 12.0);
        EXPECT_EQ(r.max_sm_clock_mhz, 1980);
        EXPECT_EQ(r.power_status, "");
    }
    EXPECT_EQ(gpu.inits, 1);
    EXPECT_EQ(gpu.shutdowns, 1);
}

// The instantaneous field is preferred to the 1 s average where the driver answers it.
TEST_F(ProfilerPowerTest, InstantPowerWhereTheDriverHasIt) {
    gpu.instant_mw = 412250, gpu.power_mw = 300000;
    PowerSampler p(fake_api(), clock(), 100);
    ASSERT_TRUE(p.available());
    EXPECT_TRUE(p.instant_power());
    p.mark();
    gpu.instant_mw = 0; // a refused reading falls back to the average for that sample
    p.mark();
    ProfileRecords r;
    p.take_into(r);
    ASSERT_EQ(r.power.size(), 2u);
    EXPECT_DOUBLE_EQ(r.power[0].power_w, 412.25);
    EXPECT_DOUBLE_EQ(r.power[1].power_w, 300.0);
    EXPECT_EQ(r.power_reading, "instantaneous");
    r.steps.push_back(step(0, 0, 10 * MS, 1000));
    EXPECT_NE(format_summary(build_report(r, ProfileContext{})).find("2 samples (instantaneous power)"),
              std::string::npos);

    PowerSampler q(fake_api(), clock(), 100); // no field at start: the average throughout
    EXPECT_FALSE(q.instant_power());
    q.take_into(r);
    EXPECT_EQ(r.power_reading, "1 s average");
}

TEST_F(ProfilerPowerTest, ThreadSamplesUntilStopped) {
    PowerSampler p(fake_api(), clock(), 1);
    ASSERT_TRUE(p.start());
    for (int i = 0; i < 200; i++) {
        gpu.now += MS;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    p.stop();
    ProfileRecords r;
    p.take_into(r);
    EXPECT_GE(r.power.size(), 3u); // 1 ms interval over >= 40 ms of sleeps
    for (size_t i = 1; i < r.power.size(); i++) EXPECT_GE(r.power[i].t_ns, r.power[i - 1].t_ns);
    for (const PowerSample& s : r.power) EXPECT_DOUBLE_EQ(s.power_w, 250.0);
    EXPECT_TRUE(r.energy.empty()); // the counter is read at marks only
    size_t n = r.power.size();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    p.take_into(r);
    EXPECT_TRUE(r.power.empty()) << "no samples after stop (had " << n << ")";
}

TEST_F(ProfilerPowerTest, NvmlAbsentOrFailingIsNotAvailable) {
    gpu.init_rc = 9;
    PowerSampler p(fake_api(), clock());
    EXPECT_FALSE(p.available());
    EXPECT_EQ(p.status(), "NVML not available (nvmlInit_v2: Driver Not Loaded)");
    EXPECT_FALSE(p.start());
    p.mark();
    ProfileRecords r;
    p.take_into(r);
    EXPECT_TRUE(r.power.empty());
    EXPECT_TRUE(r.energy.empty());
    EXPECT_EQ(r.power_status, p.status());
    EXPECT_EQ(gpu.shutdowns, 0);

    gpu.init_rc = NVML_SUCCESS, gpu.power_rc = 3; // power unsupported: nothing to sample
    PowerSampler q(fake_api(), clock());
    EXPECT_FALSE(q.available());
    EXPECT_EQ(q.status(), "NVML not available (nvmlDeviceGetPowerUsage: Unknown Error)");

    // The report and the writers say so; energy columns are unknown.
    r.steps.push_back(step(0, 0, 10 * MS, 1000));
    Report rep = build_report(r, ProfileContext{});
    EXPECT_TRUE(std::isnan(rep.steps[0].energy_j));
    EXPECT_TRUE(std::isnan(rep.steps[0].j_per_token));
    EXPECT_EQ(rep.power.status, "NVML not available (nvmlInit_v2: Driver Not Loaded)");
    std::string s = format_summary(rep);
    EXPECT_NE(s.find("J/token, tokens/J, FLOP/s per W: n/a (NVML not available (nvmlInit_v2: Driver Not Loaded))"),
              std::string::npos);
    std::string csv = steps_csv(rep);
    EXPECT_NE(csv.find("\n0,10.000000,0.000000,0.000000,0.000000,0.000000,0.000000,100000.0,,,10.000000,1,1000,,,,,0,0,0\n"),
              std::string::npos)
        << csv;
}

// A driver whose NVML lacks an optional entry point (temperature, clocks) loses that metric only; a missing
// required one (the power reading) turns the sampler off with the symbol named.
TEST_F(ProfilerPowerTest, MissingOptionalNvmlSymbolsTurnOffOnlyTheirMetric) {
    const NvmlApi full = fake_api();
    auto lookup_without = [&](std::vector<std::string> absent) {
        return [full, absent](const char* name) -> void* {
            for (const std::string& a : absent)
                if (a == name) return nullptr;
            const std::string n = name;
            if (n == "nvmlInit_v2") return reinterpret_cast<void*>(full.init);
            if (n == "nvmlShutdown") return reinterpret_cast<void*>(full.shutdown);
            if (n == "nvmlErrorString") return reinterpret_cast<void*>(full.error_string);
            if (n == "nvmlDeviceGetHandleByIndex_v2") return reinterpret_cast<void*>(full.handle_by_index);
            if (n == "nvmlDeviceGetPowerUsage") return reinterpret_cast<void*>(full.power_usage);
            if (n == "nvmlDeviceGetClockInfo") return reinterpret_cast<void*>(full.clock_info);
            if (n == "nvmlDeviceGetTemperature") return reinterpret_cast<void*>(full.temperature);
            return nullptr; // the rest: as if this NVML were older
        };
    };
    NvmlApi api;
    std::string why;
    ASSERT_TRUE(resolve_nvml(&api, lookup_without({"nvmlDeviceGetTemperature", "nvmlDeviceGetClockInfo"}), &why)) << why;
    EXPECT_EQ(api.temperature, nullptr);
    PowerSampler p(api, clock());
    ASSERT_TRUE(p.available()) << p.status();
    gpu.now = 5 * MS;
    p.mark();
    ProfileRecords r;
    p.take_into(r);
    ASSERT_EQ(r.power.size(), 1u);
    EXPECT_DOUBLE_EQ(r.power[0].power_w, 250.0);
    EXPECT_EQ(r.power[0].temperature_c, 0);
    EXPECT_EQ(r.power[0].sm_clock_mhz, 0);

    NvmlApi none;
    EXPECT_FALSE(resolve_nvml(&none, lookup_without({"nvmlDeviceGetPowerUsage"}), &why));
    EXPECT_EQ(why, "no nvmlDeviceGetPowerUsage in libnvidia-ml.so.1");
}

TEST(ProfilerPower, RealNvmlLoadFailsGracefullyOrSamples) {
    // Without the driver (CI) the library is absent; on a GPU machine it loads. Either way nothing throws.
    PowerSampler p([] { return (uint64_t)0; });
    if (!p.available()) {
        EXPECT_EQ(p.status().rfind("NVML not available (", 0), 0u) << p.status();
    } else {
        p.mark();
        ProfileRecords r;
        p.take_into(r);
        ASSERT_EQ(r.power.size(), 1u);
        EXPECT_GT(r.power[0].power_w, 0);
    }
}

// Constant 200 W over four 20 ms steps 30 ms apart, with an energy counter that updates every 100 ms (it reads
// 100 J until 100 ms, then 120 J): each step's energy comes from the power samples (200 W x 20 ms = 4 J), the
// window's from the counter's average power over the whole window (20 J over the 110 ms between its first and
// last reading) times the 80 ms of steps, and every step, no longer than the 80 ms the counter stood still, is
// marked as one the counter cannot measure.
TEST_F(ProfilerPowerTest, StepEnergyFromSamplesWindowEnergyFromTheCounter) {
    PowerSampler p(fake_api(), clock());
    gpu.power_mw = 200000;
    for (int i = 0; i < 4; i++)
        for (uint64_t t : {10 + 30 * i, 30 + 30 * i}) {
            gpu.now = t * MS, gpu.energy_mj = t < 100 ? 100000 : 120000;
            p.mark();
        }
    ProfileRecords r;
    p.take_into(r);
    for (int i = 0; i < 4; i++) r.steps.push_back(step(i, (10 + 30 * i) * MS, (30 + 30 * i) * MS, 5000));
    Report rep = build_report(r, ProfileContext{});
    for (const StepRow& s : rep.steps) {
        EXPECT_NEAR(s.energy_j, 4.0, 1e-9) << s.step;
        EXPECT_EQ(s.energy_source, EnergySource::integrated) << s.step;
        EXPECT_TRUE(s.below_counter_period) << s.step;
    }
    EXPECT_EQ(rep.power.window_source, EnergySource::counter);
    EXPECT_NEAR(rep.power.avg_w, 20.0 / 0.110, 1e-6);
    EXPECT_NEAR(rep.power.energy_j, 20.0 / 0.110 * 0.080, 1e-9);
    EXPECT_NEAR(rep.power.counter_still_ms, 80.0, 1e-9);
    EXPECT_EQ(rep.power.below_counter_period_steps, 4);
    EXPECT_EQ(rep.power.integrated_steps, 4);
    std::string s = format_summary(rep);
    EXPECT_NE(s.find("energy from the NVML energy counter over the whole window; each step's from integrated power "
                     "samples (0 steps counter, 4 integrated)"),
              std::string::npos)
        << s;
    EXPECT_NE(s.find("4 of 4 steps no longer than the 80.0 ms the energy counter stood still"), std::string::npos) << s;
    EXPECT_NE(steps_csv(rep).find(",integrated,1,0,0\n"), std::string::npos) << steps_csv(rep);

    // A counter that advances between every two readings measures every step: none is marked.
    for (size_t i = 0; i < r.energy.size(); i++) r.energy[i].joules = 100.0 + 0.5 * (double)i;
    Report fine = build_report(r, ProfileContext{});
    EXPECT_EQ(fine.power.counter_still_ms, 0.0);
    EXPECT_EQ(fine.power.below_counter_period_steps, 0);
    for (const StepRow& x : fine.steps) EXPECT_FALSE(x.below_counter_period) << x.step;
    // A counter that never advances: the window's energy is the steps' summed.
    for (EnergyReading& e : r.energy) e.joules = 100.0;
    Report still = build_report(r, ProfileContext{});
    EXPECT_EQ(still.power.window_source, EnergySource::integrated);
    EXPECT_NEAR(still.power.energy_j, 16.0, 1e-9);
}

TEST(ProfilerPower, CounterStillIsTheLongestRunOfEqualReadings) {
    EXPECT_TRUE(std::isnan(counter_still_ns({})));
    EXPECT_TRUE(std::isnan(counter_still_ns({{0, 1.0}})));
    EXPECT_EQ(counter_still_ns({{0, 1.0}, {10, 2.0}, {20, 3.0}}), 0.0);
    EXPECT_EQ(counter_still_ns({{0, 1.0}, {10, 1.0}, {20, 2.0}, {25, 2.0}, {50, 2.0}, {60, 3.0}}), 30.0);
}

TEST(ProfilerPower, StepEnergyRampAndReadingsTooFarFromTheEdges) {
    std::vector<PowerSample> ramp;
    for (uint64_t t = 0; t <= 100 * MS; t += 10 * MS) ramp.push_back({t, 100.0 + 1000.0 * (t / 1e9)});
    EnergySource src = EnergySource::none;
    // No readings: ∫ (100 + 1000 t) dt over [0.015, 0.055] s = 4 + 1.4 J.
    EXPECT_NEAR(step_energy({}, ramp, 15 * MS, 55 * MS, &src), 5.4, 1e-12);
    EXPECT_STREQ(energy_source_name(src), "integrated");
    // With samples the counter does not count for a step, even with readings 1 ms off its edges.
    std::vector<EnergyReading> near = {{14 * MS, 1.0}, {56 * MS, 6.5}};
    EXPECT_NEAR(step_energy(near, ramp, 15 * MS, 55 * MS, &src), 5.4, 1e-12);
    EXPECT_STREQ(energy_source_name(src), "integrated");
    // Without samples (RAPL): readings 1 ms off are the counter's; 20 ms off each edge (tolerance: 10% of 40 ms,
    // at least 2 ms) not this step's, which then has no energy.
    EXPECT_NEAR(step_energy(near, {}, 15 * MS, 55 * MS, &src), 5.5, 1e-12);
    EXPECT_STREQ(energy_source_name(src), "counter");
    std::vector<EnergyReading> far = {{0, 0.0}, {75 * MS, 7.0}};
    EXPECT_TRUE(std::isnan(step_energy(far, {}, 15 * MS, 55 * MS, &src)));
    EXPECT_STREQ(energy_source_name(src), "");
    EXPECT_TRUE(std::isnan(step_energy({}, {}, 0, MS, &src)));
    EXPECT_STREQ(energy_source_name(src), "");
}

// J/token, tokens/J and FLOP/s per W by hand for GPT-2 124M at B=4, T=64: 6N + 12·L·C·T FLOPs per token.
TEST(ProfilerPower, EfficiencyByHand) {
    ProfileContext c;
    GPT2Config g = gpt2_config_for_depth(12);
    c.model = g;
    c.num_parameters = 124475904;
    c.B = 4, c.T = 64;
    ProfileRecords r;
    r.steps = {step(0, 0, 100 * MS, 256)};
    r.power = {{0, 300.0}, {100 * MS, 300.0}}; // 30 J over the step
    Report rep = build_report(r, c);
    const double flops_per_token = 6.0 * 124475904 + 12.0 * 12 * 768 * 64;
    ASSERT_DOUBLE_EQ(rep.flops_per_token, flops_per_token);
    EXPECT_NEAR(rep.steps[0].energy_j, 30.0, 1e-9);
    EXPECT_NEAR(rep.steps[0].j_per_token, 30.0 / 256, 1e-12);
    EXPECT_NEAR(rep.steps[0].tokens_per_j, 256 / 30.0, 1e-9);
    // FLOP/s per W = (256 tokens / 0.1 s · flops_per_token) / 300 W = 256 · flops_per_token / 30 J.
    EXPECT_NEAR(rep.steps[0].flops_per_w, 256 * flops_per_token / 30.0, 1);
    EXPECT_NEAR(rep.power.joules_per_token, 0.1171875, 1e-12);
    EXPECT_NEAR(rep.power.tokens_per_j, 8.533333333, 1e-6);
    EXPECT_NEAR(rep.power.flops_per_w, 256 * flops_per_token / 30.0, 1);
    std::string csv = steps_csv(rep);
    EXPECT_NE(csv.find(",0.117187500,8.533,"), std::string::npos) << csv;
    EXPECT_NE(csv.find(",integrated,0,0,0\n"), std::string::npos) << csv;
    std::string s = format_summary(rep);
    EXPECT_NE(s.find("0.11719 J/token, 8.5 tokens/J, "), std::string::npos) << s;
}

// ---------------------------------------------------------------------------------------------------------
// The CPU's energy counter: RAPL through powercap (llmc/profiler/rapl.h), on a fake sysfs tree
// ---------------------------------------------------------------------------------------------------------

namespace {

// A powercap tree in a temp dir: zones with a name, a range and a counter the test moves.
struct FakePowercap {
    testutil::TempDir dir;
    void put(const std::string& rel, const std::string& text) const {
        (void)!system(("mkdir -p '" + dir.path + "/" + rel.substr(0, rel.rfind('/')) + "'").c_str());
        std::ofstream(dir / rel) << text << "\n";
    }
    void zone(const std::string& z, const std::string& name, uint64_t energy_uj, uint64_t max_uj) const {
        put(z + "/name", name);
        put(z + "/energy_uj", std::to_string(energy_uj));
        put(z + "/max_energy_range_uj", std::to_string(max_uj));
    }
};

} // namespace

TEST(ProfilerRapl, SumsPackagesAndUndoesTheWrap) {
    FakePowercap fs;
    fs.zone("intel-rapl:0", "package-0", 1000000, 262143328850);
    fs.zone("intel-rapl:1", "package-1", 262143000000, 262143328850); // 0.33 J before its wrap
    // Not added: a package's sub-domain, the same package through MMIO, and the platform (psys) zone.
    fs.zone("intel-rapl:0/intel-rapl:0:0", "core", 5, 262143328850);
    fs.zone("intel-rapl:0:0", "core", 5, 262143328850);
    fs.zone("intel-rapl-mmio:0", "package-0", 5, 262143328850);
    fs.zone("intel-rapl:2", "psys", 5, 262143328850);
    RaplReader rapl(fs.dir.path);
    ASSERT_TRUE(rapl.ok()) << rapl.status();
    EXPECT_EQ(rapl.status(), "");
    EXPECT_EQ(rapl.packages(), 2u);
    EXPECT_DOUBLE_EQ(rapl.joules(), 0.0);
    fs.put("intel-rapl:0/energy_uj", "3500000");    // +2.5 J
    fs.put("intel-rapl:1/energy_uj", "1000000");    // wrapped: 328850 + 1 + 1000000 uJ
    fs.put("intel-rapl:0:0/energy_uj", "999999999"); // a sub-domain moving changes nothing
    EXPECT_NEAR(rapl.joules(), 2.5 + 1.328851, 1e-9);
    fs.put("intel-rapl:0/energy_uj", "4500000");    // +1 J more; package 1 stands still
    EXPECT_NEAR(rapl.joules(), 3.5 + 1.328851, 1e-9);
}

TEST(ProfilerRapl, SaysWhyThereIsNoEnergy) {
    FakePowercap fs;
    RaplReader missing(fs.dir / "nowhere");
    EXPECT_FALSE(missing.ok());
    EXPECT_NE(missing.status().find("no powercap interface (" + fs.dir.path + "/nowhere: No such file"),
              std::string::npos)
        << missing.status();
    EXPECT_DOUBLE_EQ(missing.joules(), 0.0);

    RaplReader empty(fs.dir.path);
    EXPECT_NE(empty.status().find("no RAPL zone under " + fs.dir.path), std::string::npos) << empty.status();

    fs.zone("intel-rapl:0", "package-0", 1, 100);
    fs.put("intel-rapl:0/energy_uj", "n/a");
    RaplReader garbled(fs.dir.path);
    EXPECT_FALSE(garbled.ok());
    EXPECT_NE(garbled.status().find("intel-rapl:0/energy_uj holds 'n/a', not a counter"), std::string::npos)
        << garbled.status();

    fs.put("intel-rapl:0/name", "psys");
    fs.put("intel-rapl:0/energy_uj", "5");
    EXPECT_NE(RaplReader(fs.dir.path).status().find("no RAPL package domain under"), std::string::npos);
}

// A CPU profile's steps with RAPL readings at their edges and no power samples: energy, J/token and the
// counter named in the summary, as a GPU profile reports NVML's.
TEST(ProfilerRapl, CpuStepsGetEnergyFromTheCounter) {
    ProfileContext c;
    c.device_kind = DeviceKind::CPU;
    c.model = gpt2_config_for_depth(2);
    c.B = 4, c.T = 64;
    ProfileRecords r;
    r.steps = {step(0, 0, 100 * MS, 256), step(1, 100 * MS, 300 * MS, 256)};
    r.energy = {{0, 10.0}, {100 * MS, 14.0}, {100 * MS + 1000, 14.0}, {300 * MS, 20.0}};
    r.energy_counter = "RAPL package energy counter (1 package)";
    Report rep = build_report(r, c);
    EXPECT_NEAR(rep.steps[0].energy_j, 4.0, 1e-9);
    EXPECT_NEAR(rep.steps[1].energy_j, 6.0, 1e-9);
    EXPECT_EQ(rep.steps[1].energy_source, EnergySource::counter);
    EXPECT_NEAR(rep.steps[0].avg_power_w, 40.0, 1e-9);
    EXPECT_NEAR(rep.power.joules_per_token, 10.0 / 512, 1e-12);
    EXPECT_EQ(rep.power.counter_steps, 2);
    std::string s = format_summary(rep);
    EXPECT_NE(s.find("  energy 10.00 J, average 33.3 W\n"), std::string::npos) << s;
    EXPECT_NE(s.find("0.01953 J/token"), std::string::npos) << s;
    EXPECT_NE(s.find("energy from the RAPL package energy counter (1 package) over the whole window; each step's from "
                     "the counter (2 steps counter"),
              std::string::npos)
        << s;
    EXPECT_EQ(rep.power.below_counter_period_steps, 0) << "the counter stood still for 1 us only";
    EXPECT_EQ(s.find("SM clock"), std::string::npos) << s;

    // Without readings the summary gives the reason the source recorded.
    r.energy.clear();
    r.power_status = "RAPL not readable: no RAPL zone under /x";
    std::string none = format_summary(build_report(r, c));
    EXPECT_NE(none.find("n/a (RAPL not readable: no RAPL zone under /x)"), std::string::npos) << none;
}

// The CPU event source reads RAPL at each step's edges: a step's energy is the counter's advance over it,
// across a wrap; a step where the counter stood still has none, and the summary says why.
TEST(ProfilerRapl, CpuSourceReadsTheCounterAtStepEdges) {
    FakePowercap fs;
    fs.zone("intel-rapl:0", "package-0", 999000000, 1000000000); // 1 J before it wraps at 1000 J
    SubBlockTimes timings;
    CpuEventSource source(&timings, fs.dir.path);
    ASSERT_TRUE(source.start());
    source.begin_step(0);
    fs.put("intel-rapl:0/energy_uj", "2000000"); // wrapped: 1 J + 1 uJ + 2 J
    source.end_step(100);
    source.begin_step(1);
    source.end_step(100); // the counter stands still
    source.stop();
    ProfileRecords rec = source.take();
    ASSERT_EQ(rec.energy.size(), 4u);
    EXPECT_EQ(rec.energy_counter, "RAPL package energy counter (1 package)");
    EXPECT_EQ(rec.power_status, "");
    ProfileContext c;
    c.device_kind = DeviceKind::CPU;
    Report rep = build_report(rec, c);
    ASSERT_EQ(rep.steps.size(), 2u);
    EXPECT_NEAR(rep.steps[0].energy_j, 3.000001, 1e-9);
    EXPECT_EQ(rep.steps[0].energy_source, EnergySource::counter);
    EXPECT_TRUE(std::isnan(rep.steps[1].energy_j));
    // The window's energy is the counter's over the whole window; the step it did not advance over is marked.
    EXPECT_EQ(rep.power.window_source, EnergySource::counter);
    EXPECT_GT(rep.power.energy_j, 0.0);
    EXPECT_LE(rep.power.energy_j, 3.000001 + 1e-9);
    EXPECT_TRUE(rep.steps[1].below_counter_period);
    EXPECT_NE(format_summary(rep).find("steps no longer than the "), std::string::npos);

    // No tree: nothing is read, and the records carry the reason.
    CpuEventSource none(&timings, fs.dir / "nowhere");
    none.begin_step(0);
    none.end_step(100);
    ProfileRecords empty = none.take();
    EXPECT_TRUE(empty.energy.empty());
    EXPECT_EQ(empty.power_status.rfind("RAPL not readable: no powercap interface (", 0), 0u) << empty.power_status;
}
