/*
 * NVTX ranges in the project's own domain ("llmc"): step, forward, backward, optimizer, "layer N", and each
 * sub-block of llmc/subblocks.h inside them, so `nsys` and `ncu --nvtx --nvtx-include` can select any of
 * them. Range is the one RAII type for all of them, and the single place the profiler hooks into: when a
 * hook is installed it is told every push and pop with the range's sub-block, phase and layer (it pushes
 * CUPTI external correlation ids there). Without a tool attached, NVTX calls cost a branch each.
 */
#pragma once
#include <cstdio>
#include <nvtx3/nvToolsExt.h>

#include "llmc/subblocks.h"

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
        char buf[32];
        if (layer >= 0) snprintf(buf, sizeof(buf), "%s %d", name, layer);
        push({layer >= 0 ? buf : name, -1, phase == Phase::COUNT ? -1 : (int)phase, layer});
    }
    // A sub-block range inside a phase (and a layer, for the per-layer sub-blocks).
    Range(SubBlock s, Phase p, int layer = -1) { push({subblock_name(s), (int)s, (int)p, layer}); }
    ~Range() {
        if (range_hook().pop) range_hook().pop(range_hook().ctx);
        nvtxDomainRangePop(nvtx_domain());
    }
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

private:
    static void push(const RangeInfo& info) {
        nvtxEventAttributes_t a = {};
        a.version = NVTX_VERSION;
        a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        a.messageType = NVTX_MESSAGE_TYPE_ASCII;
        a.message.ascii = info.name;
        nvtxDomainRangePushEx(nvtx_domain(), &a);
        if (range_hook().push) range_hook().push(info, range_hook().ctx);
    }
};

} // namespace llmc
