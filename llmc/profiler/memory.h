/*
 * Memory analysis over a plan (llmc/model/memory_plan.h): totals by kind, the peak of what a step keeps live and who
 * is live at it, the largest tensors, and a model of PyTorch's CUDA caching allocator run on the allocation
 * sequence an eager framework would make for the same tensors; then the writers of that analysis: the text of
 * --memory-plan and summary.txt's memory section, memory.csv, and memory_snapshot.pickle in the format
 * torch.cuda.memory._dump_snapshot writes (doc/profiling.md, "Memory").
 */
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "llmc/model/memory_plan.h"

namespace llmc::prof {

/*
 * The caching allocator's documented rules (c10/cuda/CUDACachingAllocator.cpp): requests rounded up to 512 B;
 * a small pool for rounded sizes up to 1 MiB, carved from 2 MiB segments, and a large pool, carved from 20 MiB
 * segments for requests under 10 MiB and from segments of the request rounded up to 2 MiB otherwise; the smallest
 * cached free block that fits (best fit, then lowest address) is used and split when the rest is at least 512 B
 * (small pool) or more than 1 MiB (large pool); a freed block merges with free neighbours of its segment; nothing
 * is released to the device. One stream, no max_split_size, no expandable segments, no garbage collection.
 */
struct SimBlock {
    size_t offset = 0, size = 0, requested = 0;
    bool allocated = false;
    int tensor = -1; // index into the plan's tensors while allocated
};
struct SimSegment {
    bool small = false;
    size_t size = 0;
    std::vector<SimBlock> blocks; // tile the segment, by offset
};
struct CachingAllocatorResult {
    size_t reserved_peak = 0;   // bytes of segments (cudaMalloc'd) at the end: nothing is released
    size_t allocated_peak = 0;  // the largest sum of allocated blocks (rounded and unsplit sizes)
    size_t requested_peak = 0;  // the largest sum of the requests themselves (what was live)
    int peak_op = -1;           // op after whose allocations allocated_peak was reached
    std::vector<SimSegment> segments; // the state at allocated_peak
    size_t small_reserved = 0, large_reserved = 0;
    long allocations = 0;
};
// Requests of `sizes` (bytes, > 0) and frees, in order: events[i] >= 0 allocates tensor events[i], ~t frees it.
CachingAllocatorResult simulate_caching_allocator(const std::vector<size_t>& sizes, const std::vector<int>& events,
                                                  const std::vector<int>& event_ops);

// Byte totals of one kind of memory.
struct KindTotal {
    MemoryKind kind;
    size_t bytes = 0;
    long tensors = 0;
};

struct MemoryReport {
    bool present = false;      // a plan was given
    size_t planned_bytes = 0;  // every allocation of the plan
    std::vector<KindTotal> kinds; // kinds with bytes, largest first
    // Liveness (training plans): the largest sum of the tensors a step keeps live at once, the op it is reached
    // at, and the tensors live then, largest first.
    size_t live_peak = 0;
    int live_peak_op = -1;
    std::vector<int> live_at_peak;
    std::vector<int> top_tensors; // the largest tensors, indices into plan.tensors
    CachingAllocatorResult caching;
    std::vector<int> eager_events, eager_event_ops; // the eager sequence the simulation ran (see eager_sequence)
};

/*
 * The allocation sequence an eager framework makes for the plan's tensors: the whole-run tensors first (in plan
 * order), then for each op the tensors it first writes, and after it the frees of those it reads last. Padding
 * is not a tensor and is left out. events: tensor index (allocate) or ~index (free); ops: the op of each event.
 */
void eager_sequence(const MemoryPlan& plan, std::vector<int>& events, std::vector<int>& ops);

MemoryReport analyze_memory(const MemoryPlan& plan, int top_n = 10);

// What --memory-plan prints and summary.txt's memory section: the allocations, the totals by kind, the live
// peak, the caching allocator's peaks beside the plan's and the largest tensors.
std::string format_memory_report(const MemoryPlan& plan, const MemoryReport& r);
// memory_snapshot.pickle (pickle protocol 2): a segment per allocation of the plan with blocks that tile it,
// and a device trace of alloc/free events in the eager order, each with its category (the tensor's kind).
std::string memory_snapshot_pickle(const MemoryPlan& plan, const MemoryReport& r);

std::string format_bytes(size_t bytes);

// --memory-plan's answer beside the plan: the device memory planned for, the usable part, whether this plan fits
// and the largest batch whose plan does (batch_flag names it: "-b").
struct FitAnswer {
    size_t device_bytes = 0;  // 0: unknown (no device, no --device-memory)
    std::string source;       // "--device-memory", "free on <GPU>"
    size_t budget = 0;        // the usable part
    int largest = 0;          // the largest batch that fits (0: none)
    std::string batch_flag = "-b";
    std::string largest_what; // "micro-batch at T=1024"
};
std::string format_fit(const MemoryPlan& plan, const FitAnswer& f); // "1.23 GiB", "456.0 MiB", "12.0 KiB", "100 B"

} // namespace llmc::prof
