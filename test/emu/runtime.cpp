/*
 * The emulator's runtime: fibers and the block scheduler, warp collectives, shared memory, launches, streams,
 * events and memory. See test/emu/emu.h for the model it implements.
 */
#include <algorithm>
#include <boost/context/fiber.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <sys/mman.h>

#include "cuda_runtime.h"
#include "counters.h"
#include "racecheck.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

namespace ctx = boost::context;

namespace emu {

// A stream capture in progress: what the stream queued since cudaStreamBeginCapture, and whether something the
// runtime refuses during a capture has invalidated it (why: the first such call).
struct Capture {
    std::vector<std::function<void()>> nodes;
    bool invalid = false;
    std::string why;
};
struct Stream {
    bool blocking = true;
    struct Op {
        std::function<void()> fn;
        std::vector<std::pair<Stream*, uint64_t>> deps; // (stream, ops of it that must have run first)
    };
    std::deque<Op> q;
    uint64_t enqueued = 0, done = 0;
    std::unique_ptr<Capture> capture; // while capturing
};
struct Event {
    Stream* stream = nullptr;
    uint64_t seq = 0; // the stream's op count at the record
    double time_ms = 0;
    bool timing = true;
    const Capture* captured = nullptr; // recorded by a capture (not since recorded outside one)
};
// A captured graph, and an instantiated one: the nodes in capture order.
struct Graph {
    std::vector<std::function<void()>> nodes;
};
struct GraphExec {
    std::vector<std::function<void()>> nodes;
};

namespace {

// ------------------------------------------------------------------------------------------- limits (sm_90)
constexpr int kMaxThreads = 1024;
constexpr size_t kDefaultSmem = 48 * 1024;
constexpr size_t kMaxSmemOptin = 227 * 1024;
constexpr size_t kDeviceMemory = 16ull << 30; // what cudaMemGetInfo reports as the device's size
constexpr size_t kStackBytes =
#if defined(EMU_ASAN)
    256 * 1024;
#else
    64 * 1024;
#endif

struct FaultError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------------------------------------- global state
std::vector<std::string> g_faults;
std::string g_last_fault;
cudaError_t g_sticky = cudaSuccess;
cudaError_t g_last = cudaSuccess;
int g_schedule = 0;
Stats g_stats;
std::map<uintptr_t, size_t> g_device; // start -> bytes
size_t g_device_bytes = 0;
size_t g_device_peak = 0; // the most g_device_bytes reached since reset_device_peak
std::map<uintptr_t, size_t> g_pinned;
std::map<const void*, int> g_smem_optin;
std::string g_inject_name; // inject_fault(): kernels whose name contains it ("" = none), and which launch faults
int g_inject_countdown = 0;
Stream g_legacy;
std::vector<Stream*> g_streams; // created streams, in creation order
std::set<Event*> g_events;
uint64_t g_digest = 1469598103934665603ull, g_digest_bytes = 0;
double g_clock_added_ms = 0; // advance_clock()

double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count() + g_clock_added_ms;
}

cudaError_t fail(cudaError_t e) {
    g_last = e;
    return e;
}

// ------------------------------------------------------------------------------------------- fiber stacks
// mmap'd stacks with a guard page below, reused across blocks (a block may have 1024 threads).
std::vector<char*> g_free_stacks;
char* stack_get() {
    if (!g_free_stacks.empty()) {
        char* s = g_free_stacks.back();
        g_free_stacks.pop_back();
        return s;
    }
    const size_t page = 4096;
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    mprotect(p, page, PROT_NONE);
    return static_cast<char*>(p) + page; // lowest usable address
}
struct PoolStack {
    char* bottom;
    ctx::stack_context allocate() {
        ctx::stack_context sc;
        sc.size = kStackBytes;
        sc.sp = bottom + kStackBytes;
        return sc;
    }
    void deallocate(ctx::stack_context&) {}
};

// ------------------------------------------------------------------------------------------- blocks, threads
enum class State { Ready, AtBarrier, AtCollective, Done, Faulted };

struct Thread {
    Builtins b{};
    int linear = 0, warp = 0, lane = 0;
    State state = State::Ready;
    unsigned mask = 0;
    CollectiveFn fn = nullptr;
    void* arg = nullptr;
    const char* what = "";
    const char* file = "";
    int line = 0;
    // cp.async (llmc/ptx.cuh): copies issued and not yet landed; group -1 = not committed yet. The source is read
    // when the copy lands (src null: a zero fill).
    struct PendingCopy {
        void* dst;
        const void* src;
        long group;
        const void* pc; // where it was issued
    };
    std::vector<PendingCopy> copies;
    long groups_committed = 0;
    race::Lane rc; // what racecheck knows of it
    char* stack = nullptr;
    ctx::fiber fib;  // the thread, while suspended
    ctx::fiber back; // the scheduler, while the thread runs
#if defined(EMU_ASAN)
    void* fake_stack = nullptr;
#endif
};

struct Block {
    const char* kernel = "";
    std::vector<Thread> threads;
    struct Shared {
        int id;
        const char* type; // typeid name: one declaration can be instantiated with several types
        void* storage;
        size_t bytes;
    };
    std::vector<Shared> shared; // a block has a handful: a linear search allocates nothing
    size_t static_bytes = 0, smem_limit = kDefaultSmem;
    void* dynamic = nullptr;
    size_t dynamic_bytes = 0;
    std::string fault;
    ~Block() {
        for (Shared& v : shared) ::operator delete(v.storage, std::align_val_t(16));
        if (dynamic) ::operator delete(dynamic, std::align_val_t(128));
    }
};

Thread* g_thread = nullptr;
Block* g_block = nullptr;
#if defined(EMU_ASAN)
const void* g_sched_bottom = nullptr;
size_t g_sched_size = 0;
#endif

std::string where(const Thread& t) {
    char buf[160];
    snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", t.b.block.x, t.b.block.y, t.b.block.z, t.b.thread.x,
             t.b.thread.y, t.b.thread.z);
    return buf;
}

