/*
 * The GPU trainer's communicator (llmc/train/dist.h): NCCL collectives on device buffers, queued on the
 * trainer's communication stream, bootstrapped through the process's MPI communicator (rank 0's ncclUniqueId
 * broadcast to all); and the two reductions GPT2GPU::train_step drives with it (per-layer bucketed all-reduce,
 * ZeRO-1). Only llmc/train/gpu_backend.cu includes it, in builds where the Makefile found NCCL and MPI (LLMC_HAVE_NCCL);
 * the emulated tier never sees it: what the reductions feed the model is tested there with stand-ins.
 */
#pragma once
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/gpt2_config.h"
#include "llmc/train/dist.h"

namespace llmc {

#define NCCL_CHECK(call) ::llmc::nccl_check((call), #call, __FILE__, __LINE__)
inline void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess)
        throw Error(strprintf("NCCL error '%s' at %s:%d: %s", ncclGetErrorString(r), file, line, what));
}

// This process's rank among those on its node, from the launcher: which GPU it drives.
inline int local_rank(int rank) {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char* v = getenv(name)) return atoi(v);
    return rank;
}

/*
 * Picks this rank's GPU (its local rank) before anything allocates on the device. A rank that sees one GPU
 * only (the launcher gave each rank its own, CUDA_VISIBLE_DEVICES or Slurm's --gpus-per-task) takes that one.
 * Every rank takes part, so a node short of GPUs, or two ranks on one GPU (ranks that each see one, the same),
 * stops all of them with one line from rank 0.
 */
inline void select_device(Communicator& comm) {
    const int count = cuda_device_count(), local = count == 1 ? 0 : local_rank(comm.rank());
    const std::string one_per_rank = strprintf("one GPU per rank: the ranks on a node are its local ranks 0..N-1, "
                                               "or each sees one GPU of its own; this node has %d GPUs", count);
    double missing = local < count ? 0.0 : 1.0;
    comm.all_reduce_sum(&missing, 1);
    if (missing > 0)
        throw Error(strprintf("%d of %d ranks have no GPU of their own (%s)", (int)missing, comm.world(),
                              one_per_rank.c_str()));
    CUDA_CHECK(cudaSetDevice(local));
    // The GPU's identity (host and PCI bus id) from every rank, each in its own slot, as two exact 32-bit halves.
    char bus[32] = {}, host[256] = {};
    CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, local));
    gethostname(host, sizeof host - 1);
    const uint64_t id = fnv1a(bus, strlen(bus), fnv1a(host, strlen(host)));
    std::vector<double> ids(2 * (size_t)comm.world(), 0.0);
    ids[2 * comm.rank()] = (double)(id >> 32), ids[2 * comm.rank() + 1] = (double)(id & 0xFFFFFFFFu);
    comm.all_reduce_sum(ids.data(), ids.size());
    double shared = 0;
    for (int r = 0; r < comm.world(); r++)
        if (r != comm.rank() && ids[2 * r] == ids[2 * comm.rank()] && ids[2 * r + 1] == ids[2 * comm.rank() + 1])
            shared = 1;
    comm.all_reduce_sum(&shared, 1);
    if (shared > 0)
        throw Error(strprintf("%d of %d ranks share their GPU with another rank (%s)", (int)shared, comm.world(),
                              one_per_rank.c_str()));
}

/*
 * NCCL on the trainer's communication stream. Every collective is timed with a pair of CUDA events around it on
 * that stream, and every wait of the compute stream for it (join) with an event on each stream; collect() reads
 * them once the compute stream has been synchronised past the join (the step's one synchronisation), so timing
 * adds none. The times go into device_stats(): busy seconds per collective, and exposed_seconds, how long the
 * compute stream waited at each join (0 when the communication had finished before it got there).
 */
