// The CPU's choice of the next token from a row of logits (infer_gpt2's backend and the tests that hold the GPU
// sampler, llmc/sample.cuh, to the same rule).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "llmc/infer/sampler.h"

namespace llmc {

// The next token from a row of logits over V tokens: the argmax at temperature 0 (the lowest id among equal
// maxima), else a draw from softmax(logits / T) restricted to the top k (llmc/infer/sampler.h) with `coin` in [0, 1).
// A row of logits that is not all finite gives kNotFinite (llmc/infer/sampler.h), as the GPU's sample_tokens does.
template <typename Real> int pick_token(const Real* logits, int V, float temperature, int top_k, float coin) {
    for (int i = 0; i < V; i++)
        if (!std::isfinite((double)logits[i])) return kNotFinite;
    if (temperature == 0.0f) return (int)(std::max_element(logits, logits + V) - logits);
    const Real maxval = *std::max_element(logits, logits + V);
    std::vector<double> probs(V);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += probs[i] = std::exp((double)logits[i] - maxval);
    for (double& p : probs) p /= sum;
    return sample_token(probs.data(), V, SamplerConfig{temperature, top_k}, coin);
}

} // namespace llmc
