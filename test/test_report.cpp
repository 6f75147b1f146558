// report.html (scripts/report_html.py; doc/profiling.md, "report.html"): the page every profile gets, and the
// comparison page of compare_profiles.py. Three kinds of test:
//  - the data the page embeds (<script id="report-data">) against profile.json and trace.json: the same numbers
//    and names, long lists aggregated with what was aggregated said;
//  - the page in a real browser (test/report_check.py: headless Chromium through Selenium): it loads with no
//    console error and no network request, every expected section is there and not empty, a roofline point's
//    hover names it, the sub-block table sorts by a clicked column, a 1400x900 screenshot is not blank; for the
//    sample profile, a CPU training profile and a CPU inference profile written here, and a comparison;
//  - the programs: report.html written with the profile and named by the run's closing line, and when it cannot
//    be written (no python3, no plotly, no script) one line saying so and how to write it, the profile complete.
// They need python3 with plotly (LLMC_SKIP_PLOT_TESTS=1 skips them, as the plot tests); the browser tests skip with
// one line where chromium, chromedriver or selenium is missing, and fail instead under CI (CI=true), whose
// scripts/deps.sh installs them.
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "test/cpu_profile_fixture.h"
#include "test/energy_sample.h"
#include "test/one_line.h"
#include "test/report_data.h"

using nlohmann::json;
using testutil::expect_one_line;
using testutil::has;
using testutil::page_data;
using testutil::run;
using testutil::slurp;
using testutil::TempDir;

namespace {

const char* SAMPLE = "test/data/sample_profile";
const char* REPORT = "python3 scripts/report_html.py ";

// Skips (LLMC_SKIP_PLOT_TESTS=1) or fails, naming what to install, without python3 and plotly.
#define REQUIRE_PLOTLY()                                                                                        \
    do {                                                                                                        \
        const char* skip = getenv("LLMC_SKIP_PLOT_TESTS");                                                      \
        if (skip && std::string(skip) == "1") GTEST_SKIP() << "LLMC_SKIP_PLOT_TESTS=1";                         \
        ASSERT_EQ(run("python3 -c 'import plotly'").exit_code, 0)                                               \
            << "plotly not found: python3 -m pip install plotly (bash scripts/deps.sh installs it)";            \
    } while (0)

// Skips with one line where no browser can be driven; under CI (which installs one) that is a failure.
#define REQUIRE_BROWSER()                                                                                       \
    do {                                                                                                        \
        REQUIRE_PLOTLY();                                                                                       \
        static const bool ok = run("command -v chromium && command -v chromedriver && "                        \
                                   "python3 -c 'import selenium, PIL'").exit_code == 0;                         \
        const char* ci = getenv("CI");                                                                          \
        if (!ok && ci && std::string(ci) == "true")                                                             \
            FAIL() << "CI: chromium, chromedriver or selenium missing (scripts/deps.sh installs them)";         \
        if (!ok)                                                                                                \
            GTEST_SKIP() << "no browser to test the page in: chromium, chromium-driver (Debian) and selenium "  \
                            "are installed by bash scripts/deps.sh";                                            \
    } while (0)

// A copy of the sample profile at `d` (the tests write pages into it).
void copy_sample(const std::string& d) { ASSERT_EQ(run("cp -r " + std::string(SAMPLE) + " " + d).exit_code, 0); }

// The page checked in the browser, with the sections it must have.
void expect_browser_checks(const std::string& page, const std::string& sections) {
    auto r = run("python3 test/report_check.py " + page + " --sections " + sections);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "\nall checks passed\n")) << r.output;
    EXPECT_FALSE(has(r.output, "FAIL")) << r.output;
}

double num(const json& v) { return v.is_number() ? v.get<double>() : -1; }

