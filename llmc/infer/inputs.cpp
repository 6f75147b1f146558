// The inference programs' model, tokenizer and prompts (llmc/infer/inputs.h).
#include "llmc/infer/inputs.h"

#include <algorithm>
#include <string>

#include "llmc/io/checkpoint.h"
#include "llmc/util/rand.h"
#include "llmc/util/utils.h"

namespace llmc {

namespace {

// The prompts of the file, one per non-empty line (a trailing '\r' dropped); an error names the file and line.
std::vector<std::vector<int>> prompts_of_file(const std::string& path, const GPT2Tokenizer& tok,
                                              const std::string& text) {
    std::vector<std::vector<int>> prompts;
    int line_no = 0;
    for (size_t pos = 0; pos < text.size();) {
        size_t eol = std::min(text.find('\n', pos), text.size());
        std::string line = text.substr(pos, eol - pos);
        pos = eol + 1, line_no++;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) continue;
        try {
            prompts.push_back(tok.encode(line));
        } catch (const Error& e) {
            throw Error(strprintf("%s: line %d: %s", path.c_str(), line_no, e.what()));
        }
    }
    if (prompts.empty()) throw Error(strprintf("%s: no prompt in the file (one per line)", path.c_str()));
    return prompts;
}

// The prompts as the flags give them, before they are checked and cycled to B.
std::vector<std::vector<int>> given_prompts(const InferOptions& opt, const GPT2Tokenizer* tok, int V, int eot) {
    auto need_tokenizer = [&](const std::string& what) {
        if (!tok)
            throw Error(strprintf("%s: encoding text needs GPT-2's encoder.json and vocab.bpe in %s (set GPT2_VOCAB_DIR)",
                                  what.c_str(), default_gpt2_vocab_dir().c_str()));
        if (tok->vocab_size() != V)
            throw Error(strprintf("%s: the model's vocabulary has %d tokens, GPT-2's tokenizer %d: text cannot be "
                                  "encoded for it; give token ids (--prompt-ids)", what.c_str(), V, tok->vocab_size()));
    };
    if (!opt.prompt_text.empty()) {
        need_tokenizer("-p");
        return {tok->encode(opt.prompt_text)};
    }
    if (!opt.prompt_file.empty()) {
        std::string text = detail::read_text_file(opt.prompt_file);
        need_tokenizer(opt.prompt_file);
        return prompts_of_file(opt.prompt_file, *tok, text);
    }
    if (!opt.prompt_ids.empty()) return {opt.prompt_ids};
    if (opt.prompt_len <= 0) return {{eot}};
    std::vector<std::vector<int>> prompts;
    Rng rng(opt.seed ^ 1);
    for (int b = 0; b < std::max(opt.B, 1); b++) {
        prompts.emplace_back(opt.prompt_len);
        for (int& id : prompts.back()) id = (int)(rng.next_u32() % (uint32_t)V);
    }
    return prompts;
}

} // namespace

std::vector<std::vector<int>> build_prompts(const InferOptions& opt, const GPT2Tokenizer* tok, int V, int eot) {
    std::vector<std::vector<int>> prompts = given_prompts(opt, tok, V, eot);
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
    const size_t given = prompts.size(); // cycled in order: a, b, c, a, b for three prompts and -b 5
    for (int b = (int)given; b < B; b++) prompts.push_back(std::vector<int>(prompts[b % given]));
    return prompts;
}

InferInputs load_infer_inputs(const InferOptions& opt) {
    InferInputs in;
    ModelSource src = load_model_source(opt.model, opt.seed);
    in.cfg = src.cfg;
    in.params = std::move(src.params);
    const std::string vocab = default_gpt2_vocab_dir();
    if (file_exists(vocab + "/encoder.json") && file_exists(vocab + "/vocab.bpe"))
        in.tok = std::make_unique<GPT2Tokenizer>(GPT2Tokenizer::from_gpt2_files(vocab + "/encoder.json", vocab + "/vocab.bpe"));
    // A tokenizer whose vocabulary is not the model's encodes nothing (build_prompts says so) and decodes nothing.
    const bool fits = in.tok && in.tok->vocab_size() == in.cfg.vocab_size;
    in.eot = fits ? in.tok->eot() : in.cfg.vocab_size - 1;
    auto check_length = [&](long longest) {
        if ((size_t)longest + opt.new_tokens > (size_t)in.cfg.max_seq_len)
            throw Error(strprintf("-n: a prompt of %ld tokens and %d new tokens exceed the model's maximum sequence "
                                  "length %d", longest, opt.new_tokens, in.cfg.max_seq_len));
    };
    if (opt.prompt_len > 0) check_length(opt.prompt_len); // before B prompts of that length are drawn
    in.prompts = build_prompts(opt, in.tok.get(), in.cfg.vocab_size, in.eot);
    for (auto& p : in.prompts) in.longest = std::max(in.longest, (int)p.size());
    check_length(in.longest);
    if (!fits) in.tok.reset();
    return in;
}

} // namespace llmc
