// The inference programs' results and output lines (llmc/infer/results.h).
#include "llmc/infer/results.h"

#include <algorithm>
#include <cstdio>

#include "llmc/util/utils.h"

namespace llmc {

namespace {

// The sequence's decode rate; null when it took no decode step (its one token came from the prefill).
nlohmann::json decode_tok_s(const SequenceResult& s) {
    if (s.ids.size() < 2 || !(s.decode_ms > 0)) return nullptr;
    return (s.ids.size() - 1) / (s.decode_ms / 1e3);
}

} // namespace

double quantile(std::vector<double> xs, double q) {
    if (xs.empty()) return 0;
    std::sort(xs.begin(), xs.end());
    const double at = q * (xs.size() - 1);
    const size_t lo = (size_t)at, hi = std::min(lo + 1, xs.size() - 1);
    return xs[lo] + (at - lo) * (xs[hi] - xs[lo]);
}

nlohmann::json sequence_json(const SequenceResult& s) {
    return {{"prompt_ids", s.prompt_ids}, {"ids", s.ids},         {"text", s.text},
            {"ttft_ms", s.ttft_ms},       {"decode_tok_s", decode_tok_s(s)}};
}

double InferSummary::decode_ms() const {
    double ms = 0;
    for (double x : step_ms) ms += x;
    return ms;
}

nlohmann::json summary_json(const InferSummary& m) {
    const double decode_ms = m.decode_ms();
    auto or_null = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
    // Without a decode step (-n 1: the prefill gives the only token) decode has no rate and no latency: null.
    const bool decoded = !m.step_ms.empty();
    nlohmann::json s = {{"summary",
             {{"prefill_tok_s", m.prefill_ms > 0 ? m.prefill_tokens / (m.prefill_ms / 1e3) : 0.0},
              {"ttft_ms", m.ttft_ms},
              {"decode_tok_s", or_null(decoded && decode_ms > 0 ? m.decode_tokens / (decode_ms / 1e3) : NAN)},
              {"latency_p50_ms", or_null(decoded ? quantile(m.step_ms, 0.5) : NAN)},
              {"latency_p90_ms", or_null(decoded ? quantile(m.step_ms, 0.9) : NAN)},
              {"peak_mem_mib", m.peak_mem_mib},
              {"B", m.B},
              {"prompt_len", m.prompt_len},
              {"gen_len", m.gen_len},
              {"params", m.params},
              {"avg_power_w", or_null(m.avg_power_w)},
              {"j_per_token", or_null(m.j_per_token)},
              {"decode_floor_share", or_null(m.decode_floor_share)}}}};
    if (m.graph_steps >= 0) s["summary"]["graph_steps"] = m.graph_steps;
    return s;
}

std::string summary_line(const InferSummary& m) {
    const nlohmann::json s = summary_json(m)["summary"];
    const std::string decode =
        s["decode_tok_s"].is_null()
            ? std::string("decode none (-n 1)")
            : strprintf("decode %.1f tok/s%s, per-token latency p50 %.2f ms p90 %.2f ms", s["decode_tok_s"].get<double>(),
                        std::isnan(m.decode_floor_share)
                            ? ""
                            : strprintf(" (%.0f%% of its DRAM floor at %.0f GB/s)", 100 * m.decode_floor_share, m.dram_gbps)
                                  .c_str(),
                        s["latency_p50_ms"].get<double>(), s["latency_p90_ms"].get<double>());
    const std::string graphs =
        m.graph_steps < 0 ? "" : strprintf(" | CUDA graphs: %ld of %zu decode steps", m.graph_steps, m.step_ms.size());
    return strprintf("summary: B=%d prompt %d + %d new tokens, %zu params | prefill %.1f tok/s, ttft %.2f ms | %s | "
                     "peak memory %.1f MiB%s",
                     m.B, m.prompt_len, m.gen_len, m.params, s["prefill_tok_s"].get<double>(), m.ttft_ms,
                     decode.c_str(), m.peak_mem_mib, graphs.c_str());
}

void print_results(const InferOptions& opt, const InferInputs& in, std::vector<SequenceResult>& seqs, InferSummary sum) {
    const GPT2Tokenizer* tok = in.tok.get();
    sum.B = (int)seqs.size(), sum.prompt_len = in.longest, sum.gen_len = opt.new_tokens;
    sum.params = num_parameters(in.cfg);
    for (SequenceResult& s : seqs)
        if (tok) s.text = tok->decode(s.ids);
    for (const SequenceResult& s : seqs) {
        if (opt.json) {
            printf("%s\n", sequence_json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
        } else if (tok) {
            printf("%s\n", s.text.c_str());
        } else {
            for (int id : s.ids) printf("%d ", id);
            printf("\n");
        }
    }
    printf("%s\n", opt.json ? summary_json(sum).dump().c_str() : summary_line(sum).c_str());
}

} // namespace llmc