// The sub-block rows, the header's numbers and the findings the page embeds are profile.json's; a row's ms per
// step is its time over the steps of its phase.
void expect_same_numbers(const json& d, const json& pj, const std::map<std::string, double>& steps) {
    ASSERT_EQ(d["data_version"], 1);
    const json& h = d["header"];
    EXPECT_EQ(h["program"], pj["context"]["program"]);
    EXPECT_EQ(h["device"], pj["context"]["device"]);
    EXPECT_EQ(h["model"], pj["context"]["model"]);
    EXPECT_EQ(num(h["tokens_per_s"]), num(pj["throughput"]["tokens_per_s"]));
    EXPECT_EQ(h["mfu_pct"], pj["throughput"]["mfu_pct"]);
    EXPECT_EQ(h["j_per_token"], pj["power"]["joules_per_token"]);
    EXPECT_EQ(h["window"]["steps"], pj["throughput"]["steps"]);
    EXPECT_DOUBLE_EQ(num(h["step_ms"]), num(pj["throughput"]["wall_s"]) * 1e3 / num(pj["throughput"]["steps"]));
    ASSERT_EQ(d["subblocks"].size(), pj["subblocks"].size());
    for (size_t i = 0; i < pj["subblocks"].size(); i++) {
        const json &row = d["subblocks"][i], &want = pj["subblocks"][i];
        SCOPED_TRACE(want["subblock"].get<std::string>() + " " + want["phase"].get<std::string>());
        EXPECT_EQ(row["subblock"], want["subblock"]);
        EXPECT_EQ(row["phase"], want["phase"]);
        EXPECT_EQ(row["time_us"], want["time_us"]);
        EXPECT_EQ(row["pct"], want["pct"]);
        for (const char* k : {"flops", "bytes", "tflops", "gbps", "intensity", "pct_of_roofline", "bound"})
            EXPECT_EQ(row[k], want["roofline"][k]) << k;
        EXPECT_DOUBLE_EQ(num(row["ms_per_step"]), num(want["time_us"]) / 1e3 / steps.at(want["phase"]));
    }
    ASSERT_EQ(d["findings"].size(), pj["findings"].size());
    for (size_t i = 0; i < pj["findings"].size(); i++) {
        EXPECT_EQ(d["findings"][i]["rule"], pj["findings"][i]["rule"]);
        EXPECT_EQ(d["findings"][i]["what"], pj["findings"][i]["what"]);
        EXPECT_EQ(d["findings"][i]["ms_per_step"], pj["findings"][i]["ms_per_step"]);
    }
}

// Every roofline point of a sub-block is at profile.json's FLOPs / bytes and FLOPs / time per step.
void expect_roofline_points(const json& d, const json& pj) {
    std::map<std::string, json> want;
    for (const json& r : pj["subblocks"])
        if (num(r["roofline"]["flops"]) > 0 && num(r["roofline"]["bytes"]) > 0 && num(r["roofline"]["time_per_step_s"]) > 0)
            want[r["subblock"].get<std::string>() + " " + r["phase"].get<std::string>()] = r["roofline"];
    int points = 0;
    for (const json& p : d["roofline"]["points"]) {
        if (p["kind"] != "subblock") continue;
        points++;
        ASSERT_TRUE(want.count(p["name"])) << p["name"];
        const json& w = want[p["name"]];
        EXPECT_DOUBLE_EQ(num(p["intensity"]), num(w["flops"]) / num(w["bytes"])) << p["name"];
        EXPECT_DOUBLE_EQ(num(p["flops_per_s"]), num(w["flops"]) / num(w["time_per_step_s"])) << p["name"];
    }
    EXPECT_EQ(points, (int)want.size());
    EXPECT_GT(points, 20);
}

// The kernels: the first rows are profile.json's with the most time, the rest one row whose total is theirs.
void expect_kernels(const json& d, const json& pj) {
    std::vector<double> totals;
    for (const json& k : pj["kernels"]) totals.push_back(num(k["total_us"]));
    std::sort(totals.rbegin(), totals.rend());
    const json& k = d["kernels"];
    ASSERT_EQ(k["rows"], pj["kernels"].size());
    double rest = 0;
    for (size_t i = 0; i < totals.size(); i++)
        if (i < k["top"].size()) EXPECT_EQ(num(k["top"][i]["total_us"]), totals[i]) << i;
        else rest += totals[i];
    if (totals.size() > k["top"].size()) EXPECT_NEAR(num(k["other"]["total_us"]), rest, 1e-6 * rest);
    else EXPECT_TRUE(k["other"].is_null());
}

