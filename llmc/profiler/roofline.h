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

#include "llmc/gpt2_config.h"
#include "llmc/profiler/records.h"
#include "llmc/subblocks.h"

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
inline OpCost matmul_forward_cost(double BT, double C, double OC, bool bias, bool gelu_aux, double E = BF16) {
    OpCost c;
    c.gemm_flops = 2 * BT * OC * C;
    c.other_flops = gelu_aux ? GELU * BT * OC : 0;
    c.bytes = E * (BT * C + OC * C + (bias ? OC : 0)) + E * BT * OC * (gelu_aux ? 2 : 1);
    return c;
}

// dinp GEMM (+ DGELU epilogue reading the pre-GELU), dweight GEMM accumulating (+=: read and write), and the
// bias gradient kernels (dout read again, dbias read and written).
inline OpCost matmul_backward_cost(double BT, double C, double OC, bool bias, bool dgelu, double E = BF16) {
    OpCost dinp, dweight, dbias;
    dinp.gemm_flops = 2 * BT * C * OC;
    dinp.other_flops = dgelu ? DGELU * BT * C : 0;
    dinp.bytes = E * (BT * OC + OC * C + (dgelu ? BT * C : 0)) + E * BT * C;
    dweight.gemm_flops = 2 * BT * C * OC;
    dweight.bytes = E * (BT * C + BT * OC + OC * C) + E * OC * C;
    if (bias) {
        dbias.other_flops = BT * OC;
        dbias.bytes = E * (BT * OC + OC) + E * OC;
    }
    dinp += dweight;
    dinp += dbias;
    return dinp;
}

// N rows of C; fused: residual = inp1 + inp2 is formed (one more FLOP per element) and written too.
inline OpCost layernorm_forward_cost(double N, double C, bool fused_residual, double E = BF16) {
    OpCost c;
    c.other_flops = (LN_FWD + (fused_residual ? 1 : 0)) * N * C;
    double streams = fused_residual ? 2 : 1; // (N, C) tensors read, and written besides mean/rstd
    c.bytes = E * (streams * N * C + 2 * C) + E * streams * N * C + FP32 * 2 * N;
    return c;
}

// dinp (+=: read and written), dout, inp, weight, mean, rstd read; dweight, dbias read and written.
inline OpCost layernorm_backward_cost(double N, double C, double E = BF16) {
    OpCost c;
    c.other_flops = LN_BWD * N * C;
    c.bytes = E * (3 * N * C + C) + FP32 * 2 * N + E * N * C + E * 4 * C;
    return c;
}

} // namespace roofline_detail

// Forward and backward cells are per micro-batch: times the micro-batches of a step.
inline void scale_by_micro_batches(CostTable& m, int grad_accum) {
    for (int s = 0; s < NUM_SUBBLOCKS; s++)
        for (int p : {(int)Phase::fwd, (int)Phase::bwd}) m[s][p] = m[s][p] * grad_accum;
}

/*
 * FLOPs and minimum bytes of one optimizer step of GPT-2 `c` at micro-batch (B, T) with grad_accum
 * micro-batches per step, indexed [(int)SubBlock][(int)Phase].
 */
