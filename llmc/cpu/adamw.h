/*
 * CPU optimizer: deterministic global gradient norm, clipping, and AdamW (settings in llmc/model/optimizer.h;
 * decoupled weight decay only on tensors where parameter_decays()).
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "llmc/cpu/vec.h"

#include "llmc/model/gpt2_config.h"
#include "llmc/model/optimizer.h"

namespace llmc::cpu {

/*
 * Sum of the squared gradients (fp32, in double). Partial sums are taken over fixed chunks (vec::kernels' lanes,
 * then the chunks in order), so the result is bitwise the same whatever the thread count (an OpenMP reduction
 * would not promise that).
 */
inline double sum_of_squares(const float* grads, size_t n) {
    constexpr size_t CHUNK = 1 << 16;
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    std::vector<double> partial(nchunks, 0.0);
    const vec::Kernels& kern = vec::kernels();
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nchunks; c++)
        partial[c] = kern.sum_of_squares(grads + c * CHUNK, std::min(n, (c + 1) * CHUNK) - c * CHUNK);
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
}

// Global L2 norm of the gradient (data-parallel runs sum the squares over ranks: llmc/train/dist.h).
inline double global_norm(const float* grads, size_t n) { return std::sqrt(sum_of_squares(grads, n)); }

/*
 * One AdamW step over the parameters [begin, end) of the flat llm.c-order buffer (a data-parallel rank's
 * shard under ZeRO-1; all of them by default). `t` is the 1-based step count for bias correction; `grad_norm`
 * the global norm, from which the clip factor follows. m and v hold the fp32 moments of [begin, end) only:
 * m[0] is parameter `begin`'s. Each element's update depends on that element alone (vec::Kernels::adamw), so
 * updating a shard gives the same bits as updating everything.
 */
inline void adamw_update(float* params, const float* grads, float* m, float* v, const GPT2Config& config,
                         const AdamWConfig& opt, float lr, int t, double grad_norm, size_t begin = 0,
                         size_t end = SIZE_MAX) {
    float scale = (opt.grad_clip > 0.0f && grad_norm > opt.grad_clip) ? (float)(opt.grad_clip / grad_norm) : 1.0f;
    float bc1 = 1.0f - std::pow(opt.beta1, (float)t);
    float bc2 = 1.0f - std::pow(opt.beta2, (float)t);
    auto sizes = parameter_sizes(config);
    const vec::Kernels& kern = vec::kernels();
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        const float wd = parameter_decays(k) ? opt.weight_decay : 0.0f;
        const size_t lo = std::max(offset, begin), hi = std::min(offset + sizes[k], end);
        offset += sizes[k];
        if (lo >= hi) continue;
        const vec::AdamWArgs a{lr, opt.beta1, opt.beta2, opt.eps, wd, scale, bc1, bc2};
        vec::for_chunks(hi - lo, [&](size_t i, size_t cnt) {
            kern.adamw(params + lo + i, grads + lo + i, m + lo - begin + i, v + lo - begin + i, cnt, a);
        });
    }
}

} // namespace llmc::cpu
