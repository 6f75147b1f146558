// Memory counters of the emulated runtime (counters.h): warp-level instructions from the lanes' accesses, and
// per launch the requests, sectors, wavefronts, bank conflicts, ldmatrix and mma counts and DRAM bounds.
#include "counters.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "emu.h"

namespace emu::count {
namespace {

enum class Space : uint8_t { global, shared };

// One warp-level instruction: the accesses of its lanes.
struct Group {
    Space space;
    bool write;
    Kind kind;
    std::vector<std::pair<uintptr_t, size_t>> lane_access[32];
};
struct GroupKey {
    uint64_t stamp;
    uintptr_t pc;
    uint32_t warp, occurrence;
    bool operator==(const GroupKey& o) const {
        return stamp == o.stamp && pc == o.pc && warp == o.warp && occurrence == o.occurrence;
    }
};
struct GroupHash {
    size_t operator()(const GroupKey& k) const {
        return std::hash<uint64_t>()(k.stamp * 0x9E3779B97F4A7C15ull ^ k.pc ^ ((uint64_t)k.warp << 40) ^
                                     ((uint64_t)k.occurrence << 20));
    }
};
// A lane's occurrences of a site since its last synchronisation point.
struct Occurrence {
    uint64_t stamp;
    uint32_t count;
};

std::vector<Launch> g_launches;
Launch* g_launch = nullptr;
std::unordered_set<uint64_t> g_read_sectors, g_write_sectors; // the launch's distinct sectors
std::unordered_map<GroupKey, Group, GroupHash> g_groups;      // the block's instructions
std::unordered_map<uint64_t, Occurrence> g_occurrences;       // (lane, pc) -> occurrences

// The distinct units of 2^shift bytes that the accesses [a, a + n) touch, sorted (sectors: 5, bank words: 2).
template <typename Accesses> std::vector<uint64_t> distinct_units(const Accesses& accesses, int shift) {
    std::vector<uint64_t> u;
    for (const auto& [a, n] : accesses)
        for (uint64_t x = a >> shift; x <= (a + n - 1) >> shift; x++) u.push_back(x);
    std::sort(u.begin(), u.end());
    u.erase(std::unique(u.begin(), u.end()), u.end());
    return u;
}

uint64_t sectors_of(const Group& g, std::unordered_set<uint64_t>* distinct) {
    std::vector<std::pair<uintptr_t, size_t>> all;
    for (const auto& lane : g.lane_access) all.insert(all.end(), lane.begin(), lane.end());
    const std::vector<uint64_t> s = distinct_units(all, 5);
    if (distinct) distinct->insert(s.begin(), s.end());
    return s.size();
}

// Wavefronts of a shared request: its phases by access width, each as wavefronts().
void shared_request(const Group& g, uint64_t& wavefronts_sum, uint64_t& conflicts_sum) {
    size_t width = 0;
    for (const auto& lane : g.lane_access)
        for (const auto& acc : lane) width = std::max(width, acc.second);
    const int phases = width > 8 ? 4 : width > 4 ? 2 : 1, per = 32 / phases;
    for (int p = 0; p < phases; p++) {
        std::vector<std::pair<uintptr_t, size_t>> phase;
        for (int l = p * per; l < (p + 1) * per; l++) phase.insert(phase.end(), g.lane_access[l].begin(), g.lane_access[l].end());
        if (phase.empty()) continue;
        const int w = count::wavefronts(phase);
        wavefronts_sum += w;
        conflicts_sum += w - 1;
    }
}

void finish(const Group& g) {
    Launch& L = *g_launch;
    if (g.space == Space::global) {
        uint64_t bytes = 0;
        for (const auto& lane : g.lane_access)
            for (const auto& acc : lane) bytes += acc.second;
        const uint64_t sectors = sectors_of(g, g.write ? &g_write_sectors : &g_read_sectors);
        (g.write ? L.bytes_written : L.bytes_read) += bytes;
        if (g.kind == Kind::ldgsts) L.ldgsts_requests++, L.ldgsts_sectors += sectors;
        else if (g.write) L.st_requests++, L.st_sectors += sectors;
        else L.ld_requests++, L.ld_sectors += sectors;
    } else if (g.write) {
        L.shared_st_requests++;
        shared_request(g, L.shared_st_wavefronts, L.shared_st_conflicts);
    } else {
        L.shared_ld_requests++;
        shared_request(g, L.shared_ld_wavefronts, L.shared_ld_conflicts);
    }
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

void begin_launch(const char* kernel) {
    if (!detail::on) return;
    g_launches.emplace_back();
    g_launch = &g_launches.back();
    g_launch->kernel = kernel;
    g_read_sectors.clear(), g_write_sectors.clear();
}
void end_launch() {
    if (!g_launch) return;
    g_launch->unique_read_sectors = g_read_sectors.size();
    g_launch->unique_write_sectors = g_write_sectors.size();
    g_read_sectors.clear(), g_write_sectors.clear();
    g_launch = nullptr;
}
void begin_block(int threads) {
    if (!g_launch) return;
    g_launch->blocks++;
    g_launch->threads += threads;
    g_groups.clear(), g_occurrences.clear();
}
void end_block() {
    if (!g_launch) return;
    for (const auto& kv : g_groups) finish(kv.second);
    g_groups.clear(), g_occurrences.clear();
}

void access(const void* p, size_t n, bool write, const void* pc, int lane, int warp, uint64_t stamp, Kind kind) {
    if (!g_launch || !n) return;
    Space space;
    if (is_shared_range(p, n)) space = Space::shared;
    else if (is_device_range(p, n)) space = Space::global;
    else return; // the thread's own stack: registers and local memory on a device
    // The lane's occurrence of this site (and direction: a read-modify-write is two instructions) since its last
    // synchronisation point.
    const uintptr_t site = reinterpret_cast<uintptr_t>(pc) * 2 + (write ? 1 : 0);
    Occurrence& o = g_occurrences[((uint64_t)lane << 48) ^ site];
    if (o.stamp != stamp || o.count == 0) o = {stamp, 0};
    o.count++;
    Group& g = g_groups[GroupKey{stamp, site, (uint32_t)warp, o.count}];
    g.space = space, g.write = write, g.kind = kind;
    g.lane_access[lane % 32].push_back({reinterpret_cast<uintptr_t>(p), n});
}

void ldmatrix(const void* const rows[32]) {
    if (!g_launch) return;
    g_launch->ldsm++;
    // A shared request of a 16-byte row a lane: four phases of eight lanes, one per 8x8 matrix.
    Group g{Space::shared, false, Kind::plain, {}};
    for (int l = 0; l < 32; l++) g.lane_access[l].push_back({reinterpret_cast<uintptr_t>(rows[l]), 16});
    shared_request(g, g_launch->ldsm_wavefronts, g_launch->ldsm_conflicts);
}
void mma() {
    if (!g_launch) return;
    g_launch->mma++;
    g_launch->tensor_ops += 2 * 16 * 8 * 16;
}

} // namespace emu::count
