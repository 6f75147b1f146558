// The GPU trainer's NCCL communicator and gradient reductions (llmc/train/dist_nccl.cuh).
#include "llmc/train/dist_nccl.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>

#include "llmc/cuda_common.cuh"

namespace llmc {

namespace {

#define NCCL_CHECK(call) ::llmc::nccl_check((call), #call, __FILE__, __LINE__)
void nccl_check(ncclResult_t r, const char* what, const char* file, int line) {
    if (r != ncclSuccess)
        throw Error(strprintf("NCCL error '%s' at %s:%d: %s", ncclGetErrorString(r), file, line, what));
}

// This process's rank among those on its node, from the launcher: which GPU it drives.
int local_rank(int rank) {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
        if (const char* v = getenv(name)) return atoi(v);
    return rank;
}

} // namespace

void select_device(Communicator& comm) {
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

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, cudaStream_t stream)
    : Communicator(bootstrap.rank(), bootstrap.world()), bootstrap_(bootstrap), stream_(stream) {
    ncclUniqueId id;
    if (rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    bootstrap.broadcast(&id, sizeof id);
    NCCL_CHECK(ncclCommInitRank(&comm_, world(), id, rank()));
}

NcclCommunicator::~NcclCommunicator() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    // Unwinding an error: collectives may be queued that the other ranks will never join, and destroying
    // (which completes them) could wait for ever; aborting does not.
    if (std::uncaught_exceptions() > 0) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
}

void NcclCommunicator::barrier() {
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    bootstrap_.barrier();
}

void NcclCommunicator::all_reduce_group(__nv_bfloat16* buf, const std::vector<ParamRange>& ranges) {
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

void NcclCommunicator::reduce_scatter(__nv_bfloat16* buf, size_t n) {
    Shard s = equal_shard(n);
    device_timed(Collective::reduce_scatter, n * sizeof(__nv_bfloat16), [&] {
        NCCL_CHECK(ncclReduceScatter(buf, buf + s.begin, s.size(), ncclBfloat16, ncclSum, comm_, stream_));
    });
}

void NcclCommunicator::all_gather(__nv_bfloat16* buf, size_t n) {
    Shard s = equal_shard(n);
    device_timed(Collective::all_gather, n * sizeof(__nv_bfloat16),
                 [&] { NCCL_CHECK(ncclAllGather(buf + s.begin, buf, s.size(), ncclBfloat16, comm_, stream_)); });
}

void NcclCommunicator::follow(cudaStream_t compute) {
    cudaEvent_t e = next_event();
    CUDA_CHECK(cudaEventRecord(e, compute));
    CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
}

void NcclCommunicator::join(cudaStream_t compute) {
    cudaEvent_t arrived = next_event(), done = next_event();
    CUDA_CHECK(cudaEventRecord(arrived, compute));
    CUDA_CHECK(cudaEventRecord(done, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(compute, done, 0));
    pending_.push_back({-1, 0, arrived, done});
}

void NcclCommunicator::collect() {
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

void NcclCommunicator::all_reduce_impl(float* buf, size_t n) {
    device_timed(Collective::all_reduce, n * 4,
                 [&] { NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, comm_, stream_)); });
}

void NcclCommunicator::all_reduce_impl(double* buf, size_t n) {
    device_timed(Collective::all_reduce, n * 8,
                 [&] { NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat64, ncclSum, comm_, stream_)); });
}

void NcclCommunicator::reduce_scatter_impl(float* buf, size_t n) {
    Shard s = equal_shard(n);
    device_timed(Collective::reduce_scatter, n * 4, [&] {
        NCCL_CHECK(ncclReduceScatter(buf, buf + s.begin, s.size(), ncclFloat32, ncclSum, comm_, stream_));
    });
}

void NcclCommunicator::all_gather_impl(float* buf, size_t n) {
    Shard s = equal_shard(n);
    device_timed(Collective::all_gather, n * 4,
                 [&] { NCCL_CHECK(ncclAllGather(buf + s.begin, buf, s.size(), ncclFloat32, comm_, stream_)); });
}

void NcclCommunicator::broadcast_impl(void* buf, size_t bytes) {
    device_timed(Collective::broadcast, bytes,
                 [&] { NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, 0, comm_, stream_)); });
}

Shard NcclCommunicator::equal_shard(size_t n) const {
    if (n % world() != 0)
        throw Error(strprintf("NCCL shards: %zu elements do not split into %d equal shards", n, world()));
    return shard_of(n, rank(), world());
}

void NcclCommunicator::device_timed(Collective c, size_t bytes, const std::function<void()>& enqueue) {
    cudaEvent_t begin = next_event(), end = next_event();
    CUDA_CHECK(cudaEventRecord(begin, stream_));
    enqueue();
    CUDA_CHECK(cudaEventRecord(end, stream_));
    pending_.push_back({(int)c, (int64_t)bytes, begin, end});
}

cudaEvent_t NcclCommunicator::next_event() {
    if (used_ == events_.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreate(&e));
        events_.push_back(e);
    }
    return events_[used_++];
}

void BucketedAllReduce::layer_done(int layer) {
    nccl_.follow(compute_);
    nccl_.all_reduce_group(grads_, layer_parameter_ranges(config_, layer));
}

void BucketedAllReduce::finish(float* loss) {
    nccl_.follow(compute_);
    nccl_.all_reduce_sum(loss, 1);
    nccl_.join(compute_);
}

void ShardedReduce::finish(float* loss) {
    nccl_.follow(compute_);
    nccl_.reduce_scatter(grads_, n_);
    nccl_.all_reduce_sum(loss, 1);
    nccl_.join(compute_);
}

void ShardedReduce::sum_norm(float* norm_squared) {
    nccl_.follow(compute_);
    nccl_.all_reduce_sum(norm_squared, 1);
    nccl_.join(compute_);
}

void ShardedReduce::gather_params() {
    nccl_.follow(compute_);
    nccl_.all_gather(params_, n_);
    nccl_.join(compute_);
}

} // namespace llmc
