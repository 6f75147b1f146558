/*
 * GPU power, clocks, temperature and energy from NVML during a profile window.
 *
 * NVML is loaded at run time with dlopen("libnvidia-ml.so.1"): the build machines have no nvml.h, and a
 * machine without the driver must still run the profiler. The few types and entry points used are declared
 * here as the library's C ABI defines them. Absent library or a failing call leaves the sampler unavailable
 * with a one-line status ("NVML not available (...)"); nothing fails.
 *
 *   PowerSampler power(clock);            // clock: ns in the profiler's timebase (cuptiGetTimestamp)
 *   power.start();                        // false without NVML: print "power: " + power.status()
 *   power.mark(); ...step...; power.mark();  // step boundaries: a sample and an energy counter reading
 *   power.stop(); power.take_into(records);
 *
 * A thread samples every interval_ms; mark() samples on the caller's thread. Both append under a mutex.
 * The function table (NvmlApi) can be injected, so tests feed fake readings without NVML.
 *
 * The same loader answers which link a data-parallel rank's collectives cross (nvml_link: NVLink or PCIe, and
 * its peak bandwidth per direction).
 */
#pragma once
#include <dlfcn.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/profiler/records.h"
#include "llmc/train/dist.h"
#include "llmc/utils.h"

namespace llmc::prof {

// NVML's ABI: nvmlReturn_t is an int enum (0 = success), a device handle an opaque pointer.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr int NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_TEMPERATURE_GPU = 0;

// nvmlFieldValue_t as nvml.h lays it out, for nvmlDeviceGetFieldValues.
struct NvmlFieldValue {
    unsigned field_id, scope_id;
    long long timestamp_us, latency_us;
    int value_type;
    nvmlReturn_t nvml_return;
    union {
        double d;
        unsigned ui;
        unsigned long ul;
        unsigned long long ull;
        long long sll;
        int si;
    } value;
};
static_assert(sizeof(NvmlFieldValue) == 40, "nvmlFieldValue_t is 40 bytes");
// Power now, in mW (unsigned). nvmlDeviceGetPowerUsage is a 1 s trailing average on Ampere (GA100 aside)
// and newer GPUs: too slow for steps of tens of milliseconds.
constexpr unsigned NVML_FI_DEV_POWER_INSTANT = 186;

// The NVML entry points the sampler calls: the required ones first (resolve_nvml says which); the others may be null.
struct NvmlApi {
    nvmlReturn_t (*init)() = nullptr;     // nvmlInit_v2
    nvmlReturn_t (*shutdown)() = nullptr; // nvmlShutdown
    const char* (*error_string)(nvmlReturn_t) = nullptr;
    nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;         // nvmlDeviceGetHandleByIndex_v2
    nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr; // optional
    nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;             // mW
    nvmlReturn_t (*clock_info)(nvmlDevice_t, int, unsigned*) = nullptr;         // optional, MHz
    nvmlReturn_t (*max_clock_info)(nvmlDevice_t, int, unsigned*) = nullptr;     // optional, MHz
    nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned*) = nullptr;        // optional, C
    nvmlReturn_t (*clocks_event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr; // optional
    nvmlReturn_t (*total_energy)(nvmlDevice_t, unsigned long long*) = nullptr;          // optional, mJ
    nvmlReturn_t (*field_values)(nvmlDevice_t, int, NvmlFieldValue*) = nullptr;          // optional
    // The links (nvml_link), all optional: NVLink link i's state (1: active) and version (nvmlNvlinkVersion_t),
    // the PCIe link's maximum generation and width.
    nvmlReturn_t (*nvlink_state)(nvmlDevice_t, unsigned, int*) = nullptr;
    nvmlReturn_t (*nvlink_version)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_max_generation)(nvmlDevice_t, unsigned*) = nullptr;
    nvmlReturn_t (*pcie_max_width)(nvmlDevice_t, unsigned*) = nullptr;
};

/*
 * Fills *api through lookup(symbol name). Only what power sampling cannot do without is required: init,
 * shutdown, a device handle and the power reading. Every other entry point is optional: a missing one turns
 * off its own metric (clocks, temperature, throttle reasons, energy, instantaneous power) and nothing else.
 * False with *why naming the first missing required symbol.
 */