// Thread -> scheduler, and back when resumed.
void suspend(Thread& t) {
#if defined(EMU_ASAN)
    __sanitizer_start_switch_fiber(&t.fake_stack, g_sched_bottom, g_sched_size);
#endif
    t.back = std::move(t.back).resume();
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(t.fake_stack, &g_sched_bottom, &g_sched_size);
#endif
}

// Scheduler -> thread t, until it waits or ends.
void resume(Block& blk, Thread& t) {
    g_thread = &t;
    g_block = &blk;
    race::set_current(&t.rc);
#if defined(EMU_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, t.stack, kStackBytes);
#endif
    t.fib = std::move(t.fib).resume();
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    g_thread = nullptr;
    race::set_current(nullptr);
}

Thread& current() {
    if (!g_thread) {
        fprintf(stderr, "emu: a device function was called outside a kernel\n");
        std::abort();
    }
    return *g_thread;
}

std::string unit_fault(const std::string& msg) {
    return std::string("kernel ") + (g_block ? g_block->kernel : "?") + ": " + msg;
}

// Releases the warp group thread i waits in when it is complete (true); faults on a group that can never complete.
bool release_group(Block& blk, int i) {
    const int n = (int)blk.threads.size();
    Thread& t = blk.threads[i];
    if (t.state != State::AtCollective) return false;
    const int base = t.warp * 32;
    if (!(t.mask & (1u << t.lane)))
        throw FaultError(unit_fault(where(t) + ": " + t.what + " with a mask that does not name the calling lane"));
    void* args[32] = {};
    bool complete = true;
    for (int l = 0; l < 32; l++) {
        if (!(t.mask & (1u << l))) continue;
        if (base + l >= n)
            throw FaultError(unit_fault(where(t) + ": " + t.what + " names lane " + std::to_string(l) +
                                        ", which this block does not have"));
        Thread& o = blk.threads[base + l];
        char buf[512];
        switch (o.state) {
        case State::AtCollective:
            if (o.fn != t.fn || o.mask != t.mask) {
                snprintf(buf, sizeof buf,
                         "%s: divergent warp collectives: lane %d at %s (%s:%d, mask %08x), lane %d at %s (%s:%d, "
                         "mask %08x)",
                         where(t).c_str(), t.lane, t.what, t.file, t.line, t.mask, l, o.what, o.file, o.line,
                         o.mask);
                throw FaultError(unit_fault(buf));
            }
            args[l] = o.arg;
            break;
        case State::Done:
            snprintf(buf, sizeof buf, "%s: lane %d exited before joining %s (%s:%d, mask %08x)", where(t).c_str(),
                     l, t.what, t.file, t.line, t.mask);
            throw FaultError(unit_fault(buf));
        case State::AtBarrier:
            snprintf(buf, sizeof buf,
                     "%s: lane %d waits at __syncthreads (%s:%d) while lane %d waits at %s (%s:%d)",
                     where(t).c_str(), l, o.file, o.line, t.lane, t.what, t.file, t.line);
            throw FaultError(unit_fault(buf));
        default:
            complete = false;
        }
    }
    if (!complete) return false;
    if (t.fn) t.fn(args, t.mask);
    race::warp_sync(t.warp);
    g_stats.collectives++;
    for (int l = 0; l < 32; l++)
        if (t.mask & (1u << l)) blk.threads[base + l].state = State::Ready;
    return true;
}
// Releases every warp group that is complete.
bool release_warps(Block& blk) {
    bool released = false;
    for (int i = 0; i < (int)blk.threads.size(); i++) released |= release_group(blk, i);
    return released;
}

bool release_barrier(Block& blk) {
    const Thread* first = nullptr;
    for (Thread& t : blk.threads) {
        if (t.state == State::Done) continue;
        if (t.state != State::AtBarrier) return false;
        if (!first)
            first = &t;
        else if (t.line != first->line || strcmp(t.file, first->file) != 0)
            throw FaultError(unit_fault("divergent __syncthreads: " + where(*first) + " at " + first->file + ":" +
                                        std::to_string(first->line) + ", " + where(t) + " at " + t.file + ":" +
                                        std::to_string(t.line)));
    }
    if (!first) return false;
    for (Thread& t : blk.threads)
        if (t.state == State::AtBarrier) t.state = State::Ready;
    race::barrier();
    return true;
}

std::string deadlock_report(Block& blk) {
    std::string s = "deadlock: no barrier or warp collective can complete;";
    int shown = 0;
    for (Thread& t : blk.threads) {
        if (t.state == State::Done || shown >= 4) continue;
        s += " " + where(t) + " waits at " + (t.state == State::AtBarrier ? "__syncthreads" : t.what) + " (" + t.file +
             ":" + std::to_string(t.line) + ");";
        shown++;
    }
    return unit_fault(s);
}

// Schedules (emu.h): 0 forward, 1 reverse, 2 shuffled; kWarpEager runs one warp at a time up to the next barrier,
// releasing each of its collectives as soon as its group is complete.
constexpr int kWarpEager = 3;