class NcclCommunicator : public Communicator {
public:
    NcclCommunicator(Communicator& bootstrap, cudaStream_t stream)
        : Communicator(bootstrap.rank(), bootstrap.world()), bootstrap_(bootstrap), stream_(stream) {
        ncclUniqueId id;
        if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        bootstrap.broadcast(&id, sizeof id);
        NCCL_CHECK(ncclCommInitRank(&comm_, world(), id, rank()));
    }
    ~NcclCommunicator() override {
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
        // Unwinding an error: collectives may be queued that the other ranks will never join, and destroying
        // (which completes them) could wait for ever; aborting does not.
        if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
        else ncclCommDestroy(comm_);
    }
    // This rank's queued collectives done, then every rank here (through the bootstrap communicator).
    void barrier() override {
        CUDA_CHECK(cudaStreamSynchronize(stream_));
        bootstrap_.barrier();
    }
    cudaStream_t stream() const { return stream_; }
    const CommStats& device_stats() const { return device_stats_; }

    // Slices of a bf16 buffer on the device, summed in place, as one NCCL group.
    void all_reduce_group(__nv_bfloat16* buf, const std::vector<ParamRange>& ranges) {
        size_t count = 0;
        for (const ParamRange& r : ranges) count += r.count;
        device_timed(Collective::all_reduce, count * sizeof(__nv_bfloat16), [&] {
            NCCL_CHECK(ncclGroupStart());
            for (const ParamRange& r : ranges) {
                __nv_bfloat16* p = buf + r.offset;
                NCCL_CHECK(ncclAllReduce(p, p, r.count, ncclBfloat16, ncclSum, comm_, stream_));
            }
            NCCL_CHECK(ncclGroupEnd());
        });
    }
    // In place over a bf16 buffer of n values (n a multiple of the world size): this rank's shard_of(n) gets the
    // sums over ranks.
    void reduce_scatter(__nv_bfloat16* buf, size_t n) {
        Shard s = equal_shard(n);
        device_timed(Collective::reduce_scatter, n * sizeof(__nv_bfloat16), [&] {
            NCCL_CHECK(ncclReduceScatter(buf, buf + s.begin, s.size(), ncclBfloat16, ncclSum, comm_, stream_));
        });
    }
    // In place: every rank's shard_of(n) of a bf16 buffer copied to all ranks.
    void all_gather(__nv_bfloat16* buf, size_t n) {
        Shard s = equal_shard(n);
        device_timed(Collective::all_gather, n * sizeof(__nv_bfloat16),
                     [&] { NCCL_CHECK(ncclAllGather(buf + s.begin, buf, s.size(), ncclBfloat16, comm_, stream_)); });
    }

    // The communication stream starts after what `compute` has queued so far.
    void follow(cudaStream_t compute) {
        cudaEvent_t e = next_event();
        CUDA_CHECK(cudaEventRecord(e, compute));
        CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
    }
    // `compute` goes on after what the communication stream has queued so far; the wait is timed as exposed.
    void join(cudaStream_t compute) {
        cudaEvent_t arrived = next_event(), done = next_event();
        CUDA_CHECK(cudaEventRecord(arrived, compute));
        CUDA_CHECK(cudaEventRecord(done, stream_));
        CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
        pending_.push_back({-1, 0, arrived, done});
    }
    // Folds the timings queued since the last collect() into device_stats(). Every event must have completed: call
    // it after synchronising a stream that has joined.
    void collect() {
        for (const Pending& p : pending_) {
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, p.begin, p.end));
            double seconds = std::max(0.0, ms * 1e-3);
            if (p.collective < 0) {
                device_stats_.exposed_seconds += seconds;
            } else {
                device_stats_.add((Collective)p.collective, (int64_t)p.bytes, seconds);
            }
        }
        pending_.clear();
        used_ = 0;
    }

protected:
    void all_reduce_impl(float* buf, size_t n) override {
        device_timed(Collective::all_reduce, n * 4,
                     [&] { NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm_, stream_)); });
    }
    void all_reduce_impl(double* buf, size_t n) override {
        device_timed(Collective::all_reduce, n * 8,
                     [&] { NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat64, ncclSum, comm_, stream_)); });
    }
    void reduce_scatter_impl(float* buf, size_t n) override {
        Shard s = equal_shard(n);
        device_timed(Collective::reduce_scatter, n * 4, [&] {
            NCCL_CHECK(ncclReduceScatter(buf, buf + s.begin, s.size(), ncclFloat32, ncclSum, comm_, stream_));
        });
    }
    void all_gather_impl(float* buf, size_t n) override {
        Shard s = equal_shard(n);
        device_timed(Collective::all_gather, n * 4,
                     [&] { NCCL_CHECK(ncclAllGather(buf + s.begin, buf, s.size(), ncclFloat32, comm_, stream_)); });
    }
    void broadcast_impl(void* buf, size_t bytes) override {
        device_timed(Collective::broadcast, bytes,
                     [&] { NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, 0, comm_, stream_)); });
    }

