/*
 * The memory plan as data (doc/profiling.md, "Memory"): every allocation a program makes and every tensor inside
 * it, with its place (allocation, offset, bytes), what it is (name, layer, the sub-block that writes it, dtype,
 * shape, kind) and when a training step uses it (first and last op in the step's order of work).
 *
 * The GPU programs build their plan with the same tables that carve their buffers (llmc/gpu/gpt2.cuh,
 * llmc/gpu/gpt2_decoder.cuh) and allocate exactly the plan's allocations; the CPU trainer builds one for its own
 * buffers (llmc/cpu/gpt2.h). The profiler reads plans (llmc/profiler/memory.h): the peak of what is live, the
 * caching-allocator simulation, memory.csv and the snapshot pickle. Plain C++, no CUDA types.
 */
#pragma once
#include <cstddef>
#include <algorithm>
#include <functional>
#include <numeric>
#include <type_traits>
#include <string>
#include <utility>
#include <vector>

#include "llmc/model/gpt2_config.h"
#include "llmc/model/subblocks.h"
#include "llmc/util/utils.h"

namespace llmc {

enum class MemoryKind {
    parameters, gradients, master_weights, adam_moments, activations, activation_gradients, scratch, inputs,
    cublaslt_workspace, cub_temp, kv_cache, COUNT
};
inline const char* memory_kind_name(MemoryKind k) {
    static constexpr const char* names[] = {"parameters",  "gradients",          "master_weights", "adam_moments",
                                            "activations", "activation_gradients", "scratch",      "inputs",
                                            "cublaslt_workspace", "cub_temp",      "kv_cache"};
    return enum_table<MemoryKind>(names)[(int)k];
}

struct PlannedTensor {
    std::string name;    // "ln1", "wte", "adam_m", ...
    int layer = -1;      // -1: not a layer's
    int subblock = -1;   // (int)SubBlock that writes it; -1: none (parameters, optimizer state, scratch)
    MemoryKind kind = MemoryKind::activations;
    std::string dtype;   // "bf16", "fp32", "int32", "bytes"
    std::vector<size_t> shape;
    int allocation = 0;  // index into MemoryPlan::allocations
    size_t offset = 0;   // bytes from the allocation's start
    size_t bytes = 0;    // the tensor's own bytes (alignment padding after it is not counted)
    // The step's ops (MemoryPlan::ops) that first writes and last reads it; both -1: live for the whole run.
    int first_use = -1, last_use = -1;
    bool whole_run() const { return first_use < 0; }
};

struct PlannedAllocation {
    std::string name;
    size_t bytes = 0;
    // Made once per process and shared by every model in it (the cuBLASLt workspace): counted in the plan, but
    // a second model in the same process does not allocate it again.
    bool per_process = false;
    // Made and freed inside one call while the first step runs, never two at once (the cuBLASLt autotune's scratch
    // output for a matmul that accumulates: the largest it makes): counted in the plan's peak and in what fits, not
    // among the allocations a model makes when it is built.
    bool transient = false;
};

// The largest n in [1, cap] for which fits(n) holds, where fits holds up to some n and not past it (a plan's bytes
// grow with its batch): doubling, then bisection. 0 when not even fits(1).
long largest_that_fits(long cap, const std::function<bool(long)>& fits);

struct MemoryPlan {
    std::string program;            // what the plan is of: "GPU training", "GPU inference", "CPU training"
    int B = 0, T = 0, grad_accum = 1, shards = 1;
    int max_len = 0;                // inference: tokens per sequence (the KV cache's length)
    std::vector<std::string> ops;   // a training step's order of work; empty: no liveness (inference)
    std::vector<PlannedAllocation> allocations;
    std::vector<PlannedTensor> tensors;
    std::vector<std::string> notes; // what the plan had to estimate (CUB's storage without a device)

