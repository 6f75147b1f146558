/*
 * What the cuBLASLt autotune (llmc/matmul.cuh) decided for one matmul plan: the problem, the algorithms the
 * heuristic offered with their measured times, and the one the run uses. Plain C++ without CUDA types, so the
 * profiler's context (profile.json) and its tests carry it on machines without a GPU.
 */
#pragma once
#include <string>
#include <vector>

namespace llmc {

// One algorithm the heuristic offered, as cuBLASLt describes it (CUBLASLT_ALGO_CONFIG_*; -1 where unknown).
struct GemmCandidate {
    int index = 0; // its position in the heuristic's list (0: the heuristic's first)
    int algo_id = -1, tile_id = -1, splitk = -1, stages_id = -1;
    double us = -1; // measured microseconds per call; negative: not timed
};

struct GemmTuning {
    int m = 0, n = 0, k = 0; // column-major D (m, n) = op(A) (m, k) op(B) (k, n)
    bool trans_a = false, trans_b = false, accumulate = false;
    std::string epilogue;     // the epilogue asked for: DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS, DGELU
    bool gelu_kernel = false; // no algorithm had the GELU epilogue: the GEMM runs without it, the GELU kernel after
    int align[5] = {};        // alignments in bytes the plan is for: A, B, D, bias, aux
    bool autotuned = false;   // the candidates were timed (LLMC_GEMM_AUTOTUNE not 0, more than one candidate)
    bool restored = false;    // the algorithm a checkpoint recorded (set_gemm_choices), not timed again
    int chosen = 0;           // index into candidates: the algorithm every call of this plan uses
    std::vector<GemmCandidate> candidates;
};

} // namespace llmc
