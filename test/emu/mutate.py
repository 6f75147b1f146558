#!/usr/bin/env python3
"""Mutation check of the emulated GPU tier: does it fail when a kernel (or a GPU backend) is broken?

    python3 test/emu/mutate.py [--only N[,N...]] [--jobs J]      (make emu_mutation)

Copies the working tree to a temporary directory, builds the emulated tests there once, then applies each
mutation below (one changed line in llmc/), rebuilds and runs the tests that cover that kernel. A mutation is
"caught" when that run fails. Prints one table row per mutation and exits non-zero if any was missed or if the
unmutated tree already fails. The working tree is never modified.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

# (file, the exact text of one line fragment, its replacement, what the mutation breaks, tests that must fail[,
# options]): options may set "env" (the tests' extra environment) and "expect" (text the failing run must print, so
# that it is caught by the check meant to catch it).
# EMU_SCHEDULES=1 with racecheck: caught on the first schedule, from the barriers alone, not by luck of an order.
RACECHECK_ONE_SCHEDULE = {"env": {"EMU_SCHEDULES": "1"}, "expect": "racecheck: "}
MUTATIONS = [
    ("llmc/layernorm.cuh", "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
     "for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);",
     "backward row sums over 16 lanes instead of 32", "EmuKernelsLayernorm.Backward*"),
    ("llmc/layernorm.cuh", "    __syncthreads();\n\n    // Level 1: the block's warps", "\n    // Level 1: the block's warps",
     "removed barrier before the block adds its warps' sums", "EmuKernelsLayernorm.Backward*"),
    ("llmc/layernorm.cuh", "__shfl_sync(0xffffffffu, sum, 0) / C", "__shfl_sync(0xffffffffu, sum, 1) / C",
     "wrong reduction lane (the sum is valid in lane 0 only)", "EmuKernelsLayernorm.ForwardMatchesCpu"),
    ("llmc/layernorm.cuh", "for (int w = 1; w < warps; w++) {", "for (int w = 2; w < warps; w++) {",
     "off-by-one: second warp's dweight/dbias sums dropped", "EmuKernelsLayernorm.Backward*"),
    ("llmc/attention.cuh", "        __syncthreads(); // every warp is done with this stage before the next iteration refills it\n    }\n\n    // Epilogue: O / l",
     "    }\n\n    // Epilogue: O / l",
     "removed barrier: next K/V stage refilled while still read (forward)", "EmuGpuAttention.*"),
    ("llmc/attention_decode.cuh", "const int used = ceil_div(len[b], kDecodeChunk);",
     "const int used = len[b] / kDecodeChunk;", "decode combine drops the partial last split",
     "EmuGpuAttentionDecode.PartialSplitLengths"),
    ("llmc/attention_decode.cuh", "for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);",
     "for (int o = 8; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);",
     "decode score sums half the warp", "EmuGpuAttentionDecode.PartialSplitLengths"),
    ("llmc/attention.cuh", "if (key > row || key >= T) s[n][e] = -INFINITY;", "if (key >= row || key >= T) s[n][e] = -INFINITY;",
     "causal mask off by one on the diagonal (forward)", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));", "    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));",
     "quad max reduction takes a lane of another row", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "(mask && (key > row || key >= T)) ? 0.0f : exp2f(fmaf(s[n][e], sl2, -l2r[e / 2]));",
     "(mask && (key > row || key >= T)) ? 0.0f : exp2f(fmaf(s[n][e], sl2, l2r[e / 2]));",
     "wrong sign of the log-sum-exp in the dQ kernel", "EmuGpuAttention.*"),
    ("llmc/encoder.cuh", "x128 p = load128(wpe + (size_t)t * C + c);", "x128 p = load128(wpe + (size_t)t * T + c);",
     "swapped stride: position table row indexed by T", "EmuKernelsEncoder.ForwardMatchesCpu"),
    ("llmc/encoder.cuh", "for (int j = 0; j < count; j++) {", "for (int j = 1; j < count; j++) {",
     "off-by-one: a token's first position dropped from dwte", "EmuKernelsEncoder.Backward*"),
    ("llmc/classifier.cuh", "if (i * x128::size + k < V) s += expf(f[k] - m);", "if (i * x128::size + k <= V) s += expf(f[k] - m);",
     "off-by-one: a padded column enters the softmax sum", "EmuKernelsClassifier.*"),
    ("llmc/adamw.cuh", "m = beta1 * m + (1.0f - beta1) * g;", "m = beta1 * m + (1.0f - beta2) * g;",
     "wrong constant in the first moment", "EmuKernelsAdamW.ThreeStepsMatchCpu"),
    ("llmc/adamw.cuh", "if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;", "if (threadIdx.x == 1) partial[blockIdx.x] = block_sum;",
     "wrong reduction lane (BlockReduce result is valid in thread 0 only)", "EmuKernelsAdamW.Global*"),
    ("llmc/gelu.cuh", "constexpr float GELU_SCALE = 0.7978845608028654f;", "constexpr float GELU_SCALE = 0.5641895835477563f;",
     "wrong constant in GELU: sqrt(1/pi) for sqrt(2/pi)", "EmuKernelsGelu.*"),
    ("llmc/gpu/gpt2.cu", "Phase::fwd);\n    floatX* ln1 = a.ln1 + l * slab * C;\n    float *ln1_mean = a.ln1_mean + l * slab, *ln1_rstd = a.ln1_rstd + l * slab;\n    floatX* qkv = a.qkv + l * slab * 3 * C;",
     "Phase::fwd);\n    floatX* ln1 = a.ln1 + l * slab * C;\n    float *ln1_mean = a.ln1_mean + l * slab, *ln1_rstd = a.ln1_rstd + l * slab;\n    floatX* qkv = a.qkv + l * slab * C;",
     "swapped stride: layers' qkv slabs overlap", "EmuGPT2GPU.LossAndEveryGradientMatchTheCPU"),
    ("llmc/matmul.cuh", "pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT", "CUBLASLT_EPILOGUE_DEFAULT",
     "dropped epilogue: GELU backward not applied", "EmuKernelsMatmul.*"),
    ("llmc/bias_backward.cuh", "for (int sl = g; sl < slabs; sl += BiasBackwardSmem::FINAL_GROUPS)",
     "for (int sl = g; sl < slabs - 1; sl += BiasBackwardSmem::FINAL_GROUPS)",
     "off-by-one: last slab of the bias gradient dropped", "EmuKernelsMatmul.*"),
    ("llmc/attention_decode.cuh", "const size_t cache_seq = (size_t)seq[b];", "const size_t cache_seq = (size_t)b;",
     "decode reads the cache of the row's index, not its sequence's", "EmuGpuAttentionDecode.RowsOfTheRunningSequencesOnly"),
    ("llmc/sample.cuh", "const int tid = threadIdx.x, r = blockIdx.x, b = seq[r];",
     "const int tid = threadIdx.x, r = blockIdx.x, b = r;", "sampler writes ids by row, not by sequence",
     "EmuGpuSampleTokens.*"),
    ("llmc/sample.cuh", "    if (not_finite) s_not_finite = 1; // every writer writes the same value\n", "",
     "sampler draws a token from a row with NaN or inf logits", "EmuGpuSampleTokens.RowWithANonFiniteLogitGivesNotFinite"),
    ("llmc/gpu/gpt2_decoder.cu", "const int id = tok[tok_at ? tok_at[r] : r];", "const int id = tok[r];",
     "decode embeds the id of the row's index, not its sequence's", "EmuGpuGPT2Decoder.GreedyCacheMatchesRecomputeAndCpu"),
    ("llmc/matmul.cuh", "else if (plan.gelu_apart) gelu_backward_inplace(d, aux, (size_t)m * n, stream);",
     "else if (plan.gelu_apart) {}", "GELU epilogue fallback: DGELU kernel not run",
     "EmuKernelsMatmul.RefusedGeluEpiloguesFallBackToTheGeluKernels"),
    ("llmc/matmul.cuh", "    if (bias) lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, what);\n", "",
     "bias pointer set after the heuristic, not before", "EmuKernelsMatmul.EpiloguePointersOffTheirBestAlignmentMatchCpu"),
    ("llmc/matmul.cuh", "(int)align[2], pointer_alignment(bias), pointer_alignment(aux)};", "(int)align[2], 256, 256};",
     "plan cache key without the bias and aux alignments", "EmuKernelsMatmul.*"),
    ("llmc/cuda_common.cuh", "if (e == cudaSuccess && sync_after_launch()) e = cudaDeviceSynchronize();",
     "if (e == cudaSuccess && sync_after_launch()) e = cudaSuccess;", "LLMC_SYNC=1 does not synchronise after a launch",
     "EmuGPT2GPU.SyncAfterLaunchNamesTheFaultingLaunchAndSubBlock"),
    ("llmc/attention.cuh", "        ptx::cp_async_wait<1>(); // this tile (and Q) landed for this thread\n", "",
     "dropped cp.async wait_group: the forward reads a stage before it lands", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "16 * s + 8 * ((lane / 8) % 2));", "16 * s + 8 * ((lane / 16) % 2));",
     "wrong ldmatrix row address: B fragments of S = Q K^T read the wrong columns", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "16 * j + 8 * (lane / 16));", "16 * j + 8 * ((lane / 8) % 2));",
     "wrong ldmatrix.trans address: B fragments of O += P V read the wrong columns", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "    return v + __shfl_xor_sync(0xffffffffu, v, 2);", "    return v + __shfl_xor_sync(0xffffffffu, v, 8);",
     "quad sum reduction takes a lane of another row", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "(mask && (key > q || q >= T)) ? 0.0f", "(mask && (key >= q || q >= T)) ? 0.0f",
     "causal mask off by one on the diagonal (dK/dV)", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "(mask && (key > row || key >= T)) ? 0.0f", "(mask && (key >= row || key >= T)) ? 0.0f",
     "causal mask off by one on the diagonal (dQ)", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "const bool mask = qc < kw + kStrip - 1 || qc + kChunk > T;", "const bool mask = qc < kw || qc + kChunk > T;",
     "dK/dV skips the mask on a chunk that crosses the diagonal", "EmuGpuAttention.*"),
    ("llmc/attention.cuh", "        const bool in = row0 + r < T;\n", "        const bool in = true;\n",
     "rows past T read instead of zero-filled by cp.async", "EmuGpuAttention.*"),
    ("llmc/ptx.cuh", "    return l | (h << 16);", "    return h | (l << 16);",
     "bf16x2 packing with the halves swapped", "EmuGpuPtx.*:EmuGpuAttention.SingleTokenT1"),
    ("llmc/bias_backward.cuh", "    if (t == 0) bias_backward_tile_counters[tile] = 0;", "    if (t == 0) {}",
     "bias gradient's tile counter not reset for the next launch", "EmuKernelsMatmul.BiasBackward*"),
    ("llmc/bias_backward.cuh", "store128(&sm.sums[ty][h][tx][0], v);\n    }\n    __syncthreads();",
     "store128(&sm.sums[ty][h][tx][0], v);\n    }\n", "removed barrier before the row threads' sums are added",
     "EmuKernelsMatmul.BiasBackward*"),
    ("llmc/layernorm.cuh", "for (int blk = first; blk < first + in_group; blk++) {",
     "for (int blk = first; blk < first + in_group - 1; blk++) {", "off-by-one: a group's last block dropped",
     "EmuKernelsLayernorm.Backward*"),
    ("llmc/layernorm.cuh", "    if (t == 0) layernorm_backward_counters[LN_BWD_MAX_GROUPS] = 0;\n", "",
     "layernorm backward's group counter not reset for the next launch", "EmuKernelsLayernorm.Backward*"),
    ("llmc/classifier.cuh", "const size_t row = gridDim.x - 1 - blockIdx.x;", "const size_t row = gridDim.x - 1 - blockIdx.x / 2;",
     "reverse row walk covers half the rows twice", "EmuKernelsClassifier.*"),
    ("llmc/matmul.cuh", "if (us[i] < us[best]) best = (int)i;", "if (us[i] > us[best]) best = (int)i;",
     "autotune keeps the slowest candidate", "EmuKernelsMatmulAutotune.KeepsTheFastestCandidateAndResultsMatchCpu"),
    ("llmc/matmul.cuh", 'if (!strcmp(v, "0")) return false;', 'if (!strcmp(v, "0")) return true;',
     "LLMC_GEMM_AUTOTUNE=0 ignored: candidates still timed", "EmuKernelsMatmulAutotune.OffKeepsTheHeuristicsFirst"),
    ("llmc/matmul.cuh", "floatX* d = accumulate ? scratch : out;", "floatX* d = out;",
     "autotune times an accumulating matmul on its real output",
     "EmuKernelsMatmulAutotune.KeepsTheFastestCandidateAndResultsMatchCpu"),
    ("llmc/gelu.cuh", "constexpr float GELU_CUBE = 0.044715f;", "constexpr float GELU_CUBE = 0.0446f;",
     "GELU cubic constant 0.044715 -> 0.0446 (forward)", "EmuKernelsElementwise.GeluForwardWithinOneUlp"),
    ("llmc/gelu.cuh", "constexpr float GELU_CUBE = 0.044715f;", "constexpr float GELU_CUBE = 0.0446f;",
     "GELU cubic constant 0.044715 -> 0.0446 (backward)", "EmuKernelsElementwise.GeluBackwardWithinOneUlp"),
    ("llmc/gelu.cuh", "constexpr float GELU_SCALE = 0.7978845608028654f;", "constexpr float GELU_SCALE = 0.7958845608028654f;",
     "GELU sqrt(2/pi) 0.25% low (forward)", "EmuKernelsElementwise.GeluForwardWithinOneUlp"),
    ("llmc/gelu.cuh", "constexpr float GELU_SCALE = 0.7978845608028654f;", "constexpr float GELU_SCALE = 0.7958845608028654f;",
     "GELU sqrt(2/pi) 0.25% low (backward)", "EmuKernelsElementwise.GeluBackwardWithinOneUlp"),
    ("llmc/gelu.cuh", "const float tail = 2.0f * s * s_minus, du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);",
     "const float tail = 2.0f * s * s_minus, du = GELU_SCALE * (1.0f + 2.9f * GELU_CUBE * x * x);",
     "GELU backward: du/dx's 3 c x^2 term 3% low", "EmuKernelsElementwise.GeluBackwardWithinOneUlp"),
    ("llmc/gelu.cuh", "s = u >= 0.0f ? r : t * r;", "s = r;",
     "GELU: the negative half's sigmoid taken as the positive's", "EmuKernelsElementwise.Gelu*"),
    ("llmc/adamw.cuh", "v = beta2 * v + (1.0f - beta2) * g * g;", "v = beta2 * v + (1.0f - beta2) * g * g * 0.999f;",
     "AdamW second moment 0.1% low", "EmuKernelsElementwise.AdamWWithinFp32BoundsAndOneUlp"),
    ("llmc/encoder.cuh", "for (int k = 0; k < x128::size; k++) o[k] = __float2bfloat16(__bfloat162float(e[k]) + __bfloat162float(p[k]));",
     "for (int k = 0; k < x128::size; k++) o[k] = __float2bfloat16(__bfloat162float(e[k]) + __bfloat162float(p[k]) * 1.01f);",
     "encoder adds the position row 1% too large", "EmuKernelsElementwise.EncoderForwardWithinOneUlp"),
    ("llmc/matmul.cuh", "    int best = t.restored ? restored : 0;", "    int best = 0;",
     "the algorithm recorded with a checkpoint is not the one used", "EmuKernelsMatmulAutotune.RecordedChoicesAreTakenInsteadOfTiming"),
    ("llmc/matmul.cuh", "cudaMalloc(&scratch, out_bytes);", "cudaMalloc(&scratch, 2 * out_bytes);",
     "the autotune's scratch output is larger than the memory plan says", "EmuGpuMemoryPlan.FirstStepPeakIsThePlansTotal"),
    ("llmc/gpu/gpt2.cu", "m = whole(model().get_moments_m());", "m = whole(model().get_moments_v());",
     "train_gpt2cu's checkpoint saves the second moment as the first", "EmuGpuBackends.Training*"),
    ("llmc/gpu/gpt2_decoder.cu", "const int* ids = dec_->sample(temperature, top_k, coins);",
     "const int* ids = dec_->sample(temperature, 0, coins);", "infer_gpt2cu samples from every token whatever --top-k",
     "EmuGpuBackends.Inference*"),
    ("llmc/train/loop.cpp", "io.temperature = opt.temperature, io.top_k = opt.top_k;",
     "io.temperature = opt.temperature, io.top_k = 0;", "train_gpt2cu's samples ignore --top-k",
     "EmuGpuBackends.TrainerSamples*"),
    # Racecheck (test/emu/racecheck.h): a barrier missing after a stage's cp.async wait, before other warps' ldmatrix of
    # it, which the round-based schedules hide (every thread reaches the ldmatrix, landing its copies, before any runs).
    ("llmc/attention.cuh", "        ptx::cp_async_wait<1>(); // this tile (and Q) landed for this thread\n        __syncthreads();         // ... and for every thread\n",
     "        ptx::cp_async_wait<1>(); // this tile (and Q) landed for this thread\n",
     "removed barrier between a stage's cp.async wait and its ldmatrix (forward)", "EmuGpuAttention.*",
     RACECHECK_ONE_SCHEDULE),
    ("llmc/bias_backward.cuh", "    if (t == 0) sm.is_last = atomicAdd(&bias_backward_tile_counters[tile], 1u) == (unsigned)slabs - 1;\n    __syncthreads();\n",
     "    if (t == 0) sm.is_last = atomicAdd(&bias_backward_tile_counters[tile], 1u) == (unsigned)slabs - 1;\n",
     "removed barrier between the ticket's write and the block's read of it", "EmuKernelsMatmul.BiasBackward*",
     RACECHECK_ONE_SCHEDULE),
    # CUDA graphs (llmc/gpu/step_graphs.cuh): what a graph bakes in, what it reads at each launch, and attribution.
    ("llmc/gpu/gpt2_decoder.cu", "graphs_.run(stream, {R, temperature, top_k}, [&] {",
     "graphs_.run(stream, {B_, temperature, top_k}, [&] {",
     "decode graph replayed with another step's row count baked in", "EmuGpuGPT2Decoder.GraphSteps*"),
    ("llmc/gpu/gpt2_decoder.cu", "graphs_.run(stream, {R, temperature, top_k}, [&] {",
     "graphs_.run(stream, {R, 1.0f, 0}, [&] {",
     "decode graph replayed with another step's sampling baked in", "EmuGpuGPT2Decoder.GraphSteps*"),
    ("llmc/gpu/gpt2_decoder.cu", "    const int R = (int)seq.size();\n    for (int r = 0; r < R; r++) {",
     "    const int R = (int)seq.size();\n    { void* q = nullptr; CUDA_CHECK(cudaMallocHost(&q, 5 * (size_t)B_ * sizeof(int))); "
     "int* p = static_cast<int*>(q); std::copy(host_.ids, host_.ids + 5 * B_, p); cudaFreeHost(host_.ids); "
     "host_ = Staging{p, p + B_, p + 2 * B_, p + 3 * B_, reinterpret_cast<float*>(p + 4 * B_)}; }\n"
     "    for (int r = 0; r < R; r++) {",
     "decode staging buffer reallocated after the graph's capture", "EmuGpuGPT2Decoder.GraphSteps*"),
    ("llmc/gpu/gpt2.cu",
     "        upload_tokens(inputs, targets, b * t);\n        GradientReduce* last = ranks > 1 && micro == grad_accum - 1 ? "
     "reduce : nullptr;\n        auto body = [&] {\n",
     "        GradientReduce* last = ranks > 1 && micro == grad_accum - 1 ? reduce : nullptr;\n        auto body = [&] {\n"
     "            upload_tokens(inputs, targets, b * t);\n",
     "training micro-step's token copy inside the graph (the capture's replayed)", "EmuGPT2GPU.GraphSteps*"),
    ("llmc/profiler/attribution.cpp", "        a.where = unpack_range_id(node->second);\n", "",
     "a replayed kernel's node Range dropped (the launch's kept)", "EmuGraphAttribution.*"),
    ("llmc/profiler/report.cpp", "above.push_back(j.back() - out.idle_w * s.back());",
     "above.push_back(j.back() - 2 * out.idle_w * s.back());",
     "--energy: the idle baseline subtracted twice", "EnergyMethod.*"),
    ("llmc/profiler/energy.cpp", "        clock.sync(); // the counter is read after the work it should count\n", "",
     "--energy: the counter read before the replays it counts have run", "EnergyMethod.*"),
    ("llmc/gpu/step_graphs.cuh", "for (cudaGraphExec_t g : parts_.at(part).graphs) CUDA_CHECK(cudaGraphLaunch(g, stream_));",
     "CUDA_CHECK(cudaGraphLaunch(parts_.at(part).graphs.front(), stream_));",
     "--energy: a part replays its first layer's graph only", "EmuSubBlockGraphs.*"),
    # fp32 -> bf16 packing of the attention kernels' P and dS (llmc/ptx.cuh): truncated instead of rounded to nearest even.
    ("llmc/ptx.cuh", "const uint32_t l = __bfloat16_as_ushort(__float2bfloat16(lo)), h = __bfloat16_as_ushort(__float2bfloat16(hi));",
     "uint32_t l, h;\n    memcpy(&l, &lo, 4), memcpy(&h, &hi, 4), l >>= 16, h >>= 16;",
     "bf16 packing truncates instead of rounding to nearest even", "EmuGpuPtx.PackBf16x2RoundsToNearestEven"),
    # The counters' gate (test/emu/counter_expectations.csv): memory behaviour broken, results unchanged.
    ("llmc/encoder.cuh", "const int bt = (int)(idx / chunks), c = (int)(idx % chunks) * x128::size;",
     "const int bt = (int)(idx % BT), c = (int)(idx / BT) * x128::size;",
     "uncoalesced encoder: a warp's lanes take 32 rows of one chunk", "EmuSliceCounters.*",
     {"expect": "ld_sectors_per_request was"}),
    ("llmc/attention.cuh",
     "LD = HS + 8; // elements\n    static_assert(HS % 16 == 0, \"HS must be a multiple of 16 (mma k-steps)\");\n"
     "    static_assert((LD * 2) % 16 == 0 && (LD * 2) % 128 == 16, \"row stride 16 B mod 128 B: conflict-free ldmatrix\");",
     "LD = HS; // elements\n    static_assert(HS % 16 == 0, \"HS must be a multiple of 16 (mma k-steps)\");",
     "attention's shared rows without their padding (ldmatrix 8-way conflicts)", "EmuSliceCounters.*",
     {"expect": "ldsm_conflicts_per_instruction was"}),
    ("llmc/encoder.cuh", "    store128(out + (size_t)bt * C + c, o);",
     "    for (int k = 0; k < 4; k++) reinterpret_cast<float*>(out + (size_t)bt * C + c)[k] = reinterpret_cast<const float*>(&o)[k];",
     "encoder's 16-byte store split into four 4-byte ones", "EmuSliceCounters.*", {"expect": "st_requests was"}),
]


def run(cmd, cwd, timeout, env=None):
    try:
        p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                           env=env)
        return p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")


def first_failure(output):
    for line in output.splitlines():
        if line.startswith("[  FAILED  ]") or "emulator fault" in line or "ERROR: AddressSanitizer" in line:
            return line.strip()[:110]
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutation numbers (1-based)")
    ap.add_argument("--jobs", default="2")
    args = ap.parse_args()
    chosen = range(1, len(MUTATIONS) + 1) if not args.only else [int(x) for x in args.only.split(",")]

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tmp = tempfile.mkdtemp(prefix="llmc-mutation-")
    try:
        shutil.copytree(root, tmp, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git", "build", "data", "profile", "train_gpt2*", "profile_gpt2cu",
                                                      "prepare_data"))
        make = ["make", "-j" + args.jobs, "emu"]
        tests = "./build/emu/emu_tests"
        print(f"building the emulated tests in {tmp} ...", flush=True)
        rc, out = run(make, tmp, 1800)
        if rc != 0:
            print(out[-3000:])
            sys.exit("mutation check: the unmutated tree does not build")
        filters = sorted({MUTATIONS[i - 1][4] for i in chosen})
        rc, out = run([tests, "--gtest_filter=" + ":".join(filters)], tmp, 1800)
        if rc != 0:
            print(out[-3000:])
            sys.exit("mutation check: the unmutated tree fails its tests")

        print(f"{'#':>2}  {'file:line':<24} {'mutation':<58} {'result'}")
        missed = 0
        for i in chosen:
            path, old, new, what, flt = MUTATIONS[i - 1][:5]
            opts = MUTATIONS[i - 1][5] if len(MUTATIONS[i - 1]) > 5 else {}
            full = os.path.join(tmp, path)
            with open(full) as f:
                src = f.read()
            if src.count(old) != 1:
                print(f"{i:>2}  {path:<24} {what:<58} NOT APPLIED (text found {src.count(old)} times)")
                missed += 1
                continue
            line = src[:src.index(old)].count("\n") + 1
            start = time.time()
            try:
                with open(full, "w") as f:
                    f.write(src.replace(old, new))
                rc, out = run(make, tmp, 1800)
                if rc != 0:
                    result = "caught: does not compile"
                else:
                    rc, out = run([tests, "--gtest_filter=" + flt], tmp, 1800, dict(os.environ, **opts.get("env", {})))
                    if rc == 0:
                        result = "MISSED"
                    elif opts.get("expect", "") not in out:
                        result = f"MISSED: failed, but not with '{opts['expect']}' ({first_failure(out)})"
                    else:
                        result = f"caught: {first_failure(out) or 'exit ' + str(rc)}"
            finally:
                with open(full, "w") as f:
                    f.write(src)
            missed += result.startswith("MISSED")
            print(f"{i:>2}  {path + ':' + str(line):<24} {what:<58} {result} ({time.time() - start:.0f} s)", flush=True)
        print(f"mutations: {len(chosen) - missed} caught, {missed} missed")
        sys.exit(1 if missed else 0)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