// Runs warp w's lanes (in order) until each waits at a barrier or has ended, releasing its warp collectives the
// moment they are complete (kWarpEager).
void run_warp_eagerly(Block& blk, int w) {
    const int n = (int)blk.threads.size(), lo = w * 32, hi = std::min(n, lo + 32);
    for (;;) {
        bool ran = false;
        for (int i = lo; i < hi; i++) {
            Thread& t = blk.threads[i];
            if (t.state != State::Ready) continue;
            resume(blk, t);
            if (t.state == State::Faulted) throw FaultError(unit_fault(where(t) + ": " + blk.fault));
            ran = true;
        }
        bool released = false;
        for (int i = lo; i < hi; i++) released |= release_group(blk, i);
        if (!ran && !released) return;
    }
}

// Thread orders: forward, reverse, or a fresh permutation each round.
struct Order {
    std::vector<int> idx;
    std::mt19937 rng;
    Order(int n, uint64_t salt) : idx(n), rng((uint32_t)(g_schedule * 7919 + salt)) {
        for (int i = 0; i < n; i++) idx[i] = i;
        if (g_schedule == 1) std::reverse(idx.begin(), idx.end());
    }
    void next_round() {
        if (g_schedule >= 2) std::shuffle(idx.begin(), idx.end(), rng);
    }
};

void run_block(const char* name, const LaunchConfig& cfg, size_t smem_limit, uint3 bid,
               const std::function<void()>& body) {
    Block blk;
    blk.kernel = name;
    blk.smem_limit = smem_limit;
    blk.dynamic_bytes = cfg.smem;
    blk.dynamic = ::operator new(cfg.smem, std::align_val_t(128));
    std::memset(blk.dynamic, 0xFF, cfg.smem);
    const int n = (int)(cfg.block.x * cfg.block.y * cfg.block.z);
    blk.threads.resize(n);
    race::begin_block(name, (n + 31) / 32);
    count::begin_block(n);
    race::add_shared(blk.dynamic, cfg.smem, "dynamic shared memory");
    for (int i = 0; i < n; i++) {
        Thread& t = blk.threads[i];
        t.linear = i, t.warp = i / 32, t.lane = i % 32;
        t.rc.linear = i, t.rc.warp = t.warp, t.rc.self = &t;
        t.rc.name = [](const void* self) { return where(*static_cast<const Thread*>(self)); };
        t.b.block = bid;
        t.b.thread = {i % cfg.block.x, (i / cfg.block.x) % cfg.block.y, i / (cfg.block.x * cfg.block.y)};
        t.b.block_dim = cfg.block;
        t.b.grid_dim = cfg.grid;
        t.stack = stack_get();
        Thread* tp = &t;
        t.fib = ctx::fiber(std::allocator_arg, PoolStack{t.stack}, [tp, &body](ctx::fiber&& sched) {
#if defined(EMU_ASAN)
            __sanitizer_finish_switch_fiber(nullptr, &g_sched_bottom, &g_sched_size);
#endif
            tp->back = std::move(sched);
            body();
            if (!tp->copies.empty())
                device_fault(std::to_string(tp->copies.size()) + " cp.async cop" + (tp->copies.size() == 1 ? "y" : "ies") +
                             " still pending when the thread exited (issued at " +
                             race::source_line(tp->copies.front().pc) + "): no cp.async.wait_group covered " +
                             (tp->copies.size() == 1 ? "it" : "them"));
            tp->state = State::Done;
#if defined(EMU_ASAN)
            __sanitizer_start_switch_fiber(nullptr, g_sched_bottom, g_sched_size);
#endif
            return std::move(tp->back);
        });
    }
    g_stats.blocks++;
    g_stats.threads += n;
    Order order(n, bid.x * 131 + bid.y * 17 + bid.z);
    std::string fault;
    try {
        while (g_schedule == kWarpEager) {
            for (int w = 0; w < (n + 31) / 32; w++) run_warp_eagerly(blk, w);
            if (std::all_of(blk.threads.begin(), blk.threads.end(), [](const Thread& t) { return t.state == State::Done; }))
                break;
            if (release_warps(blk)) continue; // faults on a group that can never complete
            if (release_barrier(blk)) continue;
            throw FaultError(deadlock_report(blk));
        }
        while (g_schedule != kWarpEager) {
            for (int i : order.idx) {
                Thread& t = blk.threads[i];
                if (t.state != State::Ready) continue;
                resume(blk, t);
                if (t.state == State::Faulted) throw FaultError(unit_fault(where(t) + ": " + blk.fault));
            }
            bool all_done = std::all_of(blk.threads.begin(), blk.threads.end(),
                                        [](const Thread& t) { return t.state == State::Done; });
            if (all_done) break;
            order.next_round();
            if (release_warps(blk)) continue;
            if (release_barrier(blk)) continue;
            throw FaultError(deadlock_report(blk));
        }
    } catch (const FaultError& e) {
        fault = e.what();
    }
    // Fibers that did not finish are unwound by their destructors; stacks go back to the pool.
    for (Thread& t : blk.threads) {
        if (t.fib) {
#if defined(EMU_ASAN)
            ASAN_UNPOISON_MEMORY_REGION(t.stack, kStackBytes);
#endif
            t.fib = ctx::fiber();
        }
        g_free_stacks.push_back(t.stack);
    }
    if (fault.empty()) count::end_block();
    g_block = nullptr;
    race::end_block();
    if (!fault.empty()) throw FaultError(fault);
}

// ------------------------------------------------------------------------------------------- streams
Stream* resolve(cudaStream_t s) {
    if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy;
    if (std::find(g_streams.begin(), g_streams.end(), s) == g_streams.end()) return nullptr;
    return s;
}

void drop_all_work() {
    auto drop = [](Stream* s) {
        s->q.clear();
        s->done = s->enqueued;
    };
    drop(&g_legacy);
    for (Stream* s : g_streams) drop(s);
}

