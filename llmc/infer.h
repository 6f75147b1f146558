/*
 * Host side of the inference programs (infer_gpt2 on the CPU, infer_gpt2cu on the GPU; doc/flags.md has the
 * flags): the command line, the model and prompts, token choice from logits, latency statistics and the output. Where the model runs is
 * the program's business; everything here is plain C++ and unit-tested without a model.
 */
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "llmc/checkpoint.h"
#include "llmc/infer_options.h"
#include "llmc/gpt2_config.h"
#include "llmc/gpt2_init.h"
#include "llmc/profiler/session.h"
#include "llmc/rand.h"
#include "llmc/progress.h"
#include "llmc/sampler.h"
#include "llmc/tokenizer.h"
#include "llmc/utils.h"

namespace llmc {

/*
 * The B prompts, as token ids: -p and --prompt-file are encoded with `tok` (null: an Error naming the missing
 * vocabulary), --prompt-ids taken as given, --prompt-len drawn per sequence from Rng(seed ^ 1) (not the
 * sampling stream), no prompt flag gives <|endoftext|> (`eot`). Fewer prompts than B are cycled; more are an
 * error. Every prompt is non-empty and every id inside the vocabulary of size V.
 */
inline std::vector<std::vector<int>> build_prompts(const InferOptions& opt, const GPT2Tokenizer* tok, int V, int eot) {
    std::vector<std::vector<int>> prompts;
    auto need_tokenizer = [&](const std::string& what) {
        if (!tok)
            throw Error(strprintf("%s: encoding text needs GPT-2's encoder.json and vocab.bpe in %s (set GPT2_VOCAB_DIR)",
                                  what.c_str(), default_gpt2_vocab_dir().c_str()));
    };
    if (!opt.prompt_text.empty()) {
        need_tokenizer("-p");
        prompts.push_back(tok->encode(opt.prompt_text));
    } else if (!opt.prompt_file.empty()) {
        std::string text = detail::read_text_file(opt.prompt_file);
        need_tokenizer(opt.prompt_file);
        for (size_t pos = 0; pos < text.size();) {
            size_t eol = std::min(text.find('\n', pos), text.size());
            std::string line = text.substr(pos, eol - pos);
            pos = eol + 1;
            if (!line.empty() && line.back() == '\r') line.pop_back();
            if (!line.empty()) prompts.push_back(tok->encode(line));
        }
        if (prompts.empty()) throw Error(strprintf("%s: no prompt in the file (one per line)", opt.prompt_file.c_str()));
    } else if (!opt.prompt_ids.empty()) {
        prompts.push_back(opt.prompt_ids);
    } else if (opt.prompt_len > 0) {
        Rng rng(opt.seed ^ 1);
        for (int b = 0; b < std::max(opt.B, 1); b++) {
            prompts.emplace_back(opt.prompt_len);
            for (int& id : prompts.back()) id = (int)(rng.next_u32() % (uint32_t)V);
        }
    } else {
        prompts.push_back({eot});
    }
    if (prompts.size() > (size_t)kMaxInferBatch)
        throw UsageError(strprintf("%s: %zu prompts, more than the %d sequences that run together at most",
                                   opt.prompt_file.c_str(), prompts.size(), kMaxInferBatch));
    const int B = opt.B > 0 ? opt.B : (int)prompts.size();
    if ((int)prompts.size() > B)
        throw UsageError(strprintf("-b: %d sequences cannot hold the %zu prompts given", B, prompts.size()));
    for (size_t i = 0; i < prompts.size(); i++) {
        if (prompts[i].empty()) throw Error(strprintf("prompt %zu: encodes to no tokens", i + 1));
        for (int id : prompts[i])
            if (id < 0 || id >= V)
                throw UsageError(strprintf("--prompt-ids: token id %d is outside the model's vocabulary [0, %d)", id, V));
    }
    for (int b = (int)prompts.size(); b < B; b++) prompts.push_back(prompts[b % prompts.size()]);
    return prompts;
}

// What both programs start from: the model (dN with random weights from --seed, or a model file), GPT-2's
// tokenizer where its files are there and fit the model, and the B prompts, checked against maxT with -n.
struct InferInputs {
    GPT2Config cfg;
    std::vector<float> params; // num_parameters(cfg) fp32 values, llm.c order
    std::unique_ptr<GPT2Tokenizer> tok;
    int eot = 0; // <|endoftext|>: the tokenizer's, else the last id (where GPT-2 puts it)
    std::vector<std::vector<int>> prompts;
    int longest = 0; // tokens in the longest prompt
};

inline InferInputs load_infer_inputs(const InferOptions& opt) {
    InferInputs in;
    ModelSource src = load_model_source(opt.model, opt.seed);
    in.cfg = src.cfg;
    in.params = std::move(src.params);
    const std::string vocab = default_gpt2_vocab_dir();
    if (file_exists(vocab + "/encoder.json") && file_exists(vocab + "/vocab.bpe")) {
        in.tok = std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_gpt2_files(vocab + "/encoder.json", vocab + "/vocab.bpe"));
        if (in.tok->vocab_size() != in.cfg.vocab_size) in.tok.reset();
    }
    in.eot = in.tok ? in.tok->eot() : in.cfg.vocab_size - 1;
    auto check_length = [&](long longest) {
        if ((size_t)longest + opt.new_tokens > (size_t)in.cfg.max_seq_len)
            throw Error(strprintf("-n: a prompt of %ld tokens and %d new tokens exceed the model's maximum sequence "
                                  "length %d", longest, opt.new_tokens, in.cfg.max_seq_len));
    };
    if (opt.prompt_len > 0) check_length(opt.prompt_len); // before B prompts of that length are drawn
    in.prompts = build_prompts(opt, in.tok.get(), in.cfg.vocab_size, in.eot);
    for (auto& p : in.prompts) in.longest = std::max(in.longest, (int)p.size());
    check_length(in.longest);
    return in;
}

