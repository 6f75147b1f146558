/*
 * GPT-2 inference on the CPU with a KV cache: the reference for infer_gpt2 and for the GPU decoder's tests.
 *
 * The decoder runs the model's own ops (the headers of llmc/cpu/) and weights (a GPT2CPU it does not own) over "rows":
 * each row is one token appended to one sequence at that sequence's next position. Prefill appends a whole
 * prompt per sequence, decode one token per sequence, and a batch may mix lengths: every row carries its own
 * sequence and position, so ragged prompts need neither padding nor masks.
 *
 * KV cache: per layer, K and V of shape (B, NH, maxT, hs), maxT the capacity given at construction: the layout
 * attention reads, each (sequence, head)'s positions one contiguous stream (in (B, maxT, C) a head's key of
 * consecutive positions lies a whole row of C apart, which the hardware prefetchers do not follow). A row's
 * key and value are written at (its sequence, each head, its position) before any row of the same call attends,
 * so a prompt's row t sees rows 0..t of its own sequence and nothing else. Attention for a row is
 * cpu::attention_row over its sequence's cached positions 0..pos, the same function and summation order as the
 * training forward, so logits from the cache match full recomputation (tests: test/test_infer_cpu.cpp).
 *
 * Memory: the cache (2 L B maxT C values) plus row activations sized for the largest call, reused across calls.
 * Only the last row of each sequence goes through lnf and the classifier: the logits of the other prompt
 * positions are never needed.
 */
#pragma once
#include <algorithm>
#include <vector>

#include "llmc/cpu/gpt2.h"