void flush(Stream* s, uint64_t upto) {
    while (s->done < upto && !s->q.empty()) {
        Stream::Op op = std::move(s->q.front());
        s->q.pop_front();
        s->done++;
        for (auto& d : op.deps) flush(d.first, d.second);
        if (!op.fn || g_sticky != cudaSuccess) continue;
        try {
            op.fn();
        } catch (const std::exception& e) {
            g_faults.push_back(e.what());
            g_last_fault = e.what();
            g_sticky = cudaErrorLaunchFailure;
            drop_all_work();
            return;
        }
    }
}
void flush_all() {
    std::vector<Stream*> all = g_streams;
    all.push_back(&g_legacy);
    if (g_schedule == 1) std::reverse(all.begin(), all.end());
    if (g_schedule >= 2) std::shuffle(all.begin(), all.end(), std::mt19937(g_schedule));
    for (Stream* s : all) flush(s, s->enqueued);
}

void enqueue(Stream* s, std::function<void()> fn) {
    if (s->capture) { // a node of the graph being captured, not work to run
        if (fn) s->capture->nodes.push_back(std::move(fn));
        return;
    }
    Stream::Op op;
    op.fn = std::move(fn);
    // Legacy-stream semantics: legacy work waits for all earlier work of blocking streams, and work on a
    // blocking stream waits for earlier legacy work. Non-blocking streams wait for nobody.
    if (s == &g_legacy) {
        for (Stream* o : g_streams)
            if (o->blocking) op.deps.push_back({o, o->enqueued});
    } else if (s->blocking) {
        op.deps.push_back({&g_legacy, g_legacy.enqueued});
    }
    s->q.push_back(std::move(op));
    s->enqueued++;
}

// The streams capturing now.
std::vector<Stream*> capturing() {
    std::vector<Stream*> out;
    for (Stream* s : g_streams)
        if (s->capture) out.push_back(s);
    return out;
}
// A call the runtime refuses while a stream captures (global mode): every capture is invalidated, as the runtime
// invalidates the one it ran into; `err` (cudaErrorStreamCaptureUnsupported, ...) is the call's error. Returns
// cudaSuccess when nothing captures.
cudaError_t refused_in_capture(const char* what, cudaError_t err = cudaErrorStreamCaptureUnsupported) {
    const std::vector<Stream*> active = capturing();
    if (active.empty()) return cudaSuccess;
    for (Stream* s : active)
        if (!s->capture->invalid) s->capture->invalid = true, s->capture->why = what;
    return fail(err);
}

void digest(const void* p, size_t n) {
    const unsigned char* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; i++) g_digest = (g_digest ^ b[i]) * 1099511628211ull;
    g_digest_bytes += n;
}

const std::pair<const uintptr_t, size_t>* find_range(const std::map<uintptr_t, size_t>& m, const void* p, size_t n) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    if (a + n <= it->first + it->second && a >= it->first) return &*it;
    return nullptr;
}

} // namespace

// ------------------------------------------------------------------------------------------- public: faults
std::vector<std::string> take_faults() {
    flush_all();
    std::vector<std::string> f;
    f.swap(g_faults);
    g_sticky = cudaSuccess;
    g_last = cudaSuccess;
    return f;
}
void inject_fault(const char* name, int nth) {
    g_inject_name = name;
    g_inject_countdown = nth;
}
void advance_clock(double ms) { g_clock_added_ms += ms; }
void set_schedule(int s) { g_schedule = s; }
int schedule() { return g_schedule; }
const char* schedule_name(int s) {
    return s == 0 ? "forward" : s == 1 ? "reverse" : s == kWarpEager ? "warp-eager" : "shuffled";
}
const Stats& stats() { return g_stats; }
uint64_t output_digest() { return g_digest ^ g_digest_bytes; }
void reset_output_digest() {
    g_digest = 1469598103934665603ull;
    g_digest_bytes = 0;
}

[[noreturn]] void device_fault(const std::string& what) {
    Thread& t = current();
    g_block->fault = what;
    t.state = State::Faulted;
    suspend(t); // never resumed: the scheduler unwinds this fiber
    std::abort();
}

// ------------------------------------------------------------------------------------------- public: device side
Builtins& builtins() { return current().b; }

void syncthreads(const char* file, int line) {
    Thread& t = current();
    t.state = State::AtBarrier;
    t.file = file, t.line = line;
    suspend(t);
}
void warp_collective(unsigned mask, CollectiveFn fn, void* arg, const char* what) {
    Thread& t = current();
    t.state = State::AtCollective;
    t.mask = mask, t.fn = fn, t.arg = arg, t.what = what;
    t.file = "", t.line = 0;
    suspend(t);
}
void syncwarp(unsigned mask, const char* file, int line) {
    Thread& t = current();
    t.state = State::AtCollective;
    t.mask = mask, t.fn = nullptr, t.arg = nullptr, t.what = "__syncwarp";
    t.file = file, t.line = line;
    suspend(t);
}

[[noreturn]] void collective_fault(const std::string& what) { throw FaultError(unit_fault(what)); }

bool is_shared_range(const void* p, size_t bytes) {
    if (!g_block) return false;
    const auto inside = [&](const void* base, size_t n) {
        const char *b = static_cast<const char*>(base), *q = static_cast<const char*>(p);
        return base && q >= b && q + bytes <= b + n;
    };
    if (inside(g_block->dynamic, g_block->dynamic_bytes)) return true;
    for (const Block::Shared& v : g_block->shared)
        if (inside(v.storage, v.bytes)) return true;
    return false;
}