private:
    // A collective, or (collective -1) a join: the events bracketing it.
    struct Pending {
        int collective;
        int64_t bytes;
        cudaEvent_t begin, end;
    };
    // NCCL's reduce-scatter and all-gather take equal shards: shard_of's are equal when world divides n (the
    // trainer pads its buffers to that: padded_parameter_count).
    Shard equal_shard(size_t n) const {
        if (n % world() != 0)
            throw Error(strprintf("NCCL shards: %zu elements do not split into %d equal shards", n, world()));
        return shard_of(n, rank(), world());
    }
    template <typename Fn> void device_timed(Collective c, size_t bytes, Fn&& fn) {
        cudaEvent_t begin = next_event(), end = next_event();
        CUDA_CHECK(cudaEventRecord(begin, stream_));
        fn();
        CUDA_CHECK(cudaEventRecord(end, stream_));
        pending_.push_back({(int)c, (int64_t)bytes, begin, end});
    }
    // Events are reused step after step: the pool grows to the most one step has used.
    cudaEvent_t next_event() {
        if (used_ == events_.size()) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreate(&e));
            events_.push_back(e);
        }
        return events_[used_++];
    }
    Communicator& bootstrap_; // the process's MPI communicator: lives as long as the process
    cudaStream_t stream_;
    ncclComm_t comm_ = nullptr;
    std::vector<cudaEvent_t> events_;
    size_t used_ = 0;
    std::vector<Pending> pending_;
    CommStats device_stats_;
};

/*
 * The bucketed gradient all-reduce GPT2GPU::train_step drives (llmc/gpt2.cuh): each bucket (one layer's gradient
 * slices, then the embeddings and lnf: layer_parameter_ranges) is all-reduced on the communicator's own stream as
 * soon as the compute stream has queued its last gradient kernel, so NCCL runs while backward goes on with the
 * layers below. finish() adds the loss and makes the compute stream wait for all of it.
 */
class BucketedAllReduce {
public:
    BucketedAllReduce(NcclCommunicator& nccl, cudaStream_t compute, const GPT2Config& c, __nv_bfloat16* grads)
        : nccl_(nccl), compute_(compute), config_(c), grads_(grads) {}
    void layer_done(int layer) {
        nccl_.follow(compute_);
        nccl_.all_reduce_group(grads_, layer_parameter_ranges(config_, layer));
    }
    void finish(float* loss) {
        nccl_.follow(compute_);
        nccl_.all_reduce_sum(loss, 1);
        nccl_.join(compute_);
    }
    void sum_norm(float*) {} // every rank has every reduced gradient: its norm is the global one
    void gather_params() {}  // every rank updated every parameter

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
class ShardedReduce {
public:
    // params, grads: the model's padded buffers of n values (n a multiple of 8 * world).
    ShardedReduce(NcclCommunicator& nccl, cudaStream_t compute, __nv_bfloat16* params, __nv_bfloat16* grads, size_t n)
        : nccl_(nccl), compute_(compute), params_(params), grads_(grads), n_(n) {}
    void layer_done(int) {}
    void finish(float* loss) {
        nccl_.follow(compute_);
        nccl_.reduce_scatter(grads_, n_);
        nccl_.all_reduce_sum(loss, 1);
        nccl_.join(compute_);
    }
    void sum_norm(float* norm_squared) {
        nccl_.follow(compute_);
        nccl_.all_reduce_sum(norm_squared, 1);
        nccl_.join(compute_);
    }
    void gather_params() {
        nccl_.follow(compute_);
        nccl_.all_gather(params_, n_);
        nccl_.join(compute_);
    }

private:
    NcclCommunicator& nccl_;
    cudaStream_t compute_;
    __nv_bfloat16 *params_, *grads_;
    size_t n_;
};

} // namespace llmc
