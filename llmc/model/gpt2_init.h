/*
 * GPT-2 random init (-e dN): weights ~ N(0, 0.02), the two residual projections (attprojw, fcprojw) scaled
 * by 1/sqrt(2L) so the residual stream's variance does not grow with depth, biases 0, LayerNorm weights 1.
 * Values are drawn in double from one Rng stream in tensor order, so float and double models, and the CPU and
 * GPU trainers, start from the same weights for a seed.
 */
#pragma once
#include <cmath>
#include <cstdint>

#include "llmc/model/gpt2_config.h"
#include "llmc/util/rand.h"

namespace llmc {

template <typename T> void init_gpt2_parameters(T* params, const GPT2Config& c, uint64_t seed) {
    Rng rng(seed);
    auto sizes = parameter_sizes(c);
    const double std_default = 0.02, std_residual = 0.02 / std::sqrt(2.0 * c.num_layers);
    size_t off = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        T* p = params + off;
        bool is_weight = i == WTE || i == WPE || i == QKVW || i == ATTPROJW || i == FCW || i == FCPROJW;
        bool is_ln_weight = i == LN1W || i == LN2W || i == LNFW;
        double sd = (i == ATTPROJW || i == FCPROJW) ? std_residual : std_default;
        for (size_t j = 0; j < sizes[i]; j++)
            p[j] = is_weight ? (T)(sd * rng.next_normal()) : (T)(is_ln_weight ? 1.0 : 0.0);
        off += sizes[i];
    }
}

} // namespace llmc