// cp.async: the destination holds poison (0xFF bytes: NaN as bf16 or fp32) from the issue until a wait_group that
// covers the copy's group, in this thread, lands it; the source is read then (a DMA may read it any time in between:
// a kernel that changes it before the wait sees the change). Racecheck counts both the issue and the landing as
// writes of the destination by the issuing thread.
void ptx_cp_async_16(void* dst, const void* src, int src_bytes) {
    Thread& t = current();
    if (reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
        device_fault("cp.async: address not 16-byte aligned");
    if (!is_shared_range(dst, 16)) device_fault("cp.async: destination not in the block's shared memory");
    if (src_bytes != 0 && src_bytes != 16) device_fault("cp.async: src-size must be 0 or 16 here");
    if (src_bytes && !is_device_range(src, 16)) device_fault("cp.async: source not in device memory");
    const void* pc = __builtin_return_address(0);
    race::access(dst, 16, true, pc, "cp.async issued", t.rc, false);
    if (count::detail::on) {
        const uint64_t stamp = race::sync_stamp(t.warp);
        if (src_bytes) count::access(src, 16, false, pc, t.linear, t.warp, stamp, count::Kind::ldgsts);
        count::access(dst, 16, true, pc, t.linear, t.warp, stamp, count::Kind::ldgsts);
    }
    std::memset(dst, 0xFF, 16);
    t.copies.push_back({dst, src_bytes ? src : nullptr, -1, pc});
}
void ptx_cp_async_commit() {
    Thread& t = current();
    for (Thread::PendingCopy& c : t.copies)
        if (c.group < 0) c.group = t.groups_committed;
    t.groups_committed++;
}
void ptx_cp_async_wait(int n) {
    Thread& t = current();
    const void* pc = __builtin_return_address(0);
    const long done_below = t.groups_committed - n; // groups [0, done_below) are complete
    size_t keep = 0;
    for (size_t i = 0; i < t.copies.size(); i++) {
        Thread::PendingCopy& c = t.copies[i];
        if (c.group >= 0 && c.group < done_below) {
            race::access(c.dst, 16, true, pc, "cp.async landed by its wait_group", t.rc, false);
            if (c.src) std::memcpy(c.dst, c.src, 16);
            else std::memset(c.dst, 0, 16);
        } else {
            t.copies[keep++] = c;
        }
    }
    t.copies.resize(keep);
}

void shuffle_collective(void* const* args, unsigned mask) {
    for (int l = 0; l < 32; l++) {
        if (!args[l]) continue;
        ShuffleArg* a = static_cast<ShuffleArg*>(args[l]);
        if (a->src < 0 || a->src >= 32 || !(mask & (1u << a->src)))
            collective_fault("shuffle from lane " + std::to_string(a->src) + ", which is not in the mask");
        a->result = static_cast<ShuffleArg*>(args[a->src])->value;
    }
}
void ballot_collective(void* const* args, unsigned mask) {
    unsigned bits = 0;
    for (int l = 0; l < 32; l++)
        if (args[l] && static_cast<VoteArg*>(args[l])->pred) bits |= 1u << l;
    for (int l = 0; l < 32; l++)
        if (args[l]) static_cast<VoteArg*>(args[l])->result = bits & mask;
}

void* shared_storage(int id, size_t bytes, size_t align, const char* type) {
    Block& blk = *g_block;
    for (const Block::Shared& v : blk.shared)
        if (v.id == id && (v.type == type || strcmp(v.type, type) == 0)) return v.storage;
    if (blk.static_bytes + bytes + blk.dynamic_bytes > blk.smem_limit)
        device_fault("shared memory: " + std::to_string(blk.static_bytes + bytes) + " static + " +
                     std::to_string(blk.dynamic_bytes) + " dynamic bytes exceed the block's limit of " +
                     std::to_string(blk.smem_limit) + " bytes");
    void* p = ::operator new(bytes, std::align_val_t(16));
    if (align > 16 && reinterpret_cast<uintptr_t>(p) % align) device_fault("shared variable alignment above 16");
    std::memset(p, 0xFF, bytes);
    race::add_shared(p, bytes, "__shared__ variable #" + std::to_string(id));
    blk.static_bytes += bytes;
    blk.shared.push_back({id, type, p, bytes});
    return p;
}
void* dynamic_shared_storage() {
    current();
    return g_block->dynamic;
}
void launch_bounds_check(int max_threads, const char* kernel) {
    const Builtins& b = builtins();
    const unsigned n = b.block_dim.x * b.block_dim.y * b.block_dim.z;
    if (max_threads > 0 && n > (unsigned)max_threads)
        device_fault(std::string("launched with ") + std::to_string(n) +
                     " threads per block, more than its __launch_bounds__(" + std::to_string(max_threads) + ") (" +
                     kernel + ")");
}

// ------------------------------------------------------------------------------------------- public: launches
void enqueue_launch(const char* name, const void* kernel, const LaunchConfig& cfg, std::function<void()> body) {
    if (g_sticky != cudaSuccess) {
        g_last = g_sticky;
        return;
    }
    const dim3 g = cfg.grid, b = cfg.block;
    const unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > (unsigned)kMaxThreads ||
        g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        fprintf(stderr, "emu: invalid launch of %s: grid (%u,%u,%u) block (%u,%u,%u)\n", name, g.x, g.y, g.z, b.x, b.y,
                b.z);
        g_last = cudaErrorInvalidConfiguration;
        return;
    }
    auto opt = g_smem_optin.find(kernel);
    const size_t limit = opt == g_smem_optin.end() ? kDefaultSmem : std::max<size_t>(kDefaultSmem, opt->second);
    if (cfg.smem > limit) {
        fprintf(stderr, "emu: invalid launch of %s: %zu bytes of dynamic shared memory, limit %zu%s\n", name, cfg.smem,
                limit, opt == g_smem_optin.end() ? " (no cudaFuncAttributeMaxDynamicSharedMemorySize opt-in)" : "");
        g_last = cudaErrorInvalidValue;
        return;
    }
    Stream* s = resolve(cfg.stream);
    if (!s) {
        g_last = cudaErrorInvalidResourceHandle;
        return;
    }
    if (s == &g_legacy && refused_in_capture("a launch on the legacy stream", cudaErrorStreamCaptureImplicit)) return;
    g_stats.launches++;
    if (!g_inject_name.empty() && std::strstr(name, g_inject_name.c_str()) && g_inject_countdown-- == 0) {
        g_inject_name.clear();
        enqueue(s, [name] { throw std::runtime_error(std::string(name) + ": fault injected by the test"); });
        return;
    }
    const size_t smem_limit = opt == g_smem_optin.end() ? kDefaultSmem : kMaxSmemOptin;
    enqueue(s, [name, cfg, smem_limit, body = std::move(body), context = count::context()] {
        // Blocks in the schedule's order.
        const size_t nb = (size_t)cfg.grid.x * cfg.grid.y * cfg.grid.z;
        std::vector<size_t> order(nb);
        for (size_t i = 0; i < nb; i++) order[i] = i;
        if (g_schedule == 1) std::reverse(order.begin(), order.end());
        if (g_schedule >= 2) std::shuffle(order.begin(), order.end(), std::mt19937_64(g_schedule * 104729 + nb));
        count::begin_launch(name, context);
        struct EndLaunch {
            ~EndLaunch() { count::end_launch(); }
        } end_launch;
        for (size_t i : order) {
            uint3 bid{(unsigned)(i % cfg.grid.x), (unsigned)((i / cfg.grid.x) % cfg.grid.y),
                      (unsigned)(i / ((size_t)cfg.grid.x * cfg.grid.y))};
            run_block(name, cfg, smem_limit, bid, body);
        }
    });
}

