/*
 * The analytic cost model of one GPU training step (and of the CPU reference's step, cpu_analytic_costs) and
 * the roofline arithmetic the profiler reports.
 *
 * For every (sub-block, phase) cell: the FLOPs and the minimum DRAM bytes of ONE optimizer step
 * (grad_accum micro-batches of forward + backward, then one optimizer phase), as gpt2.cuh runs it:
 *   - a GEMM counts 2·M·N·K FLOPs; these run on tensor cores and are measured against the bf16 ceiling;
 *   - elementwise and reduction work (LayerNorm, GELU, softmax, AdamW, ...) is counted roughly, per element,
 *     with the count stated where it is used; it runs on CUDA cores and is measured against the fp32 ceiling;
 *   - minimum bytes = per kernel, every tensor it reads counted once (weights included) and every tensor it
 *     writes counted once; bf16 = 2 bytes, fp32 = 4, token ids = 4. The fp32 partial sums of the deterministic
 *     reductions (LayerNorm and bias gradients, global norm) and the encoder backward's sort buffers are
 *     scratch that stays in L2 and is not counted;
 *   - the fusions of doc/design.md decide which kernels exist: residual adds run inside the following
 *     LayerNorm (ln2, the next ln1, lnf), GELU inside fc (forward) and fc_proj (backward, DGELU), so the
 *     residual1, residual2 and gelu cells are zero.
 * Time floor = max(compute term, memory term), bound = the larger term.
 */
#pragma once
#include <algorithm>
#include <array>
#include <cmath>

#include "llmc/model/gpt2_config.h"
#include "llmc/profiler/records.h"
#include "llmc/model/subblocks.h"

