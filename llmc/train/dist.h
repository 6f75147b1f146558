/*
 * Data parallelism (doc/distributed.md): N processes, one per device, each training on its part of every
 * batch. Two layers:
 *
 * - Communicator: the collectives the trainer needs, on buffers the backend owns (host memory for the CPU
 *   trainer over MPI). One implementation per transport; make_communicator() picks the one this build has:
 *   MPI when the Makefile found it (dist_mpi.cpp), else a single process that refuses to run under an
 *   mpirun of several ranks. Every collective is timed into CommStats for the profile.
 * - DataParallel: the logic on top, transport-free and shared by the trainers: how a step's gradients are
 *   reduced (all-reduce, or reduce-scatter with -z 1), the global gradient norm, which slice of the
 *   parameters a rank's optimizer updates, and gathering the parameters and AdamW moments back.
 *
 * The data split is the DataLoader's (rank, world): rank r reads the r-th of every N consecutive batches, so
 * N ranks together read what one process reads. The loss and gradients are means over all ranks'
 * micro-batches; with N = 1 every collective is a no-op and the trainer is the single-process one.
 */
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "llmc/model/gpt2_config.h"
#include "llmc/model/subblocks.h"

namespace llmc {

enum class Collective { all_reduce, reduce_scatter, all_gather, broadcast, COUNT };
inline const char* collective_name(Collective c) {
    static constexpr const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
    return enum_table<Collective>(names)[(int)c];
}

// Below this message size a collective's time is its latency, not the link's bandwidth (the loss's and the
// norm's one-value all-reduces): counted apart, so they neither drag down the bandwidth of the large ones nor
// are compared with the link's peak.
constexpr int64_t kSmallMessageBytes = 64 * 1024;

// What a rank's collectives have done so far: calls, bytes each rank sent in, and busy seconds, per collective
// (small_*: the part of them in messages under kSmallMessageBytes); and exposed_seconds, the part of that time
// the training itself waited for (a blocking collective on the training thread is exposed whole; one running
// beside compute only for the wait at its end).
struct CommStats {
    int64_t calls[(int)Collective::COUNT] = {};
    int64_t bytes[(int)Collective::COUNT] = {};
    double seconds[(int)Collective::COUNT] = {};
    int64_t small_calls[(int)Collective::COUNT] = {};
    int64_t small_bytes[(int)Collective::COUNT] = {};
    double small_seconds[(int)Collective::COUNT] = {};
    double exposed_seconds = 0;
    // One collective of `n` bytes that took `s` seconds.
    void add(Collective c, int64_t n, double s) {
        calls[(int)c]++, bytes[(int)c] += n, seconds[(int)c] += s;
        if (n < kSmallMessageBytes) small_calls[(int)c]++, small_bytes[(int)c] += n, small_seconds[(int)c] += s;
    }
    double total_seconds() const {
        double t = 0;
        for (double s : seconds) t += s;
        return t;
    }
    // Adds o (sign 1) or takes it away (sign -1), field by field.
    CommStats& accumulate(const CommStats& o, int sign) {
        for (int c = 0; c < (int)Collective::COUNT; c++) {
            calls[c] += sign * o.calls[c], bytes[c] += sign * o.bytes[c], seconds[c] += sign * o.seconds[c];
            small_calls[c] += sign * o.small_calls[c], small_bytes[c] += sign * o.small_bytes[c];
            small_seconds[c] += sign * o.small_seconds[c];
        }
        exposed_seconds += sign * o.exposed_seconds;
        return *this;
    }
    CommStats& operator+=(const CommStats& o) { return accumulate(o, 1); }
    // What ran between an earlier reading o and this one.
    CommStats since(const CommStats& o) const { return CommStats(*this).accumulate(o, -1); }
};

// The link a rank's collectives cross, and its peak bandwidth per direction (GB/s; 0: unknown). A ring runs at
// its slowest link, so the merged profile compares bus bandwidth with the smallest peak of the ranks.
enum class LinkKind { unknown, shared_memory, pcie, nvlink, COUNT };
inline const char* link_kind_name(LinkKind k) {
    static constexpr const char* names[] = {"unknown", "shared memory", "PCIe", "NVLink"};
    return enum_table<LinkKind>(names)[(int)k];
}
struct Link {
    LinkKind kind = LinkKind::unknown;
    double peak_gbps = 0;
};

// The elements [begin, end) of an n-element buffer that rank `rank` of `world` owns: contiguous, in rank order,
// the first n % world shards one element longer.
struct Shard {
    size_t begin = 0, end = 0;
    size_t size() const { return end - begin; }
};
inline Shard shard_of(size_t n, int rank, int world) {
    size_t base = n / world, extra = n % world, r = (size_t)rank;
    size_t begin = r * base + std::min(r, extra);
    return {begin, begin + base + (r < extra ? 1 : 0)};
}

class Communicator {
public:
    virtual ~Communicator() = default;
    int rank() const { return rank_; }
    int world() const { return world_; }
    const CommStats& stats() const { return stats_; }