inline CostTable analytic_costs(const GPT2Config& c, int B, int T, int grad_accum) {
    using namespace roofline_detail;
    const double L = c.num_layers, C = c.channels, NH = c.num_heads, HS = C / NH;
    const double Vp = c.padded_vocab_size, V = c.vocab_size, BT = (double)B * T;
    const double N = (double)num_parameters(c);
    CostTable m{};
    auto cell = [&](SubBlock s, Phase p) -> OpCost& { return m[(int)s][(int)p]; };

    // encoder: out = wte[token] + wpe[t], one add per element. At most min(BT, Vp) distinct wte rows are
    // touched; that many are counted (fewer when tokens repeat). Backward: the wte and wpe kernels each
    // read all of dout, and the touched gradient rows are read and written.
    const double rows = std::min(BT, Vp);
    cell(SubBlock::encoder, Phase::fwd) = {0, BT * C, ID * BT + BF16 * (rows * C + T * C) + BF16 * BT * C};
    cell(SubBlock::encoder, Phase::bwd) = {0, 2 * BT * C, ID * BT + BF16 * 2 * BT * C + BF16 * 2 * (rows * C + T * C)};

    // ln1: layer 0 normalises the embeddings; layers 1.. fuse the previous layer's residual2 add.
    // ln2 fuses residual1 in every layer; lnf fuses the last layer's residual2.
    cell(SubBlock::ln1, Phase::fwd) = layernorm_forward_cost(BT, C, false);
    cell(SubBlock::ln1, Phase::fwd) += layernorm_forward_cost(BT, C, true) * (L - 1);
    cell(SubBlock::ln2, Phase::fwd) = layernorm_forward_cost(BT, C, true) * L;
    cell(SubBlock::lnf, Phase::fwd) = layernorm_forward_cost(BT, C, true);
    cell(SubBlock::ln1, Phase::bwd) = layernorm_backward_cost(BT, C) * L;
    cell(SubBlock::ln2, Phase::bwd) = layernorm_backward_cost(BT, C) * L;
    cell(SubBlock::lnf, Phase::bwd) = layernorm_backward_cost(BT, C);

    cell(SubBlock::qkv, Phase::fwd) = matmul_forward_cost(BT, C, 3 * C, true, false) * L;
    cell(SubBlock::qkv, Phase::bwd) = matmul_backward_cost(BT, C, 3 * C, true, false) * L;
    cell(SubBlock::attn_proj, Phase::fwd) = matmul_forward_cost(BT, C, C, true, false) * L;
    cell(SubBlock::attn_proj, Phase::bwd) = matmul_backward_cost(BT, C, C, true, false) * L;
    cell(SubBlock::fc, Phase::fwd) = matmul_forward_cost(BT, C, 4 * C, true, true) * L; // writes pre-GELU and GELU
    cell(SubBlock::fc, Phase::bwd) = matmul_backward_cost(BT, C, 4 * C, true, false) * L;
    cell(SubBlock::fc_proj, Phase::fwd) = matmul_forward_cost(BT, 4 * C, C, true, false) * L;
    cell(SubBlock::fc_proj, Phase::bwd) = matmul_backward_cost(BT, 4 * C, C, true, true) * L; // DGELU reads pre-GELU

    /*
     * Causal attention: only the unmasked half of QKᵀ and PV is counted, the T(T+1)/2 (query, key) pairs
     * with key <= query per (batch, head), 2·HS FLOPs per pair per product. The forward runs 2 products
     * (S = QKᵀ, O = PV). The backward runs 7, as the kernels do: the dK/dV kernel computes S, dP, dV, dK
     * and the dQ kernel recomputes S and dP for dQ (the minimal algorithm needs 5). Bytes: the forward reads
     * qkv and writes out and the fp32 lse; the backward's D kernel reads dout and out and writes D (fp32,
     * B·NH·T); the dK/dV and dQ kernels each read qkv, dout, lse and D and write their part of dqkv.
     */
    const double pairs = (double)B * NH * ((double)T * (T + 1) / 2);
    const double stats = FP32 * B * NH * T; // one fp32 per (batch, head, position): lse or D
    OpCost att_fwd, att_bwd;
    att_fwd.gemm_flops = 2 * 2 * HS * pairs;
    att_fwd.other_flops = ATT_FWD * pairs;
    att_fwd.bytes = BF16 * BT * 3 * C + BF16 * BT * C + stats;
    att_bwd.gemm_flops = 7 * 2 * HS * pairs;
    att_bwd.other_flops = 2 * ATT_BWD * pairs + 2 * BT * C;                          // + D = rowsum(dout · out)
    att_bwd.bytes = (BF16 * 2 * BT * C + stats)                                      // D kernel
                    + (BF16 * (BT * 3 * C + BT * C) + 2 * stats + BF16 * BT * 2 * C) // dK/dV kernel
                    + (BF16 * (BT * 3 * C + BT * C) + 2 * stats + BF16 * BT * C);    // dQ kernel
    cell(SubBlock::attention, Phase::fwd) = att_fwd * L;
    cell(SubBlock::attention, Phase::bwd) = att_bwd * L;

    // classifier: logits GEMM over the padded vocabulary, then the fused softmax/loss/dlogits kernel (reads
    // the V real logits, reads the targets, writes the fp32 losses and dlogits over all Vp columns in place)
    // and the loss accumulation (one add per position, read-modify-write of one fp32).
    OpCost cls = matmul_forward_cost(BT, C, Vp, false, false);
    cls += {0, XENT * BT * V, BF16 * BT * V + ID * BT + FP32 * BT + BF16 * BT * Vp};
    cls += {0, BT, FP32 * BT + 2 * FP32};
    cell(SubBlock::classifier, Phase::fwd) = cls;
    cell(SubBlock::classifier, Phase::bwd) = matmul_backward_cost(BT, C, Vp, false, false);

    scale_by_micro_batches(m, grad_accum);

    // Once per step: the global norm reads every gradient (square, add); AdamW reads grad, master, m, v and
    // writes master, m, v and the bf16 parameter.
    cell(SubBlock::grad_norm, Phase::opt) = {0, 2 * N, BF16 * N};
    cell(SubBlock::optimizer, Phase::opt) = {0, ADAMW * N, (BF16 + 3 * FP32) * N + (3 * FP32 + BF16) * N};
    return m;
}

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
 * fused: the GPU decoder's kernels (llmc/gpt2_decoder.cuh), with training's fusions: the residual adds inside the
 * LayerNorm that follows (ln2, the next ln1, lnf: two tensors read, the sum written besides the output, one more
 * FLOP per element), GELU as fc's epilogue (the pre-GELU written too), so the residual1, residual2 and gelu
 * cells are zero; and lnf over every row (the classifier still takes the last rows only).
 */
