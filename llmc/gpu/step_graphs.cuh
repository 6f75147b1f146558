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
#include <vector>

#include "llmc/cuda_common.cuh"
#include "llmc/nvtx.h"

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

/*
 * --energy's replays (llmc/profiler/energy.h): what body() queues on `stream`, split by sub-block. body() runs once:
 * the launches inside each outermost sub-block Range (llmc/nvtx.h) are captured as a graph while they are queued,
 * and the graph is launched when the Range closes, so the step's work still runs, in its order (work outside every
 * sub-block Range runs as it is queued). A (sub-block, phase) that recurs across layers keeps one graph per layer,
 * in order; replay(i, n) launches part i's graphs n times, on the buffers of the step that was captured. The body
 * keeps StepGraphs' rules. Error when a capture fails.
 */
class SubBlockGraphs {
public:
    struct Part {
        int subblock = -1, phase = -1;
        int first_layer = -1, last_layer = -1; // -1: outside the layers
        std::vector<cudaGraphExec_t> graphs;   // one per execution of the sub-block in the step, in order
    };

    SubBlockGraphs(cudaStream_t stream, const std::function<void()>& body) : stream_(stream) {
        const RangeHook saved = range_hook();
        range_hook() = RangeHook{&SubBlockGraphs::push, &SubBlockGraphs::pop, this};
        try {
            body();
        } catch (...) {
            range_hook() = saved;
            end_capture(nullptr); // nothing is left capturing
            throw;
        }
        range_hook() = saved;
        if (!error_.empty()) throw Error("sub-block graphs: " + error_);
    }
    ~SubBlockGraphs() {
        for (Part& p : parts_)
            for (cudaGraphExec_t g : p.graphs) cudaGraphExecDestroy(g);
    }
    SubBlockGraphs(const SubBlockGraphs&) = delete;
    SubBlockGraphs& operator=(const SubBlockGraphs&) = delete;

    const std::vector<Part>& parts() const { return parts_; }
    void replay(size_t part, long n) const {
        for (long i = 0; i < n; i++)
            for (cudaGraphExec_t g : parts_.at(part).graphs) CUDA_CHECK(cudaGraphLaunch(g, stream_));
    }

private:
    static void push(const RangeInfo& info, void* ctx) {
        auto* self = static_cast<SubBlockGraphs*>(ctx);
        self->depth_++;
        if (info.subblock < 0 || self->capturing_depth_ > 0 || !self->error_.empty()) return;
        cudaError_t e = cudaStreamBeginCapture(self->stream_, cudaStreamCaptureModeGlobal);
        if (e != cudaSuccess) {
            self->error_ = strprintf("cudaStreamBeginCapture in %s: %s", info.name, cudaGetErrorString(e));
            (void)cudaGetLastError();
            return;
        }
        self->capturing_depth_ = self->depth_;
        self->current_ = info;
    }
    static void pop(void* ctx) {
        auto* self = static_cast<SubBlockGraphs*>(ctx);
        if (self->capturing_depth_ == self->depth_) self->end_capture(&self->current_);
        self->depth_--;
    }
    // Ends the capture under way: instantiated, launched and kept under its part (info); null: discarded.
    void end_capture(const RangeInfo* info) {
        if (capturing_depth_ == 0) return;
        capturing_depth_ = 0;
        cudaGraph_t graph = nullptr;
        cudaError_t e = cudaStreamEndCapture(stream_, &graph);
        cudaGraphExec_t exec = nullptr;
        if (e == cudaSuccess && info) e = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (e == cudaSuccess && exec) e = cudaGraphLaunch(exec, stream_);
        if (e != cudaSuccess) {
            if (error_.empty() && info)
                error_ = strprintf("capturing %s: %s", info->name, cudaGetErrorString(e));
            (void)cudaGetLastError();
            if (exec) cudaGraphExecDestroy(exec);
            return;
        }
        if (!info) return;
        Part* part = nullptr;
        for (Part& p : parts_)
            if (p.subblock == info->subblock && p.phase == info->phase) part = &p;
        if (!part) {
            parts_.push_back({info->subblock, info->phase, info->layer, info->layer, {}});
            part = &parts_.back();
        }
        if (info->layer >= 0) {
            part->first_layer = part->first_layer < 0 ? info->layer : std::min(part->first_layer, info->layer);
            part->last_layer = std::max(part->last_layer, info->layer);
        }
        part->graphs.push_back(exec);
    }

    cudaStream_t stream_;
    std::vector<Part> parts_;
    int depth_ = 0, capturing_depth_ = 0;
    RangeInfo current_{};
    std::string error_;
};

} // namespace llmc