// The timeline is one step's kernels: as many as trace.json has for it, with their names.
void expect_timeline(const json& d, const std::string& dir) {
    const json& t = d["timeline"];
    ASSERT_TRUE(t.is_object());
    const json trace = json::parse(slurp(dir + "/trace.json"));
    std::multiset<std::string> want, got;
    for (const json& e : trace["traceEvents"])
        if (e.value("ph", "") == "X" && e.contains("args") && e["args"].value("step", -1) == t["step"] &&
            (e["cat"] == "kernel" || e["cat"] == "gpu_memcpy" || e["cat"] == "gpu_memset"))
            want.insert(e["name"].get<std::string>());
    for (const json& e : t["events"]) got.insert(t["strings"][e[3].get<int>()].get<std::string>());
    EXPECT_EQ(got, want);
    EXPECT_EQ(t["note"], "");
}

std::map<std::string, double> training_steps(const json& pj) {
    const double n = num(pj["throughput"]["steps"]);
    return {{"fwd", n}, {"bwd", n}, {"opt", n}, {"(none)", n}};
}

// A CPU training profile (train_gpt2, steps 1-2 of 3), its page written by the run.
class ReportCpuProfile : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_PLOTLY();
        testutil::run_cpu_profile(cpu, 3, 1, 2);
        ASSERT_EQ(cpu.result.exit_code, 0) << cpu.result.output;
    }
    testutil::CpuProfileRun cpu;
};

// A CPU inference profile (infer_gpt2: 2 sequences, prompts of 8, 6 new tokens), its page written by the run.
class ReportInferProfile : public testing::Test {
protected:
    void SetUp() override {
        REQUIRE_PLOTLY();
        result = run("XDG_CACHE_HOME=" + (dir / "cache") + " LLMC_POWERCAP_ROOT=" + (dir / "no_powercap") +
                     " GPT2_VOCAB_DIR=" + testutil::vocab_dir() + " ./infer_gpt2 -e d2 --prompt-len 8 -n 6 -b 2 " +
                     "--temperature 0 --profile " + profile_dir());
        ASSERT_EQ(result.exit_code, 0) << result.output;
    }
    std::string profile_dir() const { return dir / "prof"; }
    TempDir dir;
    testutil::RunResult result;
};

} // namespace

// ---- the data the page embeds ----