namespace llmc::prof {

struct OpCost {
    double gemm_flops = 0;  // tensor-core matmul FLOPs, 2·M·N·K each
    double other_flops = 0; // CUDA-core FLOPs of elementwise and reduction work (rough per-element counts)
    double bytes = 0;       // minimum DRAM bytes
    double flops() const { return gemm_flops + other_flops; }
    OpCost& operator+=(const OpCost& o) {
        gemm_flops += o.gemm_flops;
        other_flops += o.other_flops;
        bytes += o.bytes;
        return *this;
    }
};
inline OpCost operator*(OpCost c, double k) { return {c.gemm_flops * k, c.other_flops * k, c.bytes * k}; }
inline OpCost operator+(OpCost a, const OpCost& b) { return a += b; }

using CostTable = std::array<std::array<OpCost, NUM_PHASES>, NUM_SUBBLOCKS>;

namespace roofline_detail {

constexpr double BF16 = 2, FP32 = 4, ID = 4; // bytes per element
// Rough CUDA-core FLOPs per element (counting tanh, exp and sqrt as one each):
constexpr double LN_FWD = 8;  // mean: add; variance: sub, mul, add; output: sub, mul, mul, add
constexpr double LN_BWD = 17; // norm 2, w·g 1, two row sums 3, dweight/dbias sums 3; then norm 2, w·g 1, dinp 5
constexpr double GELU = 9;    // x³ 2, fma 2, scale 1, tanh 1, 1+ 1, 0.5·x 1, product 1
constexpr double DGELU = 18;  // tanh argument 6, two derivative terms 11, times the incoming gradient 1
constexpr double XENT = 9;    // per real logit: max 1, sub+exp+add 3; dlogits: sub+exp+scale 3, -1 1, ·dloss 1
constexpr double SOFTMAX = 5; // per real logit, the CPU's softmax alone: max 1, sub+exp+add 3, normalise 1
constexpr double ATT_FWD = 5; // per unmasked score: scale 1, running max 1, sub+exp2 2, row sum 1
constexpr double ATT_BWD = 8; // per unmasked score, in each of the two kernels: P from lse 2, dS = P(dP - D) 2
constexpr double ADAMW = 17;  // clip 1, m 3, v 4, bias corrections 2, sqrt+eps+div 3, decay 2, update 2

// out (BT, OC) = inp (BT, C) · Wᵀ (+ bias) (with gelu_aux: the pre-GELU is written too, and GELU applied).
// E: bytes per element of the tensors (BF16 on the GPU, FP32 on the CPU), here and in the helpers below.
OpCost matmul_forward_cost(double BT, double C, double OC, bool bias, bool gelu_aux, double E = BF16);

// dinp GEMM (+ DGELU epilogue reading the pre-GELU), dweight GEMM accumulating (+=: read and write), and the
// bias gradient kernels (dout read again, dbias read and written).
OpCost matmul_backward_cost(double BT, double C, double OC, bool bias, bool dgelu, double E = BF16);

// N rows of C; fused: residual = inp1 + inp2 is formed (one more FLOP per element) and written too.
OpCost layernorm_forward_cost(double N, double C, bool fused_residual, double E = BF16);

// dinp (+=: read and written), dout, inp, weight, mean, rstd read; dweight, dbias read and written.
OpCost layernorm_backward_cost(double N, double C, double E = BF16);

} // namespace roofline_detail

// Forward and backward cells are per micro-batch: times the micro-batches of a step.
void scale_by_micro_batches(CostTable& m, int grad_accum);

/*
 * FLOPs and minimum bytes of one optimizer step of GPT-2 `c` at micro-batch (B, T) with grad_accum
 * micro-batches per step, indexed [(int)SubBlock][(int)Phase].
 */
CostTable analytic_costs(const GPT2Config& c, int B, int T, int grad_accum);

/*
 * FLOPs and minimum bytes of a whole inference run (InferenceShape), in the prefill and decode cells, as the
 * KV-cache decoders run it: every call reads each weight once for all its rows (E bytes per element), rows
 * are tokens. Per row: GEMMs 2·K·N FLOPs, their input read and output written; LayerNorm and the
 * elementwise ops as in training's forward (without `fused`, the CPU's: the residual adds are cells of their
 * own). Attention: 4·C FLOPs per (query, key) pair (QKᵀ and PV over every head), plus the row's q read, K/V written into the
 * cache and the output written; the cache read is all of K and V each decode row attends (decode_context
 * positions: what makes decode's bytes grow with the context), and once per prompt position in prefill
 * (a tiled kernel keeps a prompt's keys on chip). lnf and the classifier run on each sequence's last row
 * only: B rows in prefill, every row in decode.
 * fused: the GPU decoder's kernels (llmc/gpu/gpt2_decoder.cuh), with training's fusions: the residual adds inside the
 * LayerNorm that follows (ln2, the next ln1, lnf: two tensors read, the sum written besides the output, one more
 * FLOP per element), GELU as fc's epilogue (the pre-GELU written too), so the residual1, residual2 and gelu
 * cells are zero; and lnf over every row (the classifier still takes the last rows only).
 */
CostTable inference_costs(const GPT2Config& c, const InferenceShape& s, bool fused = false);

/*
 * The same for the CPU reference trainer (llmc/cpu/gpt2.h), as it runs: every tensor fp32, no fusions, so
 * the residual adds and GELU are sub-blocks of their own (their cost is their bytes: one FLOP per element
 * for an add, the GELU counts above), and the backward ops accumulate into their input gradients (read and
 * written). The classifier's softmax stores probabilities in place and its backward turns them into dlogits;
 * attention keeps its (B, NH, T, T) weights for the backward. FLOPs are the GPU model's where the work is the
 * same; the CPU's ceilings treat every FLOP alike (llmc/profiler/cpu_source.h).
 */
CostTable cpu_analytic_costs(const GPT2Config& c, int B, int T, int grad_accum);

// Where a measured time sits against the ceilings. NaN where a quantity is unknown (no cost, time or ceiling).
struct RooflinePoint {
    double time_s = NAN;             // measured time for the cost
    double tflops = NAN, gbps = NAN; // achieved: FLOPs / time, bytes / time
    double intensity = NAN;          // FLOPs per byte
    double compute_floor_s = NAN;    // gemm FLOPs / bf16 ceiling + other FLOPs / fp32 ceiling
    double memory_floor_s = NAN;     // bytes / DRAM ceiling
    double floor_s = NAN;            // max of the two
    double pct_of_roofline = NAN;    // 100 · floor / time: achieved / ceiling for whichever bounds the op
    const char* bound = "";          // "compute", "memory", or "" without ceilings or cost
};

/*
 * The CUDA-core FLOPs go against the fp32 ceiling when it is known and against the bf16 ceiling otherwise
 * (an optimistic floor). "% of roofline" is floor / time, which for a purely compute-bound GEMM is the
 * achieved TFLOP/s over the bf16 ceiling and for a memory-bound op the achieved GB/s over the bandwidth.
 */
RooflinePoint roofline_point(const OpCost& c, double time_s, const Ceilings& ceil);

} // namespace llmc::prof
