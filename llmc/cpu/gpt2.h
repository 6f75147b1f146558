/*
 * GPT-2 on the CPU: the fp32 reference model (instantiated in fp64 for gradient checks) that every GPU kernel
 * is tested against. One op per header under llmc/cpu/; this file owns the memory and the order of calls.
 *
 * Memory: parameters and their gradients are one contiguous buffer each, in llm.c's tensor order. Activations
 * are one buffer carved by a table of tensor sizes (llm.c's ActivationTensors), kept across steps and
 * reallocated only when a forward needs more; activation gradients likewise, in the same layout with the
 * tensors that need no gradient left out. The classifier's (B, T, Vp) buffer holds logits, then
 * probabilities, then dlogits: there is no second vocabulary-sized buffer.
 *
 * Layer l, with residual = output of layer l-1 (the encoder output for l = 0):
 *   ln1 = LN(residual); qkv = ln1 Wqkv; atty = attention(qkv); attproj = atty Wproj;
 *   residual1 = residual + attproj; ln2 = LN(residual1); fch = ln2 Wfc; fch_gelu = gelu(fch);
 *   fcproj = fch_gelu Wfcproj; residual2 = residual1 + fcproj (the layer's output).
 */
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "llmc/cpu/attention.h"
#include "llmc/cpu/classifier.h"
#include "llmc/cpu/encoder.h"
#include "llmc/cpu/gelu.h"
#include "llmc/cpu/layernorm.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/residual.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/model/gpt2_init.h"
#include "llmc/model/memory_plan.h"
#include "llmc/profiler/cpu_timers.h"
#include "llmc/util/utils.h"

