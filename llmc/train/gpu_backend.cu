// The GPU TrainBackend (llmc/train/gpu_backend.h): the GPU model (llmc/gpt2.cuh) under the training driver, with
// NCCL data parallelism where the build has it and CUPTI tracing with --profile (or profile_gpt2cu's session).
#include "llmc/train/gpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/dataloader.h"
#include "llmc/gpt2.cuh"
#include "llmc/infer/gpu_backend.h"
#include "llmc/optimizer.h"
#include "llmc/profiler/gpu_session.h"
#include "llmc/profiler/device_specs.h"
#include "llmc/profiler/memory.h"
#include "llmc/profiler/nvml_sampler.h"
#include "llmc/progress.h"
#include "llmc/train/dist.h"
#include "llmc/train/plan.h"
#ifdef LLMC_HAVE_NCCL
#include "llmc/train/dist_nccl.cuh"
#endif

namespace llmc {

namespace {

/*
 * --profile DIR: the steps its schedule selects traced with CUPTI (llmc/profiler/session.h). The ceilings are
 * measured (or read from their cache) here, before the model takes the device memory.
 */
std::unique_ptr<prof::ProfileSession> make_profile_session(const GPT2Config& c, const TrainOptions& opt,
                                                           const Communicator& comm) {
    // The session counts steps from 0, the flag as the step lines do, from 1.
    prof::SessionOptions so{opt.profile_dir, opt.profile_start - 1, opt.profile_steps};
    int grad_accum = opt.grad_accum / comm.world(); // this rank's micro-batches
    prof::ProfileContext ctx = prof::profile_context("train_gpt2cu", c, opt.B, opt.T, grad_accum);
    ctx.rank = comm.rank(), ctx.world_size = comm.world();
    ctx.memory = plan_gpu_training(c, opt.B, opt.T, opt.zero_stage ? comm.world() : 1);
    ctx.memory.grad_accum = grad_accum;
    return prof::make_gpu_profile_session(so, std::move(ctx));
}

class GPUBackend : public GpuTrainBackend {
public:
    // With -z 1 over several ranks the model keeps the optimizer state of this rank's shard only.
    GPUBackend(const GPT2Config& c, const TrainOptions& opt, Communicator& comm)
        : profile_(opt.profile_dir.empty() ? nullptr : make_profile_session(c, opt, comm)),
          model_(std::in_place, c, opt.B, opt.T, opt.zero_stage ? comm.rank() : 0, opt.zero_stage ? comm.world() : 1),
          comm_(comm),
          B_(opt.B), T_(opt.T) {
        adam_ = opt.adam;
        int device;
        CUDA_CHECK(cudaGetDevice(&device));
#ifdef LLMC_HAVE_NCCL
        if (comm.world() > 1) {
            CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
            nccl_ = std::make_unique<NcclCommunicator>(comm, comm_stream_);
            // NVLink or PCIe within a node; across nodes the ring crosses the network, whose peak NVML does not
            // know: unknown then.
            if (comm.single_node()) {
                char bus_id[32];
                CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, device));
                link_ = prof::nvml_link(bus_id);
            }
        }
#endif
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, device));
        name_ = strprintf("GPU bf16, %s", p.name);
        spec_ = lookup_device_spec(p.name);
    }
#ifdef LLMC_HAVE_NCCL
    ~GPUBackend() override {
        nccl_.reset();
        if (comm_stream_) cudaStreamDestroy(comm_stream_);
    }
