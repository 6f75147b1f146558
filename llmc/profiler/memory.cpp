// Memory analysis and its text, CSV and pickle writers (llmc/profiler/memory.h).
#include "llmc/profiler/memory.h"

#include <algorithm>
#include <cstdint>
#include <map>

namespace llmc::prof {

// ------------------------------------------------------------------------------------------ caching allocator

namespace {

constexpr size_t kMinBlock = 512;          // every request is rounded up to this
constexpr size_t kSmallSize = 1 << 20;     // the small pool's largest request
constexpr size_t kSmallSegment = 2 << 20;  // the small pool's segments
constexpr size_t kLargeSegment = 20 << 20; // the large pool's segments for requests under kMinLargeAlloc
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kRoundLarge = 2 << 20;    // larger requests get a segment of their size rounded to this

size_t round_request(size_t n) { return n < kMinBlock ? kMinBlock : (n + kMinBlock - 1) / kMinBlock * kMinBlock; }
size_t segment_size(size_t rounded) {
    if (rounded <= kSmallSize) return kSmallSegment;
    if (rounded < kMinLargeAlloc) return kLargeSegment;
    return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

} // namespace

CachingAllocatorResult simulate_caching_allocator(const std::vector<size_t>& sizes, const std::vector<int>& events,
                                                  const std::vector<int>& event_ops) {
    CachingAllocatorResult r;
    std::vector<SimSegment> segs;
    std::map<int, std::pair<int, size_t>> where; // tensor -> (segment, block offset)
    size_t allocated = 0, requested = 0, reserved = 0;
    for (size_t e = 0; e < events.size(); e++) {
        const int ev = events[e];
        if (ev >= 0) {
            const size_t size = round_request(sizes[ev]);
            const bool small = size <= kSmallSize;
            // best fit: the smallest free block of the pool that fits, then the lowest (segment, offset)
            int best_seg = -1;
            size_t best_block = 0;
            for (size_t s = 0; s < segs.size(); s++) {
                if (segs[s].small != small) continue;
                for (size_t b = 0; b < segs[s].blocks.size(); b++) {
                    const SimBlock& k = segs[s].blocks[b];
                    if (k.allocated || k.size < size) continue;
                    if (best_seg < 0 || k.size < segs[best_seg].blocks[best_block].size)
                        best_seg = (int)s, best_block = b;
                }
            }
            if (best_seg < 0) {
                SimSegment seg;
                seg.small = small;
                seg.size = segment_size(size);
                seg.blocks.push_back({0, seg.size, 0, false, -1});
                reserved += seg.size;
                (small ? r.small_reserved : r.large_reserved) += seg.size;
                segs.push_back(seg);
                best_seg = (int)segs.size() - 1, best_block = 0;
            }
            std::vector<SimBlock>& blocks = segs[best_seg].blocks;
            SimBlock& k = blocks[best_block];
            const size_t rest = k.size - size;
            if (small ? rest >= kMinBlock : rest > kSmallSize) {
                SimBlock tail{k.offset + size, rest, 0, false, -1};
                k.size = size;
                blocks.insert(blocks.begin() + best_block + 1, tail);
            }
            SimBlock& got = blocks[best_block];
            got.allocated = true, got.requested = sizes[ev], got.tensor = ev;
            where[ev] = {best_seg, got.offset};
            allocated += got.size, requested += sizes[ev];
            r.allocations++;
            r.requested_peak = std::max(r.requested_peak, requested);
            if (allocated > r.allocated_peak) {
                r.allocated_peak = allocated;
                r.peak_op = event_ops[e];
                r.segments = segs;
            }
        } else {
            const int t = ~ev;
            auto it = where.find(t);
            if (it == where.end()) throw Error(strprintf("caching allocator: tensor %d freed but not allocated", t));
            std::vector<SimBlock>& blocks = segs[it->second.first].blocks;
            size_t b = 0;
            while (blocks[b].offset != it->second.second) b++;
            allocated -= blocks[b].size, requested -= blocks[b].requested;
            blocks[b].allocated = false, blocks[b].requested = 0, blocks[b].tensor = -1;
            where.erase(it);
            if (b + 1 < blocks.size() && !blocks[b + 1].allocated) {
                blocks[b].size += blocks[b + 1].size;
                blocks.erase(blocks.begin() + b + 1);
            }
            if (b > 0 && !blocks[b - 1].allocated) {
                blocks[b - 1].size += blocks[b].size;
                blocks.erase(blocks.begin() + b);
            }
        }
    }
    r.reserved_peak = reserved;
    return r;
}

// ------------------------------------------------------------------------------------------ analysis

void eager_sequence(const MemoryPlan& plan, std::vector<int>& events, std::vector<int>& ops) {
    events.clear(), ops.clear();
    const int n = (int)plan.tensors.size();
    auto counted = [&](int i) { return plan.tensors[i].name != "padding" && plan.tensors[i].bytes > 0; };
    for (int i = 0; i < n; i++)
        if (counted(i) && plan.tensors[i].whole_run()) events.push_back(i), ops.push_back(-1);
    for (int op = 0; op < (int)plan.ops.size(); op++) {
        for (int i = 0; i < n; i++)
            if (counted(i) && plan.tensors[i].first_use == op) events.push_back(i), ops.push_back(op);
        for (int i = 0; i < n; i++)
            if (counted(i) && !plan.tensors[i].whole_run() && plan.tensors[i].last_use == op)
                events.push_back(~i), ops.push_back(op);
    }
}

MemoryReport analyze_memory(const MemoryPlan& plan, int top_n) {
    MemoryReport r;
    r.present = !plan.allocations.empty();
    if (!r.present) return r;
    r.planned_bytes = plan.total_bytes();
    for (int k = 0; k < (int)MemoryKind::COUNT; k++) {
        KindTotal t{(MemoryKind)k, 0, 0};
        for (const PlannedTensor& x : plan.tensors)
            if (x.kind == t.kind && x.name != "padding") t.bytes += x.bytes, t.tensors++;
        if (t.bytes) r.kinds.push_back(t);
    }
    std::stable_sort(r.kinds.begin(), r.kinds.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
    const int n = (int)plan.tensors.size();
    auto by_size = [&](int a, int b) { return plan.tensors[a].bytes > plan.tensors[b].bytes; };
    for (int i = 0; i < n; i++)
        if (plan.tensors[i].name != "padding") r.top_tensors.push_back(i);
    std::stable_sort(r.top_tensors.begin(), r.top_tensors.end(), by_size);
    if ((int)r.top_tensors.size() > top_n) r.top_tensors.resize(top_n);

    // The live peak: whole-run tensors always, the others over [first_use, last_use].
    size_t always = 0;
    for (const PlannedTensor& t : plan.tensors)
        if (t.whole_run() && t.name != "padding") always += t.bytes;
    r.live_peak = always;
    for (int op = 0; op < (int)plan.ops.size(); op++) {
        size_t live = always;
        for (const PlannedTensor& t : plan.tensors)
            if (!t.whole_run() && t.first_use <= op && op <= t.last_use) live += t.bytes;
        if (live > r.live_peak || r.live_peak_op < 0) r.live_peak = live, r.live_peak_op = op;
    }
    for (int i = 0; i < n; i++) {
        const PlannedTensor& t = plan.tensors[i];
        if (t.name == "padding") continue;
        if (t.whole_run() || (r.live_peak_op >= 0 && t.first_use <= r.live_peak_op && r.live_peak_op <= t.last_use))
            r.live_at_peak.push_back(i);
    }
    std::stable_sort(r.live_at_peak.begin(), r.live_at_peak.end(), by_size);

    eager_sequence(plan, r.eager_events, r.eager_event_ops);
    std::vector<size_t> sizes(n);
    for (int i = 0; i < n; i++) sizes[i] = plan.tensors[i].bytes;
    r.caching = simulate_caching_allocator(sizes, r.eager_events, r.eager_event_ops);
    return r;
}

// ------------------------------------------------------------------------------------------ text and CSV

std::string format_bytes(size_t b) {
    if (b >= ((size_t)1 << 30)) return strprintf("%.2f GiB", b / 1073741824.0);
    if (b >= ((size_t)1 << 20)) return strprintf("%.1f MiB", b / 1048576.0);
    if (b >= ((size_t)1 << 10)) return strprintf("%.1f KiB", b / 1024.0);
    return strprintf("%zu B", b);
}

namespace {

std::string tensor_label(const PlannedTensor& t) {
    return t.layer >= 0 ? strprintf("%s[%d]", t.name.c_str(), t.layer) : t.name;
}
std::string shape_text(const std::vector<size_t>& s) {
    std::string out = "(";
    for (size_t i = 0; i < s.size(); i++) out += strprintf("%s%zu", i ? ", " : "", s[i]);
    return out + ")";
}

std::string memory_allocations_text(const MemoryPlan& plan) {
    std::string s = strprintf("  %-26s %14s %12s\n", "allocation", "bytes", "");
    for (const PlannedAllocation& a : plan.allocations)
        s += strprintf("  %-26s %14zu %12s%s\n", a.name.c_str(), a.bytes, format_bytes(a.bytes).c_str(),
                       a.per_process ? "  (once per process)" : a.transient ? "  (transient, in the first step)" : "");
    s += strprintf("  %-26s %14zu %12s\n", "total", plan.total_bytes(), format_bytes(plan.total_bytes()).c_str());
    return s;
}

std::string memory_kinds_text(const MemoryReport& r) {
    std::string s = strprintf("  %-22s %12s %8s %7s\n", "kind", "bytes", "tensors", "share");
    for (const KindTotal& k : r.kinds)
        s += strprintf("  %-22s %12s %8ld %6.1f%%\n", memory_kind_name(k.kind), format_bytes(k.bytes).c_str(), k.tensors,
                       100.0 * k.bytes / r.planned_bytes);
    return s;
}

std::string memory_peaks_text(const MemoryPlan& plan, const MemoryReport& r) {
    std::string s;
    s += strprintf("  planned (one buffer per kind, allocated up front)   %12s\n", format_bytes(r.planned_bytes).c_str());
    if (r.live_peak_op >= 0)
        s += strprintf("  live at the step's peak (%s)%*s%12s\n", plan.ops[r.live_peak_op].c_str(),
                       std::max(0, 26 - (int)plan.ops[r.live_peak_op].size()), "", format_bytes(r.live_peak).c_str());
    s += strprintf("  caching allocator (model): reserved %s, allocated peak %s, requested peak %s, %zu segments\n",
                   format_bytes(r.caching.reserved_peak).c_str(), format_bytes(r.caching.allocated_peak).c_str(),
                   format_bytes(r.caching.requested_peak).c_str(), r.caching.segments.size());
    const long long diff = (long long)r.caching.reserved_peak - (long long)r.planned_bytes;
    s += strprintf("  caching allocator reserved - planned: %s%s (alignment and tensors freed after their last use "
                   "against 512 B rounding, segment sizes and unsplit blocks)\n",
                   diff < 0 ? "-" : "+", format_bytes((size_t)std::llabs(diff)).c_str());
    return s;
}

std::string memory_top_text(const MemoryPlan& plan, const std::vector<int>& idx, const char* title) {
    std::string s = strprintf("  %s\n  %-20s %-22s %-8s %-22s %12s\n", title, "tensor", "kind", "dtype", "shape", "bytes");
    for (int i : idx) {
        const PlannedTensor& t = plan.tensors[i];
        s += strprintf("  %-20s %-22s %-8s %-22s %12s\n", tensor_label(t).c_str(), memory_kind_name(t.kind),
                       t.dtype.c_str(), shape_text(t.shape).c_str(), format_bytes(t.bytes).c_str());
    }
    return s;
}

} // namespace

std::string format_memory_report(const MemoryPlan& plan, const MemoryReport& r) {
    if (!r.present) return "";
    std::string s = strprintf("memory (%s, B=%d T=%d%s)\n", plan.program.c_str(), plan.B, plan.T,
                              plan.shards > 1 ? strprintf(", optimizer shard 1/%d", plan.shards).c_str() : "");
    s += memory_allocations_text(plan) + memory_kinds_text(r) + memory_peaks_text(plan, r);
    s += memory_top_text(plan, r.top_tensors, "largest tensors");
    if (r.live_peak_op >= 0) {
        std::vector<int> live(r.live_at_peak.begin(), r.live_at_peak.begin() + std::min<size_t>(8, r.live_at_peak.size()));
        s += memory_top_text(plan, live, strprintf("live at the peak (%zu tensors, largest 8)", r.live_at_peak.size()).c_str());
    }
    for (const std::string& n : plan.notes) s += "  note: " + n + "\n";
    return s;
}

std::string format_fit(const MemoryPlan& plan, const FitAnswer& f) {
    std::string s = strprintf("planned bytes: %zu (%s)\n", plan.total_bytes(), format_bytes(plan.total_bytes()).c_str());
    if (!f.device_bytes)
        return s + strprintf("device memory: unknown: no GPU here; for whether it fits and the largest %s, pass "
                             "--device-memory SIZE (an H100 80GB has about 79GiB free)\n",
                             f.batch_flag.c_str());
    s += strprintf("device memory: %zu (%s, %s); usable: %zu (%s, 95%%: the rest is for the CUDA context and "
                   "the libraries' own allocations)\n",
                   f.device_bytes, format_bytes(f.device_bytes).c_str(), f.source.c_str(), f.budget,
                   format_bytes(f.budget).c_str());
    s += strprintf("fits: %s\n", plan.total_bytes() <= f.budget ? "yes" : "no");
    s += strprintf("largest %s that fits (%s): %d\n", f.largest_what.c_str(), f.batch_flag.c_str(), f.largest);
    return s;
}

// ------------------------------------------------------------------------------------------ pickle

namespace {

// The few pickle (protocol 2) values a snapshot needs, written as the opcodes Python's pickle reads.
class Pickler {
public:
    std::string out = std::string("\x80\x02", 2);
    void integer(int64_t v) {
        if (v >= INT32_MIN && v <= INT32_MAX) {
            out += 'J';
            put_le((uint64_t)(uint32_t)(int32_t)v, 4);
        } else { // LONG1: little-endian two's complement, 8 bytes
            out += '\x8a';
            out += (char)8;
            put_le((uint64_t)v, 8);
        }
    }
    void boolean(bool b) { out += b ? '\x88' : '\x89'; }
    void none() { out += 'N'; }
    void string(const std::string& s) {
        out += 'X';
        put_le(s.size(), 4);
        out += s;
    }
    void begin_dict() { out += "}("; }
    void end_dict() { out += 'u'; }
    void begin_list() { out += "]("; }
    void end_list() { out += 'e'; }
    void stop() { out += '.'; }
    void key(const char* k) { string(k); }

private:
    void put_le(uint64_t v, int n) {
        for (int i = 0; i < n; i++) out += (char)((v >> (8 * i)) & 0xFF);
    }
};

// PyTorch's memory categories (torch.profiler._memory_profiler.Category) for a kind; "unknown" for the libraries'
// workspaces, which the framework does not see as tensors.
const char* torch_category(MemoryKind k) {
    switch (k) {
    case MemoryKind::parameters: return "parameter";
    case MemoryKind::gradients: return "gradient";
    case MemoryKind::master_weights:
    case MemoryKind::adam_moments: return "optimizer_state";
    case MemoryKind::activations:
    case MemoryKind::kv_cache: return "activation";
    case MemoryKind::inputs: return "input";
    case MemoryKind::activation_gradients:
    case MemoryKind::scratch: return "temporary";
    default: return "unknown";
    }
}

// The snapshot of a plan: each allocation a segment at its own address (2 MiB aligned, as a device's allocations
// are spread) tiled by blocks, then the device trace of the eager order's allocs and frees.
class SnapshotWriter {
public:
    SnapshotWriter(const MemoryPlan& plan, const MemoryReport& r) : plan_(plan), r_(r), base_(plan.allocations.size()) {
        uint64_t at = 0x7f0000000000ull;
        for (size_t a = 0; a < plan.allocations.size(); a++) {
            base_[a] = at;
            at += (plan.allocations[a].bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20) + (2 << 20);
        }
    }
    std::string str() {
        p_.begin_dict();
        p_.key("segments");
        p_.begin_list();
        for (size_t a = 0; a < plan_.allocations.size(); a++) segment(a);
        p_.end_list();
        p_.key("device_traces");
        p_.begin_list();
        device_trace();
        p_.end_list();
        p_.end_dict();
        p_.stop();
        return p_.out;
    }

private:
    // Live at the end of the trace: the whole-run tensors (the others are freed after their last use).
    static bool active(const PlannedTensor& t) { return t.whole_run() && t.name != "padding"; }

    // The stack of a tensor's allocation or free: the op that did it ("setup" before the step's ops).
    void frames(const PlannedTensor* t, int op) {
        p_.begin_list();
        if (t) {
            p_.begin_dict();
            p_.key("filename"), p_.string(op >= 0 && op < (int)plan_.ops.size() ? plan_.ops[op] : "setup");
            p_.key("line"), p_.integer(0);
            p_.key("name"), p_.string(tensor_label(*t));
            p_.end_dict();
        }
        p_.end_list();
    }

    void block(size_t a, size_t off, size_t n, const PlannedTensor* t) {
        p_.begin_dict();
        p_.key("address"), p_.integer((int64_t)(base_[a] + off));
        p_.key("size"), p_.integer((int64_t)n);
        p_.key("requested_size"), p_.integer(t ? (int64_t)n : 0);
        p_.key("state"), p_.string(t ? "active_allocated" : "inactive");
        p_.key("frames"), frames(t, -1);
        p_.end_dict();
    }

    void segment(size_t a) {
        std::vector<const PlannedTensor*> ts;
        for (const PlannedTensor& t : plan_.tensors)
            if ((size_t)t.allocation == a && active(t) && t.bytes > 0) ts.push_back(&t);
        std::sort(ts.begin(), ts.end(), [](auto* x, auto* y) { return x->offset < y->offset; });
        size_t used = 0;
        for (auto* t : ts) used += t->bytes;
        const size_t size = plan_.allocations[a].bytes;
        p_.begin_dict();
        p_.key("device"), p_.integer(0);
        p_.key("address"), p_.integer((int64_t)base_[a]);
        p_.key("total_size"), p_.integer((int64_t)size);
        for (const char* k : {"allocated_size", "active_size", "requested_size"}) p_.key(k), p_.integer((int64_t)used);
        p_.key("stream"), p_.integer(0);
        p_.key("segment_type"), p_.string(size > kSmallSegment ? "large" : "small");
        p_.key("is_expandable"), p_.boolean(false);
        p_.key("frames"), p_.begin_list(), p_.end_list();
        p_.key("blocks");
        p_.begin_list();
        size_t off = 0;
        for (auto* t : ts) {
            if (t->offset > off) block(a, off, t->offset - off, nullptr);
            block(a, t->offset, t->bytes, t);
            off = t->offset + t->bytes;
        }
        if (off < size) block(a, off, size - off, nullptr);
        p_.end_list();
        p_.end_dict();
    }

    void event(const char* action, uint64_t addr, size_t size, const char* category, const PlannedTensor* t, int op) {
        p_.begin_dict();
        p_.key("action"), p_.string(action);
        p_.key("addr"), p_.integer((int64_t)addr);
        p_.key("size"), p_.integer((int64_t)size);
        p_.key("stream"), p_.integer(0);
        p_.key("time_us"), p_.integer(time_++);
        p_.key("category"), p_.string(category);
        p_.key("frames"), frames(t, op);
        p_.end_dict();
    }

    void device_trace() {
        p_.begin_list();
        for (size_t a = 0; a < plan_.allocations.size(); a++)
            event("segment_alloc", base_[a], plan_.allocations[a].bytes, "unknown", nullptr, -1);
        for (size_t e = 0; e < r_.eager_events.size(); e++) {
            const int ev = r_.eager_events[e], i = ev >= 0 ? ev : ~ev, op = r_.eager_event_ops[e];
            const PlannedTensor& t = plan_.tensors[i];
            const uint64_t addr = base_[t.allocation] + t.offset;
            const char* category = torch_category(t.kind);
            if (ev >= 0) {
                event("alloc", addr, t.bytes, category, &t, op);
            } else {
                event("free_requested", addr, t.bytes, category, &t, op);
                event("free_completed", addr, t.bytes, category, &t, op);
            }
        }
        p_.end_list();
    }

    const MemoryPlan& plan_;
    const MemoryReport& r_;
    std::vector<uint64_t> base_;
    Pickler p_;
    long time_ = 0;
};

} // namespace

std::string memory_snapshot_pickle(const MemoryPlan& plan, const MemoryReport& r) {
    return SnapshotWriter(plan, r).str();
}

} // namespace llmc::prof
