// scripts/plot_profile.py and scripts/compare_profiles.py on the committed sample profile
// (test/data/sample_profile, from dev/sample_profile.cpp) and on a CPU profile written here. They need
// python3 with matplotlib; LLMC_SKIP_PLOT_TESTS=1 skips them where neither can be installed.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "test/cpu_profile_fixture.h"
#include "test/energy_sample.h"
#include "test/one_line.h"

using testutil::expect_one_line;
using testutil::is_png;
using testutil::run;
using testutil::TempDir;

namespace {

const char* SAMPLE = "test/data/sample_profile";

// `rel` (from the repository root, the tests' working directory) as an absolute path.
std::string abs_path(const std::string& rel) {
    char buf[4096];
    return std::string(getcwd(buf, sizeof(buf)) ? buf : ".") + "/" + rel;
}

// A CPU profile written by train_gpt2 (steps 1-2 of 3) for the scripts to read, and a directory for their output.
class PlotCpuProfile : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_MATPLOTLIB();
        testutil::run_cpu_profile(cpu, 3, 1, 2); // B=4 T=16, grad_accum 2: 128 tokens per step
        ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
    }
    testutil::CpuProfileRun cpu;
    TempDir out;
};

// An inference profile written by infer_gpt2 (B=2, prompts of 8 tokens, 6 new tokens: 1 prefill step and 5
// decode steps), and a directory for the scripts' output.
class PlotInferProfile : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_MATPLOTLIB();
        auto r = run("XDG_CACHE_HOME=" + (dir / "cache") + " LLMC_POWERCAP_ROOT=" + (dir / "no_powercap") +
                     " GPT2_VOCAB_DIR=" + testutil::vocab_dir() + " ./infer_gpt2 -e d2 --prompt-len 8 -n 6 -b 2 " +
                     "--temperature 0 --profile " + profile_dir() + " > /dev/null");
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    std::string profile_dir() const { return dir / "prof"; }
    TempDir dir;
};

// Runs plot_profile.plot_roofline on a profile directory with the sub-block points it draws recorded, and
// prints how many there are against profile.json's sub-blocks with FLOPs, bytes and time, and how many lie
// elsewhere than at (flops / bytes, flops / time per step).
std::string roofline_points(const std::string& dir, const TempDir& out) {
    std::ofstream(out / "points.py") << R"py(import json, math, sys
sys.path.insert(0, "scripts")
import matplotlib
matplotlib.use("Agg")
import matplotlib.axes
import matplotlib.pyplot as plt
import plot_profile
drawn, scatter = {}, matplotlib.axes.Axes.scatter
def record(ax, x, y, *args, **kw):
    drawn[kw.get("label")] = sorted(zip(x, y))
    return scatter(ax, x, y, *args, **kw)
matplotlib.axes.Axes.scatter = record
plot_profile.plot_roofline(plot_profile.load(sys.argv[1]), plt, sys.argv[2])
with open(sys.argv[1] + "/profile.json") as f:
    rows = [s["roofline"] for s in json.load(f)["subblocks"]]
want = sorted((r["flops"] / r["bytes"], r["flops"] / r["time_per_step_s"]) for r in rows
              if (r["flops"] or 0) > 0 and (r["bytes"] or 0) > 0 and (r["time_per_step_s"] or 0) > 0)
got = drawn.get("sub-blocks", [])
off = sum(not (math.isclose(g[0], w[0], rel_tol=1e-9) and math.isclose(g[1], w[1], rel_tol=1e-9))
          for g, w in zip(got, want))
print(f"{len(got)} of {len(want)} sub-blocks drawn, {off} elsewhere")
)py";
    return run("python3 " + (out / "points.py") + " " + dir + " " + (out / "r.png")).output;
}

} // namespace