namespace llmc {

template <typename Real> struct GPT2CPU {
    GPT2Config config;
    std::vector<Real> params_memory;
    ParameterTensors<Real> params;
    std::vector<Real> grads_memory;
    ParameterTensors<Real> grads;
    int B = 0, T = 0;                 // shape of the last forward
    Real mean_loss = -1;              // mean loss over B*T positions of the last forward with targets, else -1
    SubBlockTimes* timings = nullptr; // when set, forward/backward add each sub-block's wall time

    explicit GPT2CPU(const GPT2Config& c) : config(c) {
        validate_config(c, "GPT-2 model");
        // The fp32 kernels' run-time choices, made here: a bad LLMC_CPU_ISA or LLMC_CPU_BLAS fails before any
        // work, and never first inside a parallel region.
        cpu::vec::active_isa();
        cpu_blas::active();
        params_memory.assign(llmc::num_parameters(c), Real(0));
        grads_memory.assign(params_memory.size(), Real(0));
        params.point_into(params_memory.data(), c);
        grads.point_into(grads_memory.data(), c);
    }
    // The tensor views point into the object's own buffers: moving keeps them valid, copying would not.
    GPT2CPU(const GPT2CPU&) = delete;
    GPT2CPU& operator=(const GPT2CPU&) = delete;
    GPT2CPU(GPT2CPU&&) = default;
    GPT2CPU& operator=(GPT2CPU&&) = default;

    size_t num_parameters() const { return params_memory.size(); }

    // GPT-2 init (llmc/model/gpt2_init.h): drawn in double from Rng(seed) in tensor order, so float and double
    // models, and the GPU model, start from the same weights for a seed.
    void init_random(uint64_t seed) { init_gpt2_parameters(params_memory.data(), config, seed); }

    // inputs, targets (B, T) token ids; targets may be null (no loss). Throws llmc::Error on a bad shape or id.
    void forward(const int* inputs, const int* targets, int B, int T) {
        if (B < 1 || T < 1 || T > config.max_seq_len)
            throw Error(strprintf("forward: bad batch shape B=%d T=%d (need B >= 1, 1 <= T <= maxT=%d)", B, T,
                                  config.max_seq_len));
        check_token_ids(config, inputs, B * T, "input");
        if (targets) check_token_ids(config, targets, B * T, "target");
        probs_valid_ = backward_ready_ = false; // until this forward completes
        replayable_ = replayable_ && B == this->B && T == this->T; // replay() needs the buffers of a backward
        this->B = B;
        this->T = T;
        inputs_.assign(inputs, inputs + B * T);
        if (targets) targets_.assign(targets, targets + B * T);
        carve(acts_memory_, acts_, B, T, false);
        forward_ops(inputs_.data(), targets ? targets_.data() : nullptr);
        if (targets) {
            double sum = 0;
            for (int i = 0; i < B * T; i++) sum += acts_.losses[i];
            mean_loss = (Real)(sum / (B * T));
        } else {
            mean_loss = -1;
        }
        probs_valid_ = true;
        backward_ready_ = targets != nullptr;
    }

    /*
     * --energy (llmc/profiler/energy.h): the ops of one (sub-block, phase) of the last forward and backward run
     * again, n times, on their buffers (a backward sub-block's gradients keep accumulating, the classifier's dlogits
     * are transformed again: the values are not the step's, the work is). Needs a forward with targets and a
     * backward since the buffers were last reshaped.
     */
    void replay(SubBlock s, Phase p, long n) {
        if (!replayable_) throw Error("replay: needs a forward with targets and a backward before it");
        only_ = {s, p};
        for (long i = 0; i < n; i++) {
            if (p == Phase::fwd) forward_ops(inputs_.data(), targets_.data());
            if (p == Phase::bwd) backward_ops(last_dloss_, nullptr);
        }
        only_.reset();
    }

    // --energy's whole step: the last forward again on its tokens, ready for a backward (replay()'s conditions).
    void replay_forward() {
        if (!replayable_) throw Error("replay: needs a forward with targets and a backward before it");
        forward_ops(inputs_.data(), targets_.data());
        probs_valid_ = backward_ready_ = true;
    }

private:
    // The forward's ops on the carved buffers, each timed (and, for replay, filtered) by timed().
    void forward_ops(const int* inputs, const int* targets) {
        const int V = config.vocab_size, Vp = config.padded_vocab_size, L = config.num_layers;
        const int C = config.channels, NH = config.num_heads;
        const size_t BTC = (size_t)B * T * C;
        using namespace cpu;

        timed(SubBlock::encoder, Phase::fwd,
              [&] { encoder_forward(acts_.encoded, inputs, params.wte, params.wpe, B, T, C); });
        for (int l = 0; l < L; l++) {
            timed_layer_ = l;
            const Real* residual = l == 0 ? acts_.encoded : layer(acts_, l - 1).residual2;
            const LayerTensors a = layer(acts_, l);
            const LayerParams p = layer_params(params, l);
            timed(SubBlock::ln1, Phase::fwd,
                  [&] { layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w, p.ln1b, B, T, C); });
            timed(SubBlock::qkv, Phase::fwd, [&] { matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, B, T, C, 3 * C); });
            timed(SubBlock::attention, Phase::fwd, [&] { attention_forward(a.atty, a.att, a.qkv, B, T, C, NH); });
            timed(SubBlock::attn_proj, Phase::fwd,
                  [&] { matmul_forward(a.attproj, a.atty, p.attprojw, p.attprojb, B, T, C, C); });
            timed(SubBlock::residual1, Phase::fwd, [&] { residual_forward(a.residual1, residual, a.attproj, BTC); });
            timed(SubBlock::ln2, Phase::fwd,
                  [&] { layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual1, p.ln2w, p.ln2b, B, T, C); });
            timed(SubBlock::fc, Phase::fwd, [&] { matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, B, T, C, 4 * C); });
            timed(SubBlock::gelu, Phase::fwd, [&] { gelu_forward(a.fch_gelu, a.fch, 4 * BTC); });
            timed(SubBlock::fc_proj, Phase::fwd,
                  [&] { matmul_forward(a.fcproj, a.fch_gelu, p.fcprojw, p.fcprojb, B, T, 4 * C, C); });
            timed(SubBlock::residual2, Phase::fwd, [&] { residual_forward(a.residual2, a.residual1, a.fcproj, BTC); });
        }
        timed_layer_ = -1;
        const Real* last = layer(acts_, L - 1).residual2;
        timed(SubBlock::lnf, Phase::fwd, [&] {
            layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, last, params.lnfw, params.lnfb, B, T, C);
        });
        // The classifier in two timed parts (classifier_forward's two steps): its GEMM, then softmax and loss.
        timed(SubBlock::classifier, Phase::fwd,
              [&] { matmul_forward(acts_.probs, acts_.lnf, params.wte, (const Real*)nullptr, B, T, C, Vp); });
        timed(SubBlock::classifier, Phase::fwd,
              [&] { classifier_softmax(acts_.probs, acts_.losses, targets, B * T, V, Vp); }, SubBlockPart::softmax_loss);
    }