#endif
    const char* name() const override { return name_.c_str(); }
    void load_weights(const std::vector<float>& w) override {
        model().set_parameters(w.data());
        if (model().sharded()) gather_params();
    }
    // The loop's contract (llmc/train/loop.h): the whole fp32 arrays on every rank, whatever -z is.
    std::vector<float> weights() override { return whole(model().get_master_weights()); }
    int model_file_version() const override { return MODEL_VERSION_BF16; }
    void get_moments(std::vector<float>& m, std::vector<float>& v) override {
        m = whole(model().get_moments_m());
        v = whole(model().get_moments_v());
    }
    void set_moments(const std::vector<float>& m, const std::vector<float>& v) override { model().set_moments(m, v); }
    // The cuBLASLt algorithm of every matmul problem (timed when it was first met; llmc/matmul.cuh): a resumed
    // run takes the same ones, so it continues bitwise as the interrupted run would have.
    void save_run_choices(const std::string& path) const override {
        const std::string text = gemm_choices_text();
        AtomicFile f(path);
        f.write(text.data(), text.size());
        f.commit();
    }
    void load_run_choices(const std::string& path) override {
        if (!file_exists(path)) {
            printf("resume: no %s; cuBLASLt algorithms are chosen again (the run may differ in its last bits from "
                   "the uninterrupted one)\n", path.c_str());
            return;
        }
        File f(path, "rb");
        const size_t n = f.size();
        if (n > (1u << 20)) throw Error(strprintf("%s: %zu bytes, more than a list of matmul algorithms", path.c_str(), n));
        std::string text(n, '\0');
        f.read(&text[0], n, "matmul algorithms");
        set_gemm_choices(text, path);
    }
    // MFU against the datasheet bf16 peak, and device memory in use (everything is allocated up front, so
    // this is the run's peak).
    std::string step_extras(double ms, long tokens) const override {
        std::string s;
        if (spec_) {
            const GPT2Config& c = model().config;
            double flops = gpt2_flops_per_token(model().num_params, c.num_layers, c.channels, T_) * tokens;
            s += strprintf(" | MFU %.1f%%", 100.0 * flops / (ms * 1e-3) / (spec_->bf16_tflops * 1e12));
        }
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            s += strprintf(" | mem %.2f GiB", (total_b - free_b) / 1073741824.0);
        return s;
    }
    void print_memory() const override {
        const GPUMemoryPlan& p = model().memory;
        auto mib = [](size_t b) { return b / 1048576.0; };
        std::string shard = model().sharded() ? strprintf(", this rank's 1/%d shard", comm_.world()) : "";
        printf("GPU memory: params %.0f MiB, grads %.0f MiB, optimizer (master, m, v%s) %.0f MiB, activations %.0f MiB "
               "(of %.0f MiB free); largest micro-batch at T=%d: %d\n",
               mib(p.params), mib(p.grads), shard.c_str(), mib(p.optimizer), mib(p.activations), mib(p.free_before), T_,
               p.max_batch);
    }

    prof::ProfileSession* profile_session() override { return profile_.get(); }
    void set_profile_session(std::unique_ptr<prof::ProfileSession> session) override { profile_ = std::move(session); }
    const MemoryPlan& memory_plan() const override { return model().memory.plan; }
    void free_model() override { model_.reset(); }

    StepStats train_step(TokenBatches& train, int grad_accum, float lr, int t) override {
        auto next = [&train] {
            train.next_batch();
            return std::make_pair(train.inputs(), train.targets());
        };
#ifdef LLMC_HAVE_NCCL
        if (nccl_) {
            // The step ends synchronised (its loss and norm are read): its collectives' timings are ready.
            std::pair<float, float> r;
            if (model().sharded()) {
                r = model().train_step(next, B_, T_, grad_accum, lr, adam_, t, nccl_->world(), sharded_reduce());
            } else {
                BucketedAllReduce buckets(*nccl_, model().stream, model().config, model().grads_memory);
                r = model().train_step(next, B_, T_, grad_accum, lr, adam_, t, nccl_->world(), buckets);
            }
            nccl_->collect();
            return {r.first, r.second};
        }
#endif
        auto [loss, norm] = model().train_step(next, B_, T_, grad_accum, lr, adam_, t);
        return {loss, norm};
    }

    float val_loss(DataLoader& val, int batches, Progress& progress) override {
        val.restore(DataPosition{}); // the same batches every time
        model().zero_loss();
        for (int i = 0; i < batches; i++) {
            val.next_batch();
            model().forward(val.inputs(), val.targets(), B_, T_, 1.0f / ((float)B_ * T_ * batches), 0.0f);
            progress.tick(i + 1, batches); // as the batches are queued
        }
        model().fetch_scalars();
        return model().read_scalars().first;
    }

    // The MPI communicator's own collectives (checkpoints' gathers, the profile's) and, over NCCL, the device's,
    // timed on the communication stream.
    CommStats comm_stats(const Communicator& comm) const override {
        CommStats s = comm.stats();
#ifdef LLMC_HAVE_NCCL
        if (nccl_) s += nccl_->device_stats();
#endif
        return s;
    }
    Link link() const override { return link_; }