TEST(ReportData, SampleEmbedsProfileJsonsNumbersAndNames) {
    REQUIRE_PLOTLY();
    TempDir dir;
    copy_sample(dir / "s");
    auto r = run(REPORT + (dir / "s"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "wrote " + (dir / "s/report.html") + "\n");
    const json d = page_data(dir / "s/report.html"), pj = json::parse(slurp(dir / "s/profile.json"));
    ASSERT_TRUE(d.is_object());
    expect_same_numbers(d, pj, training_steps(pj));
    expect_roofline_points(d, pj);
    expect_kernels(d, pj);
    expect_timeline(d, dir / "s");
    // The sample's kernels are more than the page lists one by one: the rest are aggregated, and counted.
    EXPECT_EQ(d["kernels"]["top"].size(), 25u);
    EXPECT_EQ(d["kernels"]["other"]["rows"], pj["kernels"].size() - 25);
    // Hardware counters: the counted sub-blocks and every kernel_replay row of roofline.csv are points too.
    int counted = 0, kernels = 0;
    for (const json& p : d["roofline"]["points"]) counted += p["kind"] == "counted", kernels += p["kind"] == "kernel";
    EXPECT_EQ(counted, (int)pj["counters"]["subblocks"].size());
    int replay_rows = 0;
    for (auto& row : testutil::read_csv(dir / "s/roofline.csv")) replay_rows += row["scope"] == "kernel_replay";
    EXPECT_EQ(kernels, replay_rows);
    EXPECT_GT(kernels, 0);
    EXPECT_TRUE(has(d["header"]["warnings"].dump(), "synthetic data")) << d["header"]["warnings"];
    // A d12 profile's page stays small: one copy of Plotly's JavaScript and the data.
    struct stat st;
    ASSERT_EQ(stat((dir / "s/report.html").c_str(), &st), 0);
    EXPECT_LE(st.st_size, 6 * 1000 * 1000);
    const std::string html = slurp(dir / "s/report.html");
    size_t copies = 0;
    for (size_t at = 0; (at = html.find("* plotly.js v", at)) != std::string::npos; at++) copies++;
    EXPECT_EQ(copies, 1u);
}

TEST_F(ReportCpuProfile, EmbedsProfileJsonsNumbersAndNames) {
    const std::string d = cpu.profile_dir();
    const json data = page_data(d + "/report.html"), pj = json::parse(slurp(d + "/profile.json"));
    ASSERT_TRUE(data.is_object()) << cpu.result.output;
    expect_same_numbers(data, pj, training_steps(pj));
    expect_roofline_points(data, pj);
    expect_kernels(data, pj);
    expect_timeline(data, d);
    // The memory plan by category, as profile.json has it, and the live bytes replayed from the snapshot.
    ASSERT_TRUE(data["memory"].is_object());
    EXPECT_EQ(data["memory"]["kinds"], pj["memory"]["kinds"]);
    EXPECT_EQ(data["memory"]["planned_bytes"], pj["memory"]["planned_bytes"]);
    ASSERT_TRUE(data["memory"]["live"].is_object());
    EXPECT_GT(data["memory"]["live"]["events"].get<int>(), 10);
    EXPECT_TRUE(data["inference"].is_null());
    EXPECT_TRUE(data["api"].is_null()); // no CUDA calls on the CPU
}

TEST_F(ReportInferProfile, EmbedsProfileJsonsNumbersAndNames) {
    const std::string d = profile_dir();
    const json data = page_data(d + "/report.html"), pj = json::parse(slurp(d + "/profile.json"));
    ASSERT_TRUE(data.is_object()) << result.output;
    std::map<std::string, double> steps;
    for (const json& p : pj["inference"]["phases"]) steps[p["phase"]] = num(p["steps"]);
    EXPECT_EQ(steps, (std::map<std::string, double>{{"prefill", 1}, {"decode", 5}}));
    expect_same_numbers(data, pj, steps);
    expect_roofline_points(data, pj);
    EXPECT_EQ(data["phases"], json({"prefill", "decode"}));
    const json& inf = data["inference"];
    ASSERT_TRUE(inf.is_object());
    EXPECT_EQ(inf["decode_buckets"], pj["inference"]["decode_buckets"]);
    ASSERT_EQ(inf["phases"].size(), 2u);
    EXPECT_EQ(inf["ttft_ms"], pj["inference"]["phases"][0]["wall_ms"]);
    for (size_t i = 0; i < 2; i++) {
        const json &got = inf["phases"][i], &want = pj["inference"]["phases"][i];
        EXPECT_EQ(got["phase"], want["phase"]);
        for (const char* k : {"steps", "tokens", "wall_ms"}) EXPECT_EQ(got[k], want[k]) << k;
        for (const char* k : {"intensity", "pct_of_roofline", "bound"}) EXPECT_EQ(got[k], want["roofline"][k]) << k;
        EXPECT_DOUBLE_EQ(num(got["tok_s"]), num(want["tokens"]) / num(want["wall_ms"]) * 1e3);
    }
}

// energy.csv, where a profile has one (--energy), gives the energy per sub-block: its sub-block rows as the CSV has
// them (every column, numbers as numbers, an empty cell null), the whole step's and the idle row apart, the idle
// power, and the closure and how it was measured as profile.json's energy has them; every finding links to a
// section the page has. Without profile.json's energy the closure is the CSV's own: the sub-blocks' sum against
// the step row. The provisional layout (subblock, energy_j) is refused with one line.
TEST(ReportData, EnergyPerSubBlockFromEnergyCsv) {
    REQUIRE_PLOTLY();
    TempDir dir;
    testutil::write_energy_sample(SAMPLE, dir / "s");
    ASSERT_EQ(run(REPORT + (dir / "s")).exit_code, 0);
    json d = page_data(dir / "s/report.html");
    std::vector<json> want; // energy.csv's rows
    for (auto& row : testutil::read_csv(dir / "s/energy.csv")) {
        json r = json::object();
        for (auto& [k, v] : row)
            r[k] = k == "sub_block" || k == "phase" || k == "layers" ? json(v) : v.empty() ? json(nullptr) : json(std::stod(v));
        want.push_back(r);
    }
    ASSERT_EQ(want.size(), 7u);
    ASSERT_EQ(want[2]["sm_clock_mhz"], nullptr); // attention's clock and temperature are unknown
    const json e = d["power"]["subblock_energy"]; // a copy: d is read again below
    EXPECT_EQ(e["rows"], json(std::vector<json>(want.begin(), want.begin() + 5)));
    EXPECT_EQ(e["step"], want[5]);
    EXPECT_EQ(e["idle"], want[6]);
    EXPECT_EQ(e["idle_w"], 90.2);
    EXPECT_EQ(e["closure"], json::parse(R"({"sum_j": 0.10802, "step_j": 0.11, "diff_pct": -1.8})"));
    EXPECT_EQ(e["synthetic"], true);
    EXPECT_EQ(e["source"], "synthetic (scripted counter)");
    EXPECT_EQ(e["counter_period_ms"], 100.0);
    EXPECT_EQ(e["window_s"], 0.3);
    EXPECT_EQ(e["budget_s"], 60);
    EXPECT_EQ(e["repeats"], 6);
    const std::string html = slurp(dir / "s/report.html");
    for (const json& f : d["findings"]) EXPECT_TRUE(has(html, "<section id=\"" + f["section"].get<std::string>() + "\">"));

    ASSERT_EQ(run("python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); del p[\"energy\"]; "
                  "json.dump(p, open(sys.argv[1], \"w\"))' " + (dir / "s/profile.json")).exit_code, 0);
    ASSERT_EQ(run(REPORT + (dir / "s")).exit_code, 0);
    d = page_data(dir / "s/report.html");
    const json& own = d["power"]["subblock_energy"];
    EXPECT_EQ(own["rows"], e["rows"]);
    double sum = 0;
    for (int i = 0; i < 5; i++) sum += want[i]["j_per_step"].get<double>();
    EXPECT_DOUBLE_EQ(own["closure"]["sum_j"].get<double>(), sum);
    EXPECT_EQ(own["closure"]["step_j"], 0.11);
    EXPECT_DOUBLE_EQ(own["closure"]["diff_pct"].get<double>(), (sum - 0.11) / 0.11 * 100);
    EXPECT_EQ(own["idle_w"], 90.2); // the idle row's watts
    EXPECT_EQ(own["synthetic"], false);
    for (const char* k : {"source", "counter_period_ms", "window_s", "budget_s", "repeats"}) EXPECT_EQ(own[k], nullptr) << k;

    std::ofstream(dir / "s/energy.csv") << "subblock,phase,energy_j,energy_j_err\nqkv,fwd,0.25,0.02\n";
    expect_one_line(run(REPORT + (dir / "s")), 1, "report_html.py: error: ",
                    dir / "s/energy.csv: not a sub-block energy table (no column sub_block)");
}

// A step of more kernels than the timeline draws one by one: consecutive kernels of one sub-block on a stream are
// merged, every kernel's time is still drawn, and the page says what it merged.
TEST(ReportData, LongTimelinesAreAggregatedAndSaidSo) {
    REQUIRE_PLOTLY();
    TempDir dir;
    copy_sample(dir / "s");
    // Each kernel of step 1 split in 20 back to back: 5,720 kernels.
    ASSERT_EQ(run("python3 -c 'import json, sys; p = sys.argv[1]; t = json.load(open(p)); out = []\n"
                  "for e in t[\"traceEvents\"]:\n"
                  "    if e.get(\"cat\") == \"kernel\" and e[\"args\"][\"step\"] == 1:\n"
                  "        out += [dict(e, ts=e[\"ts\"] + i * e[\"dur\"] / 20, dur=e[\"dur\"] / 20) for i in range(20)]\n"
                  "    else: out.append(e)\n"
                  "t[\"traceEvents\"] = out; json.dump(t, open(p, \"w\"))' " + (dir / "s/trace.json")).exit_code, 0);
    ASSERT_EQ(run(REPORT + (dir / "s")).exit_code, 0);
    const json t = page_data(dir / "s/report.html")["timeline"];
    ASSERT_EQ(t["step"], 1);
    EXPECT_LT(t["events"].size(), 4000u);
    EXPECT_TRUE(has(t["note"].get<std::string>(), "5721 kernels and copies in this step")) << t["note"]; // and a memcpy
    double drawn = 0, want = 0;
    for (const json& e : t["events"]) drawn += num(e[2]);
    const json trace = json::parse(slurp(dir / "s/trace.json"));
    for (const json& e : trace["traceEvents"])
        if (e.value("cat", "") == "kernel" && e["args"]["step"] == 1) want += num(e["dur"]);
    EXPECT_GE(drawn, want * 0.999); // merged bars span their kernels (and the gaps between them)
}

// ---- the page in a browser ----

TEST(ReportBrowser, SampleProfile) {
    REQUIRE_BROWSER();
    TempDir dir;
    copy_sample(dir / "s");
    ASSERT_EQ(run(REPORT + (dir / "s")).exit_code, 0);
    expect_browser_checks(dir / "s/report.html", "header,findings,subblocks,roofline,timeline,kernels,api,power");
}

// A profile with energy per sub-block: its chart and table drawn in the power section with no console error, and
// hovering the tallest bar (the optimizer's) names it and gives its power.
TEST(ReportBrowser, EnergyPerSubBlock) {
    REQUIRE_BROWSER();
    TempDir dir;
    testutil::write_energy_sample(SAMPLE, dir / "s");
    ASSERT_EQ(run(REPORT + (dir / "s")).exit_code, 0);
    auto r = run("python3 test/report_check.py " + (dir / "s/report.html") +
                 " --sections header,findings,subblocks,roofline,timeline,kernels,api,power");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "\nok: hovering the energy bar 'optimizer opt' shows its name and power\n")) << r.output;
    EXPECT_TRUE(has(r.output, "\nall checks passed\n")) << r.output;
    EXPECT_FALSE(has(r.output, "FAIL")) << r.output;
}

