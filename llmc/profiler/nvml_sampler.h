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
#include "llmc/util/utils.h"

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
bool resolve_nvml(NvmlApi* api, const std::function<void*(const char*)>& lookup, std::string* why);

// resolve_nvml on libnvidia-ml.so.1 (the handle goes to *lib, for dlclose).
bool load_nvml(NvmlApi* api, void** lib, std::string* why);

/*
 * One NVLink link's peak bandwidth per direction, GB/s, by the version NVML reports (nvmlNvlinkVersion_t:
 * 1 = NVLink 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0); 0 for a version not in the table. From
 * NVIDIA's datasheets, total bidirectional NVLink bandwidth over the link count, halved: P100 160 GB/s over 4
 * links (20), V100 300 GB/s over 6 (25), A100 600 GB/s over 12 (25), H100 900 GB/s over 18 (25), B200 1.8 TB/s
 * over 18 (50).
 */
double nvlink_gbps_per_link(unsigned nvml_version);

/*
 * One PCIe lane's peak bandwidth per direction, GB/s, by generation; 0 for one not in the table. The PCI-SIG
 * transfer rates (2.5, 5, 8, 16, 32, 64 GT/s) times the line code's efficiency (8b/10b for 1 and 2, 128b/130b for
 * 3 to 5, 242/256 FLIT for 6), over 8 bits: 16 lanes of generation 4 are 31.5 GB/s.
 */
double pcie_gbps_per_lane(unsigned generation);

constexpr unsigned NVML_NVLINK_MAX_LINKS = 18; // nvml.h's, since NVLink 4 (H100: 18 links)

/*
 * The link a device's collectives cross, from NVML: its active NVLink links times their per-link peak when it
 * has any, else its PCIe link (maximum generation times maximum width); unknown when NVML answers neither.
 */
Link read_link(const NvmlApi& api, nvmlDevice_t dev);

// read_link for the device with this PCI bus id (cudaDeviceGetPCIBusId), through libnvidia-ml.so.1; unknown
// without NVML.
Link nvml_link(const std::string& pci_bus_id);

class PowerSampler {
public:
    using Clock = std::function<uint64_t()>; // ns, the timebase of the profile's records

    // NVML from libnvidia-ml.so.1. pci_bus_id ("0000:65:00.0", cudaDeviceGetPCIBusId) picks the CUDA device
    // (CUDA and NVML number devices differently); empty: NVML device 0.
    explicit PowerSampler(Clock clock, int interval_ms = 100, const std::string& pci_bus_id = "");
    // An injected function table (tests).
    PowerSampler(const NvmlApi& api, Clock clock, int interval_ms = 100, const std::string& pci_bus_id = "");
    PowerSampler(const PowerSampler&) = delete;
    PowerSampler& operator=(const PowerSampler&) = delete;
    ~PowerSampler();

    bool available() const { return device_ != nullptr; }
    // True when power is read instantaneously (NVML_FI_DEV_POWER_INSTANT), false for the averaged reading.
    bool instant_power() const { return instant_power_; }
    // "" when available, else "NVML not available (<why>)".
    const std::string& status() const { return status_; }

    // The energy counter (nvmlDeviceGetTotalEnergyConsumption, Volta and newer): whether it answers, and its
    // reading now in joules (NaN when a reading fails); the SM clock (MHz) and temperature (C) now, 0 when unknown.
    bool has_energy_counter() const;
    double energy_joules() const;
    void clocks(int* sm_clock_mhz, int* temperature_c) const;

    // Starts the sampling thread; false (and no samples) without NVML.
    bool start();
    // A step boundary: one sample and one reading of the energy counter, taken now on this thread.
    void mark();
    void stop();
    // Moves what was sampled into r (power, energy, power_reading, power_status, max_sm_clock_mhz). Call after
    // stop().
    void take_into(ProfileRecords& r);

private:
    void open(const std::string& pci_bus_id);
    bool read_instant_power(unsigned* mw) const;
    // One sample; a reading that fails stays 0 (NVML can refuse one query and answer the next).
    void sample();

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
