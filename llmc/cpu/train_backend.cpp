// train_gpt2's backend and program (llmc/cpu/programs.h): the fp32 reference model (llmc/cpu/gpt2.h) and AdamW.
#include "llmc/cpu/programs.h"

#include <algorithm>
#include <chrono>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include "llmc/cpu/adamw.h"
#include "llmc/cpu/gpt2.h"
#include "llmc/io/dataloader.h"
#include "llmc/profiler/cpu_source.h"
#include "llmc/train/dist.h"
#include "llmc/util/progress.h"

namespace llmc {

namespace {

/*
 * The x86 flush-to-zero and denormals-are-zero bits: set_mxcsr sets `csr` in every OpenMP thread (and this one);
 * flush_denormals sets both bits so and returns the value before, for set_mxcsr to restore. Elsewhere than x86
 * nothing is changed.
 */
void set_mxcsr(unsigned csr) {
#if defined(__x86_64__) || defined(__i386__)
#pragma omp parallel
    _mm_setcsr(csr);
    _mm_setcsr(csr);
#else
    (void)csr;
#endif
}
unsigned flush_denormals() {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned before = _mm_getcsr();
    set_mxcsr(before | 0x8040u);
    return before;
#else
    return 0;
#endif
}

class CPUBackend : public TrainBackend {
public:
    CPUBackend(const GPT2Config& c, const TrainShape& shape, Communicator& comm)
        : model_(c), shape_(shape), dp_(comm, model_.num_parameters(), shape.zero),
          m_(dp_.update_range().size(), 0.0f), v_(m_.size(), 0.0f),
          name_(strprintf("CPU fp32, %s, %s", cpu::vec::isa_name(cpu::vec::active_isa()),
                          cpu_blas::describe(true).c_str())) {}
    const char* name() const override { return name_.c_str(); }
    void load_weights(const std::vector<float>& w) override {
        std::copy(w.begin(), w.end(), model_.params_memory.begin());
    }
    std::vector<float> weights() override { return model_.params_memory; }
    int model_file_version() const override { return MODEL_VERSION_FP32; }
    void get_moments(std::vector<float>& m, std::vector<float>& v) override {
        m = dp_.gather_moments(m_), v = dp_.gather_moments(v_);
    }
    void set_moments(const std::vector<float>& m, const std::vector<float>& v) override {
        m_ = dp_.local_moments(m), v_ = dp_.local_moments(v);
    }
    const SubBlockTimes* timings() const override { return &timings_; }
    void print_memory() const override {
        size_t n = model_.num_parameters();
        printf("memory: params %.1f MiB, grads %.1f MiB, AdamW state %.1f MiB\n", n * 4 / 1048576.0,
               n * 4 / 1048576.0, m_.size() * 8 / 1048576.0);
    }
    // The sub-block executions timed into timings_. The session's ceilings also give the link's peak (link()).
    std::unique_ptr<prof::ProfileSession> profile_session(const prof::SessionOptions& so,
                                                          prof::ProfileContext ctx) override {
        ctx.memory = memory_plan();
        auto session = prof::make_cpu_profile_session(so, std::move(ctx), &timings_);
        profile_ = session.get();
        if (so.energy) {
            if (dp_.world() > 1) throw Error("--energy: measured on one process; this run has several");
            session->energy_work([this] { return energy_work(); });
        }
        return session;
    }
    // The model's buffers and this rank's AdamW moments (ZeRO-1: its shard).
    MemoryPlan memory_plan() const {
        MemoryPlan plan = model_.memory_plan(shape_.B, shape_.T);
        plan.shards = dp_.world() > 1 && m_.size() < model_.num_parameters() ? dp_.world() : 1;
        plan.allocations.push_back({"optimizer", 2 * m_.size() * sizeof(float), false});
        for (int i = 0; i < 2; i++) {
            PlannedTensor t;
            t.name = i ? "adam_v" : "adam_m", t.kind = MemoryKind::adam_moments, t.dtype = "fp32", t.shape = {m_.size()};
            t.allocation = (int)plan.allocations.size() - 1, t.offset = i * m_.size() * sizeof(float);
            t.bytes = m_.size() * sizeof(float);
            plan.tensors.push_back(t);
        }
        return plan;
    }
    /*
     * Ranks on one node exchange through shared memory: at best one copy from the sender's buffer to the
     * receiver's, which reads and writes every byte, so the link's peak is half the memory bandwidth the profile
     * measured (without a profile, or across nodes, it is not known).
     */
    Link link() const override {
        if (!dp_.single_node()) return {};
        return {LinkKind::shared_memory, profile_ ? profile_->context().ceilings.dram_gbps / 2 : 0.0};
    }

