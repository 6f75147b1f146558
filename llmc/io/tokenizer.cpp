// The GPT-2 tokenizer's loading, BPE and encoding (llmc/io/tokenizer.h).
#include "llmc/io/tokenizer.h"

#include <algorithm>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "llmc/io/formats.h"

namespace llmc {

std::array<int, 256> gpt2_byte_to_codepoint() {
    std::array<int, 256> cp{};
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? b : 256 + n++;
    }
    return cp;
}

std::string default_gpt2_vocab_dir() {
    const char* env = getenv("GPT2_VOCAB_DIR");
    if (env && *env) return env;
    std::string exe(4096, '\0');
    ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size());
    if (n <= 0 || (size_t)n >= exe.size()) return "dev/data/gpt2";
    exe.resize((size_t)n);
    return exe.substr(0, exe.rfind('/') + 1) + "dev/data/gpt2";
}

namespace detail {

std::string read_text_file(const std::string& path) {
    File f(path, "rb");
    std::string s(f.size(), '\0');
    f.read(s.data(), s.size());
    return s;
}

// Messages quote file content; keep them one line, short and free of control characters.
std::string quote_excerpt(std::string_view s) {
    std::string q;
    for (char c : s.substr(0, 40)) q += ((unsigned char)c < 0x20 || c == 0x7f) ? ' ' : c;
    return "\"" + q + (s.size() > 40 ? "...\"" : "\"");
}

// Match data is per encode() call so that encoding is thread-safe.
using MatchData = std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)>;

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof(buf));
    return (const char*)buf;
}

} // namespace detail

namespace {

// encoder.json, parsed: {"<token in GPT-2's byte spelling>": id, ...}, ids dense from 0.
nlohmann::json parse_encoder_json(const std::string& encoder_json) {
    // The file is one flat object: a nested value is refused as soon as it opens, so nesting depth (and the
    // recursion that deep values cost) stays bounded. Messages never quote the JSON parser's own text, which
    // echoes file content.
    nlohmann::json enc;
    auto flat = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if (depth > 0 && (event == nlohmann::json::parse_event_t::object_start ||
                          event == nlohmann::json::parse_event_t::array_start))
            throw Error(strprintf("%s: expected a flat JSON object mapping tokens to ids, found a nested %s",
                                  encoder_json.c_str(),
                                  event == nlohmann::json::parse_event_t::object_start ? "object" : "array"));
        return true;
    };
    try {
        enc = nlohmann::json::parse(detail::read_text_file(encoder_json), flat);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(strprintf("%s: malformed JSON (syntax error at byte %zu)", encoder_json.c_str(), e.byte));
    } catch (const nlohmann::json::out_of_range&) {
        throw Error(strprintf("%s: malformed JSON (a number out of range)", encoder_json.c_str()));
    } catch (const nlohmann::json::exception& e) {
        throw Error(strprintf("%s: malformed JSON (error %d)", encoder_json.c_str(), e.id));
    }
    if (!enc.is_object() || enc.empty())
        throw Error(strprintf("%s: expected a JSON object mapping tokens to ids", encoder_json.c_str()));
    return enc;
}

// A token's bytes from its spelling in GPT-2's files: every character is U+0000..U+0143, one or two UTF-8 bytes.
std::string unspell(const std::string& key, const std::array<int, 324>& cp_to_byte, const std::string& encoder_json) {
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
            throw Error(strprintf("%s: token %s has a character outside GPT-2's byte alphabet", encoder_json.c_str(),
                                  detail::quote_excerpt(key).c_str()));
        bytes += (char)cp_to_byte[cp];
    }
    return bytes;
}

// A token's id from encoder.json: an integer in [0, n), else an Error that says what it was.
int token_id(const std::string& key, const nlohmann::json& v, int n, const std::string& encoder_json) {
    bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < (uint64_t)n
                                           : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < n;
    if (!in_range)
        throw Error(strprintf("%s: token %s has id %s, expected an integer in [0, %d)", encoder_json.c_str(),
                              detail::quote_excerpt(key).c_str(),
                              v.is_number_unsigned()  ? std::to_string(v.get<uint64_t>()).c_str()
                              : v.is_number_integer() ? std::to_string(v.get<int64_t>()).c_str()
                                                      : (std::string("of JSON type ") + v.type_name()).c_str(),
                              n));
    return v.get<int>();
}

} // namespace

