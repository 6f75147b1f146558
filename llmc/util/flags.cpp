// The flag tables' parser, help writer and setters (llmc/util/flags.h).
#include "llmc/util/flags.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <utility>

#include "llmc/util/utils.h"

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

namespace {

/*
 * The one number grammar of every flag: an optional '-', decimal digits, and for a real an optional fraction and
 * exponent ("12", "-1", "3e-4", ".5", "1.5"). No sign '+', no spaces, no hexadecimal, no "inf" or "nan": what
 * strtol and strtod accept beyond that ("+8", " 8", "0x10") is refused, so every flag reads a number alike.
 */
bool is_decimal_number(const std::string& v, bool real) {
    size_t i = v.size() > 0 && v[0] == '-' ? 1 : 0;
    const size_t int_start = i;
    while (i < v.size() && isdigit((unsigned char)v[i])) i++;
    size_t digits = i - int_start;
    if (!real) return digits > 0 && i == v.size();
    if (i < v.size() && v[i] == '.') {
        const size_t frac = ++i;
        while (i < v.size() && isdigit((unsigned char)v[i])) i++;
        digits += i - frac;
    }
    if (digits == 0) return false;
    if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
        i++;
        if (i < v.size() && (v[i] == '-' || v[i] == '+')) i++;
        const size_t exp = i;
        while (i < v.size() && isdigit((unsigned char)v[i])) i++;
        if (i == exp) return false;
    }
    return i == v.size();
}

} // namespace

long parse_long_flag(const std::string& flag, const std::string& v, long lo, long hi) {
    errno = 0;
    const long x = is_decimal_number(v, false) ? strtol(v.c_str(), nullptr, 10) : 0;
    if (!is_decimal_number(v, false) || errno || x < lo || x > hi)
        throw UsageError(strprintf("%s: expected an integer in [%ld, %ld], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}

float parse_float_flag(const std::string& flag, const std::string& v, float lo, float hi) {
    const float x = is_decimal_number(v, true) ? strtof(v.c_str(), nullptr) : NAN;
    if (!(x >= lo && x <= hi)) // NaN, infinities and what is not a number fail the (finite) range too
        throw UsageError(strprintf("%s: expected a number in [%g, %g], got '%s'", flag.c_str(), lo, hi, v.c_str()));
    return x;
}

size_t parse_bytes_flag(const std::string& flag, const std::string& v) {
    static const std::pair<const char*, double> units[] = {
        {"B", 1.0},         {"KB", 1e3},           {"MB", 1e6},           {"GB", 1e9},
        {"TB", 1e12},       {"KiB", 1024.0},       {"MiB", 1048576.0},    {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}};
    size_t digits = 0;
    while (digits < v.size() && (isdigit((unsigned char)v[digits]) || strchr(".eE-", v[digits]))) digits++;
    // "1e3B": the exponent's 'e' belongs to the number; "80" alone: a number of what, the user must say.
    const std::string number = v.substr(0, digits), unit = v.substr(digits);
    if (is_decimal_number(v, true))
        throw UsageError(strprintf("%s: '%s' has no unit; write it with one, e.g. %sGiB, %sGB or %sB", flag.c_str(),
                                   v.c_str(), v.c_str(), v.c_str(), v.c_str()));
    const double n = is_decimal_number(number, true) ? strtod(number.c_str(), nullptr) : NAN;
    for (const auto& [name, scale] : units)
        if (unit == name && n > 0 && n * scale < 1.8e19 && n * scale >= 1) return (size_t)(n * scale);
    throw UsageError(strprintf("%s: expected a size such as 80GiB, 40GB, 512MiB or 4096B, got '%s'", flag.c_str(),
                               v.c_str()));
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
        if (a.flag.empty() || a.flag[0] != '-') {
            if (!positionals_) throw UsageError(strprintf("unexpected argument '%s' (see --help)", argv[i]));
            positionals_->push_back(argv[i]);
            continue;
        }
        const Flag* f = find(a.flag);
        if (!f) throw UsageError(strprintf("unknown flag '%s' (see --help)", a.flag.c_str()));
        // A second value would silently replace the first: which one the user meant is not ours to guess.
        if (given_.count(f->long_name))
            throw UsageError(strprintf("%s: given more than once%s; give each flag once", a.flag.c_str(),
                                       f->short_name.empty() ? ""
                                                             : strprintf(" (%s and %s are one flag)",
                                                                         f->short_name.c_str(), f->long_name.c_str())
                                                                   .c_str()));
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
    return {"", "--device-memory", "SIZE", "with --memory-plan: device memory to plan for, e.g. 80GiB, 40GB,\n512MiB or 4096B",
            flag::bytes(bytes), "the GPU's free memory"};
}

Flag energy_seconds_flag(float& seconds) {
    return {"", "--energy-seconds", "S", "about how long --energy measures, in seconds",
            flag::real(seconds, 1.0f, 86400.0f)};
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
    return {[&x](const std::string& f, const std::string& v) { x = parse_bytes_flag(f, v); }, nullptr};
}
FlagValue on(bool& x) {
    return {[&x](const std::string&, const std::string&) { x = true; }, nullptr};
}

FlagValue off(bool& x) {
    return {[&x](const std::string&, const std::string&) { x = false; }, nullptr};
}

} // namespace flag
} // namespace llmc
