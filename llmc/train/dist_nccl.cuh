/*
 * The GPU trainer's communicator (llmc/train/dist.h): NCCL collectives on device buffers, queued on the
 * trainer's stream, bootstrapped through the process's MPI communicator (rank 0's ncclUniqueId broadcast to
 * all). Only train_gpt2.cu includes it, in builds where the Makefile found NCCL and MPI (LLMC_HAVE_NCCL);
 * the emulated tier never sees it.
 *
 * Status: compiled, never run on GPUs (doc/distributed.md).
 */
#pragma once
#include <cstdlib>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

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
 * Picks this rank's GPU (its local rank) before anything allocates on the device. Every rank takes part, so a
 * node short of GPUs stops all of them with one line from rank 0.
 */
inline void select_device(Communicator& comm) {
    int local = local_rank(comm.rank()), count = cuda_device_count();
    double missing = local < count ? 0.0 : 1.0;
    comm.all_reduce_sum(&missing, 1);
    if (missing > 0)
        throw Error(strprintf("%d of %d ranks have no GPU of their own (one GPU per rank: the ranks on a node are its "
                              "local ranks 0..N-1, this node has %d GPUs)", (int)missing, comm.world(), count));
    CUDA_CHECK(cudaSetDevice(local));
}

class NcclCommunicator : public Communicator {
public:
    NcclCommunicator(Communicator& bootstrap, cudaStream_t stream)
        : Communicator(bootstrap.rank(), bootstrap.world()), stream_(stream) {
        ncclUniqueId id;
        if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
        bootstrap.broadcast(&id, sizeof id);
        NCCL_CHECK(ncclCommInitRank(&comm_, world(), id, rank()));
    }
    ~NcclCommunicator() override { ncclCommDestroy(comm_); }
    void barrier() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
    cudaStream_t stream() const { return stream_; }
    // Slices of a bf16 buffer on the device, summed in place, as one NCCL group. Queued on the stream: CommStats
    // do not see it; the NCCL kernels' time is in the CUPTI profile, under the comm sub-block.
    void all_reduce_group(__nv_bfloat16* buf, const std::vector<ParamRange>& ranges) {
        NCCL_CHECK(ncclGroupStart());
        for (const ParamRange& r : ranges)
            NCCL_CHECK(ncclAllReduce(buf + r.offset, buf + r.offset, r.count, ncclBfloat16, ncclSum, comm_, stream_));
        NCCL_CHECK(ncclGroupEnd());
    }

protected:
    void all_reduce_impl(float* buf, size_t n) override {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm_, stream_));
    }
    void all_reduce_impl(double* buf, size_t n) override {
        NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat64, ncclSum, comm_, stream_));
    }
    // NCCL's reduce-scatter and all-gather take equal shards: shard_of's are equal when world divides n, and the
    // trainer pads its buffers to that (not written yet: -z 1 is refused on the GPU).
    void reduce_scatter_impl(float* buf, size_t n) override {
        Shard s = equal_shard(n);
        NCCL_CHECK(ncclReduceScatter(buf, buf + s.begin, s.size(), ncclFloat32, ncclSum, comm_, stream_));
    }
    void all_gather_impl(float* buf, size_t n) override {
        Shard s = equal_shard(n);
        NCCL_CHECK(ncclAllGather(buf + s.begin, buf, s.size(), ncclFloat32, comm_, stream_));
    }
    void broadcast_impl(void* buf, size_t bytes) override {
        NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, 0, comm_, stream_));
    }

private:
    Shard equal_shard(size_t n) const {
        if (n % world() != 0)
            throw Error(strprintf("NCCL shards: %zu elements do not split into %d equal shards", n, world()));
        return shard_of(n, rank(), world());
    }
    cudaStream_t stream_;
    ncclComm_t comm_ = nullptr;
};

/*
 * The bucketed gradient all-reduce GPT2GPU::train_step drives (llmc/gpt2.cuh): each bucket (one layer's gradient
 * slices, then the embeddings and lnf: layer_parameter_ranges) is all-reduced on the communicator's own stream as
 * soon as the compute stream has queued its last gradient kernel, so NCCL runs while backward goes on with the
 * layers below. finish() adds the loss and makes the compute stream wait for all of it.
 */
class BucketedAllReduce {
public:
    BucketedAllReduce(NcclCommunicator& nccl, cudaStream_t compute, const GPT2Config& c, __nv_bfloat16* grads,
                      cudaEvent_t ready, cudaEvent_t done)
        : nccl_(nccl), compute_(compute), config_(c), grads_(grads), ready_(ready), done_(done) {}
    void layer_done(int layer) {
        follow_compute();
        nccl_.all_reduce_group(grads_, layer_parameter_ranges(config_, layer));
    }
    void finish(float* loss) {
        follow_compute();
        nccl_.all_reduce_sum(loss, 1);
        CUDA_CHECK(cudaEventRecord(done_, nccl_.stream()));
        CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    }

private:
    // The communication stream starts after what the compute stream has queued so far.
    void follow_compute() {
        CUDA_CHECK(cudaEventRecord(ready_, compute_));
        CUDA_CHECK(cudaStreamWaitEvent(nccl_.stream(), ready_, 0));
    }
    NcclCommunicator& nccl_;
    cudaStream_t compute_;
    GPT2Config config_;
    __nv_bfloat16* grads_;
    cudaEvent_t ready_, done_;
};

} // namespace llmc
