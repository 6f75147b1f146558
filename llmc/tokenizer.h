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
 */
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/formats.h"
#include "llmc/utils.h"

namespace llmc {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100..U+0143,
// so that every byte has a visible, non-whitespace spelling in the vocabulary files.
inline std::array<int, 256> gpt2_byte_to_codepoint() {
    std::array<int, 256> cp{};
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? b : 256 + n++;
    }
    return cp;
}

class GPT2Tokenizer {
public:
    static GPT2Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);
    static GPT2Tokenizer from_llmc_file(const std::string& path);

    bool can_encode() const { return regex_ != nullptr; }
    // Ordinary text only: "<|endoftext|>" in the input is encoded as the characters it is made of.
    std::vector<int> encode(std::string_view utf8_text) const;
    std::string decode(const std::vector<int>& ids) const {
        std::string out;
        for (int id : ids) out += token_bytes(id);
        return out;
    }
    const std::string& token_bytes(int id) const {
        if (id < 0 || id >= vocab_size())
            throw Error(strprintf("token id %d out of range for %s (vocab size %d)", id, source_.c_str(), vocab_size()));
        return tokens_[id];
    }
    int vocab_size() const { return (int)tokens_.size(); }
    int eot() const { return eot_; }
    void write_llmc_file(const std::string& path) const;

private:
    struct Merge {
        int rank; // line order in vocab.bpe: lower merges first
        int id;   // token the pair becomes
    };
    static uint64_t pair_key(int a, int b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
    std::vector<int> bpe(std::string_view piece) const;

    std::string source_; // the file errors name
    std::vector<std::string> tokens_;
    int eot_ = -1;
    // Encoding state, empty for a decode-only tokenizer.
    std::array<int, 256> byte_ids_{};
    std::unordered_map<uint64_t, Merge> merges_;
    std::shared_ptr<pcre2_code> regex_;
};

namespace detail {

inline std::string read_text_file(const std::string& path) {
    File f(path, "rb");
    std::string s(f.size(), '\0');
    f.read(s.data(), s.size());
    return s;
}

// Messages quote file content; keep them one line and short.
inline std::string quote_excerpt(std::string_view s) {
    std::string q;
    for (char c : s.substr(0, 40)) q += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
    return "\"" + q + (s.size() > 40 ? "...\"" : "\"");
}

// Match data is per encode() call so that encoding is thread-safe.
using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;

inline std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return (const char*)buf;
}

} // namespace detail

