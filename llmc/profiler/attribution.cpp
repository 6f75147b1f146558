// Which Range each device activity belongs to (llmc/profiler/attribution.h).
#include "llmc/profiler/attribution.h"

namespace llmc::prof {

namespace {

template <typename Record>
void attribute(std::vector<Record>& records, const std::unordered_map<uint32_t, uint64_t>& external,
               const std::unordered_map<uint64_t, uint64_t>& graph_nodes) {
    for (Record& a : records) {
        auto launch = external.find(a.correlation);
        a.where = launch == external.end() ? Attribution{} : unpack_range_id(launch->second);
        if (a.graph_node == 0) continue;
        auto node = graph_nodes.find(a.graph_node);
        if (node == graph_nodes.end()) continue;
        const int step = a.where.step; // the launch's: a graph captured in one step replays in others
        a.where = unpack_range_id(node->second);
        a.where.step = step;
    }
}

} // namespace

void attribute_activities(ProfileRecords& r, const std::unordered_map<uint32_t, uint64_t>& external,
                          const std::unordered_map<uint64_t, uint64_t>& graph_nodes) {
    attribute(r.kernels, external, graph_nodes);
    attribute(r.memcpys, external, graph_nodes);
    attribute(r.memsets, external, graph_nodes);
}

} // namespace llmc::prof