TEST_F(ReportCpuProfile, InTheBrowser) {
    REQUIRE_BROWSER();
    expect_browser_checks(cpu.profile_dir() + "/report.html", "header,subblocks,roofline,timeline,kernels,memory");
}

TEST_F(ReportInferProfile, InTheBrowser) {
    REQUIRE_BROWSER();
    expect_browser_checks(profile_dir() + "/report.html", "header,subblocks,roofline,timeline,kernels,inference");
}

TEST_F(ReportCpuProfile, ComparisonPageInTheBrowser) {
    REQUIRE_BROWSER();
    TempDir out;
    auto r = run("python3 scripts/compare_profiles.py " + cpu.profile_dir() + " " + SAMPLE + " -o " + (out / "c.png"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "\nwrote " + (out / "c.html") + "\n")) << r.output;
    const json d = page_data(out / "c.html");
    ASSERT_TRUE(d.is_object());
    EXPECT_TRUE(has(d["warning"].get<std::string>(), "A and B differ in model")) << d["warning"];
    EXPECT_GT(d["rows"].size(), 20u);
    expect_browser_checks(out / "c.html", "comparison,rows");
}

// ---- the programs write it, or say in one line why not ----

// train_gpt2 --profile writes report.html with the profile, and the closing line names it beside the summary.
TEST_F(ReportCpuProfile, TheRunWritesItAndNamesIt) {
    const std::string d = cpu.profile_dir(), out = cpu.result.output;
    EXPECT_TRUE(llmc::file_exists(d + "/report.html"));
    EXPECT_TRUE(has(out, "profile: " + d + "/summary.txt and " + d + "/report.html: ")) << out;
    EXPECT_FALSE(has(out, "report.html not written")) << out;
}