inline CostTable inference_costs(const GPT2Config& c, const InferenceShape& s, bool fused = false) {
    using namespace roofline_detail;
    const double L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    const double E = s.elem_bytes;
    CostTable m{};
    // rows: tokens; calls: how many times the weights are read; pairs: attended (query, key) pairs;
    // kv_read: cache positions read; head_rows: rows through lnf and the classifier.
    auto phase = [&](Phase p, double rows, double calls, double pairs, double kv_read, double head_rows) {
        auto cell = [&](SubBlock b) -> OpCost& { return m[(int)b][(int)p]; };
        auto matmul = [&](double K, double N) {
            return OpCost{2 * rows * K * N, 0, E * (rows * K + rows * N) + E * calls * (K * N + N)};
        };
        auto layernorm = [&](double n) { return OpCost{0, LN_FWD * n * C, E * (2 * n * C) + E * calls * 2 * C + E * 2 * n}; };
        const OpCost residual{0, rows * C, E * 3 * rows * C};
        const OpCost fused_add{0, rows * C, E * 2 * rows * C}; // a residual inside a LayerNorm: one more read and write
        cell(SubBlock::encoder) = {0, rows * C, ID * rows + E * 3 * rows * C};
        cell(SubBlock::ln1) = layernorm(rows) * L + (fused ? fused_add * (L - 1) : OpCost{});
        cell(SubBlock::qkv) = matmul(C, 3 * C) * L;
        cell(SubBlock::attention) = OpCost{4 * C * pairs, ATT_FWD * NH * pairs, E * (4 * rows * C + 2 * C * kv_read)} * L;
        cell(SubBlock::attn_proj) = matmul(C, C) * L;
        cell(SubBlock::ln2) = (layernorm(rows) + (fused ? fused_add : OpCost{})) * L;
        const OpCost gelu{0, GELU * 4 * rows * C, E * 8 * rows * C};
        cell(SubBlock::fc) = (matmul(C, 4 * C) + (fused ? OpCost{0, gelu.other_flops, E * 4 * rows * C} : OpCost{})) * L;
        cell(SubBlock::fc_proj) = matmul(4 * C, C) * L;
        if (!fused) {
            cell(SubBlock::residual1) = residual * L;
            cell(SubBlock::gelu) = gelu * L;
            cell(SubBlock::residual2) = residual * L;
        }
        const double lnf_rows = fused ? rows : head_rows;
        cell(SubBlock::lnf) = OpCost{0, LN_FWD * lnf_rows * C, E * 2 * lnf_rows * C + E * calls * 2 * C} +
                              (fused ? fused_add : OpCost{});
        cell(SubBlock::classifier) = {2 * head_rows * C * Vp, 0, E * (head_rows * C + head_rows * Vp + calls * Vp * C)};
    };
    phase(Phase::prefill, s.prompt_tokens, 1, s.prompt_pairs, s.prompt_tokens, s.sequences);
    phase(Phase::decode, s.decode_tokens, s.decode_steps, s.decode_context, s.decode_context, s.decode_tokens);
    return m;
}

