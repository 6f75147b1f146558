/*
 * GPT-2 byte-level BPE tokenizer, bit-exact with OpenAI's encoder (and tiktoken's "gpt2" encoding).
 *
 * Encoding works in two stages, as in GPT-2:
 *   1. pre-tokenization: GPT-2's regex splits the text into words, numbers, punctuation runs and whitespace;
 *   2. each piece's bytes start as one token per byte and adjacent pairs are merged, lowest vocab.bpe rank
 *      first, until no ranked pair is left.
 * Tokens are held as raw bytes. GPT-2's files spell each byte as a printable unicode character (bytes_to_unicode
 * below); that spelling exists only in encoder.json and vocab.bpe and is undone on load.
 *
 * Two ways to load:
 *   from_gpt2_files(encoder.json, vocab.bpe)  encode and decode
 *   from_llmc_file(tokenizer .bin)            decode only; llm.c's format holds the token bytes, not the merges
 * The llm.c tokenizer file: header of 256 int32 {20240328, 2, vocab size, EOT id, 0...}, then per token a uint8
 * length followed by that many bytes.
 * GPT-2's encoder.json and vocab.bpe ship with the repository (dev/data/gpt2); default_gpt2_vocab_dir() finds them.
 * Compiled once: llmc/io/tokenizer.cpp.
 */
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "llmc/util/utils.h"

namespace llmc {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100..U+0143,
// so that every byte has a visible, non-whitespace spelling in the vocabulary files.
std::array<int, 256> gpt2_byte_to_codepoint();

/*
 * Where GPT-2's encoder.json and vocab.bpe are by default: $GPT2_VOCAB_DIR where set, else the copy that ships with
 * the repository, dev/data/gpt2 beside the running program (the programs are built at the repository root), so the
 * default holds from any working directory.
 */
std::string default_gpt2_vocab_dir();

namespace detail {
std::string read_text_file(const std::string& path); // the whole file; Error naming it if it cannot be read
} // namespace detail

class GPT2Tokenizer {
public:
    static GPT2Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
    static GPT2Tokenizer from_llmc_file(const std::string& path);

    bool can_encode() const { return regex_ != nullptr; }
    // Ordinary text only: "<|endoftext|>" in the input is encoded as the characters it is made of.
    std::vector<int> encode(std::string_view utf8_text) const;
    std::string decode(const std::vector<int>& ids) const;
    const std::string& token_bytes(int id) const; // Error for an id outside the vocabulary
    int vocab_size() const { return (int)tokens_.size(); }
    int eot() const { return eot_; }
    void write_llmc_file(const std::string& path) const;

private:
    static uint64_t pair_key(int a, int b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
    std::vector<int> bpe(std::string_view piece) const;
    // from_gpt2_files' steps: encoder.json's tokens (returns each token's id by its byte spelling), vocab.bpe's
    // merges, and GPT-2's pre-tokenizer regex.
    std::unordered_map<std::string, int> load_encoder(const std::string& encoder_json);
    void load_merges(const std::string& vocab_bpe, const std::string& encoder_json,
                     const std::unordered_map<std::string, int>& spelled_ids);
    void compile_pretokenizer();

    std::string source_; // the file errors name
    std::vector<std::string> tokens_;
    int eot_ = -1;
    // Encoding state, empty for a decode-only tokenizer.
    std::array<int, 256> byte_ids_{};
    std::unordered_map<uint64_t, int> merges_; // token pair -> rank: line order in vocab.bpe, lower merges first
    std::vector<int> merge_results_;           // rank -> the token its pair becomes
    std::shared_ptr<pcre2_code> regex_;
};

} // namespace llmc
