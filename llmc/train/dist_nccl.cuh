/*
 * The GPU trainer's communicator (llmc/train/dist.h): NCCL collectives on device buffers, queued on the
 * trainer's communication stream, bootstrapped through the process's MPI communicator (rank 0's ncclUniqueId
 * broadcast to all); and the two GradientReduce (llmc/gpu/gpt2.cuh) GPT2GPU::train_step drives with it (per-layer
 * bucketed all-reduce, ZeRO-1). Compiled once (dist_nccl.cu) in builds where the Makefile found NCCL and MPI
 * (LLMC_HAVE_NCCL), for the GPU backend (llmc/gpu/gpt2.cu); the emulated tier never sees it: what the reductions
 * feed the model is tested there with stand-ins.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <vector>

#include "llmc/gpu/gpt2.cuh"
#include "llmc/model/gpt2_config.h"
#include "llmc/train/dist.h"

namespace llmc {

/*
 * Picks this rank's GPU (its local rank) before anything allocates on the device. A rank that sees one GPU
 * only (the launcher gave each rank its own, CUDA_VISIBLE_DEVICES or Slurm's --gpus-per-task) takes that one.
 * Every rank takes part, so a node short of GPUs, or two ranks on one GPU (ranks that each see one, the same),
 * stops all of them with one line from rank 0.
 */
void select_device(Communicator& comm);

/*
 * NCCL on the trainer's communication stream. Every collective is timed with a pair of CUDA events around it on
 * that stream, and every wait of the compute stream for it (join) with an event on each stream; collect() reads
 * them once the compute stream has been synchronised past the join (the step's one synchronisation), so timing
 * adds none. The times go into device_stats(): busy seconds per collective, and exposed_seconds, how long the
 * compute stream waited at each join (0 when the communication had finished before it got there).
 */
class NcclCommunicator : public Communicator {
public:
    NcclCommunicator(Communicator& bootstrap, cudaStream_t stream);
    ~NcclCommunicator() override;
    // This rank's queued collectives done, then every rank here (through the bootstrap communicator).
    void barrier() override;
    cudaStream_t stream() const { return stream_; }
    const CommStats& device_stats() const { return device_stats_; }

    // Slices of a bf16 buffer on the device, summed in place, as one NCCL group.
    void all_reduce_group(__nv_bfloat16* buf, const std::vector<ParamRange>& ranges);
    // In place over a bf16 buffer of n values (n a multiple of the world size): this rank's shard_of(n) gets the
    // sums over ranks.
    void reduce_scatter(__nv_bfloat16* buf, size_t n);
    // In place: every rank's shard_of(n) of a bf16 buffer copied to all ranks.
    void all_gather(__nv_bfloat16* buf, size_t n);

    // The communication stream starts after what `compute` has queued so far.
    void follow(cudaStream_t compute);
    // `compute` goes on after what the communication stream has queued so far; the wait is timed as exposed.
    void join(cudaStream_t compute);
    // Folds the timings queued since the last collect() into device_stats(). Every event must have completed: call
    // it after synchronising a stream that has joined.
    void collect();

protected:
    void all_reduce_impl(float* buf, size_t n) override;
    void all_reduce_impl(double* buf, size_t n) override;
    void reduce_scatter_impl(float* buf, size_t n) override;
    void all_gather_impl(float* buf, size_t n) override;
    void broadcast_impl(void* buf, size_t bytes) override;

private:
    // A collective, or (collective -1) a join: the events bracketing it.
    struct Pending {
        int collective;
        int64_t bytes;
        cudaEvent_t begin, end;
    };
    // NCCL's reduce-scatter and all-gather take equal shards: shard_of's are equal when world divides n (the
    // trainer pads its buffers to that: padded_parameter_count).
    Shard equal_shard(size_t n) const;
    // Queues the collective `enqueue` between two events on the stream, timed as collective c of `bytes`.
    void device_timed(Collective c, size_t bytes, const std::function<void()>& enqueue);
    // Events are reused step after step: the pool grows to the most one step has used.
    cudaEvent_t next_event();
    Communicator& bootstrap_; // the process's MPI communicator: lives as long as the process
    cudaStream_t stream_;
    ncclComm_t comm_ = nullptr;
    std::vector<cudaEvent_t> events_;
    size_t used_ = 0;
    std::vector<Pending> pending_;
    CommStats device_stats_;
};

/*
 * The bucketed gradient all-reduce GPT2GPU::train_step drives: each bucket (one layer's gradient slices, then the
 * embeddings and lnf: layer_parameter_ranges) is all-reduced on the communicator's own stream as soon as the
 * compute stream has queued its last gradient kernel, so NCCL runs while backward goes on with the layers below.
 * finish() adds the loss and makes the compute stream wait for all of it. Every rank has every reduced gradient
 * (its norm is the global one) and updates every parameter: no sum_norm, no gather_params.
 */
class BucketedAllReduce : public GradientReduce {
public:
    BucketedAllReduce(NcclCommunicator& nccl, cudaStream_t compute, const GPT2Config& c, __nv_bfloat16* grads)
        : nccl_(nccl), compute_(compute), config_(c), grads_(grads) {}
    void layer_done(int layer) override;
    void finish(float* loss) override;

private:
    NcclCommunicator& nccl_;
    cudaStream_t compute_;
    GPT2Config config_;
    __nv_bfloat16* grads_;
};

/*
 * ZeRO-1 (-z 1) for GPT2GPU::train_step: after the last micro-batch's backward the padded bf16 gradient buffer is
 * reduce-scattered (each rank gets the sums of its shard) with the loss beside it; the ranks' squared norms of
 * their shards are summed in the device scalar; after the shard's AdamW the bf16 parameters are all-gathered.
 * Each step waits for all three on the compute stream: nothing is left to overlap them with.
 */
class ShardedReduce : public GradientReduce {
public:
    // params, grads: the model's padded buffers of n values (n a multiple of 8 * world).
    ShardedReduce(NcclCommunicator& nccl, cudaStream_t compute, __nv_bfloat16* params, __nv_bfloat16* grads, size_t n)
        : nccl_(nccl), compute_(compute), params_(params), grads_(grads), n_(n) {}
    void finish(float* loss) override;
    void sum_norm(float* norm_squared) override;
    void gather_params() override;

private:
    NcclCommunicator& nccl_;
    cudaStream_t compute_;
    __nv_bfloat16 *params_, *grads_;
    size_t n_;
};

} // namespace llmc
