/*
 * Hardware-counter records (llmc/profiler/cupti_counters.cuh collects them) and their aggregation into sub-block and
 * per-kernel rows for the roofline. Plain C++ with no CUDA types, testable from synthetic records.
 *
 * One KernelCounters per kernel launch of the counted step, in launch order. In auto-range mode the range
 * profiler names each range by its index ("0", "1", ...), not by its kernel, and knows nothing of our
 * Ranges, so attribution is joined by order: the counted step runs the same code as the traced steps, so
 * its i-th kernel is the i-th kernel (by launch order = correlation id) of a traced step, and takes that
 * kernel's name, sub-block, phase and layer (join_by_launch_order).
 *
 * FLOPs: sm__ops_path_tensor_src_bf16_dst_fp32 counts 2·M·N·K for a GEMM, the analytic model's unit; the
 * CUDA-core FP32 FLOPs are fadd + fmul + 2·ffma thread instructions. Bytes: DRAM read + write.
 * Aggregation sums counts (ns, bytes, ops, and the seconds of the per-kernel floors) and derives every rate
 * from the sums (doc/profiling.md, "The roofline").
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "llmc/profiler/records.h"
#include "llmc/profiler/roofline.h"
#include "llmc/util/utils.h"

namespace llmc::prof {

struct KernelCounters {
    std::string name; // the range's name until joined ("12" in auto range), then the traced kernel's name
    Attribution where;
    double time_ns = 0;                        // gpu__time_duration.sum
    double dram_read = 0, dram_write = 0;      // dram__bytes_{read,write}.sum
    double l2_bytes = 0;                       // lts__t_bytes.sum
    double tensor_ops = 0;                     // sm__ops_path_tensor_src_bf16_dst_fp32.sum (= 2·M·N·K)
    double fadd = 0, fmul = 0, ffma = 0;       // smsp__sass_thread_inst_executed_op_*_pred_on.sum
    // This kernel's ceilings at the clocks it ran at (peak per cycle x cycles per second); 0 = unknown.
    double peak_tensor_flops = 0, peak_fp32_flops = 0, peak_dram_bytes = 0; // per second

    double fp32_flops() const { return fadd + fmul + 2 * ffma; }
    double flops() const { return tensor_ops + fp32_flops(); }
    double dram_bytes() const { return dram_read + dram_write; }
    // The kernel's time floor terms, seconds: tensor FLOPs against the tensor peak, FP32 FLOPs against the
    // FP32 peak, DRAM bytes against the bandwidth. Seconds add across kernels; rates do not.
    double compute_floor_s() const {
        return (peak_tensor_flops > 0 ? tensor_ops / peak_tensor_flops : 0) +
               (peak_fp32_flops > 0 ? fp32_flops() / peak_fp32_flops : 0);
    }
    double memory_floor_s() const { return peak_dram_bytes > 0 ? dram_bytes() / peak_dram_bytes : 0; }
};

// Sums over a set of kernels, and the rates derived from the sums.
struct CounterRow {
    int subblock = -1, phase = -1;
    std::string kernel; // "" for a sub-block row
    long kernels = 0;   // launches summed
    double time_ns = 0, tensor_flops = 0, fp32_flops = 0, dram_bytes = 0, l2_bytes = 0;
    double tensor_floor_s = 0, fp32_floor_s = 0, memory_floor_s = 0; // summed per-kernel floor terms

    void add(const KernelCounters& k) {
        kernels++;
        time_ns += k.time_ns;
        tensor_flops += k.tensor_ops;
        fp32_flops += k.fp32_flops();
        dram_bytes += k.dram_bytes();
        l2_bytes += k.l2_bytes;
        if (k.peak_tensor_flops > 0) tensor_floor_s += k.tensor_ops / k.peak_tensor_flops;
        if (k.peak_fp32_flops > 0) fp32_floor_s += k.fp32_flops() / k.peak_fp32_flops;
        memory_floor_s += k.memory_floor_s();
    }
    double flops() const { return tensor_flops + fp32_flops; }
    double compute_floor_s() const { return tensor_floor_s + fp32_floor_s; }
    // The ceilings these kernels ran against, each derived from its counts and its floor seconds.
    double tensor_ceiling_tflops() const { return tensor_floor_s > 0 ? tensor_flops / tensor_floor_s / 1e12 : NAN; }
    double fp32_ceiling_tflops() const { return fp32_floor_s > 0 ? fp32_flops / fp32_floor_s / 1e12 : NAN; }
    double dram_ceiling_gbps() const { return memory_floor_s > 0 ? dram_bytes / memory_floor_s / 1e9 : NAN; }
    double time_s() const { return time_ns * 1e-9; }
    double tflops() const { return time_ns > 0 ? flops() / time_s() / 1e12 : NAN; }
    double gbps() const { return time_ns > 0 ? dram_bytes / time_s() / 1e9 : NAN; }
    double intensity() const { return dram_bytes > 0 ? flops() / dram_bytes : NAN; }
    double floor_s() const { return std::max(compute_floor_s(), memory_floor_s); }
    double pct_of_roofline() const { return time_ns > 0 && floor_s() > 0 ? 100 * floor_s() / time_s() : NAN; }
    const char* bound() const {
        if (floor_s() <= 0) return "";
        return compute_floor_s() >= memory_floor_s ? "compute" : "memory";
    }
};

// What one counted step produced. Empty (collected = false) without --counters or without permission.
struct CounterReport {
    bool collected = false;
    std::string note;                  // why counters are missing or partial, "" when all is well
    double tensor_flops_per_op = 0;    // FLOPs per counted tensor op, from a calibration GEMM (0: not measured)
    std::vector<KernelCounters> kernels; // launch order
    std::vector<CounterRow> subblocks; // by (phase, sub-block) as the report orders them, "(none)" last
    std::vector<CounterRow> per_kernel; // by (kernel name, sub-block, phase), descending time
    CounterRow total;
};

/*
 * The tensor-op counter's unit, measured instead of assumed: a GEMM of known size (m, n, k) counted the same
 * way does 2·m·n·k FLOPs, so one counted op is worth 2·m·n·k / counted FLOPs (0 when nothing was counted).
 * scale_tensor_ops applies it to every kernel of a report before aggregation: to its tensor ops and to its
 * tensor peak, which the counters give in the same unit (peak ops per cycle x cycles per second).
 */