void enqueue_host_op(cudaStream_t stream, const char* what, std::function<void()> op) {
    Stream* s = resolve(stream);
    if (!s) throw std::runtime_error(std::string(what) + ": invalid stream");
    enqueue(s, [what, op = std::move(op), context = count::context()] {
        count::host_call(what, context);
        op();
    });
}
bool is_pinned(const void* p) { return find_range(g_pinned, p, 1) != nullptr; }
// The allocations found last, tried first (the counters ask for every access, and a kernel streams a few
// tensors; cudaFree forgets them).
std::pair<uintptr_t, size_t> g_last_device[8];
unsigned g_last_device_next = 0;
const void* device_allocation_of(const void* p, size_t bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (!p) return nullptr;
    for (const auto& [base, n] : g_last_device)
        if (a >= base && a + bytes <= base + n) return reinterpret_cast<const void*>(base);
    const auto* r = find_range(g_device, p, bytes);
    if (!r) return nullptr;
    g_last_device[g_last_device_next++ % 8] = *r;
    return reinterpret_cast<const void*>(r->first);
}
bool is_device_range(const void* p, size_t bytes) { return device_allocation_of(p, bytes) != nullptr; }
size_t device_bytes() { return g_device_bytes; }
size_t device_peak() { return g_device_peak; }
void reset_device_peak() { g_device_peak = g_device_bytes; }
std::vector<std::pair<const void*, size_t>> device_allocations() {
    std::vector<std::pair<const void*, size_t>> out;
    for (const auto& [addr, bytes] : g_device) out.emplace_back(reinterpret_cast<const void*>(addr), bytes);
    return out;
}

} // namespace emu

using namespace emu;

// ------------------------------------------------------------------------------------------- runtime API
cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidValue); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return fail(cudaErrorInvalidValue);
    std::memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "emulated sm_90 device");
    p->totalGlobalMem = kDeviceMemory;
    p->sharedMemPerBlock = kDefaultSmem;
    p->sharedMemPerBlockOptin = kMaxSmemOptin;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = kMaxThreads;
    p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
    p->maxThreadsPerMultiProcessor = 2048;
    p->multiProcessorCount = 132;
    p->major = 9, p->minor = 0;
    p->l2CacheSize = 50 << 20;
    p->memoryBusWidth = 5120;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) return fail(cudaErrorInvalidValue);
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
        *v = p.maxThreadsPerBlock;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
        *v = (int)p.sharedMemPerBlock;
        break;
    case cudaDevAttrWarpSize:
        *v = 32;
        break;
    case cudaDevAttrMultiProcessorCount:
        *v = p.multiProcessorCount;
        break;
    case cudaDevAttrComputeMode:
        *v = cudaComputeModeDefault;
        break;
    case cudaDevAttrComputeCapabilityMajor:
        *v = p.major;
        break;
    case cudaDevAttrComputeCapabilityMinor:
        *v = p.minor;
        break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
        *v = (int)p.sharedMemPerBlockOptin;
        break;
    default:
        return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
    *v = 13000;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
    *total = kDeviceMemory;
    *free_bytes = kDeviceMemory - std::min(kDeviceMemory, g_device_bytes);
    return cudaSuccess;
}
cudaError_t cudaGetLastError() {
    cudaError_t e = g_sticky != cudaSuccess ? g_sticky : g_last;
    g_last = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError() { return g_sticky != cudaSuccess ? g_sticky : g_last; }
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess:
        return "cudaSuccess";
    case cudaErrorInvalidValue:
        return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
        return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
        return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
        return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
        return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice:
        return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle:
        return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
        return "cudaErrorNotReady";
    case cudaErrorLaunchOutOfResources:
        return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
        return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
        return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
        return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
        return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
        return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation:
        return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit:
        return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent:
        return "cudaErrorCapturedEvent";
    }
    return "unknown error";
}
const char* cudaGetErrorString(cudaError_t e) {
    static std::string s;
    s = cudaGetErrorName(e);
    if (e == cudaErrorLaunchFailure && !g_last_fault.empty()) s += " (emulator: " + g_last_fault + ")";
    return s.c_str();
}

