// The CPU's RAPL energy counter through powercap (llmc/profiler/rapl.h).
#include "llmc/profiler/rapl.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>

#include "llmc/util/utils.h"

namespace llmc::prof {

namespace {

// The first line of a sysfs file; false with the reason (strerror of errno) in *why.
bool read_line(const std::string& path, std::string* out, std::string* why) {
    FILE* f = fopen(path.c_str(), "r");
    if (!f) {
        const bool denied = errno == EACCES;
        *why = strprintf("%s reading %s%s", strerror(errno), path.c_str(),
                         denied ? " (energy_uj is readable by root only since Linux 5.10)" : "");
        return false;
    }
    char buf[256] = {0};
    bool got = fgets(buf, sizeof(buf), f) != nullptr;
    if (!got) *why = strprintf("%s is empty or unreadable", path.c_str());
    fclose(f);
    *out = buf;
    while (!out->empty() && (out->back() == '\n' || out->back() == '\r')) out->pop_back();
    return got;
}

bool read_u64(const std::string& path, uint64_t* v, std::string* why) {
    std::string line;
    if (!read_line(path, &line, why)) return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long x = strtoull(line.c_str(), &end, 10);
    if (line.empty() || *end || errno) {
        *why = strprintf("%s holds '%s', not a counter", path.c_str(), line.c_str());
        return false;
    }
    *v = x;
    return true;
}

// Top-level RAPL zones: "intel-rapl:N" (not "intel-rapl:N:M", a sub-domain, nor "intel-rapl-mmio:N", the same
// package through MMIO), sorted so packages are summed in a fixed order.
std::vector<std::string> top_zones(const std::string& root, std::string* why) {
    std::vector<std::string> zones;
    DIR* d = opendir(root.c_str());
    if (!d) {
        *why = strprintf("no powercap interface (%s: %s)", root.c_str(), strerror(errno));
        return zones;
    }
    while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("intel-rapl:", 0) == 0 && n.find(':', 11) == std::string::npos) zones.push_back(n);
    }
    closedir(d);
    std::sort(zones.begin(), zones.end());
    if (zones.empty()) *why = "no RAPL zone under " + root + " (not an Intel or AMD CPU, or no RAPL driver)";
    return zones;
}

} // namespace

RaplReader::RaplReader(std::string root) {
    std::string why;
    for (const std::string& zone : top_zones(root, &status_)) {
        const std::string dir = root + "/" + zone;
        std::string name;
        if (!read_line(dir + "/name", &name, &why) || name.rfind("package", 0) != 0) continue;
        Domain dom;
        dom.energy_path = dir + "/energy_uj";
        if (!read_u64(dir + "/max_energy_range_uj", &dom.max_range_uj, &why) ||
            !read_u64(dom.energy_path, &dom.last_uj, &why))
            continue;
        domains_.push_back(dom);
    }
    if (ok()) status_.clear();
    else if (status_.empty())
        status_ = why.empty() ? "no RAPL package domain under " + root : why;
}

double RaplReader::joules() {
    double uj = 0;
    for (Domain& d : domains_) {
        uint64_t now = 0;
        std::string why;
        if (read_u64(d.energy_path, &now, &why)) {
            // energy_uj runs from 0 to max_energy_range_uj inclusive, then starts again from 0.
            d.total_uj += now >= d.last_uj ? (double)(now - d.last_uj) : (double)(d.max_range_uj - d.last_uj) + 1 + now;
            d.last_uj = now;
        }
        uj += d.total_uj;
    }
    return uj * 1e-6;
}

} // namespace llmc::prof
