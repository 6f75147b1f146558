// The flag table (llmc/util/flags.h): parsing, the record of what was given, and --help written from the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "llmc/profiler/options.h"
#include "llmc/util/flags.h"
#include "llmc/util/utils.h"
#include "test/test_util.h"

namespace llmc {
namespace {

struct Opts {
    int n = 8;
    float x = 0.5f;
    std::string name = "abc";
    bool on = false;
    bool keep = true;
    size_t mem = 0;
    std::vector<int> ids{1, 2};
};

FlagTable opts_flags(Opts& o) {
    FlagTable t("usage: prog [options]", "the end\n");
    t.add({"-n", "--count", "N", "how many", flag::integer(o.n, 1, 100)});
    t.add({"-x", "--ratio", "X", "a fraction,\nof the whole", flag::real(o.x, 0.0f, 1.0f)});
    t.add({"", "--name", "S", "a name", flag::text(o.name, "must not be empty")});
    t.add({"", "--on", "", "a switch", flag::on(o.on)});
    t.add({"", "--no-keep", "", "another", flag::off(o.keep)});
    t.add({"", "--mem", "SIZE", "memory", flag::bytes(o.mem), "the device's"});
    t.add({"", "--ids", "LIST", "ids",
           flag::custom(
               o.ids,
               [](const std::string& f, const std::string& v) {
                   std::vector<int> out;
                   for (size_t pos = 0; pos <= v.size();) {
                       const size_t comma = std::min(v.find(',', pos), v.size());
                       out.push_back((int)parse_long_flag(f, v.substr(pos, comma - pos), 0, 9));
                       pos = comma + 1;
                   }
                   return out;
               },
               [](const std::vector<int>& v) { return strprintf("%zu ids", v.size()); })});
    return t;
}

void parse(FlagTable& t, std::vector<std::string> args) {
    args.insert(args.begin(), "prog");
    testutil::CommandLine cl(std::move(args));
    t.parse(cl.argc(), cl.argv());
}

std::string usage_error(std::vector<std::string> args) {
    Opts o;
    FlagTable t = opts_flags(o);
    try {
        parse(t, args);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

TEST(Flags, ShortLongAndEqualsSpellingsSetTheValueAndAreRecorded) {
    Opts o;
    FlagTable t = opts_flags(o);
    parse(t, {"-n", "5", "--ratio=0.25", "--name", "z", "--on", "--no-keep", "--mem", "1.5GiB", "--ids", "3,4,5"});
    EXPECT_EQ(o.n, 5);
    EXPECT_FLOAT_EQ(o.x, 0.25f);
    EXPECT_EQ(o.name, "z");
    EXPECT_TRUE(o.on);
    EXPECT_FALSE(o.keep);
    EXPECT_EQ(o.mem, (size_t)1610612736);
    EXPECT_EQ(o.ids, (std::vector<int>{3, 4, 5}));
    EXPECT_TRUE(t.given("--count")); // recorded under the long name whichever spelling was used
    EXPECT_TRUE(t.given("--ratio"));
    EXPECT_EQ(t.given_names().size(), 7u);
}

TEST(Flags, WhatWasNotGivenKeepsItsValueAndIsNotRecorded) {
    Opts o;
    FlagTable t = opts_flags(o);
    parse(t, {"--on"});
    EXPECT_EQ(o.n, 8);
    EXPECT_EQ(o.name, "abc");
    EXPECT_FALSE(t.given("--count"));
    EXPECT_EQ(t.given_names(), std::set<std::string>{"--on"});
}

TEST(Flags, EveryErrorNamesTheFlagAsWritten) {
    EXPECT_EQ(usage_error({"--bogus"}), "unknown flag '--bogus' (see --help)");
    EXPECT_EQ(usage_error({"--bogus=3"}), "unknown flag '--bogus' (see --help)");
    EXPECT_EQ(usage_error({"-n"}), "-n: missing value");
    EXPECT_EQ(usage_error({"--on=1"}), "--on: a switch, takes no value");
    EXPECT_EQ(usage_error({"--no-keep=0"}), "--no-keep: a switch, takes no value");
    EXPECT_EQ(usage_error({"-n", "0"}), "-n: expected an integer in [1, 100], got '0'");
    EXPECT_EQ(usage_error({"--count=101"}), "--count: expected an integer in [1, 100], got '101'");
    EXPECT_EQ(usage_error({"-n", "5x"}), "-n: expected an integer in [1, 100], got '5x'");
    EXPECT_EQ(usage_error({"-x", "nan"}), "-x: expected a number in [0, 1], got 'nan'");
    EXPECT_EQ(usage_error({"-x", "inf"}), "-x: expected a number in [0, 1], got 'inf'");
    EXPECT_EQ(usage_error({"--name="}), "--name: must not be empty");
    EXPECT_NE(usage_error({"--mem", "80XB"}).find("--mem: expected a size"), std::string::npos);
    EXPECT_NE(usage_error({"--mem", "0B"}).find("--mem: expected a size"), std::string::npos);
    EXPECT_EQ(usage_error({"--ids", "1,12"}), "--ids: expected an integer in [0, 9], got '12'");
    EXPECT_EQ(usage_error({"-n", "5", "-x", "0.5"}), "(no error)");
}

// One number grammar for every flag: what strtol/strtod take beyond plain decimals ('+', spaces, hexadecimal,
// inf, nan) is refused by integers, reals and sizes alike, and a size needs its unit.
TEST(Flags, OneNumberGrammarForEveryFlag) {
    for (const char* v : {"+8", " 8", "8 ", "0x10", "010x", "", "-", "1e1", "8.0"})
        EXPECT_EQ(usage_error({"-n", v}), std::string("-n: expected an integer in [1, 100], got '") + v + "'") << v;
    for (const char* v : {"+0.5", " 0.5", "0.5 ", "0x1p-1", "inf", "nan", ".", "e1", "1e", "0.5.1", "--0.5"})
        EXPECT_EQ(usage_error({"-x", v}), std::string("-x: expected a number in [0, 1], got '") + v + "'") << v;
    for (const char* v : {"0x10GiB", "+80GiB", " 80GiB", "80GiB ", "inf GiB", "1e999GiB", "-1GiB", "GiB", "80 GiB"})
        EXPECT_EQ(usage_error({"--mem", v}).rfind("--mem: expected a size such as 80GiB", 0), 0u)
            << v << ": " << usage_error({"--mem", v});
    EXPECT_EQ(usage_error({"--mem", "80"}), "--mem: '80' has no unit; write it with one, e.g. 80GiB, 80GB or 80B");
    EXPECT_EQ(usage_error({"--mem", "1.5e3"}), "--mem: '1.5e3' has no unit; write it with one, e.g. 1.5e3GiB, 1.5e3GB "
                                               "or 1.5e3B");
    EXPECT_EQ(usage_error({"--ids", "1,+2"}), "--ids: expected an integer in [0, 9], got '+2'");
    Opts o;
    FlagTable t = opts_flags(o);
    parse(t, {"-n", "007", "-x", ".5", "--mem", "4096B", "--ids", "0,9"});
    EXPECT_EQ(o.n, 7);
    EXPECT_FLOAT_EQ(o.x, 0.5f);
    EXPECT_EQ(o.mem, 4096u);
    for (const auto& [text, bytes] : std::vector<std::pair<std::string, size_t>>{
             {"1e3B", 1000}, {"2KB", 2000}, {"1.5GiB", 1610612736}, {"80GB", 80000000000}, {"1TiB", 1ull << 40}}) {
        Opts m;
        FlagTable tm = opts_flags(m);
        parse(tm, {"--mem", text});
        EXPECT_EQ(m.mem, bytes) << text;
    }
    Opts r;
    FlagTable tr = opts_flags(r);
    parse(tr, {"-x", "1e-3"});
    EXPECT_FLOAT_EQ(r.x, 1e-3f);
}

// A flag given twice would silently keep the last value: refused, whatever its spellings.
TEST(Flags, AFlagGivenTwiceIsRefused) {
    EXPECT_EQ(usage_error({"-n", "5", "-n", "6"}), "-n: given more than once (-n and --count are one flag); give each "
                                                   "flag once");
    EXPECT_EQ(usage_error({"-n", "5", "--count=5"}), "--count: given more than once (-n and --count are one flag); "
                                                     "give each flag once");
    EXPECT_EQ(usage_error({"--name", "a", "--name", "b"}), "--name: given more than once; give each flag once");
    EXPECT_EQ(usage_error({"--on", "--on"}), "--on: given more than once; give each flag once");
}

TEST(Flags, HelpIsWrittenFromTheTableWithTheCurrentValues) {
    Opts o;
    o.n = 42; // a table bound to changed options shows what they hold
    FlagTable t = opts_flags(o);
    const std::string h = t.help();
    EXPECT_EQ(h, "usage: prog [options]\n"
                 "  -n, --count N              how many [42]\n"
                 "  -x, --ratio X              a fraction,\n"
                 "                             of the whole [0.5]\n"
                 "      --name S               a name [abc]\n"
                 "      --on                   a switch\n"
                 "      --no-keep              another\n"
                 "      --mem SIZE             memory [the device's]\n"
                 "      --ids LIST             ids [2 ids]\n"
                 "the end\n");
}

} // namespace
} // namespace llmc

// profile_gpt2cu's table (llmc/profiler/options.cpp): --cuda-graph sets the steps' mode, and with --counters it is
// refused (the counted step would be one graph launch) with one line naming both.
namespace llmc {
TEST(ProfileFlags, CudaGraphAndItsConflictWithCounters) {
    auto parse = [](std::vector<std::string> args) {
        args.insert(args.begin(), "profile_gpt2cu");
        testutil::CommandLine cl(std::move(args));
        return parse_profile_options(cl.argc(), cl.argv());
    };
    EXPECT_FALSE(parse({}).cuda_graph);
    EXPECT_TRUE(parse({"--cuda-graph", "1"}).cuda_graph);
    EXPECT_TRUE(parse({"--counters"}).counters);
    try {
        parse({"--counters", "--cuda-graph", "1"});
        ADD_FAILURE() << "--counters with --cuda-graph 1 was taken";
    } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("--counters: the counted step would replay a CUDA graph", 0), 0u) << e.what();
    }
    EXPECT_NE(profile_usage().find("--cuda-graph 0|1"), std::string::npos) << profile_usage();
}
} // namespace llmc