    // In place, summed over ranks.
    void all_reduce_sum(float* buf, size_t n) { timed(Collective::all_reduce, n * 4, [&] { all_reduce_impl(buf, n); }); }
    void all_reduce_sum(double* buf, size_t n) { timed(Collective::all_reduce, n * 8, [&] { all_reduce_impl(buf, n); }); }
    // In place over the n-element buffer: afterwards this rank's shard_of(n) holds the sums over ranks; the rest
    // is unspecified.
    void reduce_scatter_sum(float* buf, size_t n) {
        timed(Collective::reduce_scatter, n * 4, [&] { reduce_scatter_impl(buf, n); });
    }
    // In place: every rank's shard_of(n) is copied to all ranks.
    void all_gather(float* buf, size_t n) { timed(Collective::all_gather, n * 4, [&] { all_gather_impl(buf, n); }); }
    // Rank 0's bytes to every rank.
    void broadcast(void* buf, size_t bytes) { timed(Collective::broadcast, bytes, [&] { broadcast_impl(buf, bytes); }); }
    virtual void barrier() = 0;
    // Whether collectives may run on a thread other than the one that created the communicator, while that one
    // computes (one thread at a time: MPI_THREAD_SERIALIZED).
    virtual bool background_collectives() const { return false; }
    // Whether every rank runs on this node (their collectives then cross shared memory, not a network).
    virtual bool single_node() const { return true; }
    /*
     * An error was thrown on this rank (what, and the exit code it gets). If every rank meets it, returns: rank 0
     * prints the one line and all exit. If this rank is alone with it, the others would wait for it in their next
     * collective for ever: prints the line itself, naming the rank, and stops every rank (MPI_Abort).
     */
    virtual void on_error(const char* /*what*/, int /*exit_code*/) {}
    // The training's wait for collectives running beside it (a background thread's), counted as exposed.
    void add_exposed(double seconds) { stats_.exposed_seconds += seconds; }
    // The collectives the calling thread runs from now on overlap the training (their time is not exposed).
    static void mark_background_thread() { background_thread() = true; }

protected:
    Communicator(int rank, int world) : rank_(rank), world_(world) {}
    virtual void all_reduce_impl(float* buf, size_t n) = 0;
    virtual void all_reduce_impl(double* buf, size_t n) = 0;
    virtual void reduce_scatter_impl(float* buf, size_t n) = 0;
    virtual void all_gather_impl(float* buf, size_t n) = 0;
    virtual void broadcast_impl(void* buf, size_t bytes) = 0;

private:
    static bool& background_thread() {
        thread_local bool background = false;
        return background;
    }
    // One thread at a time runs collectives (MPI_THREAD_SERIALIZED): stats_ needs no lock.
    template <typename Fn> void timed(Collective c, size_t bytes, Fn&& fn) {
        auto t0 = std::chrono::steady_clock::now();
        fn();
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        stats_.add(c, (int64_t)bytes, dt);
        if (!background_thread()) stats_.exposed_seconds += dt;
    }
    int rank_, world_;
    CommStats stats_;
};

/*
 * The process's communicator: MPI in a build with it when a launcher (mpirun) started several ranks (MPI_Init
 * here, MPI_Finalize when it is destroyed), else one process; a build without MPI started by mpirun with several
 * ranks throws UsageError saying so. Ranks other than 0 print nothing: their stdout goes to /dev/null and their
 * errors are left to rank 0's line.
 */
std::unique_ptr<Communicator> make_communicator();

// One process, whatever the build and the launcher: for a program that never runs data-parallel (profile_gpt2cu).
std::unique_ptr<Communicator> single_process_communicator();

/*
 * A value every rank must share (a hash of what it was started with, or found): compared with rank 0's, and
 * when any rank's differs, UsageError on every rank: "K of N ranks <what>" (rank 0 prints it, so `what` may
 * name rank 0's own value).
 */
void check_same_on_every_rank(Communicator& comm, uint64_t mine, const std::string& what);
// Flags must be the same on every rank (else each would train a different model and hang in a collective).
void check_same_args(Communicator& comm, int argc, char** argv);

/*
 * Gradient buckets summed over the ranks on a thread of their own while backward goes on (the CPU trainer's
 * overlap): post() queues a bucket (ranges of a float buffer), the thread all-reduces the buckets in posting
 * order; wait() blocks until every posted bucket is summed and counts that wait as exposed communication. The
 * caller runs no collective of its own and touches no posted range between post() and wait(): the thread is
 * then the only one in MPI (MPI_THREAD_SERIALIZED) and the only one on those ranges.
 */
class BackgroundReducer {
public:
    // When a bucket's all-reduce ran, steady_clock nanoseconds (the profile's clock); tag: post()'s.
    struct Timing {
        int tag;
        int64_t start_ns, end_ns;
    };
    explicit BackgroundReducer(Communicator& comm);
    ~BackgroundReducer(); // drops what is still queued (an error is unwinding) and joins the thread
    void post(float* buf, std::vector<ParamRange> ranges, int tag);
    void wait(); // rethrows what the thread threw
    // The timings of the buckets summed since the last call (after wait(): all of them).
    std::vector<Timing> take_timings();

private:
    void run();
    struct Bucket {
        float* buf;
        std::vector<ParamRange> ranges;
        int tag;
    };
    std::vector<Timing> timings_; // under mu_
    Communicator& comm_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Bucket> queue_;
    bool busy_ = false, stop_ = false;
    std::exception_ptr error_;
    std::thread thread_; // last: starts once the rest is constructed
};

// The data-parallel step logic over n parameters; zero_stage 1 shards the optimizer (ZeRO-1, -z 1).
class DataParallel {
public:
    DataParallel(Communicator& comm, size_t n, int zero_stage)
        : comm_(comm), n_(n), zero_(zero_stage), shard_(shard_of(n, comm.rank(), comm.world())),
          reducer_(comm.world() > 1 && !zero_stage && comm.background_collectives()
                       ? std::make_unique<BackgroundReducer>(comm)
                       : nullptr) {}
    int rank() const { return comm_.rank(); }
    int world() const { return comm_.world(); }
    bool single_node() const { return comm_.single_node(); }
    // The parameters this rank's optimizer updates and keeps moments for: its shard with -z 1, else all.
    Shard update_range() const { return zero_ ? shard_ : Shard{0, n_}; }

