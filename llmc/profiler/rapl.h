/*
 * The CPU's energy counter, the CPU profile's counterpart of NVML's (llmc/profiler/nvml_sampler.h): the
 * kernel's powercap interface to RAPL, which Intel CPUs and AMD ones (Linux 5.8 and later) both expose as
 * <root>/intel-rapl:N, one per package ("package-N" in its `name`; its sub-domains intel-rapl:N:M, cores and
 * uncore, are inside it and not added again). Each has a cumulative `energy_uj` that wraps to 0 past
 * `max_energy_range_uj`. Reading `energy_uj` is root-only since Linux 5.10 (a side channel): where it cannot
 * be read the reader says why, and the profile reports no energy. The root is a parameter, so tests run it
 * on a fake tree.
 */
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace llmc::prof {

class RaplReader {
public:
    explicit RaplReader(std::string root = "/sys/class/powercap");
    // At least one package counter was readable when constructed.
    bool ok() const { return !domains_.empty(); }
    // Why there is no energy ("" when ok()): no powercap tree, no package domain, permission denied, ...
    const std::string& status() const { return status_; }
    size_t packages() const { return domains_.size(); }
    // Joules since construction, summed over the packages. A counter that went down wrapped once in between
    // (at the largest RAPL range a wrap takes minutes of full load: read at least once a step, it cannot wrap
    // twice); an unreadable counter adds nothing.
    double joules();

private:
    struct Domain {
        std::string energy_path;
        uint64_t max_range_uj = 0, last_uj = 0;
        double total_uj = 0;
    };
    std::vector<Domain> domains_;
    std::string status_;
};

} // namespace llmc::prof