#define EMU_STICKY()                                                                                                   \
    do {                                                                                                               \
        if (g_sticky != cudaSuccess) return fail(g_sticky);                                                            \
    } while (0)

cudaError_t cudaMalloc(void** p, size_t bytes) {
    EMU_STICKY();
    *p = nullptr;
    if (cudaError_t e = refused_in_capture("cudaMalloc")) return e;
    if (bytes == 0) return cudaSuccess;
    if (bytes > kDeviceMemory - std::min(kDeviceMemory, g_device_bytes)) return fail(cudaErrorMemoryAllocation);
    void* m = ::operator new(bytes, std::align_val_t(256), std::nothrow);
    if (!m) return fail(cudaErrorMemoryAllocation);
    std::memset(m, 0xFF, bytes); // NaN in bf16 and fp32: reading what was never written shows
    g_device[reinterpret_cast<uintptr_t>(m)] = bytes;
    g_device_bytes += bytes;
    g_device_peak = std::max(g_device_peak, g_device_bytes);
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = refused_in_capture("cudaFree")) return e;
    flush_all(); // cudaFree synchronises the device
    auto it = g_device.find(reinterpret_cast<uintptr_t>(p));
    if (it == g_device.end()) return fail(cudaErrorInvalidDevicePointer);
    g_device_bytes -= it->second;
    g_device.erase(it);
    for (auto& r : g_last_device) r = {0, 0};
    ::operator delete(p, std::align_val_t(256));
    return g_sticky != cudaSuccess ? g_sticky : cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    EMU_STICKY();
    if (cudaError_t e = refused_in_capture("cudaMallocHost")) return e;
    void* m = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
    if (!m) return fail(cudaErrorMemoryAllocation);
    g_pinned[reinterpret_cast<uintptr_t>(m)] = std::max<size_t>(bytes, 1);
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    if (cudaError_t e = refused_in_capture("cudaFreeHost")) return e;
    flush_all();
    auto it = g_pinned.find(reinterpret_cast<uintptr_t>(p));
    if (it == g_pinned.end()) return fail(cudaErrorInvalidValue);
    g_pinned.erase(it);
    ::operator delete(p, std::align_val_t(256));
    return cudaSuccess;
}