TEST(PlotProfile, SampleProfileGivesFourPngs) {
    REQUIRE_MATPLOTLIB();
    TempDir out;
    auto r = run(std::string("python3 scripts/plot_profile.py ") + SAMPLE + " -o " + out.path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
        EXPECT_TRUE(is_png(out / name)) << name;
}

TEST_F(PlotCpuProfile, WithoutPowerGivesAPlaceholder) {
    auto r = run("python3 scripts/plot_profile.py " + cpu.profile_dir()); // into the profile directory
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
        EXPECT_TRUE(is_png(cpu.profile_dir() + "/" + name)) << name;
}

TEST(PlotProfile, ClearErrors) {
    REQUIRE_MATPLOTLIB();
    auto missing = run("python3 scripts/plot_profile.py /nonexistent/profile");
    EXPECT_EQ(missing.exit_code, 2);
    EXPECT_NE(missing.output.find("no profile directory '/nonexistent/profile'"), std::string::npos) << missing.output;
    TempDir empty;
    auto incomplete = run("python3 scripts/plot_profile.py " + empty.path);
    EXPECT_EQ(incomplete.exit_code, 1);
    EXPECT_NE(incomplete.output.find("missing profile.json"), std::string::npos) << incomplete.output;
    auto cmp = run("python3 scripts/compare_profiles.py /nonexistent/a " + std::string(SAMPLE));
    EXPECT_EQ(cmp.exit_code, 2);
    EXPECT_NE(cmp.output.find("no profile directory '/nonexistent/a'"), std::string::npos) << cmp.output;
}

TEST_F(PlotCpuProfile, CompareWithSample) {
    auto r = run("python3 scripts/compare_profiles.py " + cpu.profile_dir() + " " + SAMPLE + " -o " + (out / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("A ms"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("A/B"), std::string::npos);
    EXPECT_NE(r.output.find("train_gpt2 ("), std::string::npos);
    EXPECT_NE(r.output.find("H100"), std::string::npos);
    for (const char* row : {"\nqkv          fwd", "\nqkv          bwd", "\noptimizer    opt", "\nfwd ", "\nbwd ",
                            "\ntotal "})
        EXPECT_NE(r.output.find(row), std::string::npos) << row;
    EXPECT_TRUE(is_png(out / "c.png"));
}

TEST(PlotProfile, CompareSampleWithItselfGivesOnes) {
    REQUIRE_MATPLOTLIB();
    TempDir out;
    auto r = run(std::string("cd ") + out.path + " && python3 " + abs_path("scripts/compare_profiles.py") +
                 " " + abs_path(SAMPLE) + " " + abs_path(SAMPLE));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("1.000\n"), std::string::npos) << r.output;
    EXPECT_TRUE(is_png(out / "compare.png")); // the default: compare.png in the current directory
}

// A CPU profile of a toy model against the GPT-2 sample: a warning names what differs, and --per-token turns
// each row into microseconds per token (time per step / (B * T * grad_accum)), checked against the CSV.
TEST_F(PlotCpuProfile, CompareWarnsOnDifferentShapesAndComparesPerToken) {
    const std::string cmd = "python3 scripts/compare_profiles.py " + cpu.profile_dir() + " " + SAMPLE + " -o " +
                            (out / "c.png");
    auto r = run(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("warning: A and B differ in model (L=2 NH=2 C=32 V=60 vs L=12 NH=12 C=768 V=50257), "
                            "T (16 vs 1024), grad_accum (2 vs 1): they do different work per step; --per-token"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("A ms"), std::string::npos) << r.output;

    auto t = run(cmd + " --per-token");
    ASSERT_EQ(t.exit_code, 0) << t.output;
    EXPECT_NE(t.output.find("A us/tok"), std::string::npos) << t.output;
    double qkv_us = -1;
    for (auto& row : testutil::read_csv(cpu.profile_dir() + "/subblocks.csv"))
        if (row["subblock"] == "qkv" && row["phase"] == "fwd") qkv_us = std::stod(row["time_us"]);
    ASSERT_GT(qkv_us, 0);
    size_t at = t.output.find("\nqkv          fwd");
    ASSERT_NE(at, std::string::npos) << t.output;
    double shown = std::stod(t.output.substr(at + std::string("\nqkv          fwd").size())); // column A
    EXPECT_NEAR(shown, qkv_us / 2 / 128, 1e-3 * qkv_us / 2 / 128) << t.output; // 2 steps, 4 significant digits
}

// Two profiles from the same device and program: the legends (printed as the A and B lines) differ by the
// directories' names, and profiles of the same shape draw no warning.
TEST(PlotProfile, CompareLegendsNameTheDirectories) {
    REQUIRE_MATPLOTLIB();
    TempDir copy;
    ASSERT_EQ(run("mkdir -p " + (copy / "run2") + " && cp -r " + SAMPLE + " " + (copy / "run2")).exit_code, 0);
    auto r = run(std::string("python3 scripts/compare_profiles.py ") + SAMPLE + " " + (copy / "run2/sample_profile") +
                 " -o " + (copy / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("A: data/sample_profile: train_gpt2cu ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("B: run2/sample_profile: train_gpt2cu ("), std::string::npos) << r.output;
}

// Two CPU inference profiles (batch 1 and 3): each phase's rows per step of that phase and, with --per-token,
// per token of that phase (prompt tokens for prefill, generated tokens for decode), checked against the
// profiles' own subblocks.csv and phase counts; the phase totals likewise.
TEST(PlotProfile, CompareInferenceProfilesPerPhase) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    for (const char* b : {"1", "3"}) {
        auto r = run("XDG_CACHE_HOME=" + (dir / "cache") + " LLMC_POWERCAP_ROOT=" + (dir / "no_powercap") +
                     " GPT2_VOCAB_DIR=" + testutil::vocab_dir() + " ./infer_gpt2 -e d2 --prompt-len 8 -n 6 -b " + b +
                     " --temperature 0 --profile " + (dir / ("b" + std::string(b))) + " > /dev/null");
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    // Column A of a row of the comparison (4 significant digits).
    auto column_a = [](const std::string& out, const std::string& row) {
        size_t at = out.find("\n" + row);
        EXPECT_NE(at, std::string::npos) << row << "\n" << out;
        return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 1 + row.size()));
    };
    // B=1, prompt 8, 6 new tokens: prefill is 1 step of 8 tokens, decode 5 steps of 1 token.
    const std::string a = dir / "b1";
    const auto pj = nlohmann::json::parse(testutil::slurp(a + "/profile.json"));
    std::map<std::string, std::pair<double, double>> steps_tokens;
    for (auto& ph : pj["inference"]["phases"])
        steps_tokens[ph["phase"]] = {ph["steps"].get<double>(), ph["tokens"].get<double>()};
    ASSERT_EQ(steps_tokens["prefill"], std::make_pair(1.0, 8.0));
    ASSERT_EQ(steps_tokens["decode"], std::make_pair(5.0, 5.0));
    std::map<std::string, double> qkv_us, phase_us;
    for (auto& row : testutil::read_csv(a + "/subblocks.csv")) {
        phase_us[row["phase"]] += std::stod(row["time_us"]);
        if (row["subblock"] == "qkv") qkv_us[row["phase"]] = std::stod(row["time_us"]);
    }
    const std::string cmd = "python3 scripts/compare_profiles.py " + a + " " + (dir / "b3") + " -o " + (dir / "c.png");
    for (bool per_token : {false, true}) {
        SCOPED_TRACE(per_token ? "--per-token" : "per step");
        auto r = run(cmd + (per_token ? " --per-token" : ""));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find(per_token ? "A us/tok" : "A ms"), std::string::npos) << r.output;
        EXPECT_NE(r.output.find("warning: A and B differ in B (1 vs 3)"), std::string::npos) << r.output;
        for (const char* phase : {"prefill", "decode"}) {
            const auto [steps, tokens] = steps_tokens[phase];
            // ms per step of the phase, or us per token of the phase
            auto want = [&](double us) { return per_token ? us / tokens : us / 1e3 / steps; };
            const std::string qkv_row = "qkv          " + std::string(phase) + std::string(8 - strlen(phase), ' ');
            EXPECT_NEAR(column_a(r.output, qkv_row), want(qkv_us[phase]), 1e-3 * want(qkv_us[phase])) << phase;
            const std::string total_row = std::string(phase) + std::string(21 - strlen(phase), ' ');
            EXPECT_NEAR(column_a(r.output, total_row), want(phase_us[phase]), 1e-3 * want(phase_us[phase])) << phase;
        }
        EXPECT_TRUE(is_png(dir / "c.png"));
    }
}

// Roofline labels: on the sample (sub-blocks crowded near the ridge, some on one spot) and on a CPU profile,
// no label overlaps another, and every sub-block with a point is named once.
TEST_F(PlotCpuProfile, RooflineLabelsDoNotOverlap) {
    std::ofstream(out / "check.py") << R"(import csv, sys
sys.path.insert(0, "scripts")
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import plot_profile
labels = plot_profile.plot_roofline(plot_profile.load(sys.argv[1]), plt, sys.argv[2])
bad = sum(plot_profile.overlap(a[1], b[1]) > 0 for i, a in enumerate(labels) for b in labels[:i])
named = sorted(n for text, _ in labels for n in text.split(", "))
with open(sys.argv[1] + "/subblocks.csv") as f:
    want = sorted(r["subblock"] + " " + r["phase"] for r in csv.DictReader(f)
                  if float(r["intensity"] or 0) > 0 and float(r["tflops"] or 0) > 0)
print(f"{len(labels)} labels, {bad} overlapping, names match: {named == want}")
)";
    for (const std::string& dir : {std::string(SAMPLE), cpu.profile_dir()}) {
        auto r = run("python3 " + (out / "check.py") + " " + dir + " " + (out / "r.png"));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find(" labels, 0 overlapping, names match: True"), std::string::npos) << dir << r.output;
        EXPECT_TRUE(is_png(out / "r.png"));
    }
}

// The roofline's sub-block points are profile.json's unrounded rates: on a CPU, where subblocks.csv's rates are
// thousandths of a TFLOP/s, every modelled sub-block with time is drawn, where it is (training and inference).
TEST_F(PlotCpuProfile, RooflineDrawsEverySubBlockAtItsUnroundedRate) {
    const std::string r = roofline_points(cpu.profile_dir(), out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r, m, std::regex(R"((\d+) of (\d+) sub-blocks drawn, 0 elsewhere)"))) << r;
    EXPECT_EQ(m[1], m[2]) << r;
    EXPECT_GT(std::stoi(m[2]), 20) << r; // 12 sub-blocks forward and backward, and the optimizer
}

TEST_F(PlotInferProfile, RooflineDrawsEverySubBlockAtItsUnroundedRate) {
    TempDir out;
    const std::string r = roofline_points(profile_dir(), out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r, m, std::regex(R"((\d+) of (\d+) sub-blocks drawn, 0 elsewhere)"))) << r;
    EXPECT_EQ(m[1], m[2]) << r;
    EXPECT_GT(std::stoi(m[2]), 20) << r; // 13 sub-blocks in prefill and in decode
}

