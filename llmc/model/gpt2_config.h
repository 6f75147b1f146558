/*
 * GPT-2 hyperparameters and the parameter layout shared by the CPU and GPU models and the llm.c model file:
 * 16 tensors in a fixed order, each (out, in) for weights, laid out back to back in one allocation.
 */
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "llmc/io/formats.h"
#include "llmc/util/utils.h"

namespace llmc {

struct GPT2Config {
    int max_seq_len = 1024;          // maxT
    int vocab_size = GPT2_VOCAB_SIZE; // V
    int padded_vocab_size = 50304;    // Vp: V rounded up to a multiple of 128 for aligned matmuls
    int num_layers = 0;               // L
    int num_heads = 0;                // NH
    int channels = 0;                 // C
};

// "dN": d12/d24/d36/d48 are GPT-2 124M/350M/774M/1558M; any other N gives L=N, C=64N, NH=N (head size 64).
GPT2Config gpt2_config_for_depth(int depth);

// True when `s` is a depth descriptor "dN" (N >= 1); writes N.
bool parse_depth_descriptor(const std::string& s, int* depth);

constexpr int NUM_PARAMETER_TENSORS = 16;
enum ParamIndex { WTE, WPE, LN1W, LN1B, QKVW, QKVB, ATTPROJW, ATTPROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB, LNFW, LNFB };
static_assert(LNFB + 1 == NUM_PARAMETER_TENSORS, "one ParamIndex per parameter tensor");

inline const char* parameter_name(int i) {
    static const char* names[] = {"wte",  "wpe",  "ln1w",   "ln1b",    "qkvw",    "qkvb",
                                  "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                                  "fcprojw", "fcprojb", "lnfw", "lnfb"};
    static_assert(sizeof(names) / sizeof(names[0]) == NUM_PARAMETER_TENSORS, "one name per parameter tensor");
    return names[i];
}

// Weight decay applies to the embeddings and the four matmul weights per layer (doc/design.md, "Optimizer conventions").
inline bool parameter_decays(int i) {
    return i == WTE || i == WPE || i == QKVW || i == ATTPROJW || i == FCW || i == FCPROJW;
}

inline std::array<size_t, NUM_PARAMETER_TENSORS> parameter_sizes(const GPT2Config& c) {
    size_t Vp = c.padded_vocab_size, C = c.channels, maxT = c.max_seq_len, L = c.num_layers;
    return {Vp * C,        maxT * C,  L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
            L * C,         L * C,     L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
}

/*
 * The gradient buckets of data-parallel training (doc/distributed.md): where in the flat llm.c-order buffer the
 * parameters of layer `layer` lie, one (offset, count) range per per-layer tensor; layer -1 gives the tensors
 * outside the layers (wte, wpe, lnfw, lnfb). Backward finishes layer L-1 first and the embeddings last (wte's
 * gradient gathers from the classifier and the encoder), so the buckets are ready in the order L-1, ..., 0, -1.
 */
struct ParamRange {
    size_t offset, count;
};
std::vector<ParamRange> layer_parameter_ranges(const GPT2Config& c, int layer);

inline size_t num_parameters(const GPT2Config& c) {
    size_t n = 0;
    for (size_t s : parameter_sizes(c)) n += s;
    return n;
}

/*
 * Every shape a model may have passes here before anything is sized from it: a model file's header, a dN
 * descriptor, a model constructed in code. Each dimension is bounded, and the parameter count and its bytes are
 * computed with overflow-checked arithmetic, so that num_parameters() and parameter_sizes() cannot wrap for a
 * shape that got through.
 */
constexpr int MAX_LAYERS = 1 << 12, MAX_CHANNELS = 1 << 20, MAX_SEQ_LEN = 1 << 24, MAX_VOCAB = 1 << 24;
void validate_config(const GPT2Config& c, const std::string& origin);

// -t against the model's maximum sequence length: a UsageError naming -t (every program's one check).
void check_seq_len(const GPT2Config& c, int T);

// What the GPU kernels need of a model's shape (head size 64 for the attention kernels, C and Vp multiples of 8 for
// the 16-byte rows): Error otherwise, for the GPU model and decoder alike.
void check_gpu_shape(const GPT2Config& c);

// Token ids a forward pass takes (what: "input" or "target"): an id outside [0, V) would read past wte.
void check_token_ids(const GPT2Config& c, const int* ids, int n, const char* what);

// The 16 parameter tensors as views into one contiguous buffer (T = float, double, or a GPU type).
template <typename T> struct ParameterTensors {
    T* wte;      // (Vp, C)
    T* wpe;      // (maxT, C)
    T* ln1w;     // (L, C)
    T* ln1b;     // (L, C)
    T* qkvw;     // (L, 3C, C)
    T* qkvb;     // (L, 3C)
    T* attprojw; // (L, C, C)
    T* attprojb; // (L, C)
    T* ln2w;     // (L, C)
    T* ln2b;     // (L, C)
    T* fcw;      // (L, 4C, C)
    T* fcb;      // (L, 4C)
    T* fcprojw;  // (L, C, 4C)
    T* fcprojb;  // (L, C)
    T* lnfw;     // (C)
    T* lnfb;     // (C)

    T* tensor(int i) { return (&wte)[i]; }
    void point_into(T* base, const GPT2Config& c) {
        auto sizes = parameter_sizes(c);
        for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
            (&wte)[i] = base;
            base += sizes[i];
        }
    }
};

} // namespace llmc
