// Data parallelism's transport-free logic and the single-process communicator (llmc/train/dist.h).
#include "llmc/train/dist.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "llmc/cpu/adamw.h"
#include "llmc/profiler/cpu_timers.h"
#include "llmc/util/utils.h"

namespace llmc {

#ifdef LLMC_HAVE_MPI
std::unique_ptr<Communicator> make_mpi_communicator(); // dist_mpi.cpp
#endif

namespace {

// One process: every collective leaves the buffer as it is (the sum over one rank).
class SingleProcess : public Communicator {
public:
    SingleProcess() : Communicator(0, 1) {}
    void barrier() override {}

protected:
    void all_reduce_impl(float*, size_t) override {}
    void all_reduce_impl(double*, size_t) override {}
    void reduce_scatter_impl(float*, size_t) override {}
    void all_gather_impl(float*, size_t) override {}
    void broadcast_impl(void*, size_t) override {}
};

// The world size a launcher (Open MPI's mpirun, or a PMI one: MPICH, Slurm) gave this process; 1 without one.
int launcher_world_size() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
        if (const char* v = getenv(name)) return std::max(1, atoi(v));
    return 1;
}

} // namespace


std::unique_ptr<Communicator> make_communicator() {
#ifdef LLMC_HAVE_MPI
    // A process no launcher started is one rank: MPI is not initialised (its start-up would be a singleton's,
    // with its shared-memory files and the time it takes, for collectives over one rank).
    if (launcher_world_size() > 1) return make_mpi_communicator();
    return single_process_communicator();
#else
    if (int n = launcher_world_size(); n > 1) {
        for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
            if (const char* rank = getenv(name); rank && atoi(rank) != 0) errors_quiet() = true; // one line, rank 0
        throw UsageError(strprintf("started as %d ranks, but this build has no MPI: data-parallel runs need "
                                   "libopenmpi-dev at build time (doc/distributed.md); run one process instead", n));
    }
    return single_process_communicator();
#endif
}

std::unique_ptr<Communicator> single_process_communicator() { return std::make_unique<SingleProcess>(); }

void check_same_on_every_rank(Communicator& comm, uint64_t mine, const std::string& what) {
    uint64_t root = mine;
    comm.broadcast(&root, sizeof root);
    double differ = mine != root ? 1.0 : 0.0;
    comm.all_reduce_sum(&differ, 1);
    if (differ > 0) throw UsageError(strprintf("%d of %d ranks %s", (int)differ, comm.world(), what.c_str()));
}

void check_same_args(Communicator& comm, int argc, char** argv) {
    uint64_t h = kFnvOffset;
    for (int i = 1; i < argc; i++) h = fnv1a(argv[i], strlen(argv[i]) + 1, h); // each with its NUL
    check_same_on_every_rank(comm, h, "were started with flags different from rank 0's; every rank needs the same "
                                      "flags");
}

BackgroundReducer::BackgroundReducer(Communicator& comm) : comm_(comm), thread_([this] { run(); }) {}

BackgroundReducer::~BackgroundReducer() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.clear();
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void BackgroundReducer::post(float* buf, std::vector<ParamRange> ranges, int tag) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back({buf, std::move(ranges), tag});
    }
    cv_.notify_all();
}

void BackgroundReducer::wait() {
    auto t0 = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
    comm_.add_exposed(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

std::vector<BackgroundReducer::Timing> BackgroundReducer::take_timings() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(timings_, {});
}

void BackgroundReducer::run() {
    Communicator::mark_background_thread();
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        Bucket b = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
        lock.unlock();
        const int64_t start = steady_ns();
        try {
            for (const ParamRange& r : b.ranges) comm_.all_reduce_sum(b.buf + r.offset, r.count);
        } catch (...) {
            error_ = std::current_exception(); // read by wait(), after busy_ is cleared under the lock
        }
        const int64_t end = steady_ns();
        lock.lock();
        timings_.push_back({b.tag, start, end});
        busy_ = false;
        cv_.notify_all();
    }
}

void DataParallel::reduce_gradients(float* grads) {
    if (posted_) {
        posted_ = false;
        reducer_->wait();
    } else if (zero_) {
        comm_.reduce_scatter_sum(grads, n_);
    } else {
        comm_.all_reduce_sum(grads, n_);
    }
}

double DataParallel::sum_loss(double local) {
    comm_.all_reduce_sum(&local, 1);
    return local;
}

double DataParallel::grad_norm(const float* grads) {
    double sq = cpu::sum_of_squares(grads + shard_.begin, shard_.size());
    comm_.all_reduce_sum(&sq, 1);
    return std::sqrt(sq);
}

void DataParallel::gather_params(float* params) {
    if (zero_) comm_.all_gather(params, n_);
}

std::vector<float> DataParallel::gather_moments(const std::vector<float>& local) {
    if (!zero_) return local;
    std::vector<float> full(n_);
    std::copy(local.begin(), local.end(), full.begin() + shard_.begin);
    comm_.all_gather(full.data(), n_);
    return full;
}

std::vector<float> DataParallel::local_moments(const std::vector<float>& full) const {
    Shard s = update_range();
    return std::vector<float>(full.begin() + s.begin, full.begin() + s.end);
}

} // namespace llmc
