/*
 * The emulated memory counters (test/emu/counters.h) over one training step and one decode step of a GPT-2 slice
 * that keeps every kernel's shape class: d12's C = 768 and NH = 12, one layer, B = 1, T = 256, the classifier at
 * the real V (suite EmuSliceCounters; `make emu_counters` prints the table and writes the CSV, doc/testing.md).
 *
 * Each row is one kernel in one (sub-block, phase) of the step, its launches summed: requests, sectors,
 * wavefronts, bank conflicts, ldmatrix and mma counts under ncu's metric names (scripts/ncu_metrics.txt), the
 * sectors per request against the ideal for the bytes each request asked for, and the DRAM bounds. Coverage is per
 * (sub-block, phase): the DRAM lower bounds of its own kernels against the profiler's analytic bytes of the same
 * work (llmc/profiler/roofline.h) less what the GEMMs move; cuBLASLt and CUB run as host code in the emulator and
 * their rows say "not counted".
 *
 * The gate: test/emu/counter_expectations.csv holds, per row, the counts the step may not exceed (requests,
 * sectors per request, bank conflicts per request, mma instructions, at the slice's fixed shape); a regression
 * fails naming the kernel, the metric and both values. EMU_COUNTERS_EXPECTATIONS=write rewrites the file from this run (make emu_counters_expectations).
 * Access counts on the host, labelled emulated; not timings.
 */
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/gpu/gpt2.cuh"
#include "llmc/gpu/gpt2_decoder.cuh"
#include "llmc/model/gpt2_init.h"
#include "llmc/nvtx.h"
#include "llmc/profiler/roofline.h"
#include "test/emu/counters.h"
#include "test/gpu/gpu_test_util.cuh"

using namespace llmc;

