// The MPI communicator (llmc/train/dist.h): the CPU trainer's collectives, built when the Makefile finds MPI.
#include <cstdio>
#include <mpi.h>

#include "llmc/train/dist.h"
#include "llmc/utils.h"

namespace llmc {

namespace {

class MPICommunicator : public Communicator {
public:
    MPICommunicator(int rank, int world) : Communicator(rank, world) {}
    // Every rank gets here, also when unwinding from an error all ranks share.
    ~MPICommunicator() override { MPI_Finalize(); }
    void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

protected:
    void all_reduce_impl(float* buf, size_t n) override { all_reduce(buf, n, MPI_FLOAT); }
    void all_reduce_impl(double* buf, size_t n) override { all_reduce(buf, n, MPI_DOUBLE); }
    void reduce_scatter_impl(float* buf, size_t n) override {
        std::vector<int> counts = shard_counts(n);
        Shard mine = shard_of(n, rank(), world());
        std::vector<float> out(mine.size());
        MPI_Reduce_scatter(buf, out.data(), counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        std::copy(out.begin(), out.end(), buf + mine.begin);
    }
    void all_gather_impl(float* buf, size_t n) override {
        std::vector<int> counts = shard_counts(n), offsets(world());
        for (int r = 0; r < world(); r++) offsets[r] = (int)shard_of(n, r, world()).begin;
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), offsets.data(), MPI_FLOAT,
                       MPI_COMM_WORLD);
    }
    void broadcast_impl(void* buf, size_t bytes) override {
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    }

private:
    // MPI counts are ints: buffers go in slices below 2^30 elements.
    template <typename T> void all_reduce(T* buf, size_t n, MPI_Datatype type) {
        constexpr size_t SLICE = (size_t)1 << 30;
        for (size_t i = 0; i < n; i += SLICE)
            MPI_Allreduce(MPI_IN_PLACE, buf + i, (int)std::min(SLICE, n - i), type, MPI_SUM, MPI_COMM_WORLD);
    }
    std::vector<int> shard_counts(size_t n) const {
        if (n > (size_t)INT32_MAX) throw Error(strprintf("%zu parameters: too many for one MPI collective", n));
        std::vector<int> counts(world());
        for (int r = 0; r < world(); r++) counts[r] = (int)shard_of(n, r, world()).size();
        return counts;
    }
};

} // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
    MPI_Init(nullptr, nullptr);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != 0) {
        // Rank 0 prints, logs and reports errors for the run.
        errors_quiet() = true;
        if (!freopen("/dev/null", "w", stdout)) throw Error("/dev/null: cannot open for rank output");
    }
    return std::make_unique<MPICommunicator>(rank, world);
}

} // namespace llmc
