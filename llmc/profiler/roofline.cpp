// The analytic cost model and the roofline placement (llmc/profiler/roofline.h).
#include "llmc/profiler/roofline.h"


namespace llmc::prof {

namespace roofline_detail {

OpCost matmul_forward_cost(double BT, double C, double OC, bool bias, bool gelu_aux, double E) {
    OpCost c;
    c.gemm_flops = 2 * BT * OC * C;
    c.other_flops = gelu_aux ? GELU * BT * OC : 0;
    c.bytes = E * (BT * C + OC * C + (bias ? OC : 0)) + E * BT * OC * (gelu_aux ? 2 : 1);
    return c;
}

OpCost matmul_backward_cost(double BT, double C, double OC, bool bias, bool dgelu, double E) {
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

OpCost layernorm_forward_cost(double N, double C, bool fused_residual, double E) {
    OpCost c;
    c.other_flops = (LN_FWD + (fused_residual ? 1 : 0)) * N * C;
    double streams = fused_residual ? 2 : 1; // (N, C) tensors read, and written besides mean/rstd
    c.bytes = E * (streams * N * C + 2 * C) + E * streams * N * C + FP32 * 2 * N;
    return c;
}

OpCost layernorm_backward_cost(double N, double C, double E) {
    OpCost c;
    c.other_flops = LN_BWD * N * C;
    c.bytes = E * (3 * N * C + C) + FP32 * 2 * N + E * N * C + E * 4 * C;
    return c;
}

} // namespace roofline_detail

void scale_by_micro_batches(CostTable& m, int grad_accum) {
    for (int s = 0; s < NUM_SUBBLOCKS; s++)
        for (int p : {(int)Phase::fwd, (int)Phase::bwd}) m[s][p] = m[s][p] * grad_accum;
}

CostTable analytic_costs(const GPT2Config& c, int B, int T, int grad_accum) {
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

CostTable inference_costs(const GPT2Config& c, const InferenceShape& s, bool fused) {
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

CostTable cpu_analytic_costs(const GPT2Config& c, int B, int T, int grad_accum) {
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

RooflinePoint roofline_point(const OpCost& c, double time_s, const Ceilings& ceil) {
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