// subblocks.png of an inference profile: a prefill and a decode bar per sub-block, each its time per step of
// its phase (subblocks.csv's time over profile.json's steps of that phase), labelled with the steps.
TEST_F(PlotInferProfile, SubBlocksArePrefillAndDecodeBars) {
    TempDir out;
    std::ofstream(out / "bars.py") << R"py(import csv, json, math, sys
sys.path.insert(0, "scripts")
import matplotlib
matplotlib.use("Agg")
import matplotlib.axes
import matplotlib.pyplot as plt
import plot_profile
drawn, bar = {}, matplotlib.axes.Axes.bar
def record(ax, x, height, *args, **kw):
    drawn[kw.get("label")] = sorted(h for h in height if h > 0)
    return bar(ax, x, height, *args, **kw)
matplotlib.axes.Axes.bar = record
d = sys.argv[1]
plot_profile.plot_subblocks(plot_profile.load(d), plt, sys.argv[2])
with open(d + "/profile.json") as f:
    steps = {p["phase"]: p["steps"] for p in json.load(f)["inference"]["phases"]}
with open(d + "/subblocks.csv") as f:
    rows = list(csv.DictReader(f))
for phase in ("prefill", "decode"):
    label = f"{phase} ({steps[phase]} step{'s' if steps[phase] != 1 else ''})"
    want = sorted(float(r["time_us"]) / 1e3 / steps[phase] for r in rows
                  if r["phase"] == phase and float(r["time_us"]) > 0)
    got = drawn.get(label, [])
    ok = len(got) == len(want) > 0 and all(math.isclose(g, w, rel_tol=1e-4, abs_tol=1e-6) for g, w in zip(got, want))
    print(f"{label}: {len(got)} bars of {len(want)} sub-blocks, {'right' if ok else 'wrong'} heights")
)py";
    auto r = run("python3 " + (out / "bars.py") + " " + profile_dir() + " " + (out / "s.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(prefill \(1 step\): (\d+) bars of \1 sub-blocks, right)")))
        << r.output;
    EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(decode \(5 steps\): (\d+) bars of \1 sub-blocks, right)")))
        << r.output;
    EXPECT_TRUE(is_png(out / "s.png"));
}