public:

    // Softmax over the Vp entries (padded ones 0) at position (b, t) of the last forward. The backward reuses
    // this buffer for dlogits, so probabilities are available only until the next backward.
    const Real* probs(int b, int t) const {
        if (!probs_valid_) throw Error("probs: no forward since the last backward");
        if (b < 0 || b >= B || t < 0 || t >= T)
            throw Error(strprintf("probs: position (%d, %d) outside the last forward's (B=%d, T=%d)", b, t, B, T));
        return acts_.probs + ((size_t)b * T + t) * config.padded_vocab_size;
    }

    // Layer l's slice of each per-layer parameter tensor (the KV-cache decoder, llmc/cpu/gpt2_decoder.h, runs
    // the same layers).
    struct LayerParams {
        Real *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
    };
    LayerParams layer_params(const ParameterTensors<Real>& p, int l) const {
        const size_t C = config.channels;
        return {p.ln1w + l * C,
                p.ln1b + l * C,
                p.qkvw + l * 3 * C * C,
                p.qkvb + l * 3 * C,
                p.attprojw + l * C * C,
                p.attprojb + l * C,
                p.ln2w + l * C,
                p.ln2b + l * C,
                p.fcw + l * 4 * C * C,
                p.fcb + l * 4 * C,
                p.fcprojw + l * 4 * C * C,
                p.fcprojb + l * C};
    }

    void zero_grad() { std::fill(grads_memory.begin(), grads_memory.end(), Real(0)); }

    /*
     * Accumulates d(loss_scale * mean_loss)/dparam into grads. Needs a forward with targets since the last
     * backward (it consumes the probabilities). layer_done(l), when given, is called as soon as layer l's parameter
     * gradients are final (l = L-1 down to 0, then -1 for wte, wpe and lnf: layer_parameter_ranges; wte's gathers
     * from the classifier first and the encoder last), so a data-parallel trainer can start summing them.
     */
    void backward(Real loss_scale = 1, const std::function<void(int)>& layer_done = nullptr) {
        if (!backward_ready_) throw Error("backward: needs a forward with targets since the last backward");
        const size_t used = carve(grad_acts_memory_, grad_acts_, B, T, true);
        // Ops accumulate into their input gradients (the residual stream's gradient gathers from two
        // branches), so every gradient starts from zero.
        std::fill(grad_acts_memory_.begin(), grad_acts_memory_.begin() + used, Real(0));
        last_dloss_ = loss_scale / (Real)(B * T);
        backward_ops(last_dloss_, layer_done);
        probs_valid_ = false;
        backward_ready_ = false;
        replayable_ = true;
    }

