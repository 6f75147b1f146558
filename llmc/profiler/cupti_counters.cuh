/*
 * Hardware counters per kernel with CUPTI's range profiler (cupti_range_profiler.h + cupti_profiler_host.h).
 *
 * Host half, no GPU needed: MetricConfig turns a metric list and a chip name ("GH100") into the config image
 * the profiler schedules its passes from, and evaluates counter data back into metric values.
 *
 * Device half: collect_counters() runs one callable (a training step) under the range profiler with auto
 * range (one range per kernel, named by its index) and kernel replay (CUPTI replays each kernel once per pass,
 * saving and restoring its memory, so one call of the step collects every pass), and returns one
 * KernelCounters per kernel in launch order. Activity tracing (llmc/profiler/cupti_collector.cuh) must be stopped
 * first: it would record the replays. Joining to sub-blocks: llmc/profiler/counter_records.h.
 *
 * Metric sets (pass counts observed for chip GH100 with CUPTI 2025.3.1, test/test_counters.cpp):
 *   COUNTER_METRICS  time, DRAM read/write, L2 bytes, bf16 tensor ops, and the peaks and clocks for the
 *                    per-kernel ceilings: 1 pass;
 *   FP32_METRICS     fadd, fmul, ffma thread instructions: 1 pass on their own;
 *   both             2 passes (the FP32 instruction counters do not fit beside the first set). The counted
 *                    step uses both in one config; kernel replay runs the two passes per kernel.
 */
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "llmc/profiler/counter_records.h"
#include "llmc/utils.h"

namespace llmc::prof {

inline const std::vector<std::string> COUNTER_METRICS = {
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_bytes.sum",
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum",
    // Ceilings: peak per cycle x the clock the kernel ran at (cycles elapsed / duration).
    "sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
    "sm__cycles_elapsed.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__cycles_elapsed.avg.per_second",
};
inline const std::vector<std::string> FP32_METRICS = {
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
};

// A CUPTI parameter struct, zeroed, with its structSize set (CUPTI's versioning of the struct).
template <class P> P params(size_t struct_size) {
    P p{};
    p.structSize = struct_size;
    return p;
}
#define COUNTER_PARAMS(type) ::llmc::prof::params<type>(type##_STRUCT_SIZE)

inline const char* counters_error_string(CUptiResult r) {
    const char* msg = nullptr;
    return cuptiGetResultString(r, &msg) == CUPTI_SUCCESS && msg ? msg : "unknown CUPTI error";
}

// Thrown for CUPTI failures of the counter path; `code` lets callers tell a permission problem apart.
struct CounterError : Error {
    CUptiResult code;
    CounterError(CUptiResult c, const std::string& what)
        : Error(strprintf("%s: %s", what.c_str(), counters_error_string(c))), code(c) {}
};
inline void counters_check(CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS) throw CounterError(r, what);
}

/*
 * A host object for one chip and one metric list: the config image (what to program in each pass) and the
 * evaluation of counter data. `counter_availability` (from the device) may be empty: then every counter is
 * assumed available, which is what a CI machine without a GPU can do.
 */