    StepStats train_step(TokenBatches& train, int grad_accum, float lr, int t) override {
        check_batch_shape(train, shape_);
        model_.timings = &timings_;
        model_.zero_grad();
        // Each micro-batch of every rank weighs 1/(all of them): the ranks' gradients then sum to the mean.
        const int micro_batches = grad_accum * dp_.world();
        double loss = 0;
        Progress progress(strprintf("step %d", t), "micro-batch"); // a step of many micro-batches can take minutes
        for (int micro = 0; micro < grad_accum; micro++) {
            train.next_batch();
            model_.forward(train.inputs(), train.targets(), shape_.B, shape_.T);
            loss += model_.mean_loss;
            // The last micro-batch's gradients are final layer by layer: each layer's are summed over the ranks in
            // the background while backward goes on with the layers below (DataParallel::overlaps).
            if (micro == grad_accum - 1 && dp_.overlaps())
                model_.backward(1.0f / micro_batches, [this](int layer) {
                    dp_.post_bucket(model_.grads_memory.data(), layer_parameter_ranges(model_.config, layer), layer);
                });
            else
                model_.backward(1.0f / micro_batches);
            progress.tick(micro + 1, grad_accum);
        }
        {
            // With overlap, the wait for the buckets still in flight: the communication backward did not hide.
            ScopedSubBlockTimer timer(&timings_, SubBlock::comm, Phase::bwd);
            dp_.reduce_gradients(model_.grads_memory.data());
            // The buckets' all-reduces themselves, on the reducer thread's track of a profile's trace (taken every
            // step, so that none pile up outside a profile window).
            for (const BackgroundReducer::Timing& b : dp_.take_bucket_timings())
                if (timings_.events)
                    timings_.events->push_back(
                        {SubBlock::comm, Phase::bwd, b.tag, b.start_ns, b.end_ns, SubBlockPart::main, 1});
            loss = dp_.sum_loss(loss);
        }
        double norm;
        {
            ScopedSubBlockTimer timer(&timings_, SubBlock::grad_norm, Phase::opt);
            norm = dp_.grad_norm(model_.grads_memory.data());
        }
        {
            ScopedSubBlockTimer timer(&timings_, SubBlock::optimizer, Phase::opt);
            Shard s = dp_.update_range();
            cpu::adamw_update(model_.params_memory.data(), model_.grads_memory.data(), m_.data(), v_.data(),
                              model_.config, shape_.adam, lr, t, norm, s.begin, s.end);
        }
        {
            ScopedSubBlockTimer timer(&timings_, SubBlock::comm, Phase::opt);
            dp_.gather_params(model_.params_memory.data());
        }
        model_.timings = nullptr;
        last_ = {grad_accum, lr, t, norm};
        return {(float)(loss / micro_batches), (float)norm};
    }