inline bool resolve_nvml(NvmlApi* api, const std::function<void*(const char*)>& lookup, std::string* why) {
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::decay_t<decltype(fn)>>(lookup(name)); };
    sym(api->init, "nvmlInit_v2");
    sym(api->shutdown, "nvmlShutdown");
    sym(api->error_string, "nvmlErrorString");
    sym(api->handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
    sym(api->handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
    sym(api->power_usage, "nvmlDeviceGetPowerUsage");
    sym(api->clock_info, "nvmlDeviceGetClockInfo");
    sym(api->max_clock_info, "nvmlDeviceGetMaxClockInfo");
    sym(api->temperature, "nvmlDeviceGetTemperature");
    // Renamed in CUDA 12.2's NVML; older drivers only have the throttle name (same bits).
    sym(api->clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!api->clocks_event_reasons) sym(api->clocks_event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");
    sym(api->total_energy, "nvmlDeviceGetTotalEnergyConsumption");
    sym(api->field_values, "nvmlDeviceGetFieldValues");
    sym(api->nvlink_state, "nvmlDeviceGetNvLinkState");
    sym(api->nvlink_version, "nvmlDeviceGetNvLinkVersion");
    sym(api->pcie_max_generation, "nvmlDeviceGetMaxPcieLinkGeneration");
    sym(api->pcie_max_width, "nvmlDeviceGetMaxPcieLinkWidth");
    const char* missing = !api->init              ? "nvmlInit_v2"
                          : !api->shutdown        ? "nvmlShutdown"
                          : !api->handle_by_index ? "nvmlDeviceGetHandleByIndex_v2"
                          : !api->power_usage     ? "nvmlDeviceGetPowerUsage"
                                                  : nullptr;
    if (missing) *why = std::string("no ") + missing + " in libnvidia-ml.so.1";
    return missing == nullptr;
}

// resolve_nvml on libnvidia-ml.so.1 (the handle goes to *lib, for dlclose).
inline bool load_nvml(NvmlApi* api, void** lib, std::string* why) {
    *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!*lib) {
        const char* e = dlerror();
        *why = e ? e : "dlopen libnvidia-ml.so.1 failed";
        return false;
    }
    void* handle = *lib;
    if (resolve_nvml(api, [handle](const char* name) { return dlsym(handle, name); }, why)) return true;
    dlclose(*lib);
    *lib = nullptr;
    return false;
}

/*
 * One NVLink link's peak bandwidth per direction, GB/s, by the version NVML reports (nvmlNvlinkVersion_t:
 * 1 = NVLink 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0); 0 for a version not in the table. From
 * NVIDIA's datasheets, total bidirectional NVLink bandwidth over the link count, halved: P100 160 GB/s over 4
 * links (20), V100 300 GB/s over 6 (25), A100 600 GB/s over 12 (25), H100 900 GB/s over 18 (25), B200 1.8 TB/s
 * over 18 (50).
 */
inline double nvlink_gbps_per_link(unsigned nvml_version) {
    static constexpr double per_link[] = {0, 20, 25, 25, 25, 25, 25, 50};
    return nvml_version < sizeof per_link / sizeof per_link[0] ? per_link[nvml_version] : 0.0;
}

/*
 * One PCIe lane's peak bandwidth per direction, GB/s, by generation; 0 for one not in the table. The PCI-SIG
 * transfer rates (2.5, 5, 8, 16, 32, 64 GT/s) times the line code's efficiency (8b/10b for 1 and 2, 128b/130b for
 * 3 to 5, 242/256 FLIT for 6), over 8 bits: 16 lanes of generation 4 are 31.5 GB/s.
 */
inline double pcie_gbps_per_lane(unsigned generation) {
    static constexpr double gt_per_s[] = {0, 2.5, 5, 8, 16, 32, 64};
    if (generation == 0 || generation >= sizeof gt_per_s / sizeof gt_per_s[0]) return 0.0;
    const double code = generation <= 2 ? 8.0 / 10 : generation <= 5 ? 128.0 / 130 : 242.0 / 256;
    return gt_per_s[generation] * code / 8;
}

constexpr unsigned NVML_NVLINK_MAX_LINKS = 18; // nvml.h's, since NVLink 4 (H100: 18 links)

/*
 * The link a device's collectives cross, from NVML: its active NVLink links times their per-link peak when it
 * has any, else its PCIe link (maximum generation times maximum width); unknown when NVML answers neither.
 */
inline Link read_link(const NvmlApi& api, nvmlDevice_t dev) {
    double nvlink = 0;
    if (api.nvlink_state && api.nvlink_version)
        for (unsigned i = 0; i < NVML_NVLINK_MAX_LINKS; i++) {
            int active = 0;
            unsigned version = 0;
            if (api.nvlink_state(dev, i, &active) == NVML_SUCCESS && active == 1 &&
                api.nvlink_version(dev, i, &version) == NVML_SUCCESS)
                nvlink += nvlink_gbps_per_link(version);
        }
    if (nvlink > 0) return {LinkKind::nvlink, nvlink};
    unsigned gen = 0, width = 0;
    if (api.pcie_max_generation && api.pcie_max_width && api.pcie_max_generation(dev, &gen) == NVML_SUCCESS &&
        api.pcie_max_width(dev, &width) == NVML_SUCCESS && pcie_gbps_per_lane(gen) > 0)
        return {LinkKind::pcie, pcie_gbps_per_lane(gen) * width};
    return {};
}

// read_link for the device with this PCI bus id (cudaDeviceGetPCIBusId), through libnvidia-ml.so.1; unknown
// without NVML.
inline Link nvml_link(const std::string& pci_bus_id) {
    NvmlApi api;
    void* lib = nullptr;
    std::string why;
    if (!load_nvml(&api, &lib, &why)) return {};
    Link link;
    if (api.init() == NVML_SUCCESS) {
        nvmlDevice_t dev = nullptr;
        if (api.handle_by_pci_bus_id && api.handle_by_pci_bus_id(pci_bus_id.c_str(), &dev) == NVML_SUCCESS)
            link = read_link(api, dev);
        api.shutdown();
    }
    dlclose(lib);
    return link;
}

class PowerSampler {
public:
    using Clock = std::function<uint64_t()>; // ns, the timebase of the profile's records

    // NVML from libnvidia-ml.so.1. pci_bus_id ("0000:65:00.0", cudaDeviceGetPCIBusId) picks the CUDA device
    // (CUDA and NVML number devices differently); empty: NVML device 0.
    explicit PowerSampler(Clock clock, int interval_ms = 100, const std::string& pci_bus_id = "")
        : clock_(std::move(clock)), interval_ms_(interval_ms) {
        std::string why;
        if (!load_nvml(&api_, &lib_, &why)) {
            status_ = "NVML not available (" + why + ")";
            return;
        }
        open(pci_bus_id);
    }
    // An injected function table (tests).
    PowerSampler(const NvmlApi& api, Clock clock, int interval_ms = 100, const std::string& pci_bus_id = "")
        : api_(api), clock_(std::move(clock)), interval_ms_(interval_ms) {
        open(pci_bus_id);
    }
    PowerSampler(const PowerSampler&) = delete;
    PowerSampler& operator=(const PowerSampler&) = delete;
    ~PowerSampler() {
        stop();
        if (initialised_) api_.shutdown();
        if (lib_) dlclose(lib_);
    }

    bool available() const { return device_ != nullptr; }
    // True when power is read instantaneously (NVML_FI_DEV_POWER_INSTANT), false for the averaged reading.
    bool instant_power() const { return instant_power_; }
    // "" when available, else "NVML not available (<why>)".
    const std::string& status() const { return status_; }

    // Starts the sampling thread; false (and no samples) without NVML.
    bool start() {
        if (!available() || thread_.joinable()) return available();
        stopping_ = false;
        thread_ = std::thread([this] {
            std::unique_lock<std::mutex> lock(wake_mutex_);
            do {
                lock.unlock();
                sample();
                lock.lock();
            } while (!wake_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stopping_; }));
        });
        return true;
    }
    // A step boundary: one sample and one reading of the energy counter, taken now on this thread.
    void mark() {
        if (!available()) return;
        sample();
        unsigned long long mj = 0;
        if (api_.total_energy && api_.total_energy(device_, &mj) == NVML_SUCCESS) {
            EnergyReading e{clock_(), mj * 1e-3};
            std::lock_guard<std::mutex> lock(mutex_);
            energy_.push_back(e);
        }
    }
    void stop() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard<std::mutex> lock(wake_mutex_);
            stopping_ = true;
        }
        wake_.notify_all();
        thread_.join();
    }
    // Moves what was sampled into r (power, energy, power_reading, power_status, max_sm_clock_mhz). Call after
    // stop().
    void take_into(ProfileRecords& r) {
        std::lock_guard<std::mutex> lock(mutex_);
        r.power = std::move(samples_);
        r.energy = std::move(energy_);
        r.power_status = status_;
        r.power_reading = !available() ? "" : instant_power_ ? "instantaneous" : "1 s average";
        r.max_sm_clock_mhz = max_sm_clock_mhz_;
        samples_.clear(), energy_.clear();
    }

