// The cache of measured roofline ceilings (llmc/profiler/ceiling_cache.h).
#include "llmc/profiler/ceiling_cache.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "llmc/util/utils.h"

namespace llmc::prof::ceiling_cache {

std::string dir() {
    const char* xdg = getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/llmc";
    const char* home = getenv("HOME");
    return home && *home ? std::string(home) + "/.cache/llmc" : "";
}

std::map<std::string, std::string> read(const std::string& path) {
    std::map<std::string, std::string> out;
    FILE* f = path.empty() ? nullptr : fopen(path.c_str(), "r");
    if (!f) return out;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        std::string l = line;
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        size_t sp = l.find(' ');
        if (l.empty() || l[0] == '#' || sp == std::string::npos) continue;
        out[l.substr(0, sp)] = l.substr(sp + 1);
    }
    fclose(f);
    return out;
}

double measured(const std::map<std::string, std::string>& found, const std::string& key) {
    auto it = found.find(key);
    if (it == found.end() || it->second.empty()) return 0;
    char* end = nullptr;
    errno = 0;
    const double v = strtod(it->second.c_str(), &end);
    return *end == '\0' && errno == 0 && std::isfinite(v) && v > 0 ? v : 0;
}

bool matches(const std::map<std::string, std::string>& found, const Lines& identity) {
    for (const auto& [key, value] : identity) {
        auto it = found.find(key);
        if (it == found.end() || it->second != value) return false;
    }
    return true;
}

void write(const std::string& path, const std::string& comment, const Lines& lines) {
    make_dirs(path.substr(0, path.rfind('/')));
    std::string text = "# " + comment + "; delete this file to measure again\n";
    for (const auto& [key, value] : lines) text += key + " " + value + "\n";
    AtomicFile f(path);
    f.write(text.data(), text.size());
    f.commit();
}

} // namespace llmc::prof::ceiling_cache