// With --json, stdout carries only the JSON lines: the profiler's messages and summary go to stderr meanwhile.
class StdoutToStderr {
public:
    explicit StdoutToStderr(bool on) : saved_(on ? (fflush(stdout), dup(1)) : -1) {
        if (saved_ >= 0) dup2(2, 1);
    }
    ~StdoutToStderr() {
        if (saved_ < 0) return;
        fflush(stdout);
        dup2(saved_, 1);
        close(saved_);
    }
    StdoutToStderr(const StdoutToStderr&) = delete;
    StdoutToStderr& operator=(const StdoutToStderr&) = delete;

private:
    int saved_;
};

/*
 * --profile, as both programs run it: the window is the whole run; the session's step 0 is the prefill, step k
 * the k-th decode step (numbered from 1 in the profile: prefill is its step 1). `shape` is counted as the run
 * goes: a decode step counts the running sequences' rows, each attending its cached positions and the new one
 * (both decoders compute those rows and no others). The session gets the final counts when it writes. With
 * --json the profiler's lines go to stderr.
 */
class InferProfile {
public:
    prof::InferenceShape shape;

    // elem_bytes: the decoder's bytes per weight, activation and cache element.
    InferProfile(const InferOptions& opt, const std::vector<std::vector<int>>& prompts, int elem_bytes)
        : opt_(opt) {
        shape.sequences = (long)prompts.size();
        for (auto& p : prompts) shape.prompt_tokens += (long)p.size(), shape.prompt_pairs += 0.5 * p.size() * (p.size() + 1.0);
        shape.elem_bytes = elem_bytes;
    }
    bool on() const { return session_ != nullptr; }
    prof::SessionOptions session_options() const { return {opt_.profile_dir, 0, opt_.new_tokens}; }