inline GPT2Tokenizer GPT2Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
    GPT2Tokenizer t;
    t.source_ = encoder_json;

    // encoder.json: {"<token in GPT-2's byte spelling>": id, ...}, ids dense from 0.
    nlohmann::json enc;
    try {
        enc = nlohmann::json::parse(detail::read_text_file(encoder_json));
    } catch (const nlohmann::json::exception& e) {
        throw Error(strprintf("%s: malformed JSON (%s)", encoder_json.c_str(), e.what()));
    }
    if (!enc.is_object() || enc.empty())
        throw Error(strprintf("%s: expected a JSON object mapping tokens to ids", encoder_json.c_str()));
    std::array<int, 256> byte_to_cp = gpt2_byte_to_codepoint();
    std::array<int, 324> cp_to_byte;
    cp_to_byte.fill(-1);
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = b;

    const int n = (int)enc.size();
    t.tokens_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    std::unordered_map<std::string, int> spelled_ids; // byte spelling -> id, to resolve vocab.bpe's symbols
    spelled_ids.reserve(n);
    for (auto it = enc.begin(); it != enc.end(); ++it) {
        const std::string& key = it.key();
        if (!it.value().is_number_integer() || it.value().get<long long>() < 0 || it.value().get<long long>() >= n)
            throw Error(strprintf("%s: token %s has id %s, expected an integer in [0, %d)", encoder_json.c_str(),
                                  detail::quote_excerpt(key).c_str(), it.value().dump().c_str(), n));
        int id = it.value().get<int>();
        if (seen[id]) throw Error(strprintf("%s: id %d is used by more than one token", encoder_json.c_str(), id));
        seen[id] = true;
        // Undo the byte spelling: every character is U+0000..U+0143, one or two UTF-8 bytes.
        std::string bytes;
        for (size_t i = 0; i < key.size();) {
            unsigned char c0 = key[i];
            int cp = -1;
            if (c0 < 0x80) {
                cp = c0;
                i += 1;
            } else if ((c0 & 0xE0) == 0xC0 && i + 1 < key.size() && ((unsigned char)key[i + 1] & 0xC0) == 0x80) {
                cp = (c0 & 0x1F) << 6 | ((unsigned char)key[i + 1] & 0x3F);
                i += 2;
            }
            if (cp < 0 || cp >= (int)cp_to_byte.size() || cp_to_byte[cp] < 0)
                throw Error(strprintf("%s: token %s has a character outside GPT-2's byte alphabet",
                                      encoder_json.c_str(), detail::quote_excerpt(key).c_str()));
            bytes += (char)cp_to_byte[cp];
        }
        if (bytes.empty()) throw Error(strprintf("%s: empty token with id %d", encoder_json.c_str(), id));
        t.tokens_[id] = bytes;
        spelled_ids.emplace(key, id);
    }
    auto eot = spelled_ids.find("<|endoftext|>");
    if (eot == spelled_ids.end()) throw Error(strprintf("%s: no \"<|endoftext|>\" token", encoder_json.c_str()));
    t.eot_ = eot->second;
    for (int b = 0; b < 256; b++) {
        std::string spelled;
        int cp = byte_to_cp[b];
        if (cp < 0x80) {
            spelled = std::string(1, (char)cp);
        } else {
            spelled = {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
        }
        auto id = spelled_ids.find(spelled);
        if (id == spelled_ids.end())
            throw Error(strprintf("%s: no token for byte 0x%02x", encoder_json.c_str(), b));
        t.byte_ids_[b] = id->second;
    }

    // vocab.bpe: "#version" line, then one merge "left right" per line, most frequent (lowest rank) first.
    std::string merges = detail::read_text_file(vocab_bpe);
    size_t pos = 0;
    int line_no = 0, rank = 0;
    t.merges_.reserve(n);
    while (pos < merges.size()) {
        size_t eol = merges.find('\n', pos);
        if (eol == std::string::npos) eol = merges.size();
        std::string_view line(merges.data() + pos, eol - pos);
        pos = eol + 1;
        line_no++;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty() || (line_no == 1 && line.substr(0, 8) == "#version")) continue;
        size_t sp = line.find(' ');
        if (sp == 0 || sp == std::string_view::npos || sp + 1 == line.size() || line.find(' ', sp + 1) != line.npos)
            throw Error(strprintf("%s:%d: expected two symbols separated by one space, got %s", vocab_bpe.c_str(),
                                  line_no, detail::quote_excerpt(line).c_str()));
        std::string left(line.substr(0, sp)), right(line.substr(sp + 1));
        auto a = spelled_ids.find(left), b = spelled_ids.find(right), ab = spelled_ids.find(left + right);
        if (a == spelled_ids.end() || b == spelled_ids.end())
            throw Error(strprintf("%s:%d: merge symbol %s is not in %s", vocab_bpe.c_str(), line_no,
                                  detail::quote_excerpt(a == spelled_ids.end() ? left : right).c_str(),
                                  encoder_json.c_str()));
        if (ab == spelled_ids.end())
            throw Error(strprintf("%s:%d: merge result %s is not in %s", vocab_bpe.c_str(), line_no,
                                  detail::quote_excerpt(left + right).c_str(), encoder_json.c_str()));
        t.merges_.emplace(pair_key(a->second, b->second), Merge{rank++, ab->second});
    }
    if (rank == 0) throw Error(strprintf("%s: no merges", vocab_bpe.c_str()));

    // GPT-2's pre-tokenizer. UCP makes \s, \p{L}, \p{N} Unicode-aware, as in the Python original.
    const char* pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    int err;
    PCRE2_SIZE err_off;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &err_off,
                                   nullptr);
    if (!re) throw Error("tokenizer: cannot compile the pre-tokenizer regex (" + detail::pcre2_message(err) + ")");
    // Where JIT is unavailable pcre2_match falls back to the interpreter with identical results, only slower.
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    t.regex_ = std::shared_ptr<pcre2_code>(re, pcre2_code_free);
    return t;
}

