// The memory plan: carving, liveness (llmc/model/memory_plan.h).
#include "llmc/model/memory_plan.h"

#include <tuple>


namespace llmc {

BufferCarver begin_allocation(MemoryPlan& plan, char* base, const std::string& name, bool per_process) {
    plan.allocations.push_back({name, 0, per_process});
    return BufferCarver{base, &plan, (int)plan.allocations.size() - 1};
}

void finish_allocation(MemoryPlan& plan, const BufferCarver& carve) {
    plan.allocations[carve.allocation].bytes = carve.bytes();
}

std::pair<int, int> training_liveness(const TrainingOps& o, const std::string& n, int l) {
    using S = SubBlock;
    const int L = o.L;
    if (n == "inputs") return {o.upload(), o.bwd(S::encoder)};
    if (n == "targets") return {o.upload(), o.fwd(S::classifier)};
    if (n == "encoded") return {o.fwd(S::encoder), o.bwd(S::ln1, 0)};
    if (n == "ln1") return {o.fwd(S::ln1, l), o.bwd(S::qkv, l)};
    if (n == "ln1_mean" || n == "ln1_rstd") return {o.fwd(S::ln1, l), o.bwd(S::ln1, l)};
    if (n == "qkv") return {o.fwd(S::qkv, l), o.bwd(S::attention, l)};
    if (n == "atty" || n == "att_lse" || n == "att") return {o.fwd(S::attention, l), o.bwd(S::attention, l)};
    if (n == "attproj") return {o.fwd(S::attn_proj, l), o.fwd(S::ln2, l)};
    if (n == "residual1") return {o.fwd(S::ln2, l), o.bwd(S::ln2, l)};
    if (n == "ln2") return {o.fwd(S::ln2, l), o.bwd(S::fc, l)};
    if (n == "ln2_mean" || n == "ln2_rstd") return {o.fwd(S::ln2, l), o.bwd(S::ln2, l)};
    if (n == "fch" || n == "fch_gelu") return {o.fwd(S::fc, l), o.bwd(S::fc_proj, l)};
    if (n == "fcproj") return {o.fwd(S::fc_proj, l), l + 1 < L ? o.fwd(S::ln1, l + 1) : o.fwd(S::lnf)};
    if (n == "residual2") // written by the next layer's ln1 (or lnf), read last by that op's backward
        return l + 1 < L ? std::make_pair(o.fwd(S::ln1, l + 1), o.bwd(S::ln1, l + 1))
                         : std::make_pair(o.fwd(S::lnf), o.bwd(S::lnf));
    if (n == "lnf") return {o.fwd(S::lnf), o.bwd(S::classifier)};
    if (n == "lnf_mean" || n == "lnf_rstd") return {o.fwd(S::lnf), o.bwd(S::lnf)};
    if (n == "logits" || n == "probs") return {o.fwd(S::classifier), o.bwd(S::classifier)};
    if (n == "losses") return {o.fwd(S::classifier), o.fwd(S::classifier)};
    if (n == "proj_out") return {o.fwd(S::attn_proj, 0), o.fwd(S::lnf)};
    if (n == "dresidual") return {o.bwd(S::classifier), o.bwd(S::encoder)};
    if (n == "dbtc") return {o.bwd(S::classifier), o.bwd(S::ln1, 0)};
    if (n == "dbt4c") return {o.bwd(S::fc_proj, L - 1), o.bwd(S::fc, 0)};
    if (n == "dqkv") return {o.bwd(S::attention, L - 1), o.bwd(S::qkv, 0)};
    if (n == "scratch") return {o.bwd(S::classifier), o.grad_norm()};
    // {loss, squared grad norm}: zeroed when the step starts, read once the optimizer has run.
    if (n == "scalars") return {o.upload(), o.optimizer()};
    // The update's learning rate and bias corrections: copied in just before the optimizer reads them.
    if (n == "adamw_step") return {o.optimizer(), o.optimizer()};
    // The encoder backward's sort (llmc/encoder.cuh, EncoderBackwardScratch): its arrays and CUB's storage.
    for (const char* e : {"positions", "sorted_tok", "sorted_pos", "unique_tok", "run_count", "run_offset", "num_runs",
                          "cub_temp"})
        if (n == e) return {o.bwd(S::encoder), o.bwd(S::encoder)};
    // The autotune's scratch for the largest accumulating matmul (plan_gpu_training): the classifier's weight
    // gradient (layer -1), or the last layer's fc_proj weight gradient when the vocabulary is smaller than 4C.
    if (n == "autotune_scratch") {
        const int op = l < 0 ? o.bwd(S::classifier) : o.bwd(S::fc_proj, l);
        return {op, op};
    }
    return {-1, -1};
}

namespace {

/*
 * The CPU trainer's gradients of the residual stream, which its separate residual ops write and accumulate into
 * (llmc/cpu/gpt2.h's backward), in the step's ops: its residual2 and residual1 backward sit where the fused ops
 * are (the next layer's ln1, or lnf; this layer's ln2). grad_residual2 of layer l is the next layer's dresidual:
 * written by its residual1 backward, read last by this layer's residual2 backward; grad_residual1 is written by
 * the residual2 backward and read last by the residual1 backward; grad_encoded is layer 0's dresidual, read last
 * by the encoder backward. {-1, -1}: not one of them.
 */
std::pair<int, int> residual_gradient_liveness(const TrainingOps& o, const std::string& n, int l) {
    using S = SubBlock;
    const bool last_layer = l + 1 >= o.L;
    const int after_layer = last_layer ? o.bwd(S::lnf) : o.bwd(S::ln1, l + 1); // this layer's residual2 backward
    if (n == "grad_residual2") return {last_layer ? o.bwd(S::lnf) : o.bwd(S::ln2, l + 1), after_layer};
    if (n == "grad_residual1") return {after_layer, o.bwd(S::ln2, l)};
    if (n == "grad_encoded") return {o.bwd(S::ln2, 0), o.bwd(S::encoder)};
    return {-1, -1};
}

} // namespace

void set_training_liveness(MemoryPlan& plan, int L) {
    const TrainingOps o{L};
    plan.ops = o.names();
    for (PlannedTensor& t : plan.tensors) {
        const bool mirrored = t.name.rfind("grad_", 0) == 0; // the CPU trainer's gradient of an activation
        auto [first, last] = training_liveness(o, mirrored ? t.name.substr(5) : t.name, t.layer);
        if (mirrored && first >= 0)
            last = o.mirror(first), first = o.mirror(std::min(first + 1, o.fwd(SubBlock::classifier)));
        if (mirrored && residual_gradient_liveness(o, t.name, t.layer).first >= 0)
            std::tie(first, last) = residual_gradient_liveness(o, t.name, t.layer);
        t.first_use = first, t.last_use = last;
    }
}

void BufferCarver::record(size_t at, size_t bytes, const char* dtype, const TensorInfo& info) {
    const int n = info.layers > 0 ? info.layers : 1;
    for (int l = 0; l < n; l++) {
        PlannedTensor t;
        t.name = info.name;
        t.layer = info.layers > 0 ? l : -1;
        t.subblock = info.subblock;
        t.kind = info.kind;
        t.dtype = dtype;
        t.shape = info.shape;
        t.allocation = allocation;
        t.bytes = bytes / n;
        t.offset = at + (size_t)l * t.bytes;
        plan->tensors.push_back(t);
    }
}

int TrainingOps::layer_slot(SubBlock s) {
    for (int k = 0; k < 7; k++)
        if (kLayer[k] == s) return k;
    throw Error(strprintf("training ops: %s is not a layer's sub-block", subblock_name(s)));
}

std::vector<std::string> TrainingOps::names() const {
    std::vector<std::string> n(count());
    n[upload()] = "upload ids";
    for (const char* p : {"fwd", "bwd"}) {
        const bool f = p[0] == 'f';
        for (SubBlock s : {SubBlock::encoder, SubBlock::lnf, SubBlock::classifier})
            n[f ? fwd(s) : bwd(s)] = strprintf("%s %s", p, subblock_name(s));
        for (int l = 0; l < L; l++)
            for (SubBlock s : kLayer) n[f ? fwd(s, l) : bwd(s, l)] = strprintf("%s %s layer %d", p, subblock_name(s), l);
    }
    n[grad_norm()] = "opt grad_norm";
    n[optimizer()] = "opt optimizer";
    return n;
}

long largest_that_fits(long cap, const std::function<bool(long)>& fits) {
    if (cap < 1 || !fits(1)) return 0;
    long lo = 1, hi = 2; // fits(lo); hi: not known yet
    while (hi <= cap && fits(hi)) lo = hi, hi *= 2;
    hi = std::min(hi, cap + 1); // !fits(hi) or past the cap
    while (hi - lo > 1) {
        const long mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

size_t MemoryPlan::total_bytes() const {
    size_t n = 0;
    for (const PlannedAllocation& a : allocations) n += a.bytes;
    return n;
}

size_t MemoryPlan::resident_bytes() const {
    size_t n = 0;
    for (const PlannedAllocation& a : allocations) n += a.transient ? 0 : a.bytes;
    return n;
}

const PlannedAllocation& MemoryPlan::allocation(const std::string& name) const {
    for (const PlannedAllocation& a : allocations)
        if (a.name == name) return a;
    throw Error(strprintf("memory plan: no allocation '%s'", name.c_str()));
}

const PlannedTensor& MemoryPlan::tensor(const std::string& name, int layer) const {
    for (const PlannedTensor& t : tensors)
        if (t.name == name && t.layer == layer) return t;
    throw Error(strprintf("memory plan: no tensor '%s' (layer %d)", name.c_str(), layer));
}

size_t MemoryPlan::kind_bytes(MemoryKind k) const {
    size_t n = 0;
    for (const PlannedTensor& t : tensors)
        if (t.kind == k) n += t.bytes;
    return n;
}

} // namespace llmc
