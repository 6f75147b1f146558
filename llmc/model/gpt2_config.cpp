// GPT-2 shapes: dN descriptors, the gradient buckets' ranges, shape validation (llmc/model/gpt2_config.h).
#include "llmc/model/gpt2_config.h"

namespace llmc {

GPT2Config gpt2_config_for_depth(int depth) {
    GPT2Config c;
    c.num_layers = depth;
    switch (depth) {
    case 12: c.channels = 768; c.num_heads = 12; break;
    case 24: c.channels = 1024; c.num_heads = 16; break;
    case 36: c.channels = 1280; c.num_heads = 20; break;
    case 48: c.channels = 1600; c.num_heads = 25; break;
    default: c.channels = 64 * depth; c.num_heads = depth; break;
    }
    return c;
}

bool parse_depth_descriptor(const std::string& s, int* depth) {
    if (s.size() < 2 || s[0] != 'd') return false;
    for (size_t i = 1; i < s.size(); i++)
        if (s[i] < '0' || s[i] > '9') return false;
    if (s.size() > 4) return false;
    *depth = std::stoi(s.substr(1));
    return *depth >= 1;
}

std::vector<ParamRange> layer_parameter_ranges(const GPT2Config& c, int layer) {
    auto sizes = parameter_sizes(c);
    std::vector<ParamRange> out;
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        bool per_layer = i != WTE && i != WPE && i != LNFW && i != LNFB;
        if (per_layer && layer >= 0) {
            size_t each = sizes[i] / c.num_layers;
            out.push_back({offset + (size_t)layer * each, each});
        } else if (!per_layer && layer < 0) {
            out.push_back({offset, sizes[i]});
        }
        offset += sizes[i];
    }
    return out;
}

void validate_config(const GPT2Config& c, const std::string& origin) {
    if (c.num_layers < 1 || c.num_layers > MAX_LAYERS || c.num_heads < 1 || c.channels < 1 ||
        c.channels > MAX_CHANNELS || c.channels % c.num_heads != 0 || c.max_seq_len < 1 ||
        c.max_seq_len > MAX_SEQ_LEN || c.vocab_size < 1 || c.padded_vocab_size < c.vocab_size ||
        c.padded_vocab_size > MAX_VOCAB)
        throw Error(strprintf("%s: invalid model shape (L=%d NH=%d C=%d maxT=%d V=%d Vp=%d; limits L <= %d, "
                              "C <= %d and a multiple of NH, maxT <= %d, V <= Vp <= %d)",
                              origin.c_str(), c.num_layers, c.num_heads, c.channels, c.max_seq_len, c.vocab_size,
                              c.padded_vocab_size, MAX_LAYERS, MAX_CHANNELS, MAX_SEQ_LEN, MAX_VOCAB));
    const std::string what = origin + ": parameter count";
    const char* w = what.c_str();
    size_t Vp = c.padded_vocab_size, C = c.channels, maxT = c.max_seq_len, L = c.num_layers;
    size_t CC = checked_mul(C, C, w);
    // Per layer: ln1 and ln2 (2C each), qkv (3CC + 3C), attproj (CC + C), fc (4CC + 4C), fcproj (4CC + C).
    size_t per_layer = checked_add(checked_mul(CC, 12, w), checked_mul(C, 13, w), w);
    size_t n = checked_add(checked_mul(Vp, C, w), checked_mul(maxT, C, w), w);
    n = checked_add(n, checked_mul(L, per_layer, w), w);
    n = checked_add(n, checked_mul(C, 2, w), w);
    checked_mul(n, sizeof(float), w);
}

void check_token_ids(const GPT2Config& c, const int* ids, int n, const char* what) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c.vocab_size)
            throw Error(strprintf("forward: %s token id %d at position %d is outside [0, %d)", what, ids[i], i,
                                  c.vocab_size));
}

void check_seq_len(const GPT2Config& c, int T) {
    if (T > c.max_seq_len)
        throw UsageError(strprintf("-t: sequence length %d exceeds the model's maximum %d", T, c.max_seq_len));
}

void check_gpu_shape(const GPT2Config& c) {
    if (c.channels % c.num_heads != 0 || c.channels / c.num_heads != 64)
        throw Error(strprintf("the GPU attention kernel needs head size 64 (this model: C=%d / NH=%d)", c.channels,
                              c.num_heads));
    if (c.channels % 8 != 0 || c.padded_vocab_size % 8 != 0) throw Error("the GPU kernels need C and Vp to be multiples of 8");
}

} // namespace llmc