// Byte pair merging of one pre-token. Tokens form a linked list; candidate pairs sit in a min-heap ordered by
// (rank, position), and entries made stale by an earlier merge are skipped when popped. This is GPT-2's
// "merge the lowest-ranked pair, leftmost first" in O(n log n), so a megabyte-long word is no problem.
inline std::vector<int> GPT2Tokenizer::bpe(std::string_view piece) const {
    const int n = (int)piece.size();
    if (n == 1) return {byte_ids_[(unsigned char)piece[0]]};
    std::vector<int> id(n), prev(n), next(n); // id -1: merged into its left neighbour
    for (int i = 0; i < n; i++) {
        id[i] = byte_ids_[(unsigned char)piece[i]];
        prev[i] = i - 1;
        next[i] = i + 1 < n ? i + 1 : -1;
    }
    struct Cand {
        int rank, left, right, left_id, right_id;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int l) {
        if (l < 0 || next[l] < 0) return;
        int r = next[l];
        auto m = merges_.find(pair_key(id[l], id[r]));
        if (m != merges_.end()) heap.push({m->second.rank, l, r, id[l], id[r]});
    };
    for (int i = 0; i + 1 < n; i++) push(i);
    while (!heap.empty()) {
        Cand c = heap.top();
        heap.pop();
        if (id[c.left] != c.left_id || next[c.left] != c.right || id[c.right] != c.right_id) continue; // stale
        id[c.left] = merges_.find(pair_key(c.left_id, c.right_id))->second.id;
        id[c.right] = -1;
        next[c.left] = next[c.right];
        if (next[c.left] >= 0) prev[next[c.left]] = c.left;
        push(prev[c.left]);
        push(c.left);
    }
    std::vector<int> out;
    for (int i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
    return out;
}

inline std::vector<int> GPT2Tokenizer::encode(std::string_view text) const {
    if (!can_encode())
        throw Error(strprintf("%s: tokenizer has no merges and can only decode; load encoder.json and vocab.bpe to "
                              "encode", source_.c_str()));
    std::vector<int> out;
    out.reserve(text.size() / 3);
    if (text.empty()) return out;
    detail::MatchData md(pcre2_match_data_create_from_pattern(regex_.get(), nullptr), pcre2_match_data_free);
    if (!md) throw Error("tokenizer: out of memory for the regex match data");
    // Natural text repeats its words; the cache makes BPE run once per distinct piece. Keys view into `text`.
    std::unordered_map<std::string_view, std::vector<int>> cache;
    const auto* subject = (PCRE2_SPTR)text.data();
    // The first match validates the whole text as UTF-8; later matches skip that O(n) check.
    uint32_t options = 0;
    for (size_t pos = 0; pos < text.size(); options = PCRE2_NO_UTF_CHECK) {
        int rc = pcre2_match(regex_.get(), subject, text.size(), pos, options, md.get(), nullptr);
        if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
            throw Error(strprintf("invalid UTF-8 in the input at byte offset %zu (%s)",
                                  (size_t)pcre2_get_startchar(md.get()), detail::pcre2_message(rc).c_str()));
        if (rc < 0)
            throw Error(strprintf("pre-tokenizer regex failed at byte offset %zu (%s)", pos,
                                  rc == PCRE2_ERROR_NOMATCH ? "no match" : detail::pcre2_message(rc).c_str()));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        // Every character matches some alternative, so a match elsewhere would mean text silently dropped.
        if (ov[0] != pos || ov[1] <= pos)
            throw Error(strprintf("pre-tokenizer regex skipped text at byte offset %zu", pos));
        std::string_view piece = text.substr(pos, ov[1] - pos);
        auto hit = cache.find(piece);
        if (hit == cache.end()) hit = cache.emplace(piece, bpe(piece)).first;
        out.insert(out.end(), hit->second.begin(), hit->second.end());
        pos = ov[1];
    }
    return out;
}

inline GPT2Tokenizer GPT2Tokenizer::from_llmc_file(const std::string& path) {
    File f(path, "rb");
    Header h = read_header(f, TOKENIZER_MAGIC, "tokenizer file");
    if (h[1] != TOKENIZER_VERSION)
        throw Error(strprintf("%s: unsupported tokenizer file version %d (expected %d)", path.c_str(), h[1],
                              TOKENIZER_VERSION));
    const int n = h[2], eot = h[3];
    if (n <= 0 || eot < 0 || eot >= n)
        throw Error(strprintf("%s: bad header (vocab size %d, EOT id %d)", path.c_str(), n, eot));
    std::string body(f.size() - HEADER_BYTES, '\0');
    f.read(body.data(), body.size(), "tokens");
    GPT2Tokenizer t;
    t.source_ = path;
    t.eot_ = eot;
    t.tokens_.resize(n);
    size_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (pos >= body.size() || pos + 1 + (unsigned char)body[pos] > body.size())
            throw Error(strprintf("%s: truncated tokenizer file (token %d of %d is cut off)", path.c_str(), i, n));
        size_t len = (unsigned char)body[pos];
        if (len == 0) throw Error(strprintf("%s: token %d has length 0", path.c_str(), i));
        t.tokens_[i] = body.substr(pos + 1, len);
        pos += 1 + len;
    }
    if (pos != body.size())
        throw Error(strprintf("%s: %zu unexpected bytes after the last token", path.c_str(), body.size() - pos));
    return t;
}

inline void GPT2Tokenizer::write_llmc_file(const std::string& path) const {
    Header h = make_header(TOKENIZER_MAGIC, TOKENIZER_VERSION);
    h[2] = vocab_size();
    h[3] = eot_;
    std::string body;
    for (int i = 0; i < vocab_size(); i++) {
        // The format stores lengths in one byte.
        if (tokens_[i].empty() || tokens_[i].size() > 255)
            throw Error(strprintf("%s: token %d is %zu bytes, the format allows 1 to 255", path.c_str(), i,
                                  tokens_[i].size()));
        body += (char)tokens_[i].size();
        body += tokens_[i];
    }
    AtomicFile f(path);
    f.write(h.data(), HEADER_BYTES);
    f.write(body.data(), body.size());
    f.commit();
}

} // namespace llmc
