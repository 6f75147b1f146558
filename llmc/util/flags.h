/*
 * Command-line flags, one table per program (llmc/train/options.h: the trainers; llmc/infer/options.h: inference;
 * profile_gpt2.cu: the profiler program). A row names a flag once: its short and long name, its metavar, its help
 * and what setting it does (a setter that checks the value's bounds). One parser reads every program's argv from
 * its table, and --help is written from the same table with the current values of the options the table is
 * bound to (the defaults, when it is bound to a default-constructed struct).
 *
 * Syntax: "-b 8", "--batch 8" or "--batch=8"; a switch (a row without a metavar) takes no value, and
 * "--json=0" is an error rather than a switch turned on by someone who meant off. Every error is a UsageError
 * that names the flag as it was written: the programs print it on one line and exit 2.
 */
#pragma once
#include <cstddef>
#include <functional>
#include <set>
#include <string>
#include <vector>

namespace llmc {

// INT_MAX as a flag bound: the largest value an int flag takes.
constexpr long IMAX = 2147483647;

// What a flag does with its value: `set` parses and stores it (throwing a UsageError that names `flag`), `show`
// gives the current value for --help ("" = none shown). The helpers below make the usual ones.
struct FlagValue {
    std::function<void(const std::string& flag, const std::string& value)> set;
    std::function<std::string()> show;
};

struct Flag {
    std::string short_name; // "-b", or "" when the flag has only a long name
    std::string long_name;  // "--batch"
    std::string metavar;    // "N", "DIR|GLOB|FILE"; "" = a switch, which takes no value
    std::string help;       // may run over several lines ('\n'); --help appends " [default]" to the last
    FlagValue value;
    std::string default_text = ""; // shown instead of the current value when not empty
};

class FlagTable {
public:
    // usage_line: what --help prints first ("usage: train_gpt2 [options]"); epilogue: printed after the flags.
    explicit FlagTable(std::string usage_line, std::string epilogue = "");
    FlagTable& add(Flag flag);
    // Arguments that are not flags (not starting with '-') go to *out, in order; without this, any is an error.
    FlagTable& positionals(std::vector<std::string>* out) {
        positionals_ = out;
        return *this;
    }
    // Reads argv[1..argc-1] in order; throws UsageError on an unknown flag, a missing value, a switch given a
    // value, a value its setter refuses, or an argument that is not a flag where the table takes none.
    void parse(int argc, char** argv);
    // Whether the flag with this long name was on the command line.
    bool given(const std::string& long_name) const { return given_.count(long_name) > 0; }
    const std::set<std::string>& given_names() const { return given_; }
    std::string help() const;

private:
    const Flag* find(const std::string& name) const;
    std::string usage_line_, epilogue_;
    std::vector<Flag> flags_;
    std::set<std::string> given_;
    std::vector<std::string>* positionals_ = nullptr;
};

// Setters. Integers and reals must lie in [lo, hi]; a NaN or infinite real fails the range too.
namespace flag {
FlagValue integer(int& x, long lo, long hi);
FlagValue integer(long& x, long lo, long hi);
FlagValue integer(unsigned long long& x, long lo, long hi);
FlagValue real(float& x, float lo, float hi);
FlagValue text(std::string& x, const char* empty_error = nullptr); // empty_error: the message an empty value gets
FlagValue zero_or_one(bool& x);                                    // "0" or "1"
FlagValue bytes(size_t& x);                                        // 80GiB, 40GB, 512MiB, 1.5TiB or 4096B
FlagValue on(bool& x);                                             // a switch: sets x
FlagValue off(bool& x);                                            // a switch: clears x
// Any other value: `parse` turns the text into it (throwing UsageError), `show` prints it.
template <typename T, typename Parse, typename Show> FlagValue custom(T& x, Parse parse, Show show) {
    return {[&x, parse](const std::string& f, const std::string& v) { x = parse(f, v); },
            [&x, show] { return show(x); }};
}
} // namespace flag

// Rows every program with such a flag shares: -h/--help, --device-memory (with --memory-plan) and
// --energy-seconds (with --energy).
Flag help_flag(bool& help);
Flag device_memory_flag(size_t& bytes);
Flag energy_seconds_flag(float& seconds);

/*
 * The value parsers the setters use, for flags whose values have more structure (a list of ids). One number
 * grammar for every flag: an optional '-', decimal digits and, for a real, a fraction and an exponent; no '+',
 * spaces, hexadecimal, inf or nan. A size is such a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB): a
 * bare number is refused rather than read as bytes.
 */
long parse_long_flag(const std::string& flag, const std::string& v, long lo, long hi);
float parse_float_flag(const std::string& flag, const std::string& v, float lo, float hi);
size_t parse_bytes_flag(const std::string& flag, const std::string& v);

} // namespace llmc
