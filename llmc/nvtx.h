/*
 * NVTX ranges in the project's own domain ("llmc"): step, forward, backward, optimizer, "layer N", and each
 * sub-block of llmc/model/subblocks.h inside them, so `nsys` and `ncu --nvtx --nvtx-include` can select any of
 * them. Range is the one RAII type for all of them, and the single place the profiler hooks into: when a
 * hook is installed it is told every push and pop with the range's sub-block, phase and layer (it pushes
 * CUPTI external correlation ids there). Without a tool attached, NVTX calls cost a branch each.
 * Each thread also keeps its open Ranges, innermost first, so an error can say where it happened
 * (Range::where(), used by the launch checks of llmc/cuda_common.cuh).
 */
#pragma once
#include <cstdio>
#include <string>
#include <nvtx3/nvToolsExt.h>

#include "llmc/model/subblocks.h"

namespace llmc {

struct RangeInfo {
    const char* name; // message shown by the tools ("ln1", "forward", "layer 3", ...)
    int subblock;     // (int)SubBlock, or -1 for the structural ranges
    int phase;        // (int)Phase, or -1 where the range is not inside one phase
    int layer;        // -1 outside the layer loop
};

struct RangeHook {
    void (*push)(const RangeInfo&, void* ctx) = nullptr;
    void (*pop)(void* ctx) = nullptr;
    void* ctx = nullptr;
};

inline RangeHook& range_hook() {
    static RangeHook hook;
    return hook;
}

inline nvtxDomainHandle_t nvtx_domain() {
    static nvtxDomainHandle_t d = nvtxDomainCreateA("llmc");
    return d;
}

class Range {
public:
    // A structural range: "step", "forward", "backward", "optimizer", or "layer N" when layer >= 0.
    explicit Range(const char* name, int layer = -1, Phase phase = Phase::COUNT) {
        if (layer >= 0) snprintf(name_, sizeof(name_), "%s %d", name, layer);
        push({layer >= 0 ? name_ : name, -1, phase == Phase::COUNT ? -1 : (int)phase, layer});
    }
    // A sub-block range inside a phase (and a layer, for the per-layer sub-blocks).
    Range(SubBlock s, Phase p, int layer = -1) { push({subblock_name(s), (int)s, (int)p, layer}); }
    ~Range() {
        if (range_hook().pop) range_hook().pop(range_hook().ctx);
        nvtxDomainRangePop(nvtx_domain());
        innermost() = outer_;
    }
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

    /*
     * Where this thread is: " in sub-block fc (fwd, layer 3)" for the innermost open sub-block range, else
     * " in range optimizer" for the innermost structural one, "" outside every range.
     */
    static std::string where() {
        for (const Range* r = innermost(); r; r = r->outer_) {
            const RangeInfo& i = r->info_;
            if (i.subblock < 0) continue;
            std::string s = std::string(" in sub-block ") + i.name;
            if (i.phase >= 0) s += std::string(" (") + phase_name((Phase)i.phase);
            if (i.layer >= 0) s += (i.phase >= 0 ? ", layer " : " (layer ") + std::to_string(i.layer);
            return s + (i.phase >= 0 || i.layer >= 0 ? ")" : "");
        }
        return innermost() ? std::string(" in range ") + innermost()->info_.name : "";
    }

private:
    static Range*& innermost() {
        thread_local Range* r = nullptr;
        return r;
    }
    void push(const RangeInfo& info) {
        info_ = info;
        outer_ = innermost();
        innermost() = this;
        nvtxEventAttributes_t a = {};
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = info.name;
        nvtxDomainRangePushEx(nvtx_domain(), &a);
        if (range_hook().push) range_hook().push(info, range_hook().ctx);
    }
    char name_[32] = {};
    RangeInfo info_{};
    Range* outer_ = nullptr;
};

} // namespace llmc
