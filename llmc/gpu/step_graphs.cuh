/*
 * CUDA graphs for the steps the GPU programs repeat: the decoder's decode step (llmc/gpu/gpt2_decoder.cu) and the
 * trainer's micro-step and update (llmc/gpu/gpt2.cu). What a step function queues on a stream is captured once per
 * key and launched as one graph from then on, in place of the hundred-odd launches it makes.
 *
 *   StepGraphs<Key> graphs("the decode step", enabled);
 *   graphs.run(stream, key, [&] { ...queue the step's work on stream... });
 *
 * run(): the first run of a key calls the body eagerly, so what it does on first use (cuBLASLt's heuristic and the
 * autotune, which allocate and synchronise) happens outside any capture; the second captures the body into a graph,
 * instantiates it and launches it; later runs launch that graph. The rules a body keeps:
 *   - it only queues work on the stream: no host-side state changes (a capture that fails is followed by the same
 *     body run eagerly), no synchronisation, no allocation;
 *   - a graph replays each kernel with the arguments it had at the capture, and reads device memory (and pinned
 *     host memory) as it is at each launch: whatever changes between steps is in memory the step writes before
 *     run() (the decoder's positions and coins, the trainer's tokens, learning rate and bias corrections), never a
 *     kernel argument or a pointer that moves; the key names everything the body bakes in (row counts, sampling
 *     parameters), and the buffers it uses are allocated before the first run and never again.
 *
 * A capture that fails (the runtime refuses a synchronisation, an allocation or a pageable copy while a stream
 * captures; LLMC_SYNC=1 synchronises after every launch) prints one line saying why; that step and every later one
 * then run eagerly. Profiling (llmc/profiler/cupti_collector.cuh): the collector maps each graph node it sees created
 * to the Range open at its capture, so graphs are captured again whenever the Range hook changes (a graph captured
 * before the collector started has no such map).
 */
#pragma once
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "llmc/cuda_common.cuh"

namespace llmc {

/*
 * What body() queues on `stream`, as an executable graph; null when the capture failed, with *why saying what
 * failed (the error the body threw, or the capture's own). Nothing is left capturing and no error is left pending.
 */
inline cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& body, std::string* why) {
    cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *why = strprintf("cudaStreamBeginCapture: %s", cudaGetErrorString(e));
        return nullptr;
    }
    try {
        body();
    } catch (const std::exception& ex) {
        *why = ex.what();
    }
    cudaGraph_t graph = nullptr;
    e = cudaStreamEndCapture(stream, &graph);
    if (why->empty() && e != cudaSuccess) *why = strprintf("cudaStreamEndCapture: %s", cudaGetErrorString(e));
    cudaGraphExec_t exec = nullptr;
    if (why->empty()) {
        e = cudaGraphInstantiate(&exec, graph, 0);
        if (e != cudaSuccess) *why = strprintf("cudaGraphInstantiate: %s", cudaGetErrorString(e)), exec = nullptr;
    }
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return exec;
}

template <typename Key> class StepGraphs {
public:
    // what: the step, for the fallback's line ("the decode step"); enabled: false runs every step eagerly.
    StepGraphs(const char* what, bool enabled) : what_(what), enabled_(enabled) {}
    ~StepGraphs() { clear(); }
    StepGraphs(const StepGraphs&) = delete;
    StepGraphs& operator=(const StepGraphs&) = delete;

    bool enabled() const { return enabled_; }
    long launches() const { return launches_; } // steps run as a graph launch
    long captures() const { return captures_; }

    void run(cudaStream_t stream, const Key& key, const std::function<void()>& body) {
        if (!enabled_) return body();
        if (range_hook().ctx != hook_) clear(), hook_ = range_hook().ctx; // graphs captured for another profiler
        auto it = graphs_.find(key);
        if (it == graphs_.end()) {
            if (seen_.insert(key).second) return body(); // first run: eager
            std::string why;
            cudaGraphExec_t exec = capture_graph(stream, body, &why);
            if (!exec) {
                printf("cuda graphs: %s could not be captured (%s); it runs eagerly from here on\n", what_, why.c_str());
                fflush(stdout);
                enabled_ = false;
                clear();
                return body();
            }
            captures_++;
            it = graphs_.emplace(key, exec).first;
        }
        CUDA_CHECK(cudaGraphLaunch(it->second, stream));
        launches_++;
    }

private:
    void clear() {
        for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec); // in-flight launches still complete
        graphs_.clear();
    }
    const char* what_;
    bool enabled_;
    std::map<Key, cudaGraphExec_t> graphs_;
    std::set<Key> seen_;
    const void* hook_ = nullptr;
    long launches_ = 0, captures_ = 0;
};

} // namespace llmc