private:
    void open(const std::string& pci_bus_id) {
        auto fail = [&](const char* call, nvmlReturn_t rc) {
            const char* msg = api_.error_string ? api_.error_string(rc) : nullptr;
            status_ = strprintf("NVML not available (%s: %s)", call, msg ? msg : std::to_string(rc).c_str());
            device_ = nullptr;
        };
        nvmlReturn_t rc = api_.init();
        if (rc != NVML_SUCCESS) return fail("nvmlInit_v2", rc);
        initialised_ = true;
        nvmlDevice_t dev = nullptr;
        if (!pci_bus_id.empty() && api_.handle_by_pci_bus_id) {
            if ((rc = api_.handle_by_pci_bus_id(pci_bus_id.c_str(), &dev)) != NVML_SUCCESS)
                return fail("nvmlDeviceGetHandleByPciBusId_v2", rc);
        } else if ((rc = api_.handle_by_index(0, &dev)) != NVML_SUCCESS) {
            return fail("nvmlDeviceGetHandleByIndex_v2", rc);
        }
        // Power is the one reading the sampler cannot do without: the averaged reading must answer; the
        // instantaneous field is used where it answers too (older drivers and GPUs lack it).
        unsigned mw = 0;
        if ((rc = api_.power_usage(dev, &mw)) != NVML_SUCCESS) return fail("nvmlDeviceGetPowerUsage", rc);
        device_ = dev;
        instant_power_ = read_instant_power(&mw);
        unsigned mhz = 0;
        if (api_.max_clock_info && api_.max_clock_info(dev, NVML_CLOCK_SM, &mhz) == NVML_SUCCESS)
            max_sm_clock_mhz_ = (int)mhz;
    }
    bool read_instant_power(unsigned* mw) const {
        if (!api_.field_values) return false;
        NvmlFieldValue f{};
        f.field_id = NVML_FI_DEV_POWER_INSTANT;
        if (api_.field_values(device_, 1, &f) != NVML_SUCCESS || f.nvml_return != NVML_SUCCESS) return false;
        *mw = f.value.ui;
        return true;
    }
    // One sample; a reading that fails stays 0 (NVML can refuse one query and answer the next).
    void sample() {
        PowerSample s;
        unsigned v = 0;
        unsigned long long reasons = 0;
        if (!(instant_power_ && read_instant_power(&v)) && api_.power_usage(device_, &v) != NVML_SUCCESS) return;
        s.power_w = v * 1e-3;
        s.t_ns = clock_(); // the time of the power reading
        if (api_.clock_info && api_.clock_info(device_, NVML_CLOCK_SM, &v) == NVML_SUCCESS) s.sm_clock_mhz = (int)v;
        if (api_.clock_info && api_.clock_info(device_, NVML_CLOCK_MEM, &v) == NVML_SUCCESS) s.mem_clock_mhz = (int)v;
        if (api_.temperature && api_.temperature(device_, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS)
            s.temperature_c = (int)v;
        if (api_.clocks_event_reasons && api_.clocks_event_reasons(device_, &reasons) == NVML_SUCCESS)
            s.throttle_reasons = reasons;
        std::lock_guard<std::mutex> lock(mutex_);
        samples_.push_back(s);
    }

    NvmlApi api_;
    void* lib_ = nullptr;
    bool initialised_ = false;
    nvmlDevice_t device_ = nullptr;
    std::string status_;
    int max_sm_clock_mhz_ = 0;
    bool instant_power_ = false;
    Clock clock_;
    int interval_ms_;
    std::thread thread_;
    std::mutex wake_mutex_; // guards stopping_, for the thread's timed wait
    std::condition_variable wake_;
    bool stopping_ = false;
    std::mutex mutex_; // guards samples_ and energy_: the sampling thread and mark() append concurrently
    std::vector<PowerSample> samples_;
    std::vector<EnergyReading> energy_;
};

} // namespace llmc::prof
