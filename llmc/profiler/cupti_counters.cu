// Hardware counters per kernel with CUPTI's range profiler (llmc/profiler/cupti_counters.cuh).
#include "llmc/profiler/cupti_counters.cuh"

#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

namespace llmc::prof {

namespace {

// A CUPTI parameter struct, zeroed, with its structSize set (CUPTI's versioning of the struct).
template <class P> P params(size_t struct_size) {
    P p{};
    p.structSize = struct_size;
    return p;
}
#define COUNTER_PARAMS(type) params<type>(type##_STRUCT_SIZE)

const char* counters_error_string(CUptiResult r) {
    const char* msg = nullptr;
    return cuptiGetResultString(r, &msg) == CUPTI_SUCCESS && msg ? msg : "unknown CUPTI error";
}

void counters_check(CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS) throw CounterError(r, what);
}

// Permission to read counters is per driver setting: say what to change, once, in one line.
bool counters_permission_error(CUptiResult r) {
    return r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES;
}

CUpti_Profiler_Host_Object* host_object(const std::string& chip, const std::vector<uint8_t>& availability) {
    auto init = COUNTER_PARAMS(CUpti_Profiler_Host_Initialize_Params);
    init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    init.pChipName = chip.c_str();
    init.pCounterAvailabilityImage = availability.empty() ? nullptr : availability.data();
    counters_check(cuptiProfilerHostInitialize(&init), ("counters: chip '" + chip + "' not supported").c_str());
    return init.pHostObject;
}

CUptiResult add_metrics(CUpti_Profiler_Host_Object* host, const char** names, size_t n) {
    auto add = COUNTER_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
    add.pHostObject = host;
    add.ppMetricNames = names;
    add.numMetrics = n;
    return cuptiProfilerHostConfigAddMetrics(&add);
}

void release_object(CUpti_Profiler_Host_Object* host) noexcept {
    auto d = COUNTER_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
    d.pHostObject = host;
    cuptiProfilerHostDeinitialize(&d);
}

std::vector<const char*> c_names(const std::vector<std::string>& names) {
    std::vector<const char*> out;
    for (const std::string& n : names) out.push_back(n.c_str());
    return out;
}

// The current device's driver context, found through the runtime so that no -lcuda is needed.
CUcontext current_context(int* device) {
    if (cudaGetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
        throw Error("counters: no current CUDA device");
    CUresult (*ctx_get_current)(CUcontext*) = nullptr;
    cudaDriverEntryPointQueryResult found;
    CUcontext ctx = nullptr;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", (void**)&ctx_get_current, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess || ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx)
        throw Error("counters: no current CUDA context");
    return ctx;
}

// The device's chip name ("GH100") and which of its counters can be read now.
std::pair<std::string, std::vector<uint8_t>> chip_and_availability(int device, CUcontext ctx) {
    auto chip = COUNTER_PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = (size_t)device;
    counters_check(cuptiDeviceGetChipName(&chip), "counters: chip name");
    auto avail = COUNTER_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
    avail.ctx = ctx;
    counters_check(cuptiProfilerGetCounterAvailability(&avail), "counters: counter availability");
    std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = availability.data();
    counters_check(cuptiProfilerGetCounterAvailability(&avail), "counters: counter availability");
    return {chip.pChipName, availability};
}

/*
 * One range profiler session on a context: enabled, with a counter-data image for `max_kernels` ranges of
 * `config`'s metrics set up for auto range and kernel replay; disabled (and stopped, after an error) when it goes.
 */
class RangeProfiler {
public:
    RangeProfiler(CUcontext ctx, const MetricConfig& config, size_t max_kernels) : enabled_(ctx) {
        std::vector<const char*> names = c_names(config.metrics());
        auto size = COUNTER_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
        size.pRangeProfilerObject = profiler_;
        size.pMetricNames = names.data();
        size.numMetrics = names.size();
        size.maxNumOfRanges = max_kernels;
        size.maxNumRangeTreeNodes = (uint32_t)max_kernels;
        counters_check(cuptiRangeProfilerGetCounterDataSize(&size), "counters: counter data size");
        data.resize(size.counterDataSize);
        auto di = COUNTER_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
        di.pRangeProfilerObject = profiler_;
        di.counterDataSize = data.size();
        di.pCounterData = data.data();
        counters_check(cuptiRangeProfilerCounterDataImageInitialize(&di), "counters: counter data init");
        auto sc = COUNTER_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
        sc.pRangeProfilerObject = profiler_;
        sc.configSize = config.config_image().size();
        sc.pConfig = config.config_image().data();
        sc.counterDataImageSize = data.size();
        sc.pCounterDataImage = data.data();
        sc.range = CUPTI_AutoRange;
        sc.replayMode = CUPTI_KernelReplay;
        sc.maxRangesPerPass = max_kernels;
        sc.numNestingLevels = 1; // auto range: one level
        sc.minNestingLevel = 1;
        sc.passIndex = 0;
        sc.targetNestingLevel = 1;
        counters_check(cuptiRangeProfilerSetConfig(&sc), "counters: set config");
    }
    ~RangeProfiler() {
        if (started_) stop_quietly(); // the step threw
    }
    RangeProfiler(const RangeProfiler&) = delete;
    RangeProfiler& operator=(const RangeProfiler&) = delete;

    // Runs `step` with every kernel counted; returns how many ranges were dropped.
    size_t count(const std::function<void()>& step) {
        auto start = COUNTER_PARAMS(CUpti_RangeProfiler_Start_Params);
        start.pRangeProfilerObject = profiler_;
        counters_check(cuptiRangeProfilerStart(&start), "counters: start");
        started_ = true;
        step();
        if (cudaDeviceSynchronize() != cudaSuccess) throw Error("counters: the counted step failed");
        auto stop = COUNTER_PARAMS(CUpti_RangeProfiler_Stop_Params);
        stop.pRangeProfilerObject = profiler_;
        started_ = false;
        counters_check(cuptiRangeProfilerStop(&stop), "counters: stop");
        // Kernel replay submits every pass inside each launch: one call of the step is all of them.
        if (!stop.isAllPassSubmitted) throw Error("counters: kernel replay left passes unsubmitted");
        auto dec = COUNTER_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
        dec.pRangeProfilerObject = profiler_;
        counters_check(cuptiRangeProfilerDecodeData(&dec), "counters: decode");
        return dec.numOfRangeDropped;
    }

    // The counted ranges, in launch order: each kernel's name and its metric values.
    std::vector<KernelCounters> kernels(const MetricConfig& config,
                                        const std::function<std::string(const char*)>& demangle_name) const {
        auto info = COUNTER_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
        info.pCounterDataImage = data.data();
        info.counterDataImageSize = data.size();
        counters_check(cuptiRangeProfilerGetCounterDataInfo(&info), "counters: counter data info");
        std::vector<KernelCounters> out;
        for (size_t i = 0; i < info.numTotalRanges; i++) {
            auto ri = COUNTER_PARAMS(CUpti_RangeProfiler_CounterData_GetRangeInfo_Params);
            ri.pCounterDataImage = data.data();
            ri.counterDataImageSize = data.size();
            ri.rangeIndex = i;
            ri.rangeDelimiter = "/";
            counters_check(cuptiRangeProfilerCounterDataGetRangeInfo(&ri), "counters: range name");
            out.push_back(kernel_counters_from(demangle_name(ri.rangeName), config.evaluate(data, i)));
        }
        return out;
    }

private:
    // The range profiler enabled on the context, disabled again when it goes (also when the setup above throws).
    struct Enabled {
        explicit Enabled(CUcontext ctx) {
            auto enable = COUNTER_PARAMS(CUpti_RangeProfiler_Enable_Params);
            enable.ctx = ctx;
            counters_check(cuptiRangeProfilerEnable(&enable), "counters: range profiler enable");
            object = enable.pRangeProfilerObject;
        }
        ~Enabled() {
            auto dis = COUNTER_PARAMS(CUpti_RangeProfiler_Disable_Params);
            dis.pRangeProfilerObject = object;
            cuptiRangeProfilerDisable(&dis);
        }
        CUpti_RangeProfiler_Object* object = nullptr;
    };
    void stop_quietly() noexcept {
        auto stop = COUNTER_PARAMS(CUpti_RangeProfiler_Stop_Params);
        stop.pRangeProfilerObject = profiler_;
        cuptiRangeProfilerStop(&stop);
    }
    Enabled enabled_;
    CUpti_RangeProfiler_Object* const profiler_ = enabled_.object;
    std::vector<uint8_t> data;
    bool started_ = false;
};

// The range profiler's initialisation for as long as it lives.
struct ProfilerInit {
    ProfilerInit() {
        auto init = COUNTER_PARAMS(CUpti_Profiler_Initialize_Params);
        counters_check(cuptiProfilerInitialize(&init), "counters: profiler initialize");
    }
    ~ProfilerInit() {
        auto deinit = COUNTER_PARAMS(CUpti_Profiler_DeInitialize_Params);
        cuptiProfilerDeInitialize(&deinit);
    }
};

} // namespace

CounterError::CounterError(CUptiResult c, const std::string& what)
    : Error(strprintf("%s: %s", what.c_str(), counters_error_string(c))), code(c) {}

MetricConfig::MetricConfig(const std::string& chip, const std::vector<std::string>& metrics,
                           const std::vector<uint8_t>& counter_availability)
    : metrics_(metrics) {
    host_ = host_object(chip, counter_availability);
    // All metrics in one call: CUPTI schedules each call's metrics separately (one at a time, the counter set takes
    // 7 passes instead of 1). CUPTI says only "invalid parameter" for a bad name, so on failure each name is tried
    // alone on a scratch object to say which one.
    std::vector<const char*> names = c_names(metrics_);
    CUptiResult r = add_metrics(host_, names.data(), names.size());
    if (r != CUPTI_SUCCESS) {
        release();
        for (const char* name : names) {
            CUpti_Profiler_Host_Object* scratch = host_object(chip, counter_availability);
            CUptiResult one = add_metrics(scratch, &name, 1);
            release_object(scratch);
            if (one != CUPTI_SUCCESS)
                throw CounterError(one, strprintf("counters: metric '%s' unknown on %s", name, chip.c_str()));
        }
        throw CounterError(r, "counters: metrics not accepted together");
    }
    auto size = COUNTER_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    size.pHostObject = host_;
    counters_check(cuptiProfilerHostGetConfigImageSize(&size), "counters: config image size");
    image_.resize(size.configImageSize);
    auto get = COUNTER_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    get.pHostObject = host_;
    get.configImageSize = image_.size();
    get.pConfigImage = image_.data();
    counters_check(cuptiProfilerHostGetConfigImage(&get), "counters: config image");
}

size_t MetricConfig::num_passes() const {
    auto p = COUNTER_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
    p.configImageSize = image_.size();
    p.pConfigImage = const_cast<uint8_t*>(image_.data());
    counters_check(cuptiProfilerHostGetNumOfPasses(&p), "counters: pass count");
    return p.numOfPasses;
}

std::vector<double> MetricConfig::evaluate(const std::vector<uint8_t>& counter_data, size_t range) const {
    std::vector<const char*> names = c_names(metrics_);
    std::vector<double> values(names.size());
    auto e = COUNTER_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
    e.pHostObject = host_;
    e.pCounterDataImage = counter_data.data();
    e.counterDataImageSize = counter_data.size();
    e.rangeIndex = range;
    e.ppMetricNames = names.data();
    e.numMetrics = names.size();
    e.pMetricValues = values.data();
    counters_check(cuptiProfilerHostEvaluateToGpuValues(&e), "counters: evaluate");
    return values;
}

void MetricConfig::release() noexcept {
    if (host_) release_object(host_);
    host_ = nullptr;
}

std::vector<std::string> all_counter_metrics() {
    std::vector<std::string> m = COUNTER_METRICS;
    m.insert(m.end(), FP32_METRICS.begin(), FP32_METRICS.end());
    return m;
}

KernelCounters kernel_counters_from(const std::string& name, const std::vector<double>& v) {
    KernelCounters k;
    k.name = name;
    k.time_ns = v[0], k.dram_read = v[1], k.dram_write = v[2], k.l2_bytes = v[3], k.tensor_ops = v[4];
    k.peak_tensor_flops = v[5] * v[7];
    k.peak_fp32_flops = 2 * v[6] * v[7]; // an FFMA is 2 FLOPs
    k.peak_dram_bytes = v[8] * v[9];
    k.fadd = v[10], k.fmul = v[11], k.ffma = v[12];
    return k;
}

CounterReport collect_counters(const std::function<void()>& step, size_t max_kernels,
                               const std::function<std::string(const char*)>& demangle_name) {
    CounterReport out;
    try {
        ProfilerInit init;
        int device = 0;
        const CUcontext ctx = current_context(&device);
        const auto [chip, availability] = chip_and_availability(device, ctx);
        const MetricConfig config(chip, all_counter_metrics(), availability);
        RangeProfiler profiler(ctx, config, max_kernels);
        if (size_t dropped = profiler.count(step))
            out.note = strprintf("%zu kernels beyond the first %zu were not counted", dropped, max_kernels);
        out.kernels = profiler.kernels(config, demangle_name);
        out.collected = true;
    } catch (const CounterError& e) {
        out.note = counters_permission_error(e.code)
                       ? "no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or load "
                         "the nvidia module with NVreg_RestrictProfilingToAdminUsers=0"
                       : e.what();
    } catch (const std::exception& e) { // Error, or bad_alloc for a counter image too large
        out.note = e.what();
    }
    return out;
}

} // namespace llmc::prof