private:
    // The backward's ops on the carved buffers (dloss: d(loss)/d(each position's loss)), timed by timed().
    void backward_ops(Real dloss, const std::function<void(int)>& layer_done) {
        const int V = config.vocab_size, Vp = config.padded_vocab_size, L = config.num_layers;
        const int C = config.channels, NH = config.num_heads;
        const size_t BTC = (size_t)B * T * C;
        const int* targets = targets_.data();
        using namespace cpu;

        const Real* last = layer(acts_, L - 1).residual2;
        Real* dlast = layer(grad_acts_, L - 1).residual2;
        // classifier_backward's two steps, timed apart: dlogits in place, then the matmul backward.
        timed(SubBlock::classifier, Phase::bwd, [&] { classifier_dlogits(acts_.probs, targets, dloss, B * T, V, Vp); },
              SubBlockPart::softmax_loss);
        timed(SubBlock::classifier, Phase::bwd, [&] {
            matmul_backward(grad_acts_.lnf, grads.wte, (Real*)nullptr, acts_.probs, acts_.lnf, params.wte, B, T, C, Vp);
        });
        timed(SubBlock::lnf, Phase::bwd, [&] {
            layernorm_backward(dlast, grads.lnfw, grads.lnfb, grad_acts_.lnf, last, params.lnfw, acts_.lnf_mean,
                               acts_.lnf_rstd, B, T, C);
        });
        for (int l = L - 1; l >= 0; l--) {
            timed_layer_ = l;
            const Real* residual = l == 0 ? acts_.encoded : layer(acts_, l - 1).residual2;
            Real* dresidual = l == 0 ? grad_acts_.encoded : layer(grad_acts_, l - 1).residual2;
            const LayerTensors a = layer(acts_, l), g = layer(grad_acts_, l);
            const LayerParams p = layer_params(params, l), dp = layer_params(grads, l);
            timed(SubBlock::residual2, Phase::bwd, [&] { residual_backward(g.residual1, g.fcproj, g.residual2, BTC); });
            timed(SubBlock::fc_proj, Phase::bwd, [&] {
                matmul_backward(g.fch_gelu, dp.fcprojw, dp.fcprojb, g.fcproj, a.fch_gelu, p.fcprojw, B, T, 4 * C, C);
            });
            timed(SubBlock::gelu, Phase::bwd, [&] { gelu_backward(g.fch, a.fch, g.fch_gelu, 4 * BTC); });
            timed(SubBlock::fc, Phase::bwd,
                  [&] { matmul_backward(g.ln2, dp.fcw, dp.fcb, g.fch, a.ln2, p.fcw, B, T, C, 4 * C); });
            timed(SubBlock::ln2, Phase::bwd, [&] {
                layernorm_backward(g.residual1, dp.ln2w, dp.ln2b, g.ln2, a.residual1, p.ln2w, a.ln2_mean, a.ln2_rstd, B,
                                   T, C);
            });
            timed(SubBlock::residual1, Phase::bwd, [&] { residual_backward(dresidual, g.attproj, g.residual1, BTC); });
            timed(SubBlock::attn_proj, Phase::bwd, [&] {
                matmul_backward(g.atty, dp.attprojw, dp.attprojb, g.attproj, a.atty, p.attprojw, B, T, C, C);
            });
            timed(SubBlock::attention, Phase::bwd,
                  [&] { attention_backward(g.qkv, g.atty, a.qkv, a.att, B, T, C, NH); });
            timed(SubBlock::qkv, Phase::bwd,
                  [&] { matmul_backward(g.ln1, dp.qkvw, dp.qkvb, g.qkv, a.ln1, p.qkvw, B, T, C, 3 * C); });
            timed(SubBlock::ln1, Phase::bwd, [&] {
                layernorm_backward(dresidual, dp.ln1w, dp.ln1b, g.ln1, residual, p.ln1w, a.ln1_mean, a.ln1_rstd, B, T,
                                   C);
            });
            if (layer_done) layer_done(l);
        }
        timed_layer_ = -1;
        timed(SubBlock::encoder, Phase::bwd,
              [&] { encoder_backward(grads.wte, grads.wpe, grad_acts_.encoded, inputs_.data(), B, T, C); });
        if (layer_done) layer_done(-1);
    }