std::unordered_map<std::string, int> GPT2Tokenizer::load_encoder(const std::string& encoder_json) {
    const nlohmann::json enc = parse_encoder_json(encoder_json);
    std::array<int, 256> byte_to_cp = gpt2_byte_to_codepoint();
    std::array<int, 324> cp_to_byte;
    cp_to_byte.fill(-1);
    for (int b = 0; b < 256; b++) cp_to_byte[byte_to_cp[b]] = b;

    const int n = (int)enc.size();
    tokens_.assign(n, std::string());
    std::vector<bool> seen(n, false);
    std::unordered_map<std::string, int> spelled_ids; // byte spelling -> id, to resolve vocab.bpe's symbols
    spelled_ids.reserve(n);
    for (auto it = enc.begin(); it != enc.end(); ++it) {
        const std::string& key = it.key();
        const int id = token_id(key, it.value(), n, encoder_json);
        if (seen[id]) throw Error(strprintf("%s: id %d is used by more than one token", encoder_json.c_str(), id));
        seen[id] = true;
        std::string bytes = unspell(key, cp_to_byte, encoder_json);
        if (bytes.empty()) throw Error(strprintf("%s: empty token with id %d", encoder_json.c_str(), id));
        tokens_[id] = bytes;
        spelled_ids.emplace(key, id);
    }
    auto eot = spelled_ids.find("<|endoftext|>");
    if (eot == spelled_ids.end()) throw Error(strprintf("%s: no \"<|endoftext|>\" token", encoder_json.c_str()));
    eot_ = eot->second;
    for (int b = 0; b < 256; b++) {
        std::string spelled;
        int cp = byte_to_cp[b];
        if (cp < 0x80) {
            spelled = std::string(1, (char)cp);
        } else {
            spelled = {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
        }
        auto id = spelled_ids.find(spelled);
        if (id == spelled_ids.end()) throw Error(strprintf("%s: no token for byte 0x%02x", encoder_json.c_str(), b));
        byte_ids_[b] = id->second;
    }
    return spelled_ids;
}

void GPT2Tokenizer::load_merges(const std::string& vocab_bpe, const std::string& encoder_json,
                                const std::unordered_map<std::string, int>& spelled_ids) {
    // vocab.bpe: "#version" line, then one merge "left right" per line, most frequent (lowest rank) first. As
    // BPE training writes it, every merge makes a new token out of two that exist already (single bytes or
    // the results of earlier lines); bpe() relies on that order.
    std::string merges = detail::read_text_file(vocab_bpe);
    size_t pos = 0;
    int line_no = 0, rank = 0;
    const int n = vocab_size();
    std::vector<int> made_by(n, -1); // line that made each token; 0 for the single bytes
    for (int b = 0; b < 256; b++) made_by[byte_ids_[b]] = 0;
    merges_.reserve(n);
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
        for (const auto& sym : {a, b})
            if (made_by[sym->second] < 0)
                throw Error(strprintf("%s:%d: merge symbol %s is neither a single byte nor made by an earlier line",
                                      vocab_bpe.c_str(), line_no, detail::quote_excerpt(sym->first).c_str()));
        if (made_by[ab->second] >= 0)
            throw Error(strprintf("%s:%d: merge result %s is %s", vocab_bpe.c_str(), line_no,
                                  detail::quote_excerpt(left + right).c_str(),
                                  made_by[ab->second] == 0 ? "a single byte"
                                                           : strprintf("made by line %d already", made_by[ab->second]).c_str()));
        made_by[ab->second] = line_no;
        merges_.emplace(pair_key(a->second, b->second), rank++);
        merge_results_.push_back(ab->second);
    }
    if (rank == 0) throw Error(strprintf("%s: no merges", vocab_bpe.c_str()));

}

