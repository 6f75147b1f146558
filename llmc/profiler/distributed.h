/*
 * The merged profile of a data-parallel run (doc/distributed.md): every rank profiles itself into DIR/rank<r>/,
 * and rank 0 writes DIR/distributed.txt from one RankRecord per rank. Records -> analysis (summarize_ranks) ->
 * writer (format_distributed), as the rest of the profiler; none of it needs MPI or a GPU.
 */
#pragma once
#include <string>
#include <vector>

#include "llmc/train/dist.h"

namespace llmc::prof {

// What one rank measured over the run's steps.
struct RankRecord {
    int rank = 0;
    int steps = 0;
    double step_seconds = 0; // summed wall time of those steps
    CommStats comm;          // the collectives of those steps, and the part of their time the rank waited for
    Link link;               // what they crossed
};

struct CollectiveRow {
    Collective kind;
    int64_t calls = 0, bytes = 0; // summed over ranks
    double seconds = 0;           // mean per rank
    double bus_gbps = 0;          // achieved bus bandwidth (NCCL's busBw convention), GB/s
    double of_peak = 0;           // bus_gbps over the link's peak; 0 when the peak is unknown or the row small
    bool small = false;           // its messages are under kSmallMessageBytes: latency, not compared with the peak
};

struct DistributedSummary {
    int world = 0;
    Link link;                              // the slowest rank's link (a known peak beats an unknown one)
    std::vector<CollectiveRow> collectives; // those that ran: per collective its large messages, then its small
    double comm_seconds = 0;                // mean per rank per step (the run's collectives over its steps)
    double hidden_share = 0;                // of communication time, the part overlapped with compute
    std::vector<double> step_ms;            // mean step time per rank
    std::vector<double> wait_ms;            // of it, mean wait for communication per step (exposed)
    // The rank that computes longest per step (step less its wait). In synchronous training every rank's step
    // ends at the same collectives, so step times even out; the straggler is the one the others wait for.
    int straggler = -1;
};

/*
 * Bus bandwidth of a collective over `world` ranks: bytes each rank sent in over the time, times the share of
 * them a ring moves over each link: 2(N-1)/N for an all-reduce, (N-1)/N for a reduce-scatter or an all-gather,
 * 1 for a broadcast. Comparable with the link's peak whatever N is.
 */
double bus_bandwidth(Collective c, double bytes, double seconds, int world);

// Every rank's record, on every rank (a collective: all ranks call it).
std::vector<RankRecord> gather_rank_records(Communicator& comm, const RankRecord& mine);

DistributedSummary summarize_ranks(const std::vector<RankRecord>& ranks);
std::string format_distributed(const DistributedSummary& s);

} // namespace llmc::prof