public:

    /*
     * The model's own buffers for a (B, T) step as a memory plan (llmc/model/memory_plan.h): parameters, parameter
     * gradients, the activations and their gradients, each one std::vector carved by activation_sizes in this
     * order (no alignment between tensors). The optimizer's moments are the trainer's and not counted here.
     */
    MemoryPlan memory_plan(int B_, int T_) const {
        static const char* names[NUM_ACTIVATION_TENSORS] = {
            "encoded", "ln1",  "ln1_mean", "ln1_rstd", "qkv",       "atty", "att",      "attproj",  "residual1", "ln2",
            "ln2_mean", "ln2_rstd", "fch", "fch_gelu", "fcproj", "residual2", "lnf", "lnf_mean", "lnf_rstd", "probs",
            "losses"};
        static const SubBlock writers[NUM_ACTIVATION_TENSORS] = {
            SubBlock::encoder, SubBlock::ln1, SubBlock::ln1, SubBlock::ln1, SubBlock::qkv, SubBlock::attention,
            SubBlock::attention, SubBlock::attn_proj, SubBlock::residual1, SubBlock::ln2, SubBlock::ln2, SubBlock::ln2,
            SubBlock::fc, SubBlock::gelu, SubBlock::fc_proj, SubBlock::residual2, SubBlock::lnf, SubBlock::lnf,
            SubBlock::lnf, SubBlock::classifier, SubBlock::classifier};
        const size_t L = config.num_layers, BT = (size_t)B_ * T_, C = config.channels, NH = config.num_heads;
        const std::vector<size_t> row_shapes[NUM_ACTIVATION_TENSORS] = {
            {BT, C}, {BT, C}, {BT}, {BT}, {BT, 3 * C}, {BT, C}, {(size_t)B_, NH, (size_t)T_, (size_t)T_}, {BT, C},
            {BT, C}, {BT, C}, {BT}, {BT}, {BT, 4 * C}, {BT, 4 * C}, {BT, C}, {BT, C}, {BT, C}, {BT}, {BT},
            {BT, (size_t)config.padded_vocab_size}, {BT}};
        const char* dtype = planned_dtype<Real>();
        MemoryPlan plan;
        plan.program = "CPU training";
        plan.B = B_, plan.T = T_;
        auto tensor = [&](const std::string& name, int layer, int sb, MemoryKind kind, std::vector<size_t> shape,
                          size_t offset, size_t count) {
            PlannedTensor t;
            t.name = name, t.layer = layer, t.subblock = sb, t.kind = kind, t.dtype = dtype, t.shape = std::move(shape);
            t.allocation = (int)plan.allocations.size() - 1, t.offset = offset * sizeof(Real), t.bytes = count * sizeof(Real);
            plan.tensors.push_back(t);
        };
        for (auto [name, kind] : {std::make_pair("parameters", MemoryKind::parameters),
                                  std::make_pair("gradients", MemoryKind::gradients)}) {
            plan.allocations.push_back({name, params_memory.size() * sizeof(Real), false});
            const auto sizes = parameter_sizes(config);
            size_t off = 0;
            for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
                tensor(parameter_name(i), -1, -1, kind, {sizes[i]}, off, sizes[i]);
                off += sizes[i];
            }
        }
        for (bool gradients : {false, true}) {
            const auto sizes = activation_sizes(B_, T_, gradients);
            size_t total = 0;
            for (size_t n : sizes) total += n;
            plan.allocations.push_back({gradients ? "activation_gradients" : "activations", total * sizeof(Real), false});
            size_t off = 0;
            for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
                if (sizes[i] == 0) continue;
                const bool stacked = i >= 1 && i <= 15; // the (L, ...) tensors
                const int layers = stacked ? (int)L : 1;
                const std::string name = gradients ? std::string("grad_") + names[i] : names[i];
                for (int l = 0; l < layers; l++)
                    tensor(name, stacked ? l : -1, (int)writers[i],
                           gradients ? MemoryKind::activation_gradients : MemoryKind::activations, row_shapes[i],
                           off + l * (sizes[i] / layers), sizes[i] / layers);
                off += sizes[i];
            }
        }
        set_training_liveness(plan, (int)L);
        return plan;
    }