TEST_F(ReportInferProfile, TheRunWritesIt) {
    EXPECT_TRUE(llmc::file_exists(profile_dir() + "/report.html"));
    EXPECT_FALSE(has(result.output, "report.html not written")) << result.output;
}

namespace {

// A CPU profile run with `env` before the command and `cd` into a directory first (where given), into a directory
// that held an earlier profile's report.html; the run must succeed with the profile complete and no page.
std::string run_without_page(testutil::CpuProfileRun& r, const std::string& env) {
    testutil::run_cpu_profile(r, 2, 1, 1); // the earlier profile, with its page (or not, without plotly)
    EXPECT_EQ(r.result.exit_code, 0) << r.result.output;
    std::ofstream(r.profile_dir() + "/report.html") << "an earlier profile's page\n";
    auto res = run(env + " ./train_gpt2 -i " + r.dir.path + " -e " + (r.dir / "toy_model.bin") +
                   " -b 4 -t 16 -d 128 -s 0 -v 0 -x 2 --profile " + r.profile_dir() + " --profile-start 1 --profile-steps 1");
    EXPECT_EQ(res.exit_code, 0) << res.output;
    for (const char* f : {"summary.txt", "profile.json", "trace.json", "kernels.csv"})
        EXPECT_TRUE(llmc::file_exists(r.profile_dir() + "/" + f)) << f;
    EXPECT_FALSE(llmc::file_exists(r.profile_dir() + "/report.html")) << "the earlier profile's page is left";
    EXPECT_TRUE(has(res.output, "profile: " + r.profile_dir() + "/summary.txt: ")) << res.output;
    size_t lines = 0;
    for (size_t at = 0; (at = res.output.find("report.html", at)) != std::string::npos; at++) lines++;
    EXPECT_EQ(lines, 1u) << res.output; // one line, and the closing line does not name a page
    return res.output;
}

} // namespace