    /*
     * --energy's replays (llmc/profiler/session.h EnergyWork): each (sub-block, phase) the CPU times, on the last
     * step's buffers (GPT2CPU::replay; a forward or backward sub-block grad_accum times, as in the step), the norm and
     * AdamW with the last step's settings, and the whole step (the last micro-batch grad_accum times, then the norm
     * and the update). The clock is the host's and there is nothing to wait for; the weights and moments are put back.
     */
    prof::EnergyWork energy_work() {
        if (last_.grad_accum == 0) throw Error("no training step to replay");
        auto saved = std::make_shared<std::vector<float>>(model_.params_memory);
        auto m = std::make_shared<std::vector<float>>(m_), v = std::make_shared<std::vector<float>>(v_);
        prof::EnergyWork w;
        const int L = model_.config.num_layers;
        const std::string layers = strprintf("0-%d", L - 1);
        auto add = [&](SubBlock sb, Phase p, bool per_layer) {
            w.targets.push_back({subblock_name(sb), phase_name(p), per_layer ? layers : "-", prof::EnergyKind::part,
                                 [this, sb, p](long n) { model_.replay(sb, p, n * last_.grad_accum); }});
        };
        using S = SubBlock;
        for (S sb : {S::encoder, S::ln1, S::qkv, S::attention, S::attn_proj, S::residual1, S::ln2, S::fc, S::gelu,
                     S::fc_proj, S::residual2, S::lnf, S::classifier})
            add(sb, Phase::fwd, sb != S::encoder && sb != S::lnf && sb != S::classifier);
        for (S sb : {S::classifier, S::lnf, S::residual2, S::fc_proj, S::gelu, S::fc, S::ln2, S::residual1,
                     S::attn_proj, S::attention, S::qkv, S::ln1, S::encoder})
            add(sb, Phase::bwd, sb != S::encoder && sb != S::lnf && sb != S::classifier);
        auto norm = [this] { return dp_.grad_norm(model_.grads_memory.data()); };
        auto update = [this](double grad_norm) {
            cpu::adamw_update(model_.params_memory.data(), model_.grads_memory.data(), m_.data(), v_.data(),
                              model_.config, shape_.adam, last_.lr, last_.t, grad_norm, 0, model_.num_parameters());
        };
        w.targets.push_back({"grad_norm", "opt", "-", prof::EnergyKind::part, [norm](long n) {
                                 for (long i = 0; i < n; i++) (void)norm();
                             }});
        w.targets.push_back({"optimizer", "opt", "-", prof::EnergyKind::part, [this, update](long n) {
                                 for (long i = 0; i < n; i++) update(last_.norm);
                             }});
        w.targets.push_back({"step", "all", "-", prof::EnergyKind::step, [this, norm, update](long n) {
                                 for (long i = 0; i < n; i++) {
                                     model_.zero_grad();
                                     for (int micro = 0; micro < last_.grad_accum; micro++) {
                                         model_.replay_forward();
                                         model_.backward(1.0f / last_.grad_accum);
                                     }
                                     update(norm());
                                 }
                             }});
        w.clock.now_s = [] { return steady_ns() * 1e-9; };
        w.clock.sync = [] {};
        w.clock.idle = [](double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); };
        // Replayed values drift from the step's (the classifier's dlogits shrink by dloss at each replay): denormals
        // would make the same work many times slower, so every thread flushes them while the replays run.
        const unsigned csr = flush_denormals();
        w.restore = [this, saved, m, v, csr] {
            model_.params_memory = *saved; // same size: the tensor views stay valid
            m_ = *m, v_ = *v;
            set_mxcsr(csr);
        };
        return w;
    }

    float val_loss(DataLoader& val, int batches, Progress& progress) override {
        val.restore(DataPosition{}); // the same batches every time
        double sum = 0;
        for (int i = 0; i < batches; i++) {
            val.next_batch();
            model_.forward(val.inputs(), val.targets(), shape_.B, shape_.T);
            sum += model_.mean_loss;
            progress.tick(i + 1, batches);
        }
        return (float)(sum / batches);
    }

private:
    GPT2CPU<float> model_;
    const TrainShape shape_;
    DataParallel dp_;
    std::vector<float> m_, v_; // AdamW moments of dp_.update_range()
    const std::string name_;   // "CPU fp32, <elementwise kernels>, <GEMM>"
    SubBlockTimes timings_;
    struct LastStep {
        int grad_accum = 0; // 0: no step yet
        float lr = 0;
        int t = 0;
        double norm = 0;
    } last_; // the last train_step's, for energy_work
    const prof::ProfileSession* profile_ = nullptr; // the driver's, recording into timings_ (it outlives the run)
};

std::unique_ptr<TrainBackend> make_backend(const GPT2Config& c, const TrainShape& shape, Communicator& comm) {
    return std::make_unique<CPUBackend>(c, shape, comm);
}

} // namespace

TrainProgram cpu_train_program() {
    TrainOptions defaults;
    defaults.T = 64; // the CPU trainer defaults to short sequences, as llm.c's CPU reference does
    TrainProgram p{"train_gpt2", defaults, make_backend};
    p.make_sampler = cpu_infer_program().make_backend;
    return p;
}

} // namespace llmc