private:
    // Activations of one forward; per-layer tensors are stacked (L, ...). In the gradient table the tensors
    // marked below as forward-only are null.
    static constexpr int NUM_ACTIVATION_TENSORS = 21;
    struct Activations {
        Real* encoded;   // (B, T, C)
        Real* ln1;       // (L, B, T, C)
        Real* ln1_mean;  // (L, B, T) forward-only
        Real* ln1_rstd;  // (L, B, T) forward-only
        Real* qkv;       // (L, B, T, 3C)
        Real* atty;      // (L, B, T, C)
        Real* att;       // (L, B, NH, T, T) forward-only
        Real* attproj;   // (L, B, T, C)
        Real* residual1; // (L, B, T, C)
        Real* ln2;       // (L, B, T, C)
        Real* ln2_mean;  // (L, B, T) forward-only
        Real* ln2_rstd;  // (L, B, T) forward-only
        Real* fch;       // (L, B, T, 4C)
        Real* fch_gelu;  // (L, B, T, 4C)
        Real* fcproj;    // (L, B, T, C)
        Real* residual2; // (L, B, T, C)
        Real* lnf;       // (B, T, C)
        Real* lnf_mean;  // (B, T) forward-only
        Real* lnf_rstd;  // (B, T) forward-only
        Real* probs;     // (B, T, Vp) forward-only: the backward turns it into dlogits in place
        Real* losses;    // (B, T) forward-only
    };
    // Layer l's slice of each stacked tensor (null where the table has none).
    struct LayerTensors {
        Real *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *attproj, *residual1, *ln2, *ln2_mean, *ln2_rstd, *fch,
            *fch_gelu, *fcproj, *residual2;
    };

    std::vector<Real> acts_memory_, grad_acts_memory_;
    Activations acts_{}, grad_acts_{};
    std::vector<int> inputs_, targets_; // copies of the last forward's ids, for the backward
    bool probs_valid_ = false, backward_ready_ = false;
    bool replayable_ = false;                        // replay(): a forward with targets and a backward ran
    Real last_dloss_ = 0;                            // the last backward's, for replay()
    std::optional<std::pair<SubBlock, Phase>> only_; // replay(): the one sub-block timed() runs
    int timed_layer_ = -1; // the layer the sub-blocks being timed belong to (-1 outside the layers)

    std::array<size_t, NUM_ACTIVATION_TENSORS> activation_sizes(int B, int T, bool gradients) const {
        const size_t L = config.num_layers, C = config.channels, NH = config.num_heads;
        const size_t BT = (size_t)B * T, Vp = config.padded_vocab_size;
        const size_t fwd_only = gradients ? 0 : 1;
        return {BT * C,                         // encoded
                L * BT * C,                     // ln1
                L * BT * fwd_only,              // ln1_mean
                L * BT * fwd_only,              // ln1_rstd
                L * BT * 3 * C,                 // qkv
                L * BT * C,                     // atty
                L * B * NH * T * T * fwd_only,  // att
                L * BT * C,                     // attproj
                L * BT * C,                     // residual1
                L * BT * C,                     // ln2
                L * BT * fwd_only,              // ln2_mean
                L * BT * fwd_only,              // ln2_rstd
                L * BT * 4 * C,                 // fch
                L * BT * 4 * C,                 // fch_gelu
                L * BT * C,                     // fcproj
                L * BT * C,                     // residual2
                BT * C,                         // lnf
                BT * fwd_only,                  // lnf_mean
                BT * fwd_only,                  // lnf_rstd
                BT * Vp * fwd_only,             // probs
                BT * fwd_only};                 // losses
    }

    // Points the table into `memory`, growing it first if this shape needs more than it holds; returns the
    // number of elements in use.
    size_t carve(std::vector<Real>& memory, Activations& t, int B, int T, bool gradients) {
        const auto sizes = activation_sizes(B, T, gradients);
        size_t total = 0;
        for (size_t s : sizes) total += s;
        if (total > memory.size()) {
            memory.clear();
            memory.shrink_to_fit(); // release the old buffer before allocating the larger one
            memory.resize(total);
        }
        Real* base = memory.data();
        Real** ptrs = &t.encoded;
        for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
            ptrs[i] = sizes[i] ? base : nullptr;
            base += sizes[i];
        }
        return total;
    }

    LayerTensors layer(const Activations& t, int l) const {
        const size_t BT = (size_t)B * T, C = config.channels, NH = config.num_heads;
        auto at = [l](Real* p, size_t n) { return p ? p + l * n : nullptr; };
        return {at(t.ln1, BT * C),          at(t.ln1_mean, BT),     at(t.ln1_rstd, BT),     at(t.qkv, BT * 3 * C),
                at(t.atty, BT * C),         at(t.att, BT * NH * T), at(t.attproj, BT * C),  at(t.residual1, BT * C),
                at(t.ln2, BT * C),          at(t.ln2_mean, BT),     at(t.ln2_rstd, BT),     at(t.fch, BT * 4 * C),
                at(t.fch_gelu, BT * 4 * C), at(t.fcproj, BT * C),   at(t.residual2, BT * C)};
    }

    template <typename F> void timed(SubBlock s, Phase p, F&& f, SubBlockPart part = SubBlockPart::main) {
        if (only_ && (only_->first != s || only_->second != p)) return;
        ScopedSubBlockTimer timer(timings, s, p, timed_layer_, part);
        f();
    }
};

} // namespace llmc