TEST(ReportRun, WithoutPython3TheProfileIsCompleteAndOneLineSaysHow) {
    REQUIRE_PLOTLY();
    if (llmc::file_exists(".venv/bin/python3"))
        GTEST_SKIP() << "this checkout's .venv (scripts/deps.sh) has a python3, which the programs run the script with";
    testutil::CpuProfileRun r;
    const std::string out = run_without_page(r, "PATH=/nonexistent");
    EXPECT_TRUE(has(out, "\nprofile: report.html not written (python3 not found on PATH); write it with: python3 "
                         "scripts/report_html.py " + r.profile_dir() + "\n")) << out;
}

TEST(ReportRun, WithoutPlotlyTheProfileIsCompleteAndOneLineSaysHow) {
    REQUIRE_PLOTLY();
    testutil::CpuProfileRun r;
    // A plotly package that cannot be imported, found first.
    ASSERT_EQ(run("mkdir -p " + (r.dir / "fake/plotly") + " && echo 'raise ImportError(\"no plotly here\")' > " +
                  (r.dir / "fake/plotly/__init__.py")).exit_code, 0);
    const std::string out = run_without_page(r, "PYTHONPATH=" + (r.dir / "fake"));
    EXPECT_TRUE(has(out, "\nprofile: report.html not written (plotly is not installed (python3 -m pip install plotly)); "
                         "write it with: python3 scripts/report_html.py " + r.profile_dir() + "\n")) << out;
}

TEST(ReportRun, WithoutTheScriptTheProfileIsCompleteAndOneLineSaysHow) {
    REQUIRE_PLOTLY();
    testutil::CpuProfileRun r;
    // The program copied where no scripts/ is beside it, run from a directory without one either.
    ASSERT_EQ(run("mkdir " + (r.dir / "bin") + " && cp train_gpt2 " + (r.dir / "bin")).exit_code, 0);
    testutil::run_cpu_profile(r, 2, 1, 1);
    ASSERT_EQ(r.result.exit_code, 0) << r.result.output;
    auto res = run("cd " + (r.dir / "bin") + " && ./train_gpt2 -i " + r.dir.path + " -e " + (r.dir / "toy_model.bin") +
                   " -b 4 -t 16 -d 128 -s 0 -v 0 -x 2 --profile " + r.profile_dir() + " --profile-start 1 --profile-steps 1");
    ASSERT_EQ(res.exit_code, 0) << res.output;
    EXPECT_TRUE(has(res.output, "\nprofile: report.html not written (scripts/report_html.py is neither beside the program "
                                "nor in the working directory); write it with: python3 scripts/report_html.py " +
                                    r.profile_dir() + "\n"))
        << res.output;
    EXPECT_FALSE(llmc::file_exists(r.profile_dir() + "/report.html"));
}

// ---- bad input to report_html.py: one line, exit 1 (a bad flag: 2), nothing written ----