// A training profile against an inference one: a warning says they share no phase; each one's rows and phase
// totals are printed, none with a ratio, and there is no whole-run total to divide.
TEST_F(PlotInferProfile, CompareWithATrainingProfileWarnsAndDividesNothing) {
    testutil::CpuProfileRun train;
    testutil::run_cpu_profile(train, 3, 1, 2);
    ASSERT_EQ(train.result.exit_code, 0) << train.result.output;
    auto r = run("python3 scripts/compare_profiles.py " + train.profile_dir() + " " + profile_dir() + " -o " +
                 (dir / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("compare_profiles.py: warning: A is a training profile and B an inference one: they "
                            "share no phase, so no row has a ratio and there is no whole-run total\n"),
              std::string::npos)
        << r.output;
    for (const char* row : {"\nqkv          fwd", "\nqkv          prefill", "\nfwd ", "\ndecode "})
        EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
    EXPECT_EQ(r.output.find("\ntotal "), std::string::npos) << r.output;
    // Every row after the header, up to the plot's line, ends in an A/B of "-".
    std::istringstream lines(r.output.substr(r.output.find("\nsubblock ") + 1));
    int rows = 0;
    std::string line;
    std::getline(lines, line); // the header
    while (std::getline(lines, line) && line.rfind("wrote ", 0) != 0)
        if (!line.empty() && line.rfind("compare_profiles.py: ", 0) != 0) {
            rows++;
            EXPECT_EQ(line.substr(line.find_last_of(' ')), " -") << line;
        }
    EXPECT_GT(rows, 20) << r.output;
    EXPECT_TRUE(is_png(dir / "c.png"));
}

namespace {

// A copy of the sample profile at `d`, with `file` replaced by `text` (where file is given).
void damaged_sample(const std::string& d, const std::string& file = "", const std::string& text = "") {
    ASSERT_EQ(run("cp -r " + std::string(SAMPLE) + " " + d).exit_code, 0);
    if (!file.empty()) std::ofstream(d + "/" + file, std::ios::binary) << text;
}

} // namespace

// A profile directory whose files are damaged (profile.json empty, cut short, an array, binary; a table without the
// column it is read by): one line naming the file and exit 1 from both scripts, not a traceback, and no plot.
TEST(PlotProfile, DamagedFilesGetOneLineNamingThem) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    const std::string json = testutil::slurp(std::string(SAMPLE) + "/profile.json");
    const std::vector<std::pair<std::string, std::string>> profiles = {
        {"", "not valid JSON"},
        {json.substr(0, json.size() / 2), "not valid JSON"},
        {"[1, 2]", "not a JSON object (it holds an array)"},
        {std::string("\x89PNG\r\n\x1a\n\xff\xfe\x00\x01", 12), "not UTF-8 text"}};
    int i = 0;
    for (const auto& [text, why] : profiles) {
        const std::string d = dir / ("p" + std::to_string(i++));
        damaged_sample(d, "profile.json", text);
        SCOPED_TRACE(why);
        expect_one_line(run("python3 scripts/plot_profile.py " + d + " -o " + (dir / "out")), 1,
                        "plot_profile.py: error: ", d + "/profile.json: " + why);
        expect_one_line(run("python3 scripts/compare_profiles.py " + d + " " + SAMPLE + " -o " + (dir / "c.png")), 1,
                        "compare_profiles.py: error: ", d + "/profile.json: " + why);
    }
    std::string subblocks = testutil::slurp(std::string(SAMPLE) + "/subblocks.csv");
    damaged_sample(dir / "sub", "subblocks.csv", "sub_block" + subblocks.substr(8));
    expect_one_line(run("python3 scripts/compare_profiles.py " + std::string(SAMPLE) + " " + (dir / "sub") + " -o " +
                        (dir / "c.png")),
                    1, "compare_profiles.py: error: ", dir / "sub/subblocks.csv: not a sub-block table (no column subblock)");
    std::string kernels = testutil::slurp(std::string(SAMPLE) + "/kernels.csv");
    damaged_sample(dir / "ker", "kernels.csv", kernels.replace(kernels.find("category"), 8, "kind"));
    expect_one_line(run("python3 scripts/plot_profile.py " + (dir / "ker") + " -o " + (dir / "out")), 1,
                    "plot_profile.py: error: ", dir / "ker/kernels.csv: not a kernel table (no column category)");
    EXPECT_NE(access((dir / "out/roofline.png").c_str(), F_OK), 0);
    EXPECT_NE(access((dir / "c.png").c_str(), F_OK), 0);
}