/*
 * The same for the CPU reference trainer (llmc/cpu/gpt2.h), as it runs: every tensor fp32, no fusions, so
 * the residual adds and GELU are sub-blocks of their own (their cost is their bytes: one FLOP per element
 * for an add, the GELU counts above), and the backward ops accumulate into their input gradients (read and
 * written). The classifier's softmax stores probabilities in place and its backward turns them into dlogits;
 * attention keeps its (B, NH, T, T) weights for the backward. FLOPs are the GPU model's where the work is the
 * same; the CPU's ceilings treat every FLOP alike (llmc/profiler/cpu_source.h).
 */
inline CostTable cpu_analytic_costs(const GPT2Config& c, int B, int T, int grad_accum) {
    using namespace roofline_detail;
    const double L = c.num_layers, C = c.channels, NH = c.num_heads, HS = C / NH;
    const double Vp = c.padded_vocab_size, V = c.vocab_size, BT = (double)B * T;
    const double N = (double)num_parameters(c), E = FP32, BTC = BT * C;
    CostTable m{};
    auto cell = [&](SubBlock s, Phase p) -> OpCost& { return m[(int)s][(int)p]; };

    const double rows = std::min(BT, Vp); // wte rows the encoder touches, as on the GPU
    cell(SubBlock::encoder, Phase::fwd) = {0, BTC, ID * BT + E * (rows * C + T * C) + E * BTC};
    cell(SubBlock::encoder, Phase::bwd) = {0, 2 * BTC, ID * BT + E * BTC + E * 2 * (rows * C + T * C)};
    for (SubBlock ln : {SubBlock::ln1, SubBlock::ln2, SubBlock::lnf}) {
        const double n = ln == SubBlock::lnf ? 1 : L;
        cell(ln, Phase::fwd) = layernorm_forward_cost(BT, C, false, E) * n;
        cell(ln, Phase::bwd) = layernorm_backward_cost(BT, C, E) * n;
    }
    // Matmul backward: dinp accumulates (read as well as written), the GPU model writes it.
    auto matmul = [&](SubBlock s, double K, double M) {
        cell(s, Phase::fwd) = matmul_forward_cost(BT, K, M, true, false, E) * L;
        cell(s, Phase::bwd) = (matmul_backward_cost(BT, K, M, true, false, E) + OpCost{0, 0, E * BT * K}) * L;
    };
    matmul(SubBlock::qkv, C, 3 * C);
    matmul(SubBlock::attn_proj, C, C);
    matmul(SubBlock::fc, C, 4 * C);
    matmul(SubBlock::fc_proj, 4 * C, C);
    // residual: out = a + b; backward: both input gradients += dout.
    for (SubBlock r : {SubBlock::residual1, SubBlock::residual2}) {
        cell(r, Phase::fwd) = OpCost{0, BTC, E * 3 * BTC} * L;
        cell(r, Phase::bwd) = OpCost{0, 2 * BTC, E * 5 * BTC} * L;
    }
    // GELU over the (BT, 4C) fc output; backward reads inp and dout, dinp += .
    cell(SubBlock::gelu, Phase::fwd) = OpCost{0, GELU * 4 * BTC, E * 2 * 4 * BTC} * L;
    cell(SubBlock::gelu, Phase::bwd) = OpCost{0, DGELU * 4 * BTC, E * 4 * 4 * BTC} * L;

    // Attention over the unmasked pairs: forward QKᵀ and AV (2 products), softmax; it writes full (T, T) rows
    // of weights. Backward: dA = dO·Vᵀ, dV += A·dO, dQ and dK from dS (4 products), reading the weights.
    const double pairs = (double)B * NH * ((double)T * (T + 1) / 2), weights = (double)B * NH * T * T;
    cell(SubBlock::attention, Phase::fwd) =
        OpCost{2 * 2 * HS * pairs, ATT_FWD * pairs, E * (BT * 3 * C + weights + BTC)} * L;
    cell(SubBlock::attention, Phase::bwd) =
        OpCost{4 * 2 * HS * pairs, 4 * pairs, E * (BT * 3 * C + weights + BTC + 2 * BT * 3 * C)} * L;

    // Classifier: the logits GEMM, then softmax and loss in place over the (BT, Vp) buffer (targets read,
    // losses written); backward: dlogits in place, then the matmul backward (no bias).
    cell(SubBlock::classifier, Phase::fwd) =
        matmul_forward_cost(BT, C, Vp, false, false, E) + OpCost{0, SOFTMAX * BT * V, E * 2 * BT * Vp + ID * BT + E * BT};
    cell(SubBlock::classifier, Phase::bwd) = OpCost{0, BT * V + BT, E * 2 * BT * V + ID * BT} +
                                             matmul_backward_cost(BT, C, Vp, false, false, E) +
                                             OpCost{0, 0, E * BTC};
    scale_by_micro_batches(m, grad_accum);

    // Once per step, fp32 throughout: the global norm reads every gradient; AdamW reads grad, parameter, m, v
    // and writes parameter, m, v.
    cell(SubBlock::grad_norm, Phase::opt) = {0, 2 * N, E * N};
    cell(SubBlock::optimizer, Phase::opt) = {0, ADAMW * N, E * 7 * N};
    return m;
}

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
inline RooflinePoint roofline_point(const OpCost& c, double time_s, const Ceilings& ceil) {
    RooflinePoint r;
    if (time_s > 0) r.time_s = time_s;
    if (c.flops() <= 0 && c.bytes <= 0) return r; // nothing modelled: nothing to compare
    if (c.bytes > 0) r.intensity = c.flops() / c.bytes;
    if (time_s > 0) {
        r.tflops = c.flops() / time_s / 1e12;
        r.gbps = c.bytes / time_s / 1e9;
    }
    if (ceil.bf16_tflops <= 0 || ceil.dram_gbps <= 0) return r;
    const double cuda_core_tflops = ceil.fp32_tflops > 0 ? ceil.fp32_tflops : ceil.bf16_tflops;
    r.compute_floor_s = c.gemm_flops / (ceil.bf16_tflops * 1e12) + c.other_flops / (cuda_core_tflops * 1e12);
    r.memory_floor_s = c.bytes / (ceil.dram_gbps * 1e9);
    r.floor_s = std::max(r.compute_floor_s, r.memory_floor_s);
    r.bound = r.compute_floor_s >= r.memory_floor_s ? "compute" : "memory";
    if (time_s > 0) r.pct_of_roofline = 100 * r.floor_s / time_s;
    return r;
}

} // namespace llmc::prof