TEST(ReportScript, BadInputsGetOneLine) {
    REQUIRE_PLOTLY();
    TempDir dir;
    expect_one_line(run(REPORT + (dir / "none")), 1, "report_html.py: error: ", "no profile directory '" + (dir / "none") + "'");
    copy_sample(dir / "old");
    // A profile.json of an older version: no profile_version.
    ASSERT_EQ(run("python3 -c 'import json, sys; p = json.load(open(sys.argv[1])); del p[\"profile_version\"]; "
                  "json.dump(p, open(sys.argv[1], \"w\"))' " + (dir / "old/profile.json")).exit_code, 0);
    expect_one_line(run(REPORT + (dir / "old")), 1, "report_html.py: error: ",
                    dir / "old/profile.json: written by an older version of the profiler (no profile_version)");
    copy_sample(dir / "new");
    ASSERT_EQ(run("sed -i 's/\"profile_version\": 1/\"profile_version\": 99/' " + (dir / "new/profile.json")).exit_code, 0);
    expect_one_line(run(REPORT + (dir / "new")), 1, "report_html.py: error: ", "profile_version 99, but this script reads version 1");
    for (const char* missing : {"profile.json", "trace.json", "roofline.csv"}) {
        const std::string d = dir / ("m_" + std::string(missing));
        copy_sample(d);
        ASSERT_EQ(unlink((d + "/" + missing).c_str()), 0);
        expect_one_line(run(REPORT + d), 1, "report_html.py: error: ", d + ": missing " + missing);
    }
    copy_sample(dir / "bad");
    std::ofstream(dir / "bad/trace.json") << "{\"traceEvents\": [1, 2";
    expect_one_line(run(REPORT + (dir / "bad")), 1, "report_html.py: error: ", dir / "bad/trace.json: not valid JSON");
    std::ofstream(dir / "bad/trace.json") << "{}";
    expect_one_line(run(REPORT + (dir / "bad")), 1, "report_html.py: error: ", dir / "bad/trace.json: not a trace (no traceEvents)");
    // A hostile memory snapshot: a pickle that would run a command is refused, not loaded.
    copy_sample(dir / "pickle");
    std::ofstream(dir / "pickle/memory_snapshot.pickle", std::ios::binary) << "cos\nsystem\n(S'true'\ntR.";
    expect_one_line(run(REPORT + (dir / "pickle")), 1, "report_html.py: error: ",
                    dir / "pickle/memory_snapshot.pickle: not a memory snapshot (names a class (os.system))");
    for (const std::string d : {"old", "new", "bad", "pickle"})
        EXPECT_FALSE(llmc::file_exists(dir / (d + "/report.html"))) << d;
}

TEST(ReportScript, OutputsAreRegularFilesOrNewNames) {
    REQUIRE_PLOTLY();
    TempDir dir;
    copy_sample(dir / "s");
    const std::string notes = dir / "notes.txt";
    std::ofstream(notes) << "notes\n";
    ASSERT_EQ(symlink(notes.c_str(), (dir / "s/report.html").c_str()), 0);
    expect_one_line(run(REPORT + (dir / "s")), 1, "report_html.py: error: ",
                    dir / "s/report.html: a symbolic link; an output must be a regular file or a new name");
    expect_one_line(run(REPORT + (dir / "s") + " -o " + (dir / "s/report.html")), 2, "report_html.py: error: ",
                    "-o: " + (dir / "s/report.html") + ": a symbolic link");
    expect_one_line(run(REPORT + (dir / "s") + " -o " + dir.path), 2, "report_html.py: error: ", "a directory");
    expect_one_line(run(REPORT + (dir / "s") + " -o " + (dir / "no/page.html")), 2, "report_html.py: error: ",
                    "no directory '" + (dir / "no") + "'");
    EXPECT_EQ(slurp(notes), "notes\n");
    auto r = run(REPORT + (dir / "s") + " -o " + (dir / "page.html"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(page_data(dir / "page.html").is_object());
}

// compare_profiles.py's page goes exactly where --html says, a .html file that is a regular file or a new name.
TEST(ReportScript, ComparisonPageOutputs) {
    REQUIRE_PLOTLY();
    TempDir dir;
    const std::string compare = "python3 scripts/compare_profiles.py " + std::string(SAMPLE) + " " + SAMPLE + " -o " +
                                (dir / "c.png") + " --html ";
    expect_one_line(run(compare + "/dev/null"), 2, "compare_profiles.py: error: ", "--html: '/dev/null' is not a .html file name");
    ASSERT_EQ(symlink((dir / "elsewhere.html").c_str(), (dir / "link.html").c_str()), 0);
    expect_one_line(run(compare + (dir / "link.html")), 2, "compare_profiles.py: error: ",
                    "--html: " + (dir / "link.html") + ": a symbolic link");
    EXPECT_FALSE(llmc::file_exists(dir / "c.png")); // refused before anything is drawn
    auto r = run(compare + (dir / "page.html"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "\nwrote " + (dir / "page.html") + "\n")) << r.output;
    const json d = page_data(dir / "page.html");
    ASSERT_TRUE(d.is_object());
    EXPECT_TRUE(d["warning"].is_null()); // the same profile twice
    for (const json& row : d["rows"]) EXPECT_EQ(row["ratio"], 1.0) << row;
}
