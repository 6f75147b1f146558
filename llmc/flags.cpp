// The flag tables' parser, help writer and setters (llmc/flags.h).
#include "llmc/flags.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "llmc/utils.h"

namespace llmc {

namespace {

// Width of the names column in --help: "  -n, --checkpoint-every N   " and every shorter one.
constexpr size_t kNameColumn = 29;

// One argument: "--flag=value" carries its value; otherwise the value, if the flag takes one, is the next one.
struct Arg {
    std::string flag, value;
    bool has_value = false;
};

Arg split_arg(const std::string& arg) {
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) return {arg.substr(0, eq), arg.substr(eq + 1), true};
    return {arg, "", false};
}

std::string names_column(const Flag& f) {
    std::string s = f.short_name.empty() ? "      " : "  " + f.short_name + ", ";
    s += f.long_name;
    if (!f.metavar.empty()) s += " " + f.metavar;
    s += "  ";
    if (s.size() < kNameColumn) s.resize(kNameColumn, ' ');
    return s;
}

std::string format_float(float x) { return strprintf("%g", x); }

} // namespace

long parse_long_flag(const std::string& flag, const std::string& v, long lo, long hi) {
    errno = 0;
    char* end = nullptr;
    const long x = strtol(v.c_str(), &end, 10);
    if (v.empty() || *end || errno || x < lo || x > hi)
        throw UsageError(strprintf("%s: expected an integer in [%ld, %ld], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}

float parse_float_flag(const std::string& flag, const std::string& v, float lo, float hi) {
    char* end = nullptr;
    const float x = strtof(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi)) // NaN and infinities fail the (finite) range too
        throw UsageError(strprintf("%s: expected a number in [%g, %g], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}

FlagTable::FlagTable(std::string usage_line, std::string epilogue)
    : usage_line_(std::move(usage_line)), epilogue_(std::move(epilogue)) {}

FlagTable& FlagTable::add(Flag flag) {
    flags_.push_back(std::move(flag));
    return *this;
}

const Flag* FlagTable::find(const std::string& name) const {
    for (const Flag& f : flags_)
        if (name == f.long_name || (!f.short_name.empty() && name == f.short_name)) return &f;
    return nullptr;
}

void FlagTable::parse(int argc, char** argv) {
    for (int i = 1; i < argc; i++) {
        Arg a = split_arg(argv[i]);
        const Flag* f = find(a.flag);
        if (!f) throw UsageError(strprintf("unknown flag '%s' (see --help)", a.flag.c_str()));
        if (f->metavar.empty() && a.has_value) // "--json=0" would read as "on" to whoever wrote it as "off"
            throw UsageError(strprintf("%s: a switch, takes no value", a.flag.c_str()));
        if (!f->metavar.empty() && !a.has_value) {
            if (i + 1 >= argc) throw UsageError(strprintf("%s: missing value", a.flag.c_str()));
            a.value = argv[++i];
        }
        f->value.set(a.flag, a.value);
        given_.insert(f->long_name);
    }
}

std::string FlagTable::help() const {
    std::string out = usage_line_ + "\n";
    for (const Flag& f : flags_) {
        std::string help = f.help;
        const std::string shown = !f.default_text.empty() ? f.default_text : f.value.show ? f.value.show() : "";
        if (!shown.empty()) help += (help.empty() || help.back() == '\n' ? "[" : " [") + shown + "]";
        std::string line = names_column(f);
        for (size_t pos = 0; pos <= help.size();) { // continuation lines line up under the first
            const size_t eol = std::min(help.find('\n', pos), help.size());
            out += (pos == 0 ? line : std::string(kNameColumn, ' ')) + help.substr(pos, eol - pos) + "\n";
            pos = eol + 1;
        }
    }
    return out + epilogue_;
}

Flag help_flag(bool& help) { return {"-h", "--help", "", "this help", flag::on(help)}; }

Flag device_memory_flag(size_t& bytes) {
    return {"", "--device-memory", "SIZE", "with --memory-plan: device memory to plan for, e.g. 80GiB, 40GB,\n512MiB or bytes",
            flag::bytes(bytes), "the GPU's free memory"};
}

namespace flag {

FlagValue integer(int& x, long lo, long hi) {
    return {[&x, lo, hi](const std::string& f, const std::string& v) { x = (int)parse_long_flag(f, v, lo, hi); },
            [&x] { return std::to_string(x); }};
}
FlagValue integer(long& x, long lo, long hi) {
    return {[&x, lo, hi](const std::string& f, const std::string& v) { x = parse_long_flag(f, v, lo, hi); },
            [&x] { return std::to_string(x); }};
}
FlagValue integer(unsigned long long& x, long lo, long hi) {
    return {[&x, lo, hi](const std::string& f, const std::string& v) {
                x = (unsigned long long)parse_long_flag(f, v, lo, hi);
            },
            [&x] { return std::to_string(x); }};
}
FlagValue real(float& x, float lo, float hi) {
    return {[&x, lo, hi](const std::string& f, const std::string& v) { x = parse_float_flag(f, v, lo, hi); },
            [&x] { return format_float(x); }};
}
FlagValue text(std::string& x, const char* empty_error) {
    return {[&x, empty_error](const std::string& f, const std::string& v) {
                if (empty_error && v.empty()) throw UsageError(strprintf("%s: %s", f.c_str(), empty_error));
                x = v;
            },
            [&x] { return x; }};
}
FlagValue zero_or_one(bool& x) {
    return {[&x](const std::string& f, const std::string& v) { x = parse_long_flag(f, v, 0, 1) != 0; },
            [&x] { return std::string(x ? "1" : "0"); }};
}
FlagValue bytes(size_t& x) {
    return {[&x](const std::string& f, const std::string& v) {
                char* end = nullptr;
                const double n = strtod(v.c_str(), &end);
                const std::string unit = end ? std::string(end) : "";
                static const std::pair<const char*, double> units[] = {
                    {"", 1.0},    {"B", 1.0},      {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
                    {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
                for (const auto& [name, scale] : units)
                    if (unit == name && end != v.c_str() && n > 0 && n * scale < 1.8e19 && n * scale >= 1) {
                        x = (size_t)(n * scale);
                        return;
                    }
                throw UsageError(strprintf("%s: expected a size such as 80GiB, 40GB, 512MiB or a number of bytes, "
                                           "got '%s'", f.c_str(), v.c_str()));
            },
            nullptr};
}
FlagValue on(bool& x) {
    return {[&x](const std::string&, const std::string&) { x = true; }, nullptr};
}

FlagValue off(bool& x) {
    return {[&x](const std::string&, const std::string&) { x = false; }, nullptr};
}

} // namespace flag
} // namespace llmc
