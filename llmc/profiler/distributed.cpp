// The merged data-parallel profile (llmc/profiler/distributed.h).
#include "llmc/profiler/distributed.h"

#include <algorithm>

#include "llmc/util/utils.h"

namespace llmc::prof {

double bus_bandwidth(Collective c, double bytes, double seconds, int world) {
    if (seconds <= 0 || world < 1) return 0;
    double n = world, factor = c == Collective::all_reduce ? 2 * (n - 1) / n
                               : c == Collective::broadcast ? 1.0
                                                            : (n - 1) / n;
    return bytes * factor / seconds / 1e9;
}

std::vector<RankRecord> gather_rank_records(Communicator& comm, const RankRecord& mine) {
    // Each rank fills its own row of a zeroed table; the sum over ranks is the whole table.
    constexpr int C = (int)Collective::COUNT, K = 5 + 6 * C;
    std::vector<double> table((size_t)comm.world() * K, 0.0);
    double* row = table.data() + (size_t)comm.rank() * K;
    const CommStats& m = mine.comm;
    row[0] = mine.steps, row[1] = mine.step_seconds, row[2] = m.exposed_seconds;
    row[3] = (double)mine.link.kind, row[4] = mine.link.peak_gbps;
    for (int c = 0; c < C; c++) {
        double* x = row + 5 + 6 * c;
        x[0] = (double)m.calls[c], x[1] = (double)m.bytes[c], x[2] = m.seconds[c];
        x[3] = (double)m.small_calls[c], x[4] = (double)m.small_bytes[c], x[5] = m.small_seconds[c];
    }
    comm.all_reduce_sum(table.data(), table.size());
    std::vector<RankRecord> out(comm.world());
    for (int r = 0; r < comm.world(); r++) {
        const double* x = table.data() + (size_t)r * K;
        RankRecord& rec = out[r];
        CommStats& s = rec.comm;
        rec.rank = r, rec.steps = (int)x[0], rec.step_seconds = x[1], s.exposed_seconds = x[2];
        rec.link = {(LinkKind)(int)x[3], x[4]};
        for (int c = 0; c < C; c++) {
            const double* y = x + 5 + 6 * c;
            s.calls[c] = (int64_t)y[0], s.bytes[c] = (int64_t)y[1], s.seconds[c] = y[2];
            s.small_calls[c] = (int64_t)y[3], s.small_bytes[c] = (int64_t)y[4], s.small_seconds[c] = y[5];
        }
    }
    return out;
}

DistributedSummary summarize_ranks(const std::vector<RankRecord>& ranks) {
    DistributedSummary s;
    s.world = (int)ranks.size();
    if (ranks.empty()) return s;
    double comm = 0, exposed = 0;
    s.link = ranks[0].link;
    for (const RankRecord& r : ranks)
        if (r.link.peak_gbps > 0 && (s.link.peak_gbps <= 0 || r.link.peak_gbps < s.link.peak_gbps)) s.link = r.link;
    for (int c = 0; c < (int)Collective::COUNT; c++)
        for (bool small : {false, true}) {
            CollectiveRow row{(Collective)c};
            row.small = small;
            for (const RankRecord& r : ranks) {
                const CommStats& x = r.comm;
                row.calls += small ? x.small_calls[c] : x.calls[c] - x.small_calls[c];
                row.bytes += small ? x.small_bytes[c] : x.bytes[c] - x.small_bytes[c];
                row.seconds += (small ? x.small_seconds[c] : x.seconds[c] - x.small_seconds[c]) / s.world;
            }
            if (row.calls == 0) continue;
            row.bus_gbps = bus_bandwidth(row.kind, (double)row.bytes / s.world, row.seconds, s.world);
            row.of_peak = s.link.peak_gbps > 0 && !small ? row.bus_gbps / s.link.peak_gbps : 0;
            comm += row.seconds;
            s.collectives.push_back(row);
        }
    int steps = 0;
    double longest = -1;
    for (const RankRecord& r : ranks) {
        exposed += r.comm.exposed_seconds / s.world;
        const double ms = r.steps ? 1e3 * r.step_seconds / r.steps : 0;
        const double wait = r.steps ? 1e3 * r.comm.exposed_seconds / r.steps : 0;
        s.step_ms.push_back(ms);
        s.wait_ms.push_back(wait);
        if (ms - wait > longest) longest = ms - wait, s.straggler = r.rank;
        steps = std::max(steps, r.steps);
    }
    s.comm_seconds = steps ? comm / steps : 0;
    s.hidden_share = comm > 0 ? std::max(0.0, 1 - exposed / comm) : 0;
    return s;
}

std::string format_distributed(const DistributedSummary& s) {
    std::string out = strprintf("data-parallel profile: %d ranks\n\ncommunication (per rank, over the training "
                                "steps)\n",
                                s.world);
    out += strprintf("%-15s %8s %14s %12s %12s %9s\n", "collective", "calls", "bytes/rank", "ms/rank", "bus GB/s",
                     "of peak");
    for (const CollectiveRow& r : s.collectives)
        out += strprintf("%-15s %8lld %14lld %12.3f %12.3f %9s\n",
                         (collective_name(r.kind) + std::string(r.small ? " small" : "")).c_str(),
                         (long long)(r.calls / s.world), (long long)(r.bytes / s.world), 1e3 * r.seconds, r.bus_gbps,
                         r.of_peak > 0 ? strprintf("%.1f%%", 100 * r.of_peak).c_str() : "-");
    out += s.link.peak_gbps > 0
               ? strprintf("link: %s, peak %.1f GB/s per direction (bus bandwidth is comparable with it)\n",
                           link_kind_name(s.link.kind), s.link.peak_gbps)
               : strprintf("link: %s, peak unknown\n", link_kind_name(s.link.kind));
    for (const CollectiveRow& r : s.collectives)
        if (r.small) {
            out += strprintf("small: messages under %lld KiB (the loss's, the norm's, small tensors'), whose time is "
                             "latency: not compared with the peak\n", (long long)(kSmallMessageBytes / 1024));
            break;
        }
    out += strprintf("\ncommunication per step: %.3f ms per rank, %.1f%% of it hidden behind compute\n",
                     1e3 * s.comm_seconds, 100 * s.hidden_share);
    out += "\nstep time per rank (mean ms per step; waiting: for communication, not hidden; computing: the rest)\n";
    out += strprintf("%-9s %10s %10s %10s\n", "rank", "step", "waiting", "computing");
    for (size_t r = 0; r < s.step_ms.size(); r++)
        out += strprintf("rank %-4zu %10.3f %10.3f %10.3f%s\n", r, s.step_ms[r], s.wait_ms[r],
                         s.step_ms[r] - s.wait_ms[r], (int)r == s.straggler ? "  <- straggler" : "");
    return out;
}

} // namespace llmc::prof