namespace {
// Checks a copy's pointers against its kind; the direction with cudaMemcpyDefault comes from the pointers.
cudaError_t classify(void* dst, const void* src, size_t n, cudaMemcpyKind& kind) {
    const bool dd = is_device_range(dst, n), sd = is_device_range(src, n);
    if (kind == cudaMemcpyDefault)
        kind = sd ? (dd ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                  : (dd ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    const bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd != want_dd || sd != want_sd) {
        fprintf(stderr, "emu: cudaMemcpy of %zu bytes, kind %d, with %s destination and %s source\n", n, (int)kind,
                dd ? "a device" : "a host (or out-of-bounds device)",
                sd ? "a device" : "a host (or out-of-bounds device)");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
// The host-side copy a queued transfer performs; device-to-host bytes feed the output digest.
void do_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    std::memmove(dst, src, n);
    if (kind == cudaMemcpyDeviceToHost) digest(src, n);
}
} // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    EMU_STICKY();
    if (n == 0) return cudaSuccess;
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t e = classify(dst, src, n, kind)) return fail(e);
    if (st == &g_legacy)
        if (cudaError_t e = refused_in_capture("work on the legacy stream", cudaErrorStreamCaptureImplicit)) return e;
    // A captured copy runs at every launch of its graph: pageable memory, which the runtime stages at the call, is
    // refused.
    if (st->capture && ((kind == cudaMemcpyHostToDevice && !is_pinned(src)) ||
                        (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)) || kind == cudaMemcpyHostToHost))
        return refused_in_capture("cudaMemcpyAsync with pageable host memory");
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src)) {
        // Pageable source: staged at the call, so the caller may reuse it at once.
        auto staged =
            std::make_shared<std::vector<unsigned char>>((const unsigned char*)src, (const unsigned char*)src + n);
        enqueue(st, [dst, staged, n] { std::memcpy(dst, staged->data(), n); });
        return cudaSuccess;
    }
    enqueue(st, [dst, src, n, kind] { do_copy(dst, src, n, kind); });
    if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst)) flush(st, st->enqueued); // pageable: returns when done
    return g_sticky != cudaSuccess ? g_sticky : cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    EMU_STICKY();
    if (n == 0) return cudaSuccess;
    if (cudaError_t e = refused_in_capture("cudaMemcpy (synchronous)")) return e;
    if (cudaError_t e = classify(dst, src, n, kind)) return fail(e);
    if (kind == cudaMemcpyHostToHost) {
        std::memmove(dst, src, n);
        return cudaSuccess;
    }
    if (kind == cudaMemcpyHostToDevice) {
        // Synchronises the legacy stream first; from pageable memory it returns once the data is staged, and
        // the write to the device happens in legacy-stream order (a non-blocking stream does not wait for it).
        flush(&g_legacy, g_legacy.enqueued);
        cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, cudaStreamLegacy);
        if (is_pinned(src)) flush(&g_legacy, g_legacy.enqueued);
        return e;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, cudaStreamLegacy);
    if (kind == cudaMemcpyDeviceToHost) flush(&g_legacy, g_legacy.enqueued);
    return e != cudaSuccess ? e : (g_sticky != cudaSuccess ? g_sticky : cudaSuccess);
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
    EMU_STICKY();
    if (n == 0) return cudaSuccess;
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    if (st == &g_legacy)
        if (cudaError_t e = refused_in_capture("work on the legacy stream", cudaErrorStreamCaptureImplicit)) return e;
    if (!is_device_range(p, n)) {
        fprintf(stderr, "emu: cudaMemset of %zu bytes outside any device allocation\n", n);
        return fail(cudaErrorInvalidValue);
    }
    enqueue(st, [p, value, n] { std::memset(p, value, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t n) { return cudaMemsetAsync(p, value, n, cudaStreamLegacy); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
    EMU_STICKY();
    Stream* st = new Stream;
    st->blocking = (flags & cudaStreamNonBlocking) == 0;
    g_streams.push_back(st);
    *s = st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    Stream* st = resolve(s);
    if (!st || st == &g_legacy) return fail(cudaErrorInvalidResourceHandle);
    if (st->capture) return refused_in_capture("cudaStreamDestroy of the capturing stream");
    flush(st, st->enqueued); // queued work still completes
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), st));
    for (Event* e : g_events)
        if (e->stream == st) e->stream = nullptr, e->seq = 0;
    delete st;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    if (st->capture) return refused_in_capture("cudaStreamSynchronize on the capturing stream");
    flush(st, st->enqueued);
    return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t cudaDeviceSynchronize() {
    if (cudaError_t e = refused_in_capture("cudaDeviceSynchronize")) return e;
    flush_all();
    return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    EMU_STICKY();
    Stream* st = resolve(s);
    if (!st || !g_events.count(e)) return fail(cudaErrorInvalidResourceHandle);
    if (st->capture) { // within one capture, its nodes run in order anyway; an event from outside it is refused
        if (e->captured == st->capture.get()) return cudaSuccess;
        return refused_in_capture("waiting for an event recorded outside the capture", cudaErrorStreamCaptureIsolation);
    }
    if (e->captured) return fail(cudaErrorCapturedEvent);
    if (!e->stream) return cudaSuccess; // never recorded: nothing to wait for
    enqueue(st, nullptr);
    st->q.back().deps.push_back({e->stream, e->seq});
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    Event* ev = new Event;
    ev->timing = (flags & cudaEventDisableTiming) == 0;
    g_events.insert(ev);
    *e = ev;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!g_events.erase(e)) return fail(cudaErrorInvalidResourceHandle);
    // A record still queued writes into the event: let it run first.
    if (e->stream) flush(e->stream, e->seq);
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    EMU_STICKY();
    Stream* st = resolve(s);
    if (!st || !g_events.count(e)) return fail(cudaErrorInvalidResourceHandle);
    if (st == &g_legacy)
        if (cudaError_t err = refused_in_capture("work on the legacy stream", cudaErrorStreamCaptureImplicit)) return err;
    enqueue(st, [e] {
        if (g_events.count(e)) e->time_ms = now_ms();
    });
    if (st->capture) { // a record node: the event belongs to the capture until it is recorded outside one
        e->captured = st->capture.get(), e->stream = nullptr, e->seq = 0;
        return cudaSuccess;
    }
    e->captured = nullptr;
    e->stream = st;
    e->seq = st->enqueued;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!g_events.count(e)) return fail(cudaErrorInvalidResourceHandle);
    if (e->captured) return fail(cudaErrorCapturedEvent);
    if (e->stream) flush(e->stream, e->seq);
    return g_sticky != cudaSuccess ? fail(g_sticky) : cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!g_events.count(a) || !g_events.count(b)) return fail(cudaErrorInvalidResourceHandle);
    if (!a->timing || !b->timing) return fail(cudaErrorInvalidResourceHandle);
    if (!a->stream || !b->stream || a->stream->done < a->seq || b->stream->done < b->seq)
        return fail(cudaErrorNotReady);
    *ms = (float)(b->time_ms - a->time_ms);
    return cudaSuccess;
}

// ------------------------------------------------------------------------------------------- CUDA graphs
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    EMU_STICKY();
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    if (st == &g_legacy) return fail(cudaErrorStreamCaptureUnsupported); // the legacy stream cannot capture
    if (st->capture) return fail(cudaErrorIllegalState);
    if (mode != cudaStreamCaptureModeGlobal) return fail(cudaErrorInvalidValue); // the one mode the project uses
    // What the stream queued before the capture runs before anything captured could (a graph launch comes after).
    st->capture = std::make_unique<Capture>();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    *graph = nullptr;
    if (!st->capture) return fail(cudaErrorIllegalState);
    std::unique_ptr<Capture> c = std::move(st->capture);
    if (c->invalid) {
        fprintf(stderr, "emu: stream capture invalidated by %s\n", c->why.c_str());
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *graph = new Graph{std::move(c->nodes)};
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    Stream* st = resolve(s);
    if (!st) return fail(cudaErrorInvalidResourceHandle);
    *status = !st->capture ? cudaStreamCaptureStatusNone
              : st->capture->invalid ? cudaStreamCaptureStatusInvalidated
                                     : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    EMU_STICKY();
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new GraphExec{graph->nodes};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    EMU_STICKY();
    Stream* st = resolve(s);
    if (!st || !exec) return fail(cudaErrorInvalidResourceHandle);
    if (st->capture) return refused_in_capture("cudaGraphLaunch into a capture"); // nested graphs: not emulated
    g_stats.graph_launches++;
    // Every node in capture order, as one item of the stream's work.
    enqueue(st, [nodes = exec->nodes] {
        for (const std::function<void()>& node : nodes) node();
    });
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

cudaError_t emu_func_set_attribute(const void* func, cudaFuncAttribute attr, int value) {
    EMU_STICKY();
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kMaxSmemOptin) return fail(cudaErrorInvalidValue);
        g_smem_optin[func] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    return fail(cudaErrorInvalidValue);
}