void GPT2Tokenizer::compile_pretokenizer() {
    // GPT-2's pre-tokenizer. UCP makes \s, \p{L}, \p{N} Unicode-aware, as in the Python original.
    const char* pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    int err;
    PCRE2_SIZE err_off;
    pcre2_code* re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &err_off,
                                   nullptr);
    if (!re) throw Error("tokenizer: cannot compile the pre-tokenizer regex (" + detail::pcre2_message(err) + ")");
    // Where JIT is unavailable pcre2_match falls back to the interpreter with identical results, only slower.
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    regex_ = std::shared_ptr<pcre2_code>(re, pcre2_code_free);
}

GPT2Tokenizer GPT2Tokenizer::from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe) {
    GPT2Tokenizer t;
    t.source_ = encoder_json;
    const std::unordered_map<std::string, int> spelled_ids = t.load_encoder(encoder_json);
    t.load_merges(vocab_bpe, encoder_json, spelled_ids);
    t.compile_pretokenizer();
    return t;
}

namespace detail {
/*
 * BPE's candidate pairs as keys rank << 32 | position, taken out one rank at a time: pop_rank() hands over every
 * key of the lowest rank, in position order. Ranks must come out non-decreasing (a pushed key's rank is never
 * below the last popped one), which is what a radix heap needs: keys sit in buckets by the highest bit in which
 * their rank differs from the last popped rank, and a pop that finds bucket 0 empty redistributes the lowest
 * non-empty bucket, so every key moves down at most 32 times and always sequentially in memory. On a
 * multi-megabyte piece, where a binary heap is bound by cache misses, that and walking each rank's positions in
 * order is what keeps BPE fast.
 */
class RankQueue {
public:
    void push(uint64_t key) {
        if ((key >> 32) < last_) throw Error("tokenizer: internal error (BPE ranks out of order)");
        buckets_[bucket(key)].push_back(key);
    }
    // Moves the keys of the lowest rank into `out`, sorted; false when the queue is empty.
    bool pop_rank(std::vector<uint64_t>& out) {
        if (buckets_[0].empty()) {
            int i = 1;
            while (i < (int)buckets_.size() && buckets_[i].empty()) i++;
            if (i == (int)buckets_.size()) return false;
            std::vector<uint64_t>& from = buckets_[i];
            last_ = *std::min_element(from.begin(), from.end()) >> 32;
            for (uint64_t key : from) buckets_[bucket(key)].push_back(key);
            from.clear();
        }
        out.swap(buckets_[0]);
        buckets_[0].clear();
        std::sort(out.begin(), out.end());
        return true;
    }

private:
    int bucket(uint64_t key) const {
        uint64_t rank = key >> 32;
        return rank == last_ ? 0 : 64 - __builtin_clzll(rank ^ last_);
    }
    std::array<std::vector<uint64_t>, 33> buckets_;
    uint64_t last_ = 0;
};
} // namespace detail

// Byte pair merging of one pre-token: GPT-2's "merge the lowest-ranked pair, leftmost first" in O(n log n).
// Tokens form a linked list over the piece's bytes; candidate pairs are keys (rank << 32 | left position). A
// merge only creates pairs that contain its result, and the loader checks that every merge using a token comes
// after the merge that made it, so new candidates always rank above the merge that made them: ranks come out
// in order, and within a rank positions left to right. An entry is stale once its left token has been merged
// away or starts a different pair now; stale entries are skipped.
std::vector<int> GPT2Tokenizer::bpe(std::string_view piece) const {
    const int n = (int)piece.size();
    if (n == 1) return {byte_ids_[(unsigned char)piece[0]]};
    constexpr uint32_t NONE = UINT32_MAX;
    // One struct per byte, so that the scattered accesses of a long piece touch one cache line per position.
    struct Node {
        int id;             // -1: merged into its left neighbour
        int prev, next;     // -1 at the ends
        uint32_t pair_rank; // rank of the pair this token starts, NONE when it has none
    };
    std::vector<Node> t(n);
    for (int i = 0; i < n; i++) t[i] = {byte_ids_[(unsigned char)piece[i]], i - 1, i + 1 < n ? i + 1 : -1, NONE};
    detail::RankQueue queue;
    auto update = [&](int l) {
        if (l < 0) return;
        auto m = t[l].next < 0 ? merges_.end() : merges_.find(pair_key(t[l].id, t[t[l].next].id));
        t[l].pair_rank = m == merges_.end() ? NONE : (uint32_t)m->second;
        if (t[l].pair_rank != NONE) queue.push((uint64_t)t[l].pair_rank << 32 | (uint32_t)l);
    };
    for (int i = 0; i + 1 < n; i++) update(i);
    std::vector<uint64_t> batch;
    while (queue.pop_rank(batch)) {
        const uint32_t rank = (uint32_t)(batch[0] >> 32);
        for (size_t k = 0; k < batch.size(); k++) {
            if (k + 16 < batch.size()) __builtin_prefetch(&t[(uint32_t)batch[k + 16]]);
            const int l = (int)(uint32_t)batch[k];
            Node& left = t[l];
            if (left.id < 0 || left.pair_rank != rank) continue; // stale
            Node& right = t[left.next];
            left.id = merge_results_[rank];
            right.id = -1;
            left.next = right.next;
            if (left.next >= 0) t[left.next].prev = l;
            update(left.prev);
            update(l);
        }
    }
    std::vector<int> out;
    for (int i = 0; i >= 0; i = t[i].next) out.push_back(t[i].id);
    return out;
}

