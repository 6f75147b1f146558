// Memory counters of the emulated runtime (counters.h): warp-level instructions from the lanes' accesses, and
// per launch the requests, sectors, wavefronts, bank conflicts, ldmatrix and mma counts and DRAM bounds.
#include "counters.h"

#include <algorithm>
#include <unordered_map>

#include "emu.h"

namespace emu::count {
namespace {

enum class Space : uint8_t { global, shared };

// One lane's access.
struct Acc {
    uintptr_t a;
    uint32_t n;
    uint32_t lane;
    const void* base; // global: the device allocation it lies in
};
// One warp-level instruction: the accesses of its lanes.
struct Group {
    Space space;
    bool write;
    Kind kind;
    std::vector<Acc> acc;
};
struct GroupKey {
    uint64_t stamp;
    uintptr_t pc;
    uint32_t warp, occurrence;
    bool operator==(const GroupKey& o) const {
        return stamp == o.stamp && pc == o.pc && warp == o.warp && occurrence == o.occurrence;
    }
};
// splitmix64's finaliser: every input bit reaches the low bits the tables index by.
uint64_t mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
uint64_t hash_of(const GroupKey& k) {
    return mix(k.stamp * 0x9E3779B97F4A7C15ull ^ k.pc ^ ((uint64_t)k.warp << 40) ^ ((uint64_t)k.occurrence << 20));
}
uint64_t hash_of(uint64_t k) { return mix(k); }

/*
 * An open-addressing map cleared in constant time (a generation count): every access looks its instruction up,
 * and the tables are emptied at every block, so node-based maps spent most of the counting time in malloc.
 */
template <typename K, typename V> class FlatMap {
public:
    void clear() {
        if (++gen_ == 0) { // wrapped: forget every slot for real
            for (Slot& s : slots_) s.gen = 0;
            gen_ = 1;
        }
        used_ = 0;
    }
    V& operator[](const K& k) {
        if (2 * (used_ + 1) > slots_.size()) grow();
        Slot* s = find(k);
        if (s->gen != gen_) *s = {k, V{}, gen_}, used_++;
        return s->value;
    }

private:
    struct Slot {
        K key;
        V value;
        uint32_t gen = 0;
    };
    Slot* find(const K& k) {
        const size_t mask = slots_.size() - 1;
        for (size_t i = hash_of(k) & mask;; i = (i + 1) & mask)
            if (slots_[i].gen != gen_ || slots_[i].key == k) return &slots_[i];
    }
    void grow() {
        std::vector<Slot> old;
        old.swap(slots_);
        slots_.assign(old.empty() ? 1024 : 2 * old.size(), Slot{});
        const uint32_t gen = gen_;
        used_ = 0;
        for (Slot& o : old)
            if (o.gen == gen) {
                Slot* s = find(o.key);
                *s = o, used_++;
            }
    }
    std::vector<Slot> slots_;
    size_t used_ = 0;
    uint32_t gen_ = 1;
};

// A lane's occurrences of a site since its last synchronisation point.
struct Occurrence {
    uint64_t stamp;
    uint32_t count;
};

// Each device allocation's sectors touched by the launch, one bit per 32 bytes: the DRAM lower bounds.
class SectorSet {
public:
    void add(const void* base, uint64_t sector) {
        const uintptr_t b = reinterpret_cast<uintptr_t>(base);
        if (b != last_base_) {
            last_ = &bits_[b];
            last_base_ = b;
        }
        const uint64_t i = sector - (b >> 5);
        if (i / 64 >= last_->size()) last_->resize(i / 64 + 1, 0);
        (*last_)[i / 64] |= 1ull << (i % 64);
    }
    uint64_t count() const {
        uint64_t n = 0;
        for (const auto& kv : bits_)
            for (uint64_t w : kv.second) n += __builtin_popcountll(w);
        return n;
    }
    void clear() { bits_.clear(), last_base_ = 0, last_ = nullptr; }

private:
    std::unordered_map<uintptr_t, std::vector<uint64_t>> bits_;
    uintptr_t last_base_ = 0;
    std::vector<uint64_t>* last_ = nullptr;
};

std::vector<Launch> g_launches;
Launch* g_launch = nullptr;
SectorSet g_read_sectors, g_write_sectors;  // the launch's distinct sectors
std::vector<Group> g_group_pool;             // the block's instructions (storage reused across blocks)
size_t g_groups_used = 0;
FlatMap<GroupKey, uint32_t> g_groups;        // instruction -> its index in g_group_pool, plus one
FlatMap<uint64_t, Occurrence> g_occurrences; // (lane, pc) -> occurrences
std::function<std::string()> g_context;

// The distinct units of 2^shift bytes that the accesses [a, a + n) touch, sorted (sectors: 5, bank words: 2).
template <typename Accesses> std::vector<uint64_t> distinct_units(const Accesses& accesses, int shift) {
    std::vector<uint64_t> u;
    for (const auto& [a, n] : accesses)
        for (uint64_t x = a >> shift; x <= (a + n - 1) >> shift; x++) u.push_back(x);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
}

// A global request's sectors (marked in the launch's distinct ones) and the bytes its lanes asked for, each byte
// counted once (lanes reading the same bytes share them): the sectors a perfectly coalesced request of those
// bytes would take is that over 32, rounded up.
uint64_t sectors_of(const Group& g, SectorSet& distinct, uint64_t* union_bytes) {
    std::vector<std::pair<uintptr_t, size_t>> all;
    all.reserve(g.acc.size());
    for (const Acc& x : g.acc) {
        all.push_back({x.a, x.n});
        for (uint64_t s = x.a >> 5; s <= (x.a + x.n - 1) >> 5; s++) distinct.add(x.base, s);
    }
    const uint64_t sectors = distinct_units(all, 5).size();
    std::sort(all.begin(), all.end());
    uint64_t bytes = 0, end = 0;
    for (const auto& [a, n] : all) {
        if (a + n <= end) continue;
        bytes += a + n - std::max<uint64_t>(a, end);
        end = a + n;
    }
    *union_bytes = bytes;
    return sectors;
}

// Wavefronts of a shared request: its phases by access width, each as wavefronts().
void shared_request(const Group& g, uint64_t& wavefronts_sum, uint64_t& conflicts_sum) {
    size_t width = 0;
    for (const Acc& x : g.acc) width = std::max<size_t>(width, x.n);
    const int phases = width > 8 ? 4 : width > 4 ? 2 : 1, per = 32 / phases;
    std::vector<std::pair<uintptr_t, size_t>> phase;
    for (int p = 0; p < phases; p++) {
        phase.clear();
        for (const Acc& x : g.acc)
            if ((int)(x.lane % 32) / per == p) phase.push_back({x.a, x.n});
        if (phase.empty()) continue;
        const int w = count::wavefronts(phase);
        wavefronts_sum += w;
        conflicts_sum += w - 1;
    }
}

void finish(const Group& g) {
    Launch& L = *g_launch;
    if (g.space == Space::global) {
        uint64_t bytes = 0, distinct_bytes = 0;
        for (const Acc& x : g.acc) bytes += x.n;
        const uint64_t sectors = sectors_of(g, g.write ? g_write_sectors : g_read_sectors, &distinct_bytes);
        const uint64_t ideal = (distinct_bytes + 31) / 32;
        if (g.kind == Kind::ldgsts) L.ldgsts_requests++, L.ldgsts_sectors += sectors, L.ldgsts_bytes += bytes, L.ldgsts_ideal_sectors += ideal;
        else if (g.write) L.st_requests++, L.st_sectors += sectors, L.st_bytes += bytes, L.st_ideal_sectors += ideal;
        else L.ld_requests++, L.ld_sectors += sectors, L.ld_bytes += bytes, L.ld_ideal_sectors += ideal;
    } else if (g.write) {
        L.shared_st_requests++;
        shared_request(g, L.shared_st_wavefronts, L.shared_st_conflicts);
    } else {
        L.shared_ld_requests++;
        shared_request(g, L.shared_ld_wavefronts, L.shared_ld_conflicts);
    }
}

void reset_block() {
    for (size_t i = 0; i < g_groups_used; i++) g_group_pool[i].acc.clear();
    g_groups_used = 0;
    g_groups.clear(), g_occurrences.clear();
}

} // namespace

int wavefronts(const std::vector<std::pair<uintptr_t, size_t>>& phase) {
    int per_bank[32] = {};
    int most = 0;
    for (uint64_t w : distinct_units(phase, 2)) most = std::max(most, ++per_bank[w % 32]);
    return most;
}

void start() {
    g_launches.clear();
    detail::on = true;
}
std::vector<Launch> stop() {
    detail::on = false;
    return std::move(g_launches);
}

void set_context(std::function<std::string()> f) { g_context = std::move(f); }
std::string context() { return detail::on && g_context ? g_context() : std::string(); }

void host_call(const char* what, const std::string& context) {
    if (!detail::on) return;
    Launch l;
    l.kernel = what, l.context = context, l.counted = false;
    g_launches.push_back(std::move(l));
}

void begin_launch(const char* kernel, const std::string& context) {
    if (!detail::on) return;
    g_launches.emplace_back();
    g_launch = &g_launches.back();
    g_launch->kernel = kernel;
    g_launch->context = context;
    g_read_sectors.clear(), g_write_sectors.clear();
}
void end_launch() {
    if (!g_launch) return;
    g_launch->unique_read_sectors = g_read_sectors.count();
    g_launch->unique_write_sectors = g_write_sectors.count();
    g_read_sectors.clear(), g_write_sectors.clear();
    g_launch = nullptr;
}
void begin_block(int threads) {
    if (!g_launch) return;
    g_launch->blocks++;
    g_launch->threads += threads;
    reset_block();
}
void end_block() {
    if (!g_launch) return;
    for (size_t i = 0; i < g_groups_used; i++) finish(g_group_pool[i]);
    reset_block();
}

void access(const void* p, size_t n, bool write, const void* pc, int lane, int warp, uint64_t stamp, Kind kind) {
    if (!g_launch || !n) return;
    Space space;
    const void* base = nullptr;
    if (is_shared_range(p, n)) space = Space::shared;
    else if ((base = device_allocation_of(p, n))) space = Space::global;
    else return; // the thread's own stack: registers and local memory on a device
    // The lane's occurrence of this site (and direction: a read-modify-write is two instructions) since its last
    // synchronisation point.
    const uintptr_t site = reinterpret_cast<uintptr_t>(pc) * 2 + (write ? 1 : 0);
    Occurrence& o = g_occurrences[((uint64_t)lane << 48) ^ site];
    if (o.stamp != stamp || o.count == 0) o = {stamp, 0};
    o.count++;
    uint32_t& index = g_groups[GroupKey{stamp, site, (uint32_t)warp, o.count}];
    if (index == 0) {
        if (g_groups_used == g_group_pool.size()) g_group_pool.emplace_back();
        Group& g = g_group_pool[g_groups_used++];
        g.space = space, g.write = write, g.kind = kind;
        index = (uint32_t)g_groups_used;
    }
    g_group_pool[index - 1].acc.push_back({reinterpret_cast<uintptr_t>(p), (uint32_t)n, (uint32_t)lane, base});
}

void ldmatrix(const void* const rows[32]) {
    if (!g_launch) return;
    g_launch->ldsm++;
    // A shared request of a 16-byte row a lane: four phases of eight lanes, one per 8x8 matrix.
    Group g{Space::shared, false, Kind::plain, {}};
    for (int l = 0; l < 32; l++) g.acc.push_back({reinterpret_cast<uintptr_t>(rows[l]), 16, (uint32_t)l, nullptr});
    shared_request(g, g_launch->ldsm_wavefronts, g_launch->ldsm_conflicts);
}
void mma() {
    if (!g_launch) return;
    g_launch->mma++;
    g_launch->tensor_ops += 2 * 16 * 8 * 16;
}

} // namespace emu::count
