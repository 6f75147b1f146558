/*
 * What both inference programs start from (llmc/infer/driver.h): the model (dN with random weights from --seed,
 * or a model file), GPT-2's tokenizer where its files are there and fit the model, and the B prompts.
 */
#pragma once
#include <memory>
#include <vector>

#include "llmc/model/gpt2_config.h"
#include "llmc/infer/options.h"
#include "llmc/io/tokenizer.h"

namespace llmc {

/*
 * The B prompts, as token ids: -p and --prompt-file are encoded with `tok` (null: an Error naming the missing
 * vocabulary; a tokenizer of another vocabulary size than V: an Error saying so), --prompt-ids taken as given,
 * --prompt-len drawn per sequence from Rng(seed ^ 1) (not the sampling stream), no prompt flag gives
 * <|endoftext|> (`eot`). Fewer prompts than B are cycled in order; more are an error. Every prompt is non-empty
 * and every id inside the vocabulary of size V.
 */
std::vector<std::vector<int>> build_prompts(const InferOptions& opt, const GPT2Tokenizer* tok, int V, int eot);

struct InferInputs {
    GPT2Config cfg;
    std::vector<float> params; // num_parameters(cfg) fp32 values, llm.c order
    std::unique_ptr<GPT2Tokenizer> tok;
    int eot = 0; // <|endoftext|>: the tokenizer's, else the last id (where GPT-2 puts it)
    std::vector<std::vector<int>> prompts;
    int longest = 0; // tokens in the longest prompt
};

// The model, tokenizer and prompts for these flags; the prompts checked against maxT with -n.
InferInputs load_infer_inputs(const InferOptions& opt);

} // namespace llmc