class MetricConfig {
public:
    MetricConfig(const std::string& chip, const std::vector<std::string>& metrics,
                 const std::vector<uint8_t>& counter_availability = {})
        : metrics_(metrics) {
        host_ = host_object(chip, counter_availability);
        // All metrics in one call: CUPTI schedules each call's metrics separately (one at a time, the counter
        // set takes 7 passes instead of 1). CUPTI says only "invalid parameter" for a bad name, so on failure
        // each name is tried alone on a scratch object to say which one.
        std::vector<const char*> names;
        for (const std::string& m : metrics_) names.push_back(m.c_str());
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
    ~MetricConfig() { release(); }
    MetricConfig(const MetricConfig&) = delete;
    MetricConfig& operator=(const MetricConfig&) = delete;

    const std::vector<uint8_t>& config_image() const { return image_; }
    const std::vector<std::string>& metrics() const { return metrics_; }

    // Replays each kernel needs to collect every metric.
    size_t num_passes() const {
        auto p = COUNTER_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
        p.configImageSize = image_.size();
        p.pConfigImage = const_cast<uint8_t*>(image_.data());
        counters_check(cuptiProfilerHostGetNumOfPasses(&p), "counters: pass count");
        return p.numOfPasses;
    }

    // Values of metrics() for range `range` of a decoded counter-data image, in metrics() order.
    std::vector<double> evaluate(const std::vector<uint8_t>& counter_data, size_t range) const {
        std::vector<const char*> names;
        for (const std::string& m : metrics_) names.push_back(m.c_str());
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

private:
    static CUpti_Profiler_Host_Object* host_object(const std::string& chip, const std::vector<uint8_t>& availability) {
        auto init = COUNTER_PARAMS(CUpti_Profiler_Host_Initialize_Params);
        init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
        init.pChipName = chip.c_str();
        init.pCounterAvailabilityImage = availability.empty() ? nullptr : availability.data();
        counters_check(cuptiProfilerHostInitialize(&init), ("counters: chip '" + chip + "' not supported").c_str());
        return init.pHostObject;
    }
    static CUptiResult add_metrics(CUpti_Profiler_Host_Object* host, const char** names, size_t n) {
        auto add = COUNTER_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
        add.pHostObject = host;
        add.ppMetricNames = names;
        add.numMetrics = n;
        return cuptiProfilerHostConfigAddMetrics(&add);
    }
    static void release_object(CUpti_Profiler_Host_Object* host) noexcept {
        auto d = COUNTER_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
        d.pHostObject = host;
        cuptiProfilerHostDeinitialize(&d);
    }
    void release() noexcept {
        if (host_) release_object(host_);
        host_ = nullptr;
    }
    std::vector<std::string> metrics_;
    CUpti_Profiler_Host_Object* host_ = nullptr;
    std::vector<uint8_t> image_;
};

// All metrics a counted step collects: COUNTER_METRICS then FP32_METRICS.
inline std::vector<std::string> all_counter_metrics() {
    std::vector<std::string> m = COUNTER_METRICS;
    m.insert(m.end(), FP32_METRICS.begin(), FP32_METRICS.end());
    return m;
}

// One evaluated range (values in all_counter_metrics() order) as a KernelCounters.
inline KernelCounters kernel_counters_from(const std::string& name, const std::vector<double>& v) {
    KernelCounters k;
    k.name = name;
    k.time_ns = v[0], k.dram_read = v[1], k.dram_write = v[2], k.l2_bytes = v[3], k.tensor_ops = v[4];
    k.peak_tensor_flops = v[5] * v[7];
    k.peak_fp32_flops = 2 * v[6] * v[7]; // an FFMA is 2 FLOPs
    k.peak_dram_bytes = v[8] * v[9];
    k.fadd = v[10], k.fmul = v[11], k.ffma = v[12];
    return k;
}

// Permission to read counters is per driver setting: say what to change, once, in one line.
inline bool counters_permission_error(CUptiResult r) {
    return r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES;
}

/*
 * Runs `step` once under the range profiler on the current device and returns its kernels' counters in
 * launch order (names demangled by `demangle_name`). Never throws for a CUPTI failure: the report says
 * why in `note` and `collected` stays false, so the rest of the profile is still written. `max_kernels`
 * sizes the counter-data image; launches beyond it are dropped (and counted in the note). The caller joins
 * the kernels to sub-blocks (join_by_launch_order) and aggregates them (aggregate_counters).
 */
inline CounterReport collect_counters(const std::function<void()>& step, size_t max_kernels,
                                      const std::function<std::string(const char*)>& demangle_name) {
    CounterReport out;
    bool initialized = false, started = false;
    CUpti_RangeProfiler_Object* profiler = nullptr;
    try {
        auto init = COUNTER_PARAMS(CUpti_Profiler_Initialize_Params);
        counters_check(cuptiProfilerInitialize(&init), "counters: profiler initialize");
        initialized = true;
        int device = 0;
        if (cudaGetDevice(&device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess)
            throw Error("counters: no current CUDA device");
        // The driver's current context, found through the runtime so that no -lcuda is needed.
        CUresult (*ctx_get_current)(CUcontext*) = nullptr;
        cudaDriverEntryPointQueryResult found;
        CUcontext ctx = nullptr;
        if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", (void**)&ctx_get_current, 12000, cudaEnableDefault,
                                             &found) != cudaSuccess ||
            found != cudaDriverEntryPointSuccess || ctx_get_current(&ctx) != CUDA_SUCCESS || !ctx)
            throw Error("counters: no current CUDA context");

        auto chip = COUNTER_PARAMS(CUpti_Device_GetChipName_Params);
        chip.deviceIndex = (size_t)device;
        counters_check(cuptiDeviceGetChipName(&chip), "counters: chip name");
        auto avail = COUNTER_PARAMS(CUpti_Profiler_GetCounterAvailability_Params);
        avail.ctx = ctx;
        counters_check(cuptiProfilerGetCounterAvailability(&avail), "counters: counter availability");
        std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
        avail.pCounterAvailabilityImage = availability.data();
        counters_check(cuptiProfilerGetCounterAvailability(&avail), "counters: counter availability");

        const std::vector<std::string> metrics = all_counter_metrics();
        MetricConfig config(chip.pChipName, metrics, availability);

        auto enable = COUNTER_PARAMS(CUpti_RangeProfiler_Enable_Params);
        enable.ctx = ctx;
        counters_check(cuptiRangeProfilerEnable(&enable), "counters: range profiler enable");
        profiler = enable.pRangeProfilerObject;

        std::vector<const char*> names;
        for (const std::string& m : metrics) names.push_back(m.c_str());
        auto size = COUNTER_PARAMS(CUpti_RangeProfiler_GetCounterDataSize_Params);
        size.pRangeProfilerObject = profiler;
        size.pMetricNames = names.data();
        size.numMetrics = names.size();
        size.maxNumOfRanges = max_kernels;
        size.maxNumRangeTreeNodes = (uint32_t)max_kernels;
        counters_check(cuptiRangeProfilerGetCounterDataSize(&size), "counters: counter data size");
        std::vector<uint8_t> data(size.counterDataSize);
        auto di = COUNTER_PARAMS(CUpti_RangeProfiler_CounterDataImage_Initialize_Params);
        di.pRangeProfilerObject = profiler;
        di.counterDataSize = data.size();
        di.pCounterData = data.data();
        counters_check(cuptiRangeProfilerCounterDataImageInitialize(&di), "counters: counter data init");

        auto sc = COUNTER_PARAMS(CUpti_RangeProfiler_SetConfig_Params);
        sc.pRangeProfilerObject = profiler;
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

        auto start = COUNTER_PARAMS(CUpti_RangeProfiler_Start_Params);
        start.pRangeProfilerObject = profiler;
        counters_check(cuptiRangeProfilerStart(&start), "counters: start");
        started = true;
        step();
        if (cudaDeviceSynchronize() != cudaSuccess) throw Error("counters: the counted step failed");
        auto stop = COUNTER_PARAMS(CUpti_RangeProfiler_Stop_Params);
        stop.pRangeProfilerObject = profiler;
        started = false;
        counters_check(cuptiRangeProfilerStop(&stop), "counters: stop");
        // Kernel replay submits every pass inside each launch: one call of the step is all of them.
        if (!stop.isAllPassSubmitted) throw Error("counters: kernel replay left passes unsubmitted");
        auto dec = COUNTER_PARAMS(CUpti_RangeProfiler_DecodeData_Params);
        dec.pRangeProfilerObject = profiler;
        counters_check(cuptiRangeProfilerDecodeData(&dec), "counters: decode");
        if (dec.numOfRangeDropped)
            out.note = strprintf("%zu kernels beyond the first %zu were not counted", dec.numOfRangeDropped,
                                 max_kernels);

        auto info = COUNTER_PARAMS(CUpti_RangeProfiler_GetCounterDataInfo_Params);
        info.pCounterDataImage = data.data();
        info.counterDataImageSize = data.size();
        counters_check(cuptiRangeProfilerGetCounterDataInfo(&info), "counters: counter data info");
        for (size_t i = 0; i < info.numTotalRanges; i++) {
            auto ri = COUNTER_PARAMS(CUpti_RangeProfiler_CounterData_GetRangeInfo_Params);
            ri.pCounterDataImage = data.data();
            ri.counterDataImageSize = data.size();
            ri.rangeIndex = i;
            ri.rangeDelimiter = "/";
            counters_check(cuptiRangeProfilerCounterDataGetRangeInfo(&ri), "counters: range name");
            out.kernels.push_back(kernel_counters_from(demangle_name(ri.rangeName), config.evaluate(data, i)));
        }
        out.collected = true;
    } catch (const CounterError& e) {
        out.note = counters_permission_error(e.code)
                       ? "no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or load "
                         "the nvidia module with NVreg_RestrictProfilingToAdminUsers=0"
                       : e.what();
    } catch (const std::exception& e) { // Error, or bad_alloc for a counter image too large
        out.note = e.what();
    }
    if (started) { // the step threw: stop the profiler before disabling it
        auto stop = COUNTER_PARAMS(CUpti_RangeProfiler_Stop_Params);
        stop.pRangeProfilerObject = profiler;
        cuptiRangeProfilerStop(&stop);
    }
    if (profiler) {
        auto dis = COUNTER_PARAMS(CUpti_RangeProfiler_Disable_Params);
        dis.pRangeProfilerObject = profiler;
        cuptiRangeProfilerDisable(&dis);
    }
    if (initialized) {
        auto deinit = COUNTER_PARAMS(CUpti_Profiler_DeInitialize_Params);
        cuptiProfilerDeInitialize(&deinit);
    }
    return out;
}

} // namespace llmc::prof
