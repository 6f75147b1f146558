/*
 * The names every profile uses for the parts of a training step (doc/profiling.md, "Sub-blocks").
 * The CPU trainer times these (llmc/profiler/cpu_timers.h); the GPU trainer wraps each in an NVTX range
 * (llmc/nvtx.h) and the profiler attributes kernels to them, so CPU and GPU profiles line up row by row.
 */
#pragma once

namespace llmc {

enum class SubBlock {
    encoder, ln1, qkv, attention, attn_proj, residual1, ln2, fc, gelu, fc_proj, residual2, lnf, classifier,
    optimizer, grad_norm,
    comm, // data-parallel communication (llmc/train/dist.h): gradient reduction, parameter gathering
    COUNT
};
// Training runs fwd, bwd and opt; inference (infer_gpt2) prefill (the prompts) and decode (one token per step).
enum class Phase { fwd, bwd, opt, prefill, decode, COUNT };

constexpr int NUM_SUBBLOCKS = (int)SubBlock::COUNT;
constexpr int NUM_PHASES = (int)Phase::COUNT;

// The entries of an array indexed by an enum must be exactly its COUNT: a name added to the enum but not to
// the table (or the reverse) is a compile error, not a read past the end.
template <typename Enum, typename T, int N> constexpr const T* enum_table(const T (&table)[N]) {
    static_assert(N == (int)Enum::COUNT, "one entry per enum value");
    return table;
}

inline const char* subblock_name(SubBlock s) {
    static constexpr const char* names[] = {"encoder",   "ln1",       "qkv", "attention", "attn_proj",
                                            "residual1", "ln2",       "fc",  "gelu",      "fc_proj",
                                            "residual2", "lnf",       "classifier", "optimizer", "grad_norm",
                                            "comm"};
    return enum_table<SubBlock>(names)[(int)s];
}
inline const char* phase_name(Phase p) {
    static constexpr const char* names[] = {"fwd", "bwd", "opt", "prefill", "decode"};
    return enum_table<Phase>(names)[(int)p];
}

} // namespace llmc