namespace {

constexpr int kB = 1, kT = 256;
constexpr const char* kExpectations = "test/emu/counter_expectations.csv";

GPT2Config slice_config() {
    GPT2Config c = gpt2_config_for_depth(12);
    c.num_layers = 1;
    return c;
}

// The innermost sub-block range open on this thread, as "subblock,phase,layer" (",," outside every sub-block):
// each launch's attribution, taken when it is queued.
struct RangeStack {
    std::vector<RangeInfo> open;
    RangeHook saved;
    RangeStack() {
        saved = range_hook();
        range_hook() = {[](const RangeInfo& i, void* s) { static_cast<RangeStack*>(s)->open.push_back(i); },
                        [](void* s) { static_cast<RangeStack*>(s)->open.pop_back(); }, this};
        emu::count::set_context([this] { return where(); });
    }
    ~RangeStack() {
        emu::count::set_context({});
        range_hook() = saved;
    }
    std::string where() const {
        for (auto it = open.rbegin(); it != open.rend(); ++it)
            if (it->subblock >= 0)
                return std::string(subblock_name((SubBlock)it->subblock)) + "," +
                       (it->phase >= 0 ? phase_name((Phase)it->phase) : "") + "," +
                       (it->layer >= 0 ? std::to_string(it->layer) : "");
        return ",,";
    }
};

// One row: a kernel's launches in one (sub-block, phase, layer).
struct Row {
    std::string kernel, subblock, phase, layer;
    int launches = 0;
    emu::count::Launch sum;
};

double ratio(uint64_t a, uint64_t b) { return b ? (double)a / b : 0.0; }

// A prediction from the counts (doc/gpu_trainer.md's device model): the DRAM lower bound at 2.8 TB/s (an H100 SXM's
// achievable HBM bandwidth) or the tensor operations at 989 TFLOP/s (its dense bf16 peak), whichever is longer.
double predicted_us(const emu::count::Launch& s) {
    const double bytes = 32.0 * (s.unique_read_sectors + s.unique_write_sectors);
    return std::max(bytes / 2.8e12, (double)s.tensor_ops / 989e12) * 1e6;
}

std::vector<Row> rows_of(const std::vector<emu::count::Launch>& launches) {
    std::vector<Row> rows;
    std::map<std::string, size_t> at;
    for (const emu::count::Launch& l : launches) {
        std::string where[3];
        std::stringstream ss(l.context.empty() ? ",," : l.context);
        for (std::string& w : where) std::getline(ss, w, ',');
        const std::string key = l.kernel + "|" + l.context;
        auto it = at.find(key);
        if (it == at.end()) {
            it = at.emplace(key, rows.size()).first;
            rows.push_back({l.kernel, where[0], where[1], where[2], 0, {}});
            rows.back().sum.counted = l.counted;
        }
        Row& r = rows[it->second];
        r.launches++;
        emu::count::Launch& s = r.sum;
        s.blocks += l.blocks, s.threads += l.threads;
        s.ld_requests += l.ld_requests, s.ld_sectors += l.ld_sectors, s.ld_bytes += l.ld_bytes;
        s.ld_ideal_sectors += l.ld_ideal_sectors;
        s.st_requests += l.st_requests, s.st_sectors += l.st_sectors, s.st_bytes += l.st_bytes;
        s.st_ideal_sectors += l.st_ideal_sectors;
        s.ldgsts_requests += l.ldgsts_requests, s.ldgsts_sectors += l.ldgsts_sectors;
        s.ldgsts_bytes += l.ldgsts_bytes, s.ldgsts_ideal_sectors += l.ldgsts_ideal_sectors;
        s.shared_ld_requests += l.shared_ld_requests, s.shared_ld_wavefronts += l.shared_ld_wavefronts;
        s.shared_ld_conflicts += l.shared_ld_conflicts;
        s.shared_st_requests += l.shared_st_requests, s.shared_st_wavefronts += l.shared_st_wavefronts;
        s.shared_st_conflicts += l.shared_st_conflicts;
        s.ldsm += l.ldsm, s.ldsm_wavefronts += l.ldsm_wavefronts, s.ldsm_conflicts += l.ldsm_conflicts;
        s.mma += l.mma, s.tensor_ops += l.tensor_ops;
        s.unique_read_sectors += l.unique_read_sectors, s.unique_write_sectors += l.unique_write_sectors;
    }
    return rows;
}

// The profiler's analytic bytes of the work our own kernels do in each (sub-block, phase) of the slice: the
// training step's and one decode step's cells less what their GEMMs (cuBLASLt) move, by the same cost functions.
std::map<std::string, double> own_analytic_bytes(const GPT2Config& c, int decode_context) {
    using namespace prof;
    using namespace prof::roofline_detail;
    const double BT = (double)kB * kT, C = c.channels, Vp = c.padded_vocab_size;
    std::map<std::string, double> out;
    const CostTable train = analytic_costs(c, kB, kT, 1);
    auto gemm = [&](SubBlock s, Phase p) -> double {
        const bool fwd = p == Phase::fwd;
        switch (s) {
        case SubBlock::qkv: return fwd ? matmul_forward_cost(BT, C, 3 * C, true, false).bytes : matmul_backward_cost(BT, C, 3 * C, false, false).bytes;
        case SubBlock::attn_proj: return fwd ? matmul_forward_cost(BT, C, C, true, false).bytes : matmul_backward_cost(BT, C, C, false, false).bytes;
        case SubBlock::fc: return fwd ? matmul_forward_cost(BT, C, 4 * C, true, true).bytes : matmul_backward_cost(BT, C, 4 * C, false, false).bytes;
        case SubBlock::fc_proj: return fwd ? matmul_forward_cost(BT, 4 * C, C, true, false).bytes : matmul_backward_cost(BT, 4 * C, C, false, true).bytes;
        case SubBlock::classifier: return fwd ? matmul_forward_cost(BT, C, Vp, false, false).bytes : matmul_backward_cost(BT, C, Vp, false, false).bytes;
        default: return 0;
        }
    };
    for (int s = 0; s < NUM_SUBBLOCKS; s++)
        for (Phase p : {Phase::fwd, Phase::bwd, Phase::opt})
            out[std::string(subblock_name((SubBlock)s)) + "," + phase_name(p)] = train[s][(int)p].bytes - gemm((SubBlock)s, p);
    // One decode step of one row at `decode_context` cached positions: every GEMM cell (the classifier's too) is
    // cuBLASLt's alone.
    InferenceShape shape;
    shape.sequences = 1, shape.prompt_tokens = decode_context - 1, shape.decode_steps = 1, shape.decode_tokens = 1;
    shape.decode_context = decode_context, shape.elem_bytes = 2;
    const CostTable dec = inference_costs(c, shape, true);
    for (int s = 0; s < NUM_SUBBLOCKS; s++) {
        const SubBlock b = (SubBlock)s;
        const bool gemm_only = b == SubBlock::qkv || b == SubBlock::attn_proj || b == SubBlock::fc ||
                               b == SubBlock::fc_proj || b == SubBlock::classifier;
        out[std::string(subblock_name(b)) + ",decode"] = gemm_only ? 0.0 : dec[s][(int)Phase::decode].bytes;
    }
    return out;
}

// Each (sub-block, phase)'s DRAM lower bound over its counted kernels, in bytes: what coverage compares.
std::map<std::string, double> counted_bytes(const std::vector<Row>& rows) {
    std::map<std::string, double> counted;
    for (const Row& r : rows)
        if (r.sum.counted)
            counted[r.subblock + "," + r.phase] += 32.0 * (r.sum.unique_read_sectors + r.sum.unique_write_sectors);
    return counted;
}

// The columns: ncu's metric name where the count is one (scripts/ncu_metrics.txt), ours for what derives from them.
std::string csv(const std::vector<Row>& rows, const std::map<std::string, double>& analytic) {
    const std::map<std::string, double> counted = counted_bytes(rows);
    const std::string header = "kernel,subblock,phase,layer,launches,counted,blocks,threads,"
         "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,"
         "ld_sectors_per_request,ld_ideal_sectors_per_request,"
         "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum,"
         "st_sectors_per_request,st_ideal_sectors_per_request,"
         "l1tex__t_requests_pipe_lsu_mem_global_op_ldgsts.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ldgsts.sum,"
         "ldgsts_sectors_per_request,ldgsts_ideal_sectors_per_request,"
         "shared_ld_requests,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,"
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,shared_ld_conflicts_per_request,"
         "shared_st_requests,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,"
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,shared_st_conflicts_per_request,"
         "smsp__sass_inst_executed_op_ldsm.sum,ldsm_wavefronts,ldsm_conflicts,ldsm_conflicts_per_instruction,"
         "mma,sm__ops_path_tensor_src_bf16_dst_fp32.sum,"
         "dram_read_bytes_min,dram_read_bytes_max,dram_write_bytes_min,dram_write_bytes_max,"
         "subblock_counted_bytes,subblock_analytic_bytes,subblock_coverage,predicted_us_h100";
    const size_t metrics = std::count(header.begin(), header.end(), ',') - 5; // the columns after "counted"
    std::ostringstream o;
    o << header << "\n";
    for (const Row& r : rows) {
        const emu::count::Launch& s = r.sum;
        const std::string cell = r.subblock + "," + r.phase;
        o << r.kernel << "," << r.subblock << "," << r.phase << "," << r.layer << "," << r.launches << ","
          << (s.counted ? "yes" : "not counted");
        if (!s.counted) {
            o << std::string(metrics, ',') << "\n";
            continue;
        }
        char buf[1024];
        const double a = analytic.count(cell) ? analytic.at(cell) : 0.0, c = counted.count(cell) ? counted.at(cell) : 0.0;
        snprintf(buf, sizeof buf,
                 ",%llu,%llu,%llu,%llu,%.3f,%.3f,%llu,%llu,%.3f,%.3f,%llu,%llu,%.3f,%.3f,%llu,%llu,%llu,%.3f,%llu,%llu,"
                 "%llu,%.3f,%llu,%llu,%llu,%.3f,%llu,%llu,%llu,%llu,%llu,%llu,%.0f,%.0f,%.3f,%.3f\n",
                 (unsigned long long)s.blocks, (unsigned long long)s.threads, (unsigned long long)s.ld_requests,
                 (unsigned long long)s.ld_sectors, ratio(s.ld_sectors, s.ld_requests),
                 ratio(s.ld_ideal_sectors, s.ld_requests), (unsigned long long)s.st_requests,
                 (unsigned long long)s.st_sectors, ratio(s.st_sectors, s.st_requests),
                 ratio(s.st_ideal_sectors, s.st_requests), (unsigned long long)s.ldgsts_requests,
                 (unsigned long long)s.ldgsts_sectors, ratio(s.ldgsts_sectors, s.ldgsts_requests),
                 ratio(s.ldgsts_ideal_sectors, s.ldgsts_requests), (unsigned long long)s.shared_ld_requests,
                 (unsigned long long)s.shared_ld_wavefronts, (unsigned long long)s.shared_ld_conflicts,
                 ratio(s.shared_ld_conflicts, s.shared_ld_requests), (unsigned long long)s.shared_st_requests,
                 (unsigned long long)s.shared_st_wavefronts, (unsigned long long)s.shared_st_conflicts,
                 ratio(s.shared_st_conflicts, s.shared_st_requests), (unsigned long long)s.ldsm,
                 (unsigned long long)s.ldsm_wavefronts, (unsigned long long)s.ldsm_conflicts,
                 ratio(s.ldsm_conflicts, s.ldsm), (unsigned long long)s.mma, (unsigned long long)s.tensor_ops,
                 (unsigned long long)(32 * s.unique_read_sectors), (unsigned long long)(32 * (s.ld_sectors + s.ldgsts_sectors)),
                 (unsigned long long)(32 * s.unique_write_sectors), (unsigned long long)(32 * s.st_sectors), c, a,
                 a > 0 ? c / a : 0.0, predicted_us(s));
        o << buf;
    }
    return o.str();
}

// A short kernel name for the table: without template arguments and namespaces.
std::string short_name(const std::string& k) {
    std::string s = k.substr(0, k.find('<'));
    const size_t colon = s.rfind("::");
    return colon == std::string::npos ? s : s.substr(colon + 2);
}

std::string table(const std::vector<Row>& rows, const std::map<std::string, double>& analytic) {
    const std::map<std::string, double> counted = counted_bytes(rows);
    std::ostringstream o;
    char buf[512];
    snprintf(buf, sizeof buf, "%-36s %-18s %4s %13s %13s %13s %9s %9s %9s %7s %9s %9s %6s %8s\n",
             "kernel (emulated counts)", "sub-block", "n", "ld sec/req", "st sec/req", "ldgsts s/req", "shld cf/r",
             "shst cf/r", "ldsm cf/i", "mma", "MB DRAM>=", "MB model", "cover", "us H100");
    o << buf;
    for (const Row& r : rows) {
        const emu::count::Launch& s = r.sum;
        const std::string cell = r.subblock + "," + r.phase;
        const std::string where = r.subblock.empty() ? "(no sub-block)" : r.subblock + " " + r.phase;
        if (!s.counted) {
            snprintf(buf, sizeof buf, "%-36s %-18s %4d %s\n", short_name(r.kernel).c_str(), where.c_str(), r.launches,
                     "not counted (host code in the emulator)");
            o << buf;
            continue;
        }
        auto per = [](uint64_t sec, uint64_t req, uint64_t ideal) {
            char b[32];
            if (!req) return std::string("-");
            snprintf(b, sizeof b, "%.2f (%.2f)", ratio(sec, req), ratio(ideal, req));
            return std::string(b);
        };
        auto cf = [](uint64_t c, uint64_t req) {
            char b[32];
            if (!req) return std::string("-");
            snprintf(b, sizeof b, "%.2f", ratio(c, req));
            return std::string(b);
        };
        const double a = analytic.count(cell) ? analytic.at(cell) : 0.0, c = counted.count(cell) ? counted.at(cell) : 0.0;
        snprintf(buf, sizeof buf, "%-36s %-18s %4d %13s %13s %13s %9s %9s %9s %7llu %9.3f %9.3f %6s %8.2f\n",
                 short_name(r.kernel).c_str(), where.c_str(), r.launches,
                 per(s.ld_sectors, s.ld_requests, s.ld_ideal_sectors).c_str(),
                 per(s.st_sectors, s.st_requests, s.st_ideal_sectors).c_str(),
                 per(s.ldgsts_sectors, s.ldgsts_requests, s.ldgsts_ideal_sectors).c_str(),
                 cf(s.shared_ld_conflicts, s.shared_ld_requests).c_str(),
                 cf(s.shared_st_conflicts, s.shared_st_requests).c_str(), cf(s.ldsm_conflicts, s.ldsm).c_str(),
                 (unsigned long long)s.mma, 32.0 * (s.unique_read_sectors + s.unique_write_sectors) / 1e6, a / 1e6,
                 a > 0 ? (std::to_string((int)std::lround(100 * c / a)) + "%").c_str() : "-", predicted_us(s));
        o << buf;
    }
    o << "sec/req: 32-byte sectors per request (in parentheses: the ideal for the bytes each request asked for); "
         "cf/r: bank conflicts per shared request; cf/i: per ldmatrix; MB DRAM>=: the distinct sectors read and "
         "written (a lower bound of ncu's dram__bytes); MB model: the profiler's analytic bytes of the sub-block's "
         "own kernels; cover: the sub-block's counted bytes over its model bytes; us H100: predicted, the DRAM lower "
         "bound at 2.8 TB/s or the tensor operations at 989 TFLOP/s, whichever is longer (no launch overhead)\n";
    return o.str();
}

// The gate's metrics: counts per row that a change may not raise.
struct Gated {
    const char* name;
    double (*get)(const emu::count::Launch&);
};
const Gated kGated[] = {
    // Requests at the slice's fixed shape: a 16-byte access split into narrower ones multiplies them.
    {"ld_requests", [](const emu::count::Launch& s) { return (double)s.ld_requests; }},
    {"st_requests", [](const emu::count::Launch& s) { return (double)s.st_requests; }},
    {"ldgsts_requests", [](const emu::count::Launch& s) { return (double)s.ldgsts_requests; }},
    {"ld_sectors_per_request", [](const emu::count::Launch& s) { return ratio(s.ld_sectors, s.ld_requests); }},
    {"st_sectors_per_request", [](const emu::count::Launch& s) { return ratio(s.st_sectors, s.st_requests); }},
    {"ldgsts_sectors_per_request", [](const emu::count::Launch& s) { return ratio(s.ldgsts_sectors, s.ldgsts_requests); }},
    {"shared_ld_conflicts_per_request", [](const emu::count::Launch& s) { return ratio(s.shared_ld_conflicts, s.shared_ld_requests); }},
    {"shared_st_conflicts_per_request", [](const emu::count::Launch& s) { return ratio(s.shared_st_conflicts, s.shared_st_requests); }},
    {"ldsm_conflicts_per_instruction", [](const emu::count::Launch& s) { return ratio(s.ldsm_conflicts, s.ldsm); }},
    {"mma", [](const emu::count::Launch& s) { return (double)s.mma; }},
};

std::string row_key(const Row& r) { return r.kernel + "|" + r.subblock + "|" + r.phase + "|" + r.layer; }

std::string expectations_csv(const std::vector<Row>& rows) {
    std::ostringstream o;
    o << "# The emulated counters' gate (test/emu/test_slice_counters.cu): per kernel and sub-block of the GPT-2 slice's\n"
         "# training and decode step, the most each metric may reach. Rewritten by make emu_counters_expectations.\n";
    o << "kernel|subblock|phase|layer";
    for (const Gated& g : kGated) o << "," << g.name;
    o << "\n";
    for (const Row& r : rows) {
        if (!r.sum.counted) continue;
        o << row_key(r);
        for (const Gated& g : kGated) {
            char b[32];
            snprintf(b, sizeof b, ",%.4f", g.get(r.sum));
            o << b;
        }
        o << "\n";
    }
    return o.str();
}

std::map<std::string, std::vector<double>> read_expectations(const std::string& path) {
    std::ifstream f(path);
    std::map<std::string, std::vector<double>> out;
    std::string line;
    bool header = true;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        if (header) {
            header = false;
            continue;
        }
        std::stringstream ss(line);
        std::string key, v;
        std::getline(ss, key, ',');
        std::vector<double> vals;
        while (std::getline(ss, v, ',')) vals.push_back(std::atof(v.c_str()));
        out[key] = vals;
    }
    return out;
}