    // Whether gradients are summed in buckets during the last micro-batch's backward (post_bucket): all-reduce
    // (-z 0) over several ranks, on a communicator that runs collectives in the background. -z 1's
    // reduce-scatter runs after backward, on the whole buffer.
    bool overlaps() const { return reducer_ != nullptr; }
    // A bucket of gradients backward has finished (layer_parameter_ranges of `layer`): summed over the ranks from
    // now on.
    void post_bucket(float* grads, std::vector<ParamRange> ranges, int layer) {
        reducer_->post(grads, std::move(ranges), layer);
        posted_ = true;
    }
    // When each bucket's all-reduce ran since the last call (tag: its layer), for the profile's trace.
    std::vector<BackgroundReducer::Timing> take_bucket_timings() {
        return reducer_ ? reducer_->take_timings() : std::vector<BackgroundReducer::Timing>{};
    }
    // Sums each rank's gradients: over the whole buffer, or (-z 1) only into this rank's shard. After buckets
    // were posted (they cover the buffer), waits for them instead.
    void reduce_gradients(float* grads);
    // Sum over ranks of each rank's local loss sum.
    double sum_loss(double local);
    // Global L2 norm of the reduced gradients: each rank sums the squares of its shard, in one order whatever
    // -z is, so -z 1 and -z 0 clip by the same bits.
    double grad_norm(const float* grads);
    // After the update: every rank's parameters from the shards (-z 1); nothing to do otherwise.
    void gather_params(float* params);
    // Full-length moments from this rank's update_range() slices (for a checkpoint), and back.
    std::vector<float> gather_moments(const std::vector<float>& local);
    std::vector<float> local_moments(const std::vector<float>& full) const;

private:
    Communicator& comm_;
    size_t n_;
    int zero_;
    Shard shard_;
    std::unique_ptr<BackgroundReducer> reducer_;
    bool posted_ = false;
};

} // namespace llmc
