// The memory plan (llmc/model/memory_plan.h) against what the GPU programs really allocate and carve.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "llmc/gpu/gpt2.cuh"
#include "llmc/gpu/gpt2_decoder.cuh"
#include "llmc/matmul.cuh"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;

namespace {

// The device allocations made while `make` runs (and still live after it), as sizes, sorted.
#ifdef LLMC_EMU
template <typename Make> std::vector<size_t> allocations_made_by(Make&& make) {
    auto before = emu::device_allocations();
    make();
    std::set<const void*> old;
    for (auto& [p, n] : before) old.insert(p);
    std::vector<size_t> sizes;
    for (auto& [p, n] : emu::device_allocations())
        if (!old.count(p)) sizes.push_back(n);
    std::sort(sizes.begin(), sizes.end());
    return sizes;
}
#endif

// The plan's allocations that a model makes when it is built (not the per-process cuBLASLt workspace, not the
// first step's transient autotune scratch), sorted.
std::vector<size_t> planned_sizes(const MemoryPlan& plan) {
    std::vector<size_t> sizes;
    for (const PlannedAllocation& a : plan.allocations)
        if (!a.per_process && !a.transient) sizes.push_back(a.bytes);
    std::sort(sizes.begin(), sizes.end());
    return sizes;
}

// Inside each allocation the tensors lie within it and do not overlap.
void expect_tensors_tile(const MemoryPlan& plan) {
    std::map<int, std::vector<std::pair<size_t, size_t>>> by_alloc;
    for (const PlannedTensor& t : plan.tensors) by_alloc[t.allocation].push_back({t.offset, t.bytes});
    for (auto& [a, spans] : by_alloc) {
        std::sort(spans.begin(), spans.end());
        for (size_t i = 0; i < spans.size(); i++) {
            EXPECT_LE(spans[i].first + spans[i].second, plan.allocations[a].bytes) << plan.allocations[a].name;
            if (i > 0) {
                EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first) << plan.allocations[a].name;
            }
        }
    }
}

} // namespace

// The bytes the runtime saw allocated for a training model are the plan's, allocation by allocation, and the
// cuBLASLt workspace the plan counts is the one live in the process.
GPU_TEST(GpuMemoryPlan, TrainingModelAllocatesThePlan) {
    REQUIRE_GPU();
    const GPT2Config c = gputest::tiny_gpt2_config();
    CublasLt& lt = CublasLt::get(); // made once per process: allocated before, whatever test ran first
    for (int shards : {1, 2}) {
        SCOPED_TRACE(testing::Message() << "shards " << shards);
        const MemoryPlan plan = plan_gpu_training(c, 2, 32, shards);
        expect_tensors_tile(plan);
        EXPECT_EQ(plan.allocation("cublaslt_workspace").bytes, CublasLt::WORKSPACE_BYTES);
        std::unique_ptr<GPT2GPU> model;
#ifdef LLMC_EMU
        const std::vector<size_t> made =
            allocations_made_by([&] { model = std::make_unique<GPT2GPU>(c, 2, 32, shards - 1, shards); });
        EXPECT_EQ(made, planned_sizes(plan));
        bool workspace_live = false;
        for (auto& [p, n] : emu::device_allocations())
            workspace_live |= p == lt.workspace && n == plan.allocation("cublaslt_workspace").bytes;
        EXPECT_TRUE(workspace_live);
#else
        (void)lt;
        model = std::make_unique<GPT2GPU>(c, 2, 32, shards - 1, shards);
#endif
        EXPECT_EQ(model->memory.total(), plan.total_bytes());
        // Every activation pointer is where the plan puts it (inputs is the buffer's first tensor).
        const char* base = reinterpret_cast<const char*>(model->acts.inputs);
        const size_t slab = 2 * 32, C = c.channels;
        auto at = [&](const void* p) { return (size_t)(reinterpret_cast<const char*>(p) - base); };
        for (int l = 0; l < c.num_layers; l++) {
            EXPECT_EQ(plan.tensor("ln1", l).offset, at(model->acts.ln1 + l * slab * C));
            EXPECT_EQ(plan.tensor("qkv", l).offset, at(model->acts.qkv + l * slab * 3 * C));
            EXPECT_EQ(plan.tensor("fch_gelu", l).offset, at(model->acts.fch_gelu + l * slab * 4 * C));
            EXPECT_EQ(plan.tensor("att_lse", l).offset, at(model->acts.att_lse + l * slab * c.num_heads));
        }
        EXPECT_EQ(plan.tensor("logits").offset, at(model->acts.logits));
        EXPECT_EQ(plan.tensor("scalars").offset, at(model->acts.scalars));
        EXPECT_EQ(plan.tensor("adam_v").offset,
                  (size_t)(reinterpret_cast<const char*>(model->v) - reinterpret_cast<const char*>(model->master)));
    }
}