void write_file(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
    ASSERT_TRUE(f.good()) << "cannot write " << path;
}

} // namespace

TEST(EmuSliceCounters, TrainingAndDecodeStepsStayWithinTheirExpectations) {
    REQUIRE_INSTRUMENTATION();
    const GPT2Config cfg = slice_config();
    std::vector<float> w(num_parameters(cfg));
    init_gpt2_parameters(w.data(), cfg, 1337);
    std::mt19937 rng(42); // fixed: the counts depend on the tokens (the encoder's backward groups repeats)
    std::vector<int> in(kB * kT), tg(kB * kT);
    for (int& t : in) t = (int)(rng() % cfg.vocab_size);
    for (int& t : tg) t = (int)(rng() % cfg.vocab_size);

    // The GEMMs' algorithms untimed: the autotune's candidate calls are host code here, and none is counted.
    struct NoAutotune {
        std::string saved;
        bool had = false;
        NoAutotune() {
            if (const char* v = std::getenv("LLMC_GEMM_AUTOTUNE")) saved = v, had = true;
            setenv("LLMC_GEMM_AUTOTUNE", "0", 1);
        }
        ~NoAutotune() { had ? (void)setenv("LLMC_GEMM_AUTOTUNE", saved.c_str(), 1) : (void)unsetenv("LLMC_GEMM_AUTOTUNE"); }
    } no_autotune;
    std::vector<emu::count::Launch> launches;
    {
        RangeStack ranges;
        GPT2GPU model(cfg, kB, kT);
        model.set_parameters(w.data());
        emu::count::start();
        model.train_step([&] { return std::make_pair(in.data(), tg.data()); }, kB, kT, 1, 1e-4f, AdamWConfig{}, 1);
        CUDA_CHECK(cudaDeviceSynchronize());
        launches = emu::count::stop();

        // One decode step at position kT - 1 after a prompt of kT - 1 tokens (prefill and its token not counted).
        GPT2DecoderGPU dec(cfg, w.data(), 1, kT - 1, kT);
        dec.prefill({std::vector<int>(in.begin(), in.end() - 1)});
        const std::vector<float> coins(1, 0.5f);
        dec.sample(0.0f, 0, coins);
        emu::count::start();
        dec.decode({true});
        dec.sample(0.0f, 0, coins);
        CUDA_CHECK(cudaDeviceSynchronize());
        for (emu::count::Launch& l : emu::count::stop()) launches.push_back(std::move(l));
    }
    for (const std::string& f : emu::take_faults()) ADD_FAILURE() << "emulator fault: " << f;

    const std::vector<Row> rows = rows_of(launches);
    const std::map<std::string, double> analytic = own_analytic_bytes(cfg, kT);
    const std::string text = table(rows, analytic), counters_csv = csv(rows, analytic);
    // scripts/ncu_metrics.txt is the one list of the metrics: each is a column here (the DRAM bytes as bounds).
    {
        std::ifstream f("scripts/ncu_metrics.txt");
        ASSERT_TRUE(f.good()) << "scripts/ncu_metrics.txt";
        const std::string header = "," + counters_csv.substr(0, counters_csv.find('\n')) + ",";
        std::string metric;
        int n = 0;
        while (std::getline(f, metric)) {
            if (metric.empty() || metric[0] == '#') continue;
            n++;
            if (metric.rfind("dram__bytes_", 0) == 0) {
                const std::string dir = metric.find("_read") != std::string::npos ? "read" : "write";
                EXPECT_NE(header.find(",dram_" + dir + "_bytes_min,"), std::string::npos) << metric;
            } else {
                EXPECT_NE(header.find("," + metric + ","), std::string::npos) << metric << " is not a column";
            }
        }
        EXPECT_EQ(n, 14);
    }
    // Every row has the header's columns.
    {
        std::stringstream lines(counters_csv);
        std::string line;
        std::getline(lines, line);
        const auto columns = std::count(line.begin(), line.end(), ',');
        while (std::getline(lines, line)) EXPECT_EQ(std::count(line.begin(), line.end(), ','), columns) << line;
    }
    printf("%s", text.c_str());
    if (const char* dir = std::getenv("EMU_COUNTERS_DIR")) {
        write_file(std::string(dir) + "/emu_counters.csv", counters_csv);
        write_file(std::string(dir) + "/emu_counters.txt", text);
        printf("wrote %s/emu_counters.csv and %s/emu_counters.txt\n", dir, dir);
    }
    const char* mode = std::getenv("EMU_COUNTERS_EXPECTATIONS");
    if (mode && std::string(mode) == "write") {
        write_file(kExpectations, expectations_csv(rows));
        printf("wrote %s\n", kExpectations);
        return;
    }

    // The gate.
    const auto want = read_expectations(kExpectations);
    ASSERT_FALSE(want.empty()) << "no expectations in " << kExpectations << " (make emu_counters_expectations)";
    std::map<std::string, bool> seen;
    for (const Row& r : rows) {
        if (!r.sum.counted) continue;
        const std::string key = row_key(r);
        auto it = want.find(key);
        if (it == want.end()) {
            ADD_FAILURE() << "kernel " << key << " has no expectation in " << kExpectations
                          << " (a new launch: make emu_counters_expectations)";
            continue;
        }
        seen[key] = true;
        ASSERT_EQ(it->second.size(), std::size(kGated)) << kExpectations << ": row " << key;
        for (size_t m = 0; m < std::size(kGated); m++) {
            const double now = kGated[m].get(r.sum), then = it->second[m];
            EXPECT_LE(now, then + 5e-5 + 1e-6 * then)
                << "kernel " << r.kernel << " in " << r.subblock << " " << r.phase << ": " << kGated[m].name
                << " was " << then << ", now " << now;
        }
    }
    for (const auto& kv : want)
        EXPECT_TRUE(seen.count(kv.first)) << "kernel " << kv.first << " of " << kExpectations
                                          << " no longer runs (make emu_counters_expectations)";
}