// Where the scripts write: plot_profile.py's -o is a directory (a file given there is refused and left as it is),
// and a plot in it that is a link is not written through; compare_profiles.py writes exactly its -o, a .png file
// (a name without .png would have been written as NAME.png), and not through a link either.
TEST(PlotProfile, OutputsAreRegularFilesOrNewNames) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    const std::string notes = dir / "notes.txt";
    std::ofstream(notes) << "notes\n";
    const std::string plot = "python3 scripts/plot_profile.py " + std::string(SAMPLE) + " -o ";
    expect_one_line(run(plot + notes), 2, "plot_profile.py: error: ", "-o: '" + notes + "' exists and is not a directory");
    ASSERT_EQ(run("mkdir " + (dir / "out") + " && ln -s " + notes + " " + (dir / "out/power.png")).exit_code, 0);
    expect_one_line(run(plot + (dir / "out")), 1, "plot_profile.py: error: ",
                    dir / "out/power.png: a symbolic link; an output must be a regular file or a new name");
    EXPECT_NE(access((dir / "out/roofline.png").c_str(), F_OK), 0) << "drawn before the refusal";

    const std::string compare = "python3 scripts/compare_profiles.py " + std::string(SAMPLE) + " " + SAMPLE + " -o ";
    expect_one_line(run(compare + (dir / "c")), 2, "compare_profiles.py: error: ",
                    "-o: '" + (dir / "c") + "' is not a .png file name");
    expect_one_line(run(compare + "/dev/null"), 2, "compare_profiles.py: error: ", "-o: '/dev/null' is not a .png file name");
    EXPECT_NE(access((dir / "c.png").c_str(), F_OK), 0);
    expect_one_line(run(compare + (dir / "out/power.png")), 2, "compare_profiles.py: error: ",
                    "-o: " + (dir / "out/power.png") + ": a symbolic link; an output must be a regular file or a new name");
    EXPECT_EQ(testutil::slurp(notes), "notes\n");
    auto r = run(compare + (dir / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(testutil::has(r.output, "\nwrote " + (dir / "c.png") + "\n")) << r.output;
    EXPECT_TRUE(is_png(dir / "c.png"));
}

// Ceilings that a damaged ceiling cache leaves in profile.json (null, infinite, missing): the roofline is drawn
// without them, with one warning naming them, and the comparison, which does not use them, is as before.
TEST(PlotProfile, CeilingsThatAreNotNumbersAreLeftOutWithAWarning) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    const std::string d = dir / "prof";
    damaged_sample(d);
    ASSERT_EQ(run("python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); c = p[\"context\"][\"ceilings\"]; "
                  "c[\"bf16_tflops\"] = None; c[\"dram_gbps\"] = float(\"inf\"); del c[\"fp32_tflops\"]; "
                  "json.dump(p, open(sys.argv[1], \"w\"))' " + d + "/profile.json").exit_code, 0);
    auto r = run("python3 scripts/plot_profile.py " + d + " -o " + (dir / "out"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(testutil::has(r.output, "plot_profile.py: warning: " + d + "/profile.json: ceilings bf16_tflops (null), "
                                        "fp32_tflops (missing), dram_gbps (Infinity) are not numbers; roofline.png is "
                                        "drawn without them\n"))
        << r.output;
    const int plots = 4 + (access((d + "/energy.csv").c_str(), F_OK) == 0); // energy.png where the sample has energy.csv
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1 + plots) << r.output; // the warning, a "wrote" each
    for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
        EXPECT_TRUE(is_png(dir / ("out/" + std::string(name)))) << name;
    auto c = run("python3 scripts/compare_profiles.py " + d + " " + SAMPLE + " -o " + (dir / "c.png"));
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_TRUE(testutil::has(c.output, "\ntotal ")) << c.output;
}

// energy.png, where the profile directory has energy.csv (--energy): a bar per sub-block and phase of its joules per
// step in mJ, with error bars to the 95% interval's bounds and the part above idle as a narrower bar inside, the idle
// power and the closure in the title, and "synthetic" where profile.json's energy says so. Checked against the CSV
// by recording what is drawn. Without energy.csv there is no energy.png, and the other four are as before.
TEST(PlotProfile, EnergyPngWhereTheProfileHasEnergyCsv) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    damaged_sample(dir / "plain");
    ASSERT_EQ(run("rm -f " + (dir / "plain/energy.csv")).exit_code, 0);
    auto plain = run("python3 scripts/plot_profile.py " + (dir / "plain") + " -o " + (dir / "plain_out"));
    ASSERT_EQ(plain.exit_code, 0) << plain.output;
    EXPECT_EQ(std::count(plain.output.begin(), plain.output.end(), '\n'), 4) << plain.output;
    EXPECT_FALSE(testutil::has(plain.output, "energy")) << plain.output;
    EXPECT_NE(access((dir / "plain_out/energy.png").c_str(), F_OK), 0);
    EXPECT_TRUE(is_png(dir / "plain_out/power.png"));

    for (bool synthetic : {true, false}) {
        SCOPED_TRACE(synthetic ? "synthetic" : "measured");
        const std::string d = dir / (synthetic ? "syn" : "nvml");
        testutil::write_energy_sample(SAMPLE, d, synthetic);
        auto r = run("python3 scripts/plot_profile.py " + d + " -o " + (d + "_out"));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_TRUE(testutil::has(r.output, "\nwrote " + d + "_out/energy.png\n")) << r.output;
        EXPECT_TRUE(is_png(d + "_out/energy.png"));
        for (const char* name : {"roofline.png", "subblocks.png", "kernels.png", "power.png"})
            EXPECT_TRUE(is_png(d + "_out/" + name)) << name;
    }

    std::ofstream(dir / "bars.py") << R"py(import csv, math, sys
sys.path.insert(0, "scripts")
import matplotlib
matplotlib.use("Agg")
import matplotlib.axes
import matplotlib.pyplot as plt
import plot_profile
drawn, bar = {}, matplotlib.axes.Axes.bar
def record(ax, x, height, *args, **kw):
    drawn[kw.get("label")] = (list(height), kw.get("yerr"), kw.get("width"))
    return bar(ax, x, height, *args, **kw)
matplotlib.axes.Axes.bar = record
plot_profile.plot_energy(plot_profile.load(sys.argv[1]), plt, sys.argv[2])
ax = plt.gcf().axes[0] if plt.get_fignums() else None
with open(sys.argv[1] + "/energy.csv") as f:
    rows = [r for r in csv.DictReader(f) if r["sub_block"] not in ("step", "idle")]
close = lambda a, b: len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b))
mj = lambda key: [float(r[key]) * 1e3 for r in rows]
heights, yerr, outer = drawn["J per step"]
above, _, inner = drawn["J above idle"]
print(f"{len(heights)} bars of {len(rows)} sub-blocks")
print("heights", "right" if close(heights, mj("j_per_step")) else f"wrong {heights}")
print("below", "right" if close(yerr[0], [j - lo for j, lo in zip(mj("j_per_step"), mj("ci95_low"))]) else f"wrong {yerr[0]}")
print("above", "right" if close(yerr[1], [hi - j for j, hi in zip(mj("j_per_step"), mj("ci95_high"))]) else f"wrong {yerr[1]}")
print("above idle", "right" if close(above, mj("j_above_idle")) else f"wrong {above}", "inside" if inner < outer else "not inside")
)py";
    // The axes' labels and title, from the figure plot_energy leaves (closed: read through savefig's hook).
    std::ofstream(dir / "text.py") << R"py(import sys