    // With --profile: make(session_options()) builds the session (the ceilings it measures print quietly under
    // --json); without, nothing.
    template <typename Make> void start(Make&& make) {
        if (opt_.profile_dir.empty()) return;
        prof::check_profile_dir(opt_.profile_dir, "--profile"); // before the ceilings are measured
        StdoutToStderr quiet(opt_.json);
        session_ = make(session_options());
        session_->before_report([this](const prof::ProfileRecords&, prof::ProfileContext& ctx) {
            ctx.inference = shape; // the decode counts, known now
            return prof::CounterReport{};
        });
    }

    void begin_step() {
        if (session_) session_->begin_step(step_);
    }
    // A decode step's rows: the running sequences; length(b) is sequence b's cached tokens before the step.
    template <typename Length> long count_decode_step(const std::vector<bool>& running, Length&& length) {
        long rows = 0;
        for (size_t b = 0; b < running.size(); b++)
            if (running[b]) rows++, shape.decode_context += length((int)b) + 1;
        shape.decode_steps++, shape.decode_tokens += rows;
        return rows;
    }
    void end_step(long tokens, bool last) {
        if (!session_) return;
        session_->end_step(tokens);
        StdoutToStderr quiet(opt_.json);
        session_->step_done(last);
        step_++;
    }
    // The profile's average power and joules per token over the run (NaN without --profile or a reading):
    // the summary's avg_power_w and j_per_token.
    double avg_power_w() const { return session_ ? session_->written_avg_w() : NAN; }
    double joules_per_token() const { return session_ ? session_->written_joules_per_token() : NAN; }
    // After the results are printed: an Error when the profile could not be written.
    void throw_if_not_written() const {
        if (session_) session_->throw_if_not_written();
    }

private:
    const InferOptions& opt_;
    std::unique_ptr<prof::ProfileSession> session_;
    int step_ = 0;
};

// The next token from a row of logits over V tokens: the argmax at temperature 0 (the lowest id among equal
// maxima), else a draw from softmax(logits / T) restricted to the top k (llmc/sampler.h) with `coin` in [0, 1).
// A row of logits that is not all finite gives kNotFinite (llmc/sampler.h), as the GPU's sample_tokens does.
template <typename Real> int pick_token(const Real* logits, int V, float temperature, int top_k, float coin) {
    for (int i = 0; i < V; i++)
        if (!std::isfinite((double)logits[i])) return kNotFinite;
    if (temperature == 0.0f) return (int)(std::max_element(logits, logits + V) - logits);
    const Real maxval = *std::max_element(logits, logits + V);
    std::vector<double> probs(V);
    double sum = 0;
    for (int i = 0; i < V; i++) sum += probs[i] = std::exp((double)logits[i] - maxval);
    for (double& p : probs) p /= sum;
    return sample_token(probs.data(), V, SamplerConfig{temperature, top_k}, coin);
}

// Stops the run on a token drawn from logits that are not all finite (kNotFinite): sequence `b`'s `n`-th token.
inline void check_token(int id, int b, size_t n) {
    if (id == kNotFinite)
        throw Error(strprintf("the model's logits are not finite (NaN or inf) for sequence %d, token %zu: the model's "
                              "weights are not finite, or it diverged",
                              b, n));
}

// Long generations show that they move: "generating: token 130/512, 12 s elapsed, ETA ..." every few seconds on
// stderr, when stderr is a terminal (never into a pipe, a log or --json's stdout).
class DecodeProgress {
public:
    explicit DecodeProgress(int new_tokens)
        : on_(isatty(STDERR_FILENO) == 1), total_(new_tokens), progress_("generating", "token", 5.0, stderr) {}
    // After `done` tokens of each running sequence.
    void tick(long done) {
        if (on_) progress_.tick(done, total_);
    }

private:
    bool on_;
    long total_;
    Progress progress_;
};

// The q-quantile (0..1) of xs by linear interpolation between order statistics; 0 for an empty list.
inline double quantile(std::vector<double> xs, double q) {
    if (xs.empty()) return 0;
    std::sort(xs.begin(), xs.end());
    const double at = q * (xs.size() - 1);
    const size_t lo = (size_t)at, hi = std::min(lo + 1, xs.size() - 1);
    return xs[lo] + (at - lo) * (xs[hi] - xs[lo]);
}

