/*
 * Token sampling for -s/-g: temperature and top-k applied to a probability row from the model's softmax.
 * Works on probabilities rather than logits because the classifier keeps only probs (see cpu/classifier.h);
 * p^(1/temperature), renormalised, is softmax(logits / temperature). The weights are taken relative to the most
 * likely token, (p / p_max)^(1/temperature) = exp((log p - log p_max) / temperature), so the mode's weight is 1
 * whatever the temperature: at the lowest temperatures every other weight underflows to 0 and the draw is the
 * argmax (p^(1/temperature) itself would underflow to 0 for every token, leaving nothing to draw from).
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace llmc {

// The id given for a row of logits that is not all finite (a model with NaN or infinite weights, or one that
// diverged), by the CPU's pick_token (llmc/infer/pick_token.h) and the GPU's sample_tokens (llmc/sample.cuh):
// the inference driver (llmc/infer/driver.cpp) stops on it instead of printing tokens drawn from nothing.
constexpr int kNotFinite = -1;

struct SamplerConfig {
    float temperature = 1.0f; // > 0
    int top_k = 0;            // 0 = whole vocabulary
};

// Draws a token from probs[0..V) with `coin` uniform in [0, 1). Deterministic for a given coin.
template <typename T> int sample_token(const T* probs, int V, const SamplerConfig& cfg, float coin) {
    std::vector<double> w(V);
    const double inv_temp = 1.0 / cfg.temperature;
    double pmax = 0.0;
    for (int i = 0; i < V; i++) pmax = std::max(pmax, (double)probs[i]); // NaN never wins: a row of NaN gives 0
    const double log_pmax = std::log(pmax);
    for (int i = 0; i < V; i++)
        w[i] = probs[i] > 0 ? std::exp((std::log((double)probs[i]) - log_pmax) * inv_temp) : 0.0;
    if (cfg.top_k > 0 && cfg.top_k < V) {
        std::vector<double> sorted(w);
        std::nth_element(sorted.begin(), sorted.begin() + (cfg.top_k - 1), sorted.end(), std::greater<double>());
        double kth = sorted[cfg.top_k - 1];
        // Ties at the k-th value are all kept: which of equal candidates to drop would be arbitrary.
        for (double& x : w)
            if (x < kth) x = 0.0;
    }
    double total = 0.0;
    for (double x : w) total += x;
    double target = coin * total, cdf = 0.0;
    int last_nonzero = 0;
    for (int i = 0; i < V; i++) {
        if (w[i] <= 0) continue;
        cdf += w[i];
        last_nonzero = i;
        if (target < cdf) return i;
    }
    return last_nonzero; // coin * total rounded up to total
}

} // namespace llmc