sys.path.insert(0, "scripts")
import matplotlib
matplotlib.use("Agg")
import matplotlib.figure
import matplotlib.pyplot as plt
import plot_profile
save = matplotlib.figure.Figure.savefig
def record(fig, *args, **kw):
    ax = fig.axes[0]
    print(ax.get_title())
    print(ax.get_ylabel())
    print(", ".join(t.get_text() for t in ax.get_xticklabels()))
    return save(fig, *args, **kw)
matplotlib.figure.Figure.savefig = record
plot_profile.plot_energy(plot_profile.load(sys.argv[1]), plt, sys.argv[2])
)py";
    auto bars = run("python3 " + (dir / "bars.py") + " " + (dir / "syn") + " " + (dir / "e.png"));
    ASSERT_EQ(bars.exit_code, 0) << bars.output;
    EXPECT_EQ(bars.output, "5 bars of 5 sub-blocks\nheights right\nbelow right\nabove right\nabove idle right inside\n");
    auto text = run("python3 " + (dir / "text.py") + " " + (dir / "syn") + " " + (dir / "e.png"));
    ASSERT_EQ(text.exit_code, 0) << text.output;
    EXPECT_EQ(text.output, "Energy per sub-block (synthetic): train_gpt2cu on NVIDIA H100 80GB HBM3 (synthetic sample)\n"
                           "idle 90.2 W; closure: sub-blocks 0.108 J vs whole step 0.11 J (-1.8%)\n"
                           "mJ per training step\n"
                           "encoder fwd, qkv fwd, attention fwd, qkv bwd, optimizer opt\n");
    auto measured = run("python3 " + (dir / "text.py") + " " + (dir / "nvml") + " " + (dir / "e.png"));
    ASSERT_EQ(measured.exit_code, 0) << measured.output;
    EXPECT_TRUE(testutil::has(measured.output, "Energy per sub-block: train_gpt2cu on ")) << measured.output;
}

