// A profile directory with energy per sub-block (--energy; doc/profiling.md, "Energy per sub-block") for the
// scripts that read it (test_plots.cpp, test_report.cpp, test_sweep.cpp): a copy of the sample profile with a
// hand-written energy.csv and profile.json's energy object, whatever the sample itself holds.
#pragma once
#include <fstream>
#include <gtest/gtest.h>
#include <string>

#include "test/test_util.h"

namespace testutil {

// energy.csv as the profiler writes it: the sub-blocks in step order, then the whole step and idle. Empty cells are
// unknown (attention's clock and temperature, FLOP/J where no FLOPs are modelled).
inline const char* const kEnergyCsv =
    "sub_block,phase,layers,j_per_step,ci95_low,ci95_high,watts,j_above_idle,flop_per_j,repeats,seconds,"
    "sm_clock_mhz,temp_c\n"
    "encoder,fwd,-,0.00012,0.00011,0.00013,402.1,0.00005,,6,1.9,1980,61\n"
    "qkv,fwd,0-11,0.0123,0.012,0.0126,612.3,0.0081,3.1e+11,6,1.9,1980,61\n"
    "attention,fwd,0-11,0.021,0.019,0.024,598,0.013,2.5e+11,6,1.9,,\n"
    "qkv,bwd,0-11,0.0246,0.024,0.0252,640.5,0.016,3e+11,6,1.9,1980,62\n"
    "optimizer,opt,-,0.05,0.048,0.051,500,0.02,,6,1.9,1980,62\n"
    "step,all,-,0.11,0.105,0.115,650,0.06,2.1e+11,6,1.9,1980,62\n"
    "idle,-,-,0.05,0.049,0.051,90.2,0,,6,1.9,345,55\n";

// A copy of the profile directory `sample` at `d` with kEnergyCsv and an energy object in profile.json (its rows
// kEnergyCsv's, its closure the sub-blocks' 0.10802 J against the step's 0.11 J: -1.8%), synthetic or not.
inline void write_energy_sample(const std::string& sample, const std::string& d, bool synthetic = true) {
    ASSERT_EQ(run("cp -r " + sample + " " + d + " && rm -f " + d + "/energy.csv").exit_code, 0);
    std::ofstream(d + "/energy.csv") << kEnergyCsv;
    auto r = run(std::string("python3 -c 'import csv, json, sys\n"
                             "d = sys.argv[1]\n"
                             "num = lambda k, v: v if k in (\"sub_block\", \"phase\", \"layers\") else "
                             "(float(v) if v else None)\n"
                             "rows = [{k: num(k, v) for k, v in r.items()} for r in csv.DictReader(open(d + \"/energy.csv\"))]\n"
                             "p = json.load(open(d + \"/profile.json\"))\n"
                             "p[\"energy\"] = {\"source\": \"synthetic (scripted counter)\" if sys.argv[2] == \"1\" else "
                             "\"NVML total energy counter\", \"synthetic\": sys.argv[2] == \"1\", "
                             "\"counter_period_ms\": 100.0, \"window_s\": 0.3, \"budget_s\": 60, \"repeats\": 6, "
                             "\"idle_w\": 90.2, \"rows\": rows, "
                             "\"closure\": {\"sum_j\": 0.10802, \"step_j\": 0.11, \"diff_pct\": -1.8}}\n"
                             "json.dump(p, open(d + \"/profile.json\", \"w\"), indent=1)' ") +
                 d + " " + (synthetic ? "1" : "0"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
}

} // namespace testutil
