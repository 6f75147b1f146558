/*
 * The collection layer's join (llmc/profiler/cupti_collector.cuh): which Range each kernel, copy and memset of the
 * records belongs to. Plain C++, tested on synthetic records.
 *
 * A launch made directly belongs to the innermost Range open at its API call: CUPTI links the call's correlation id
 * to the external id that Range pushed (`external`: correlation id -> pack_range_id). Work replayed from a CUDA graph
 * was launched by one cudaGraphLaunch, under the step's Range only: the NVTX ranges and external ids of its
 * sub-blocks fired once, when the graph was captured. It carries the id of the graph node it ran as, and the
 * collector saw each node created during the capture, under the Range open then (`graph_nodes`: node id -> the
 * Range's pack_range_id, the nodes of instantiated graphs included). Such work takes its node's sub-block, phase and
 * layer, and the step of its launch: the same attribution as the eager step's kernel in that place.
 */
#pragma once
#include <cstdint>
#include <unordered_map>

#include "llmc/profiler/records.h"

namespace llmc::prof {

// Sets `where` of every kernel, memcpy and memset of r. An activity whose correlation has no external id, or whose
// graph node was not seen created, keeps what is known (nothing, or the launch's step and Range).
void attribute_activities(ProfileRecords& r, const std::unordered_map<uint32_t, uint64_t>& external,
                          const std::unordered_map<uint64_t, uint64_t>& graph_nodes);

} // namespace llmc::prof