// A damaged energy.csv (the provisional layout without the columns, a number cell that is not one, a row cut short,
// binary): one line naming it and exit 1, not a traceback, and no plot drawn.
TEST(PlotProfile, DamagedEnergyCsvGetsOneLineNamingIt) {
    REQUIRE_MATPLOTLIB();
    TempDir dir;
    const std::string good = testutil::kEnergyCsv;
    const std::string header = good.substr(0, good.find('\n') + 1);
    const std::vector<std::pair<std::string, std::string>> damaged = {
        {"subblock,phase,energy_j,energy_j_err\nqkv,fwd,0.25,0.02\n", "not a sub-block energy table (no column sub_block)"},
        {header + "qkv,fwd,0-11,lots,0.012,0.0126,612.3,0.0081,,6,1.9,1980,61\n", "line 2: j_per_step 'lots' is not a number"},
        {header + "qkv,fwd,0-11,0.0123,0.012,0.0126,612.3,0.0081,,6,1.9,inf,61\n", "line 2: sm_clock_mhz 'inf' is not a number"},
        {header + "qkv,fwd,0-11,0.0123,0.012\n", "line 2: 5 fields where the header has 13"},
        {std::string("\x89PNG\r\n\x1a\n\xff\xfe\x00\x01", 12), "not UTF-8 text"}};
    int i = 0;
    for (const auto& [text, why] : damaged) {
        SCOPED_TRACE(why);
        const std::string d = dir / ("e" + std::to_string(i++));
        testutil::write_energy_sample(SAMPLE, d);
        std::ofstream(d + "/energy.csv", std::ios::binary) << text;
        expect_one_line(run("python3 scripts/plot_profile.py " + d + " -o " + (d + "_out")), 1,
                        "plot_profile.py: error: ", d + "/energy.csv: " + why);
        EXPECT_NE(access((d + "_out/roofline.png").c_str(), F_OK), 0);
        EXPECT_NE(access((d + "_out/energy.png").c_str(), F_OK), 0);
    }
}
