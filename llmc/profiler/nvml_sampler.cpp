// NVML's loader, the link reader and the power sampler (llmc/profiler/nvml_sampler.h).
#include "llmc/profiler/nvml_sampler.h"

#include <cmath>

#include <dlfcn.h>

namespace llmc::prof {

bool resolve_nvml(NvmlApi* api, const std::function<void*(const char*)>& lookup, std::string* why) {
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

bool load_nvml(NvmlApi* api, void** lib, std::string* why) {
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

double nvlink_gbps_per_link(unsigned nvml_version) {
    static constexpr double per_link[] = {0, 20, 25, 25, 25, 25, 25, 50};
    return nvml_version < sizeof per_link / sizeof per_link[0] ? per_link[nvml_version] : 0.0;
}

double pcie_gbps_per_lane(unsigned generation) {
    static constexpr double gt_per_s[] = {0, 2.5, 5, 8, 16, 32, 64};
    if (generation == 0 || generation >= sizeof gt_per_s / sizeof gt_per_s[0]) return 0.0;
    const double code = generation <= 2 ? 8.0 / 10 : generation <= 5 ? 128.0 / 130 : 242.0 / 256;
    return gt_per_s[generation] * code / 8;
}

Link read_link(const NvmlApi& api, nvmlDevice_t dev) {
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

Link nvml_link(const std::string& pci_bus_id) {
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

PowerSampler::PowerSampler(Clock clock, int interval_ms, const std::string& pci_bus_id)
    : clock_(std::move(clock)), interval_ms_(interval_ms) {
    std::string why;
    if (!load_nvml(&api_, &lib_, &why)) {
        status_ = "NVML not available (" + why + ")";
        return;
    }
    open(pci_bus_id);
}

PowerSampler::PowerSampler(const NvmlApi& api, Clock clock, int interval_ms, const std::string& pci_bus_id)
    : api_(api), clock_(std::move(clock)), interval_ms_(interval_ms) {
    open(pci_bus_id);
}

PowerSampler::~PowerSampler() {
    stop();
    if (initialised_) api_.shutdown();
    if (lib_) dlclose(lib_);
}

bool PowerSampler::start() {
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

void PowerSampler::mark() {
    if (!available()) return;
    sample();
    unsigned long long mj = 0;
    if (api_.total_energy && api_.total_energy(device_, &mj) == NVML_SUCCESS) {
        EnergyReading e{clock_(), mj * 1e-3};
        std::lock_guard<std::mutex> lock(mutex_);
        energy_.push_back(e);
    }
}

bool PowerSampler::has_energy_counter() const { return available() && std::isfinite(energy_joules()); }

double PowerSampler::energy_joules() const {
    unsigned long long mj = 0;
    if (!available() || !api_.total_energy || api_.total_energy(device_, &mj) != NVML_SUCCESS) return NAN;
    return mj * 1e-3;
}

void PowerSampler::clocks(int* sm_clock_mhz, int* temperature_c) const {
    unsigned v = 0;
    *sm_clock_mhz = available() && api_.clock_info && api_.clock_info(device_, NVML_CLOCK_SM, &v) == NVML_SUCCESS ? (int)v : 0;
    *temperature_c =
        available() && api_.temperature && api_.temperature(device_, NVML_TEMPERATURE_GPU, &v) == NVML_SUCCESS ? (int)v : 0;
}

void PowerSampler::stop() {
    if (!thread_.joinable()) return;
    {
        std::lock_guard<std::mutex> lock(wake_mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

void PowerSampler::take_into(ProfileRecords& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    r.power = std::move(samples_);
    r.energy = std::move(energy_);
    r.power_status = status_;
    r.power_reading = !available() ? "" : instant_power_ ? "instantaneous" : "1 s average";
    r.max_sm_clock_mhz = max_sm_clock_mhz_;
    samples_.clear(), energy_.clear();
}

void PowerSampler::open(const std::string& pci_bus_id) {
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

bool PowerSampler::read_instant_power(unsigned* mw) const {
    if (!api_.field_values) return false;
    NvmlFieldValue f{};
    f.field_id = NVML_FI_DEV_POWER_INSTANT;
    if (api_.field_values(device_, 1, &f) != NVML_SUCCESS || f.nvml_return != NVML_SUCCESS) return false;
    *mw = f.value.ui;
    return true;
}

void PowerSampler::sample() {
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

} // namespace llmc::prof