// The device memory a first training step reaches at its peak is the plan's total: the model's allocations and the
// largest of the autotune's transient scratch outputs (the classifier's weight gradient), which are all freed again.
GPU_TEST(GpuMemoryPlan, FirstStepPeakIsThePlansTotal) {
    REQUIRE_GPU();
#ifdef LLMC_EMU
    gputest::ScopedEnv autotune("LLMC_GEMM_AUTOTUNE", nullptr);
    const GPT2Config c = gputest::tiny_gpt2_config();
    const int B = 2, T = 32;
    const MemoryPlan plan = plan_gpu_training(c, B, T);
    const PlannedAllocation& scratch = plan.allocation("autotune_scratch");
    EXPECT_TRUE(scratch.transient);
    EXPECT_EQ(scratch.bytes, (size_t)c.padded_vocab_size * c.channels * sizeof(floatX)); // Vp >= 4C here
    CublasLt& lt = CublasLt::get();
    lt.plans.clear(); // every matmul is a new plan, timed in this step
    const size_t before = emu::device_bytes();
    emu::reset_device_peak();
    {
        GPT2GPU model(c, B, T);
        const size_t built = emu::device_bytes();
        EXPECT_EQ(built - before, plan.resident_bytes() - plan.allocation("cublaslt_workspace").bytes);
        auto in = gputest::random_tokens(B * T, c.vocab_size), tg = gputest::random_tokens(B * T, c.vocab_size);
        model.zero_grad();
        model.zero_loss();
        model.forward(in.data(), tg.data(), B, T, 1.0f / (B * T), 1.0f / (B * T));
        model.backward();
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(emu::device_peak() - before, plan.total_bytes() - plan.allocation("cublaslt_workspace").bytes);
        EXPECT_EQ(emu::device_bytes(), built); // the scratch outputs are freed
    }
    lt.plans.clear(); // no plan of this test's pointers outlives it
    {
        gputest::ScopedEnv off("LLMC_GEMM_AUTOTUNE", "0"); // no timing, no scratch, none planned
        EXPECT_THROW(plan_gpu_training(c, B, T).allocation("autotune_scratch"), Error);
    }
#else
    GTEST_SKIP() << "the emulated runtime counts the bytes allocated";
#endif
}

GPU_TEST(GpuMemoryPlan, DecoderAllocatesThePlan) {
    REQUIRE_GPU();
    const GPT2Config c = gputest::tiny_gpt2_config();
    std::vector<float> w(num_parameters(c), 0.01f);
    const int B = 3, longest = 5, max_len = 20;
    const MemoryPlan plan = plan_gpu_inference(c, B, longest, max_len);
    expect_tensors_tile(plan);
    std::unique_ptr<GPT2DecoderGPU> dec;
#ifdef LLMC_EMU
    CublasLt::get();
    const std::vector<size_t> made =
        allocations_made_by([&] { dec = std::make_unique<GPT2DecoderGPU>(c, w.data(), B, longest, max_len); });
    EXPECT_EQ(made, planned_sizes(plan));
#else
    dec = std::make_unique<GPT2DecoderGPU>(c, w.data(), B, longest, max_len);
#endif
    EXPECT_EQ(dec->memory.total(), plan.total_bytes());
    // The KV cache: L layers of K and V, (B, max_len, C) bf16 each.
    EXPECT_EQ(dec->cache_bytes(), (size_t)c.num_layers * 2 * B * max_len * c.channels * 2);
    EXPECT_EQ(plan.kind_bytes(MemoryKind::kv_cache), dec->cache_bytes());
}

