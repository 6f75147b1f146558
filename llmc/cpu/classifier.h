/*
 * Output head on the CPU: logits = inp @ wte^T (weight tying), softmax over the V real tokens, and the
 * cross-entropy loss against the targets.
 *
 * One (B, T, Vp) buffer serves the whole head: the forward writes logits into it and turns them into
 * probabilities in place, the backward turns the probabilities into dlogits in place. The Vp - V padded
 * columns take part in the matmul (their wte rows exist) but are excluded from the softmax: their
 * probabilities are 0 and their dlogits are 0, so padded wte rows get exactly zero gradient.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "llmc/cpu/matmul.h"
#include "llmc/cpu/vec.h"

namespace llmc::cpu {

// Softmax over the V real columns of each row of logits (BT, Vp), in place, padded columns set to 0, and
// the loss at each position: losses (BT) written only when targets (BT) is not null. The classifier's
// non-GEMM part, kept apart so the CPU profile times it apart from the matmul.
template <typename Real> void classifier_softmax(Real* probs, Real* losses, const int* targets, int BT, int V, int Vp) {
    vec::kernels(); // resolved outside the parallel region (an invalid LLMC_CPU_ISA throws)
#pragma omp parallel for if (BT > 1)
    for (int bt = 0; bt < BT; bt++) {
        Real* p = probs + (size_t)bt * Vp;
        Real maxval = p[0];
#pragma omp simd reduction(max : maxval)
        for (int i = 1; i < V; i++) maxval = std::max(maxval, p[i]);
        // The loss comes from the logits, -log softmax = log(sum) - (logit - max), so a target probability
        // that underflows in Real still gives a finite loss.
        const Real target_logit = targets ? p[targets[bt]] : Real(0);
        double sum = 0;
        if constexpr (std::is_same_v<Real, float>) {
            sum = vec::kernels().exp_sum(p, V, maxval);
        } else {
            for (int i = 0; i < V; i++) {
                p[i] = std::exp(p[i] - maxval);
                sum += p[i];
            }
        }
        const Real inv = (Real)(1.0 / sum);
        for (int i = 0; i < V; i++) p[i] *= inv;
        for (int i = V; i < Vp; i++) p[i] = 0;
        if (targets) losses[bt] = (Real)(std::log(sum) - ((double)target_logit - maxval));
    }
}

// probs (B, T, Vp) out; losses (B, T) out, written only when targets is not null;
// inp (B, T, C); wte (Vp, C); targets (B, T) in [0, V) or null.
template <typename Real> void classifier_forward(Real* probs, Real* losses, const Real* inp, const Real* wte,
                                                 const int* targets, int B, int T, int C, int V, int Vp) {
    matmul_forward(probs, inp, wte, (const Real*)nullptr, B, T, C, Vp);
    classifier_softmax(probs, losses, targets, B * T, V, Vp);
}

// Turns probs (BT, Vp) into dlogits = (probs - onehot(target)) * dloss in place (padded columns stay 0).
template <typename Real> void classifier_dlogits(Real* probs, const int* targets, Real dloss, int BT, int V, int Vp) {
#pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        Real* p = probs + (size_t)bt * Vp;
        for (int i = 0; i < V; i++) p[i] *= dloss;
        p[targets[bt]] -= dloss;
    }
}

// Turns probs into dlogits in place, then accumulates dinp (B, T, C) and dwte (Vp, C). dloss is
// d(objective)/d(loss at one position), the same for every position (1 / (B*T) for the mean loss).
template <typename Real> void classifier_backward(Real* dinp, Real* dwte, Real* probs, const Real* inp, const Real* wte,
                                                  const int* targets, Real dloss, int B, int T, int C, int V, int Vp) {
    classifier_dlogits(probs, targets, dloss, B * T, V, Vp);
    matmul_backward(dinp, dwte, (Real*)nullptr, probs, inp, wte, B, T, C, Vp);
}

} // namespace llmc::cpu