namespace llmc {

template <typename Real> class GPT2DecoderCPU {
public:
    SubBlockTimes* timings = nullptr; // when set, each sub-block's wall time is added under `phase`
    Phase phase = Phase::fwd;

    // B sequences of at most max_len tokens each (prompt + generated), max_len <= the model's maxT.
    GPT2DecoderCPU(const GPT2CPU<Real>& model, int B, int max_len) : m_(model), B_(B), maxT_(max_len), len_(B, 0) {
        const GPT2Config& c = model.config;
        if (B < 1 || max_len < 1 || max_len > c.max_seq_len)
            throw Error(strprintf("decoder: bad shape B=%d max_len=%d (need B >= 1, 1 <= max_len <= maxT=%d)", B,
                                  max_len, c.max_seq_len));
        cache_.assign(cache_elements(c, B, max_len), Real(0));
    }

    // Values in a KV cache for B sequences of max_len tokens: K and V, every layer.
    static size_t cache_elements(const GPT2Config& c, int B, int max_len) {
        return 2 * (size_t)c.num_layers * B * max_len * c.channels;
    }
    size_t cache_bytes() const { return cache_.size() * sizeof(Real); }
    int batch() const { return B_; }
    int capacity() const { return maxT_; }
    int length(int b) const { return len_.at(b); }
    void reset() { std::fill(len_.begin(), len_.end(), 0); }

    /*
     * Appends tokens[b] to sequence b for every b (an empty list leaves the sequence as it is) and writes into
     * logits (B, Vp) row b the logits after sequence b's last appended token; rows of sequences with nothing
     * appended are left untouched. Throws llmc::Error on a bad id or a sequence that would pass its capacity.
     */
    void append(const std::vector<std::vector<int>>& tokens, Real* logits) {
        const GPT2Config& c = m_.config;
        const int C = c.channels, NH = c.num_heads, hs = C / NH, L = c.num_layers, Vp = c.padded_vocab_size;
        if ((int)tokens.size() != B_)
            throw Error(strprintf("decoder: %zu token lists for %d sequences", tokens.size(), B_));
        // ---- rows: (sequence, position, token), sequences in order ----
        seq_.clear(), pos_.clear(), tok_.clear(), last_.clear();
        for (int b = 0; b < B_; b++) {
            if (len_[b] + tokens[b].size() > (size_t)maxT_)
                throw Error(strprintf("decoder: sequence %d would hold %zu tokens, more than its capacity %d", b,
                                      len_[b] + tokens[b].size(), maxT_));
            check_token_ids(c, tokens[b].data(), tokens[b].size(), "input");
            for (size_t j = 0; j < tokens[b].size(); j++) {
                seq_.push_back(b), pos_.push_back(len_[b] + (int)j), tok_.push_back(tokens[b][j]);
            }
            if (!tokens[b].empty()) last_.push_back((int)seq_.size() - 1);
        }
        const int R = (int)seq_.size(), NL = (int)last_.size();
        if (R == 0) return;
        carve(R);
        const size_t RC = (size_t)R * C;
        // Keys and values each layer's attention reads. Threads only for enough of them: with passive waiting, a
        // parallel region per layer costs more than a decode row's heads save (doc/cpu_reference.md).
        size_t kv_values = 0;
        for (int r = 0; r < R; r++) kv_values += 2 * (size_t)(pos_[r] + 1) * C;
        using namespace cpu;

        timed(SubBlock::encoder, -1, [&] {
#pragma omp parallel for if (RC >= cpu::vec::PARALLEL_MIN)
            for (int r = 0; r < R; r++)
                for (int i = 0; i < C; i++)
                    a_.x[(size_t)r * C + i] = m_.params.wte[(size_t)tok_[r] * C + i] + m_.params.wpe[(size_t)pos_[r] * C + i];
        });
        for (int l = 0; l < L; l++) {
            const auto p = m_.layer_params(m_.params, l);
            Real* kc = cache_.data() + (size_t)l * 2 * B_ * maxT_ * C; // (B, NH, maxT, hs) keys of layer l
            Real* vc = kc + (size_t)B_ * maxT_ * C;                    // (B, NH, maxT, hs) values
            auto head0 = [&](int r, int h) { return ((size_t)seq_[r] * NH + h) * maxT_ * hs; }; // its position 0
            timed(SubBlock::ln1, l, [&] { layernorm_forward(a_.ln, a_.mean, a_.rstd, a_.x, p.ln1w, p.ln1b, 1, R, C); });
            timed(SubBlock::qkv, l, [&] { matmul_forward(a_.qkv, a_.ln, p.qkvw, p.qkvb, 1, R, C, 3 * C); });
            timed(SubBlock::attention, l, [&] {
                // Every row's key and value go into the cache first: rows of one prompt attend to each other.
                for (int r = 0; r < R; r++)
                    for (int h = 0; h < NH; h++) {
                        const size_t at = head0(r, h) + (size_t)pos_[r] * hs;
                        std::copy_n(a_.qkv + (size_t)r * 3 * C + C + h * hs, hs, kc + at);
                        std::copy_n(a_.qkv + (size_t)r * 3 * C + 2 * C + h * hs, hs, vc + at);
                    }
#pragma omp parallel if (kv_values >= ATTENTION_PARALLEL_MIN)
                {
                    std::vector<Real> att(maxT_); // this thread's softmax weights
#pragma omp for collapse(2)
                    for (int r = 0; r < R; r++)
                        for (int h = 0; h < NH; h++)
                            attention_row(a_.atty + (size_t)r * C + h * hs, att.data(), a_.qkv + (size_t)r * 3 * C + h * hs,
                                          kc + head0(r, h), vc + head0(r, h), hs, pos_[r] + 1, hs);
                }
            });
            timed(SubBlock::attn_proj, l,
                  [&] { matmul_forward(a_.proj, a_.atty, p.attprojw, p.attprojb, 1, R, C, C); });
            timed(SubBlock::residual1, l, [&] { residual_forward(a_.x1, a_.x, a_.proj, RC); });
            timed(SubBlock::ln2, l, [&] { layernorm_forward(a_.ln, a_.mean, a_.rstd, a_.x1, p.ln2w, p.ln2b, 1, R, C); });
            timed(SubBlock::fc, l, [&] { matmul_forward(a_.fch, a_.ln, p.fcw, p.fcb, 1, R, C, 4 * C); });
            timed(SubBlock::gelu, l, [&] { gelu_forward(a_.fch_gelu, a_.fch, 4 * RC); });
            timed(SubBlock::fc_proj, l,
                  [&] { matmul_forward(a_.proj, a_.fch_gelu, p.fcprojw, p.fcprojb, 1, R, 4 * C, C); });
            timed(SubBlock::residual2, l, [&] { residual_forward(a_.x, a_.x1, a_.proj, RC); });
        }
        // ---- the head, on each sequence's last row only ----
        timed(SubBlock::lnf, -1, [&] {
            for (int i = 0; i < NL; i++) std::copy_n(a_.x + (size_t)last_[i] * C, C, a_.x1 + (size_t)i * C);
            layernorm_forward(a_.ln, a_.mean, a_.rstd, a_.x1, m_.params.lnfw, m_.params.lnfb, 1, NL, C);
        });
        timed(SubBlock::classifier, -1, [&] {
            matmul_forward(a_.logits, a_.ln, m_.params.wte, (const Real*)nullptr, 1, NL, C, Vp);
            for (int i = 0; i < NL; i++)
                std::copy_n(a_.logits + (size_t)i * Vp, Vp, logits + (size_t)seq_[last_[i]] * Vp);
        });
        for (int b = 0; b < B_; b++) len_[b] += (int)tokens[b].size();
    }

private:
    // Keys and values a call's attention reads (both, every head) below which it runs on the calling thread.
    // Measured at d12, B=1, positions 129-256 (about 0.3M values per layer): 1.4-1.6 ms per token on one thread,
    // 2.7-3.4 ms on two, so a parallel region's wake-up and barrier outweigh their half of ~120 us of work.
    static constexpr size_t ATTENTION_PARALLEL_MIN = 1 << 20;

    // Row activations of one call; x is the residual stream, x1 the stream after attention.
    struct Rows {
        Real *x, *x1, *ln, *mean, *rstd, *qkv, *atty, *proj, *fch, *fch_gelu, *logits;
    };

    const GPT2CPU<Real>& m_;
    int B_, maxT_;
    std::vector<int> len_;                     // tokens cached per sequence
    std::vector<Real> cache_;                  // (L, 2, B, NH, maxT, hs)
    std::vector<Real> rows_memory_;
    Rows a_{};
    std::vector<int> seq_, pos_, tok_, last_;  // per row; last_: each appending sequence's last row

    // Points a_ into rows_memory_ for R rows (the logits: one row per sequence), growing it when R needs more.
    void carve(int R) {
        const size_t C = m_.config.channels, Vp = m_.config.padded_vocab_size, r = R;
        const size_t sizes[] = {r * C, r * C, r * C, r, r, r * 3 * C, r * C, r * C, r * 4 * C, r * 4 * C, B_ * Vp};
        size_t total = 0;
        for (size_t s : sizes) total += s;
        if (total > rows_memory_.size()) rows_memory_.resize(total);
        Real* base = rows_memory_.data();
        Real** ptrs = &a_.x;
        for (size_t s : sizes) {
            *ptrs++ = base;
            base += s;
        }
    }

    template <typename F> void timed(SubBlock s, int layer, F&& f) {
        ScopedSubBlockTimer timer(timings, s, phase, layer);
        f();
    }
};

} // namespace llmc