// What one sequence produced, and when.
struct SequenceResult {
    std::vector<int> prompt_ids, ids; // ids: generated tokens, EOT included when --stop-eot stopped there
    std::string text;                 // the generated tokens decoded ("" without a tokenizer)
    double ttft_ms = 0;               // from the start of prefill to this sequence's first token
    double decode_ms = 0;             // the decode steps this sequence took part in
};

// A whole run: the per-step latencies of decode and the totals the summary reports.
struct InferSummary {
    double prefill_ms = 0, ttft_ms = 0;
    std::vector<double> step_ms; // each decode step (one token for every active sequence)
    long prefill_tokens = 0, decode_tokens = 0;
    double peak_mem_mib = 0;
    int B = 0, prompt_len = 0, gen_len = 0;
    size_t params = 0;
    double avg_power_w = NAN, j_per_token = NAN; // --profile's power over the run; NaN: not measured (null)
};

// After the prefill: each sequence's prompt and time to first token (one for all: they prefill together), and the
// prompt tokens counted into the summary. Both programs record it the same way.
inline void record_prefill(const std::vector<std::vector<int>>& prompts, std::vector<SequenceResult>& seqs,
                           InferSummary& sum) {
    for (size_t b = 0; b < seqs.size(); b++) {
        seqs[b].prompt_ids = prompts[b];
        seqs[b].ttft_ms = sum.ttft_ms;
        sum.prefill_tokens += (long)prompts[b].size();
    }
}

// The sequence's decode rate; null when it took no decode step (its one token came from the prefill).
inline nlohmann::json decode_tok_s(const SequenceResult& s) {
    if (s.ids.size() < 2 || !(s.decode_ms > 0)) return nullptr;
    return (s.ids.size() - 1) / (s.decode_ms / 1e3);
}

inline nlohmann::json sequence_json(const SequenceResult& s) {
    return {{"prompt_ids", s.prompt_ids}, {"ids", s.ids},         {"text", s.text},
            {"ttft_ms", s.ttft_ms},       {"decode_tok_s", decode_tok_s(s)}};
}

inline nlohmann::json summary_json(const InferSummary& m) {
    double decode_ms = 0;
    for (double x : m.step_ms) decode_ms += x;
    auto or_null = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
    // Without a decode step (-n 1: the prefill gives the only token) decode has no rate and no latency: null.
    const bool decoded = !m.step_ms.empty();
    return {{"summary",
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
              {"j_per_token", or_null(m.j_per_token)}}}};
}

// The human summary line: "summary: prefill ... tok/s, ttft ... ms, decode ... tok/s, ...".
inline std::string summary_line(const InferSummary& m) {
    const nlohmann::json s = summary_json(m)["summary"];
    const std::string decode =
        s["decode_tok_s"].is_null()
            ? std::string("decode none (-n 1)")
            : strprintf("decode %.1f tok/s, per-token latency p50 %.2f ms p90 %.2f ms", s["decode_tok_s"].get<double>(),
                        s["latency_p50_ms"].get<double>(), s["latency_p90_ms"].get<double>());
    return strprintf("summary: B=%d prompt %d + %d new tokens, %zu params | prefill %.1f tok/s, ttft %.2f ms | %s | "
                     "peak memory %.1f MiB",
                     m.B, m.prompt_len, m.gen_len, m.params, s["prefill_tok_s"].get<double>(), m.ttft_ms,
                     decode.c_str(), m.peak_mem_mib);
}

inline double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The program's output: per sequence its text (ids without a tokenizer) or with --json its object; then the
// summary line (object), its shape (B, prompt and generated lengths, parameters) taken from `in` here.
inline void print_results(const InferOptions& opt, const InferInputs& in, std::vector<SequenceResult>& seqs,
                          InferSummary sum) {
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
