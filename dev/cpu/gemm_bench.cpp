/*
 * The CPU matmuls' GEMMs at every shape the trainer and the inference program use, each timed with the
 * project's own GEMM, its rows kernel (calls of at most ROWS_MAX rows), OpenBLAS and BLIS, in one run, so the
 * choice llmc/cpu/matmul.h makes per shape can be checked on any machine:
 *
 *   make gemm_bench && OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive ./build/gemm_bench [-e d12] [--reps N]
 *
 * Rows: forward (BT x C -> OC), backward dinp and dweight, for training B=4 T=64, prefill B=1 and B=8 at 128
 * tokens, and decode at B = 1, 2, 4, 8. GFLOP/s = 2 BT C OC / the best of --reps calls (after one warm call);
 * "-" where that way does not apply or the library is not installed. The last column is what the programs use.
 */
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "llmc/cpu/matmul.h"
#include "llmc/model/gpt2_config.h"
#include "llmc/util/cpu_blas.h"
#include "llmc/util/rand.h"
#include "llmc/util/utils.h"

using namespace llmc;

namespace {

double best_seconds(int reps, const std::function<void()>& f) {
    f(); // warm: first-touch pages, the library's buffers and threads
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

struct Shape {
    std::string what;
    int BT, C, OC;
};

enum class Op { fwd, dinp, dweight };

// One op of one shape through one way: "ours" (the project's GEMM), "rows", or a library.
void run(Op op, const std::string& way, const cpu_blas::Library* lib, const Shape& s, std::vector<float>& inp,
         std::vector<float>& w, std::vector<float>& out) {
    using namespace cpu::gemm_detail;
    const int BT = s.BT, C = s.C, OC = s.OC;
    if (way == "rows") return cpu::rows_matmul(out.data(), inp.data(), w.data(), (const float*)nullptr, BT, C, OC);
    if (lib) {
        if (op == Op::fwd) cpu_blas::gemm(*lib, false, true, BT, OC, C, inp.data(), C, w.data(), C, 0.f, out.data(), OC);
        // dinp (BT, C) += dout (BT, OC) weight (OC, C); dweight (OC, C) += dout^T inp: out plays dout.
        if (op == Op::dinp) cpu_blas::gemm(*lib, false, false, BT, C, OC, out.data(), OC, w.data(), C, 1.f, inp.data(), C);
        if (op == Op::dweight) cpu_blas::gemm(*lib, true, false, OC, C, BT, out.data(), OC, inp.data(), C, 1.f, w.data(), C);
        return;
    }
    if (op == Op::fwd) { // as matmul_forward runs it without a library, whatever the row count
        std::vector<float> inp_t((size_t)C * BT);
        for (int c = 0; c < C; c++)
            for (int bt = 0; bt < BT; bt++) inp_t[(size_t)c * BT + bt] = inp[(size_t)bt * C + c];
        gemm<float>(OC, BT, C, w.data(), C, 1, inp_t.data(), BT, out.data(), 1, OC, true, nullptr);
    }
    if (op == Op::dinp) gemm<float>(BT, C, OC, out.data(), OC, 1, w.data(), C, inp.data(), C, 1, false, nullptr);
    if (op == Op::dweight) gemm<float>(OC, C, BT, out.data(), 1, OC, inp.data(), C, w.data(), C, 1, false, nullptr);
}

} // namespace

int main(int argc, char** argv) {
    int depth = 12, reps = 3;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "-e" && i + 1 < argc && argv[i + 1][0] == 'd' && atoi(argv[i + 1] + 1) > 0) {
            depth = atoi(argv[++i] + 1);
        } else if (a == "--reps" && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            reps = atoi(argv[++i]);
        } else {
            fprintf(a == "-h" || a == "--help" ? stdout : stderr, "usage: gemm_bench [-e dN] [--reps N (>= 1)]\n");
            return a == "-h" || a == "--help" ? 0 : 2;
        }
    }
    const std::string model = "d" + std::to_string(depth);
    try {
        const GPT2Config c = gpt2_config_for_depth(depth);
        const int C = c.channels, Vp = c.padded_vocab_size;
        std::vector<Shape> shapes;
        auto add = [&](const std::string& what, int BT) {
            for (auto [name, K, N] : {std::tuple<const char*, int, int>{"qkv", C, 3 * C}, {"attn_proj", C, C},
                                      {"fc", C, 4 * C}, {"fc_proj", 4 * C, C}, {"classifier", C, Vp}})
                shapes.push_back({what + " " + name, BT, K, N});
        };
        add("train B=4 T=64", 256);
        add("prefill B=1", 128);
        add("prefill B=8", 1024);
        for (int b : {1, 2, 4, 8}) add("decode B=" + std::to_string(b), b);

        const cpu_blas::Library* libs[2] = {cpu_blas::find("openblas"), cpu_blas::find("blis")};
        printf("%s, %d OpenMP threads; OpenBLAS: %s; BLIS: %s; the programs use: %s (rows kernel up to %d rows)\n",
               model.c_str(), omp_get_max_threads(), libs[0] ? libs[0]->name.c_str() : "not installed",
               libs[1] ? libs[1]->name.c_str() : "not installed", cpu_blas::describe().c_str(), cpu::ROWS_MAX);
        const cpu_blas::Library* programs = cpu_blas::active();
        printf("%-30s %-7s %6s %6s %6s %8s %8s %8s %8s  %s\n", "shape", "op", "BT", "C", "OC", "ours", "rows", "openblas",
               "blis", "(GFLOP/s)");
        Rng rng(1);
        for (const Shape& s : shapes) {
            std::vector<float> inp((size_t)s.BT * s.C), w((size_t)s.OC * s.C), out((size_t)s.BT * s.OC);
            for (float& x : inp) x = rng.next_f32() - 0.5f;
            for (float& x : w) x = (rng.next_f32() - 0.5f) * 0.02f;
            const bool decode = s.BT <= cpu::ROWS_MAX;
            for (Op op : {Op::fwd, Op::dinp, Op::dweight}) {
                if (decode && op != Op::fwd) continue;
                const double flops = 2.0 * s.BT * s.C * s.OC;
                auto rate = [&](const std::string& way, const cpu_blas::Library* lib) {
                    if ((way == "rows" && (op != Op::fwd || !decode)) || (way != "ours" && way != "rows" && !lib))
                        return std::string("-");
                    const double sec = best_seconds(reps, [&] { run(op, way, lib, s, inp, w, out); });
                    return strprintf("%.1f", flops / sec * 1e-9);
                };
                const char* opname[] = {"fwd", "dinp", "dweight"};
                const std::string used = decode ? "rows" : programs ? programs->name.substr(0, 8) : "ours";
                printf("%-30s %-7s %6d %6d %6d %8s %8s %8s %8s  %s\n", s.what.c_str(), opname[(int)op], s.BT, s.C,
                       s.OC, rate("ours", nullptr).c_str(), rate("rows", nullptr).c_str(), rate("lib", libs[0]).c_str(),
                       rate("lib", libs[1]).c_str(), used.c_str());
                fflush(stdout);
            }
        }
    } catch (const std::exception& e) {
        fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