inline double tensor_flops_per_op(double counted_ops, double m, double n, double k) {
    return counted_ops > 0 ? 2.0 * m * n * k / counted_ops : 0.0;
}
void scale_tensor_ops(CounterReport& r, double flops_per_op);

// Strips the argument list of a demangled name ("void f<T>(int*)" and "f" compare equal on "f").
std::string kernel_base_name(const std::string& name);

// True for a range named by its index, as auto range names them.
bool is_range_index(const std::string& name);

/*
 * Copies `traced` (one traced step's kernels) names and attribution onto `counted` by launch order.
 * Returns "" on success, else why the join failed (counts differ, or a kernel name at the same position
 * differs; a range named by its index matches any kernel); on failure the counted kernels keep no
 * attribution and land in "(none)".
 */
std::string join_by_launch_order(std::vector<KernelRecord> traced, std::vector<KernelCounters>& counted);

// The traced kernels of the last recorded step (those that started inside its time span): what a counted step
// repeats and is joined to.
std::vector<KernelRecord> last_step_kernels(const ProfileRecords& records);

// Fills subblocks, per_kernel and total from kernels.
void aggregate_counters(CounterReport& r);

// The sub-block row of (subblock, phase), or nullptr when no counted kernel ran there.
const CounterRow* find_counter_row(const CounterReport& r, int subblock, int phase);

// What the counted figures are (the summary's table, roofline.csv's replay_ columns and kernel_replay rows,
// profile.json's "counters"): kernels replayed one at a time, not the traced steps.
constexpr const char* REPLAY_NOTE = "replay figures: CUPTI ran each kernel alone, its memory saved and restored "
                                    "between passes, the L2 disturbed; times and bytes are not the traced steps'";

/*
 * A row of the "Measured vs analytic" table (summary.txt, counters.csv, profile.json "counters/subblocks"), per
 * step: a sub-block's counted tensor FLOPs next to its analytic GEMM FLOPs (equal for cuBLAS GEMMs: both are
 * 2·M·N·K), the counted FP32 FLOPs next to the analytic elementwise FLOPs (rough per-element counts), and the
 * DRAM bytes next to the analytic minimum. The last row is the total ("total", no phase).
 */
struct MeasuredRow {
    std::string subblock, phase; // "(none)" for kernels outside every sub-block
    CounterRow hw;
    bool has_analytic = false; // the model has a cost for this row
    OpCost analytic;
};
std::vector<MeasuredRow> measured_rows(const CounterReport& r, const CostTable& costs, bool has_model);

} // namespace llmc::prof
