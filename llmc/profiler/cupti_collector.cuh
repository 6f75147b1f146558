/*
 * The profiler's collection layer: CUPTI's Activity API, in-process, turned into ProfileRecords
 * (llmc/profiler/records.h) for the aggregation and writer layers.
 *
 *   CuptiCollector c;
 *   if (c.start()) {                        // false: CUPTI is taken by nsys/ncu; the run goes on untraced
 *       c.begin_step(1); ...step...; c.end_step(tokens);   // after the step's loss read
 *       c.flush();                          // off the clock: hands completed buffers to the parser
 *       c.stop();
 *       ProfileRecords r = c.take();
 *   }
 *
 * Attribution: while collecting, the collector is llmc::range_hook(). Every Range push becomes a CUPTI
 * external correlation id (pack_range_id of its sub-block, phase, layer and the current step) and a
 * RangeRecord; CUPTI then emits, for every API call made under it, an EXTERNAL_CORRELATION record that
 * links the call's correlation id to the innermost pushed id. Kernels, copies and memsets carry their
 * launch's correlation id, so take() joins them to a Range after all buffers are parsed (the two records
 * arrive in either order; llmc/profiler/attribution.h). DRIVER API records are enabled as well: cuBLASLt
 * launches its GEMMs with the driver API, and CUPTI emits external correlation records only for API kinds that
 * are enabled.
 *
 * CUDA graphs (llmc/gpu/step_graphs.cuh): a replayed kernel's launch is the cudaGraphLaunch, made under the step's
 * Range alone. CUPTI's resource callback tells the collector of every graph node created, on the thread that
 * captures it: the node's id is mapped to the innermost open Range; instantiation clones each node, and the clone's
 * id (the one replayed activity records carry as graphNodeId) is mapped to its original's. A graph must therefore be
 * captured while the collector runs (the step graphs are captured again when the Range hook changes).
 *
 * Compiled once (cupti_collector.cu), by nvcc, into the GPU programs and the nvcc build's tests.
 *
 * Buffers and threads: CUPTI asks for buffers from whatever thread needs one and returns them filled on its
 * own worker thread (or on the thread calling flush()). Buffers come from a process-wide pool of at most
 * MAX_BUFFERS x BUFFER_BYTES; when it is empty CUPTI gets no buffer, drops records, and the drop count is
 * reported in ProfileRecords::dropped_records. A completed buffer is parsed with no lock held, then
 * appended to the collector's records under a mutex; no lock is ever held across a CUPTI call, so none
 * can deadlock against CUPTI's own. Ranges and steps are recorded only by the training thread (Ranges are
 * never opened on other threads) and need no lock.
 */
#pragma once
#include <cupti.h>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmc/nvtx.h"
#include "llmc/profiler/records.h"

namespace llmc::prof {

const char* cupti_error_string(CUptiResult r);
void cupti_check(CUptiResult r, const char* what, const char* file, int line);
#define CUPTI_CHECK(call) ::llmc::prof::cupti_check((call), #call, __FILE__, __LINE__)

// CUPTI's API version; throws when it is not the one the activity records are read as (cupti_version.h).
uint32_t checked_cupti_version();

// nsys and ncu load themselves into the processes they profile through CUDA_INJECTION64_PATH.
bool cuda_tool_injected();

// Kernel names arrive mangled ("_Z20layernorm_forward..."); C names (cuBLAS's) are kept as they are.
std::string demangle(const char* name);

class CuptiCollector {
public:
    static constexpr size_t BUFFER_BYTES = 8u << 20;
    static constexpr int MAX_BUFFERS = 16;

    CuptiCollector() = default;
    ~CuptiCollector() { shutdown(); }
    CuptiCollector(const CuptiCollector&) = delete;
    CuptiCollector& operator=(const CuptiCollector&) = delete;

    /*
     * Enables the activity kinds and installs the Range hook. Returns false, after printing one line, when
     * another tool holds CUPTI: collection stays off and every other method is a no-op. A CUPTI of another API
     * version than the headers' (checked_cupti_version), or any other CUPTI failure, throws, with nothing left
     * enabled.
     */
    bool start();
    bool running() const { return running_; }

    // A profiled step: Ranges pushed until end_step() carry this step number (the run's, from 1).
    void begin_step(int step);
    void end_step(long tokens);

    // Hands every completed buffer to the parser. Blocks while CUPTI delivers them: call it between steps.
    void flush();

    // Uninstalls the hook, waits for the GPU, disables collection and drains every buffer.
    void stop();

    /*
     * The records of a stopped collection, each activity sorted by start time and joined to its Range.
     * The collector is empty afterwards.
     */
    ProfileRecords take();

    // CUPTI's clock: the timebase of every record.
    // Never throws (the power sampler's thread calls it): cuptiGetTimestamp fails only on a null pointer.
    static uint64_t timestamp() noexcept;

    // What one buffer holds: records, and the correlation id -> packed range id links.
    struct Chunk {
        ProfileRecords rec;
        std::vector<std::pair<uint32_t, uint64_t>> external;
    };

private:
    /*
     * Process-wide, because CUPTI's callbacks carry no user pointer and CUPTI may still hold a buffer after
     * a collector is gone: buffers are never freed (at most MAX_BUFFERS x BUFFER_BYTES, allocated on
     * demand), and a buffer completed with no collector attached just goes back to the free list.
     */
    struct Pool;

    static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
    // Runs on CUPTI's thread: exceptions must not escape, so a failure is kept for flush()/stop() to throw.
    static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid);
    void append(Chunk&& c);
    // CUPTI's resource callback for graph nodes created and cloned (training thread, inside the CUDA call).
    static void CUPTIAPI graph_node_callback(void* ctx, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                                             const void* data);
    // Range hook, training thread only. The pop runs in ~Range, so it must not throw.
    static void hook_push(const RangeInfo& info, void* ctx);
    static void hook_pop(void* ctx);
    // Records dropped from the global queue (buffer_completed counts each per-context, per-stream buffer's).
    void count_dropped();
    void detach_sink();
    void rethrow_callback_error();
    // Destructor path (an exception unwound past a running collection): stop without throwing.
    void shutdown() noexcept;
    void unsubscribe() noexcept;

    bool running_ = false;
    int enabled_kinds_ = 0;
    CUpti_SubscriberHandle subscriber_ = nullptr;
    // Guarded by Pool::records_mutex (appended on CUPTI's thread):
    ProfileRecords rec_;
    std::unordered_map<uint32_t, uint64_t> external_; // correlation id -> packed range id
    std::string callback_error_;
    // Training thread only:
    std::vector<RangeRecord> ranges_;
    std::vector<size_t> open_; // indices into ranges_ of the Ranges still open, innermost last
    std::vector<StepRecord> steps_;
    std::unordered_map<uint64_t, uint64_t> graph_nodes_; // graph node id -> packed range id of its capture
    int step_ = -1;
};

} // namespace llmc::prof