private:
    // The model, or Error once free_model() has given it back (profile_gpt2cu: nothing may touch it after that).
    GPT2GPU& model() {
        if (!model_) throw Error("GPU backend: the model was used after free_model()");
        return *model_;
    }
    const GPT2GPU& model() const { return const_cast<GPUBackend*>(this)->model(); }
    // A -z 1 rank's shard (padding included) as the whole array (num_params) every rank gets. Through the MPI
    // communicator on the host, not NCCL: device memory is planned up front for training (print_memory is the
    // run's peak) and has no room for a whole fp32 copy, and the loop wants the arrays on the host anyway.
    std::vector<float> whole(const std::vector<float>& shard) {
        if (!model().sharded()) return shard;
        std::vector<float> full(model().padded_params);
        std::copy(shard.begin(), shard.end(), full.begin() + model().shard.begin);
        comm_.all_gather(full.data(), full.size()); // shard_of(padded_params): the model's shards
        full.resize(model().num_params);
        return full;
    }
    // -z 1: the bf16 parameters of every shard to every rank, after the model has set its own.
    void gather_params() {
#ifdef LLMC_HAVE_NCCL
        sharded_reduce().gather_params();
        CUDA_CHECK(cudaStreamSynchronize(model().stream));
        nccl_->collect();
#endif
    }
#ifdef LLMC_HAVE_NCCL
    ShardedReduce sharded_reduce() {
        return ShardedReduce(*nccl_, model().stream, model().params_memory, model().grads_memory, model().padded_params);
    }
#endif

    std::unique_ptr<prof::ProfileSession> profile_; // before model_: the ceilings are measured before it is allocated
    std::optional<GPT2GPU> model_;                  // always there, until free_model: reached through model()
    Communicator& comm_;
    Link link_; // what the collectives cross (data-parallel runs): NVLink or PCIe from NVML
#ifdef LLMC_HAVE_NCCL
    // Data-parallel runs only: the collectives run on comm_stream_ beside model().stream.
    cudaStream_t comm_stream_ = nullptr;
    std::unique_ptr<NcclCommunicator> nccl_;
#endif
    int B_, T_;
    AdamWConfig adam_;
    std::string name_;
    const DeviceSpec* spec_ = nullptr;
};

} // namespace

/*
 * Data parallelism over NCCL (doc/distributed.md): one GPU per rank, chosen by local rank; each layer's gradients
 * are all-reduced on a stream of their own as soon as backward has finished them, or with -z 1 (ZeRO-1)
 * reduce-scattered after backward, each rank updating its shard and all-gathering the parameters.
 */
std::unique_ptr<GpuTrainBackend> make_gpu_train_backend(const GPT2Config& c, const TrainOptions& opt,
                                                        Communicator& comm) {
    if (comm.world() > 1) {
#ifdef LLMC_HAVE_NCCL
        select_device(comm);
#else
        throw UsageError(strprintf("started as %d ranks, but train_gpt2cu was built without NCCL (or MPI): rebuild "
                                   "where both are found (doc/distributed.md)", comm.world()));
#endif
    }
    return std::make_unique<GPUBackend>(c, opt, comm);
}

std::unique_ptr<TrainBackend> make_gpu_backend(const GPT2Config& c, const TrainOptions& opt, Communicator& comm) {
    return make_gpu_train_backend(c, opt, comm);
}

/*
 * --memory-plan: the plan of every allocation for these flags (-e, -b, -t), its analysis, and the largest
 * micro-batch at this T whose plan fits --device-memory (or the present GPU's free memory); no GPU needed.
 */
namespace {

int print_memory_plan(const RunPlan& model, int shards) {
    const TrainOptions& opt = model.opt;
    const GPT2Config& cfg = model.cfg;
    if ((long)opt.B * opt.T > 2147483647L) throw UsageError("-b: B*T is more than the GPU trainer's int row count");
    MemoryPlan plan = plan_gpu_training(cfg, opt.B, opt.T, shards);
    plan.grad_accum = opt.grad_accum;
    printf("memory plan: train_gpt2cu -e %s -b %d -t %d%s (grad accumulation %d: no memory of its own)\n",
           model.source.c_str(), opt.B, opt.T, shards > 1 ? strprintf(", optimizer state in %d shards", shards).c_str() : "",
           opt.grad_accum);
    printf("%s", prof::format_memory_report(plan, prof::analyze_memory(plan)).c_str());
    prof::FitAnswer fit;
    fit.largest_what = strprintf("micro-batch at T=%d", opt.T);
    fit.device_bytes = device_memory_to_plan(opt.device_memory, &fit.source);
    if (fit.device_bytes) {
        fit.budget = memory_budget(fit.device_bytes);
        fit.largest = largest_training_batch(cfg, opt.T, shards, fit.budget);
    }
    printf("%s", prof::format_fit(plan, fit).c_str());
    return 0;
}

void require_training_gpu() { require_gpu("train_gpt2cu", "./train_gpt2 is the CPU trainer with the same flags"); }

} // namespace

TrainProgram gpu_train_program() {
    return TrainProgram{"train_gpt2cu", TrainOptions{}, make_gpu_backend, print_memory_plan, require_training_gpu,
                        make_gpu_infer_backend};
}

} // namespace llmc