std::vector<int> GPT2Tokenizer::encode(std::string_view text) const {
    if (!can_encode())
        throw Error(strprintf("%s: tokenizer has no merges and can only decode; load encoder.json and vocab.bpe to "
                              "encode", source_.c_str()));
    std::vector<int> out;
    out.reserve(text.size() / 3);
    if (text.empty()) return out;
    detail::MatchData md(pcre2_match_data_create_from_pattern(regex_.get(), nullptr), pcre2_match_data_free);
    if (!md) throw Error("tokenizer: out of memory for the regex match data");
    // Natural text repeats its words; the cache makes BPE run once per distinct piece. Keys view into `text`.
    // Bounded: only word-sized pieces are kept, and a full cache starts over, so text of unique words costs
    // no more than MAX_CACHED entries.
    constexpr size_t MAX_CACHED = 1 << 16, MAX_CACHED_PIECE = 64;
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
        std::vector<int> uncached;
        const std::vector<int>* ids = &uncached;
        if (piece.size() > MAX_CACHED_PIECE) {
            uncached = bpe(piece);
        } else {
            auto hit = cache.find(piece);
            if (hit == cache.end()) {
                if (cache.size() == MAX_CACHED) cache.clear();
                hit = cache.emplace(piece, bpe(piece)).first;
            }
            ids = &hit->second;
        }
        out.insert(out.end(), ids->begin(), ids->end());
        pos = ov[1];
    }
    return out;
}

GPT2Tokenizer GPT2Tokenizer::from_llmc_file(const std::string& path) {
    File f(path, "rb");
    Header h = read_header(f, TOKENIZER_MAGIC, "tokenizer file");
    if (h[1] != TOKENIZER_VERSION)
        throw Error(strprintf("%s: unsupported tokenizer file version %d (expected %d)", path.c_str(), h[1],
                              TOKENIZER_VERSION));
    const int n = h[2], eot = h[3];
    if (n <= 0 || eot < 0 || eot >= n)
        throw Error(strprintf("%s: bad header (vocab size %d, EOT id %d)", path.c_str(), n, eot));
    // Every token takes at least 2 bytes (length, then 1 to 255 bytes): check the claim before allocating for it.
    const size_t body_bytes = f.size() - HEADER_BYTES;
    if ((size_t)n > body_bytes / 2)
        throw Error(strprintf("%s: truncated tokenizer file (header says %d tokens, the %zu bytes after it hold at "
                              "most %zu)", path.c_str(), n, body_bytes, body_bytes / 2));
    std::string body(body_bytes, '\0');
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

void GPT2Tokenizer::write_llmc_file(const std::string& path) const {
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

std::string GPT2Tokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (int id : ids) out += token_bytes(id);
    return out;
}

const std::string& GPT2Tokenizer::token_bytes(int id) const {
    if (id < 0 || id >= vocab_size())
        throw Error(strprintf("token id %d out of range for %s (vocab size %d)", id, source_.c_str(), vocab_size()));
    return tokens_[id];
}

} // namespace llmc
