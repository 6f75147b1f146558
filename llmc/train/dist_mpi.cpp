// The MPI communicator (llmc/train/dist.h): the CPU trainer's collectives, built when the Makefile finds MPI.
#include <chrono>
#include <cstdio>
#include <mpi.h>
#include <thread>

#include "llmc/train/dist.h"
#include "llmc/util/utils.h"

namespace llmc {

namespace {

class MPICommunicator : public Communicator {
public:
    MPICommunicator(int rank, int world, bool serialized) : Communicator(rank, world), serialized_(serialized) {
        MPI_Comm_dup(MPI_COMM_WORLD, &errors_);
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        int on_node = 0;
        MPI_Comm_size(node, &on_node);
        MPI_Comm_free(&node);
        single_node_ = on_node == world;
    }
    // At process exit (run_training keeps the communicator to the end), also after an error all ranks share.
    ~MPICommunicator() override {
        MPI_Comm_free(&errors_);
        MPI_Finalize();
    }
    void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
    bool background_collectives() const override { return serialized_; }
    bool single_node() const override { return single_node_; }

    /*
     * Whether every rank failed is decided by a barrier on a communicator of its own: the ranks that are still
     * training may be inside a collective of the world's, which a barrier there would wrongly match. Ranks meeting
     * the same error (flags, data, checkpoints: the same files for all) reach it within moments of each other; a
     * rank still alone after ERROR_AGREEMENT_SECONDS has an error of its own (a write only rank 0 makes, a node's
     * own disk or memory) and stops the run.
     */
    void on_error(const char* what, int exit_code) override {
        if (world() == 1) return;
        MPI_Request req;
        MPI_Ibarrier(errors_, &req);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(ERROR_AGREEMENT_SECONDS);
        int all = 0;
        while (MPI_Test(&req, &all, MPI_STATUS_IGNORE) == MPI_SUCCESS && !all &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (all) return;
        fprintf(stderr, "error: rank %d of %d: %s (stopping every rank)\n", rank(), world(), what);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, exit_code);
    }

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
    static constexpr double ERROR_AGREEMENT_SECONDS = 10;
    bool serialized_, single_node_ = false;
    MPI_Comm errors_;
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
    // SERIALIZED: the gradient buckets are all-reduced on a thread of their own while the training thread computes
    // (BackgroundReducer); without it every collective runs on the training thread.
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (rank != 0) {
        // Rank 0 prints, logs and reports errors for the run.
        errors_quiet() = true;
        if (!freopen("/dev/null", "w", stdout)) throw Error("/dev/null: cannot open for rank output");
    }
    return std::make_unique<MPICommunicator>(rank, world, provided >= MPI_THREAD_SERIALIZED);
}

} // namespace llmc