    // The peak: every allocation, the transient one included.
    size_t total_bytes() const;
    // What stays allocated between steps: the allocations less the transient one.
    size_t resident_bytes() const;
    // The allocation of that name; Error if there is none.
    const PlannedAllocation& allocation(const std::string& name) const;
    // The tensor of that name and layer; Error if there is none.
    const PlannedTensor& tensor(const std::string& name, int layer = -1) const;
    size_t kind_bytes(MemoryKind k) const;
};

// Element type names for the plan.
template <typename E> const char* planned_dtype() {
    if constexpr (std::is_same_v<E, float>) return "fp32";
    else if constexpr (std::is_same_v<E, int>) return "int32";
    else if constexpr (sizeof(E) == 2) return "bf16";
    else return "bytes";
}

// What a carve records: the tensor's name and kind, its shape per layer, the number of layers it stacks
// (0: not stacked; n: n slabs of equal size, one plan entry each) and the sub-block that writes it.
struct TensorInfo {
    const char* name = "";
    MemoryKind kind = MemoryKind::activations;
    std::vector<size_t> shape;
    int layers = 0;
    int subblock = -1;
};

/*
 * Carves typed tensors one after the other from one buffer (base may be null to only measure), each starting
 * 256-byte aligned: cuBLASLt's operand alignment, and more than any vector load needs. With a plan it also
 * records each tensor into plan->tensors as part of allocation `allocation`.
 */
struct BufferCarver {
    char* base;
    MemoryPlan* plan = nullptr;
    int allocation = 0;
    size_t off = 0;
    template <typename E> void operator()(E*& ptr, size_t count, const TensorInfo& info = {}) {
        off = round_up(off);
        ptr = base ? reinterpret_cast<E*>(base + off) : nullptr;
        if (plan) record(off, count * sizeof(E), planned_dtype<E>(), info);
        off += count * sizeof(E);
    }
    // Bytes without a typed pointer (CUB's temporary storage).
    void raw(size_t bytes, const TensorInfo& info) {
        off = round_up(off);
        if (plan) record(off, bytes, "bytes", info);
        off += bytes;
    }
    size_t bytes() const { return round_up(off); }
    static size_t round_up(size_t n) { return (n + 255) / 256 * 256; }

private:
    void record(size_t at, size_t bytes, const char* dtype, const TensorInfo& info);
};

// Starts a named allocation in the plan; carve into it with the returned carver, then finish_allocation.
BufferCarver begin_allocation(MemoryPlan& plan, char* base, const std::string& name, bool per_process = false);
void finish_allocation(MemoryPlan& plan, const BufferCarver& carve);

// The parameter tensors (llm.c order, stacked per layer as the model file keeps them) of one buffer of E.
template <typename E>
void carve_parameter_tensors(BufferCarver& carve, const GPT2Config& c, MemoryKind kind, size_t padded_count) {
    const auto sizes = parameter_sizes(c);
    const size_t L = c.num_layers;
    E* p = nullptr;
    size_t used = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const bool stacked = i >= 2 && i < 14; // wte, wpe before the layers' tensors, lnfw, lnfb after
        // Contiguous: the buffer is one array, so only the first tensor is aligned (the others follow it).
        const size_t at = carve.off;
        carve(p, sizes[i], {parameter_name(i), kind, {stacked ? sizes[i] / L : sizes[i]}, stacked ? (int)L : 0});
        carve.off = at + sizes[i] * sizeof(E);
        used += sizes[i];
    }
    if (padded_count > used) carve(p, padded_count - used, {"padding", kind, {padded_count - used}});
}

/*
 * A training step's order of work, as an eager framework would run it: the id upload, the forward (encoder;
 * per layer ln1, qkv, attention, attn_proj, ln2, fc, fc_proj: the GPU's sub-blocks, with residual1 inside ln2,
 * gelu inside fc and residual2 inside the next ln1), lnf, classifier, then the backward in reverse, the global
 * norm and the optimizer. Activations' liveness is given in these ops' indices.
 */
struct TrainingOps {
    int L;
    static constexpr SubBlock kLayer[7] = {SubBlock::ln1,  SubBlock::qkv, SubBlock::attention, SubBlock::attn_proj,
                                           SubBlock::ln2,  SubBlock::fc,  SubBlock::fc_proj};
    static int layer_slot(SubBlock s);
    int upload() const { return 0; }
    int fwd(SubBlock s, int l = -1) const {
        if (s == SubBlock::encoder) return 1;
        if (s == SubBlock::lnf) return 2 + 7 * L;
        if (s == SubBlock::classifier) return 3 + 7 * L;
        return 2 + 7 * l + layer_slot(s);
    }
    int bwd(SubBlock s, int l = -1) const {
        if (s == SubBlock::classifier) return 4 + 7 * L;
        if (s == SubBlock::lnf) return 5 + 7 * L;
        if (s == SubBlock::encoder) return 6 + 14 * L;
        return mirror(fwd(s, l));
    }
    // The backward op of a forward op (the forward runs 1 .. 3 + 7L, the backward 4 + 7L .. 6 + 14L).
    int mirror(int fwd_op) const { return 7 + 14 * L - fwd_op; }
    int grad_norm() const { return 7 + 14 * L; }
    int optimizer() const { return 8 + 14 * L; }
    int count() const { return 9 + 14 * L; }
    std::vector<std::string> names() const;
};

/*
 * First and last op of a training tensor by its name and layer (the GPU's and the CPU's activation names):
 * written by its forward sub-block, read last by the backward op that needs it. {-1, -1}: the whole run.
 */
std::pair<int, int> training_liveness(const TrainingOps& o, const std::string& n, int l);

// Sets the plan's op names and every tensor's liveness by training_liveness. A gradient of an activation (the
// CPU trainer keeps them, named grad_<activation>) is live from the backward of the op after that activation's
// writer to the backward of its writer (the forward interval mirrored); the residual stream's gradients, which
// the CPU's residual ops write and accumulate into, by where those ops sit among the step's.
void set_training_liveness(MemoryPlan& plan, int L);

} // namespace llmc