// The activation tensors' bytes are the per-token sum of the forward's tensors (counted here from the model's
// equations, doc/design.md), times B*T.
GPU_TEST(GpuMemoryPlan, ActivationBytesAreTheForwardsTensors) {
    const GPT2Config c = gpt2_config_for_depth(12);
    const size_t C = c.channels, NH = c.num_heads, L = c.num_layers, Vp = c.padded_vocab_size;
    for (int B : {1, 3, 16}) {
        const size_t BT = (size_t)B * 1024;
        // per layer: ln1, atty, residual1, ln2, residual2 (C each), qkv (3C), fch and fch_gelu (4C each) in bf16;
        // two LayerNorms' mean and rstd and the attention's log-sum-exp per head in fp32
        const size_t per_layer = 2 * (5 * C + 3 * C + 8 * C) + 4 * (4 + NH);
        // encoded, lnf, proj_out (C each) and logits (Vp) in bf16; lnf's mean and rstd and the losses in fp32
        const size_t rest = 2 * (3 * C + Vp) + 4 * 3;
        const MemoryPlan plan = plan_gpu_training(c, B, 1024);
        EXPECT_EQ(plan.kind_bytes(MemoryKind::activations), BT * (L * per_layer + rest)) << "B " << B;
        EXPECT_EQ(plan.kind_bytes(MemoryKind::parameters), 2 * num_parameters(c));
        EXPECT_EQ(plan.kind_bytes(MemoryKind::adam_moments), 2 * 4 * num_parameters(c));
    }
}

// The largest micro-batch for d12 at T=1024 in 80 GiB: its plan fits the budget (95% of the memory) and one more
// sequence's does not.
GPU_TEST(GpuMemoryPlan, LargestBatchIsTheLastThatFits) {
    const GPT2Config c = gpt2_config_for_depth(12);
    const size_t budget = memory_budget((size_t)80 << 30);
    const int n = largest_training_batch(c, 1024, 1, budget);
    ASSERT_GT(n, 1);
    EXPECT_LE(plan_gpu_training(c, n, 1024).total_bytes(), budget);
    EXPECT_GT(plan_gpu_training(c, n + 1, 1024).total_bytes(), budget);
    const GPUMemoryPlan p = plan_gpu_memory(c, 4, 1024, 1, (size_t)80 << 30);
    EXPECT_EQ(p.max_batch, n);
}

// Liveness: every activation is written before it is last read, inside the step's ops.
GPU_TEST(GpuMemoryPlan, TrainingLivenessIsInsideTheStep) {
    const GPT2Config c = gputest::tiny_gpt2_config();
    const MemoryPlan plan = plan_gpu_training(c, 2, 32);
    ASSERT_EQ((int)plan.ops.size(), TrainingOps{c.num_layers}.count());
    int with_liveness = 0;
    // What lives for the whole run: the parameters, their gradients, the optimizer's state and the per-process
    // workspace. Every other tensor (activations, their gradients, inputs, scratch: the encoder's sort arrays
    // too) has a rule naming it, or it would count as live for the whole step.
    const std::set<MemoryKind> whole_run = {MemoryKind::parameters, MemoryKind::gradients, MemoryKind::master_weights,
                                            MemoryKind::adam_moments, MemoryKind::cublaslt_workspace};
    for (const PlannedTensor& t : plan.tensors) {
        if (!whole_run.count(t.kind)) {
            EXPECT_GE(t.first_use, 0) << t.name << " layer " << t.layer << " (" << memory_kind_name(t.kind) << ")";
            with_liveness++;
        }
        if (t.first_use >= 0) {
            EXPECT_LE(t.first_use, t.last_use) << t.name << " layer " << t.layer;
            EXPECT_LT(t.last_use, (int)plan.ops.size()) << t.name;
        }
    }
    EXPECT_GT(with_liveness, 10 * c.num_layers);
    // ln1 of layer 1 is written by the forward's ln1 of layer 1 and last read by the qkv backward of that layer.
    EXPECT_EQ(plan.ops[plan.tensor("ln1", 1).first_use], "fwd ln1 layer 1");
    EXPECT_EQ(plan.ops[plan.tensor("ln1", 1).last_use], "bwd qkv layer 1");
    for (const char* name : {"sorted_tok", "cub_temp", "num_runs"}) {
        EXPECT_EQ(plan.ops[plan.tensor(name).first_use], "bwd encoder") << name;
        EXPECT_EQ(plan.ops[plan.tensor(name).last_use], "bwd encoder") << name;
    }
}
