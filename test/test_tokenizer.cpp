// GPT-2 tokenizer (llmc/io/tokenizer.h) against tiktoken's ids in test/data/tokenizer_vectors.txt (regenerate with
// dev/data/gen_tokenizer_vectors.py), the llm.c tokenizer file, and every error path.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>
#include <functional>
#include <gtest/gtest.h>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/io/formats.h"
#include "llmc/io/tokenizer.h"
#include "test/test_util.h"

using namespace llmc;

namespace {

std::string gpt2_dir() { return testutil::vocab_dir(); }

// Loading parses 1 MB of JSON and 50k merges; do it once for the whole suite.
const GPT2Tokenizer& gpt2() {
    static const GPT2Tokenizer tok =
        GPT2Tokenizer::from_gpt2_files(gpt2_dir() + "/encoder.json", gpt2_dir() + "/vocab.bpe");
    return tok;
}

struct Vectors {
    struct Case {
        std::string quoted, text; // as written in the file, and unescaped
        std::vector<int> ids;
    };
    std::vector<Case> cases;
    std::map<std::string, std::pair<size_t, std::string>> facts; // name -> (count, hash or "")
};

// The file's quoted strings use \n \t \r \" \\ and \xHH (one byte).
std::string unescape(const std::string& q) {
    std::string s;
    for (size_t i = 1; i + 1 < q.size(); i++) {
        if (q[i] != '\\') {
            s += q[i];
        } else if (q[++i] == 'x') {
            s += (char)std::stoi(q.substr(i + 1, 2), nullptr, 16);
            i += 2;
        } else {
            s += q[i] == 'n' ? '\n' : q[i] == 't' ? '\t' : q[i] == 'r' ? '\r' : q[i];
        }
    }
    return s;
}

const Vectors& vectors() {
    static const Vectors v = [] {
        Vectors out;
        std::istringstream in(detail::read_text_file("test/data/tokenizer_vectors.txt"));
        for (std::string line; std::getline(in, line);) {
            if (line.empty() || line[0] == '#') continue;
            if (line[0] == '"') {
                size_t end = 1;
                while (end < line.size() && line[end] != '"') end += line[end] == '\\' ? 2 : 1;
                if (end >= line.size()) throw Error("test/data/tokenizer_vectors.txt: unterminated string: " + line);
                Vectors::Case c{line.substr(0, end + 1), unescape(line.substr(0, end + 1)), {}};
                std::istringstream ids(line.substr(end + 1));
                for (int id; ids >> id;) c.ids.push_back(id);
                out.cases.push_back(c);
            } else {
                std::istringstream f(line);
                std::string name, hash;
                size_t count = 0;
                f >> name >> count >> hash;
                out.facts[name] = {count, hash};
            }
        }
        return out;
    }();
    return v;
}

// 64-bit FNV-1a over the little-endian uint16 token stream, as in gen_tokenizer_vectors.py.
std::string fnv1a64_u16(const std::vector<int>& ids) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int id : ids)
        for (int byte : {id & 0xff, (id >> 8) & 0xff}) h = (h ^ (uint64_t)byte) * 0x100000001b3ull;
    return strprintf("%016llx", (unsigned long long)h);
}

void write_file(const std::string& path, const std::string& bytes) {
    File f(path, "wb");
    f.write(bytes.data(), bytes.size());
    f.close();
}

// Runs fn, which must throw llmc::Error; returns the message (empty if nothing was thrown).
std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "error message is not one line: " << msg;
        return msg;
    }
    ADD_FAILURE() << "no llmc::Error thrown";
    return "";
}

// GPT-2's spelling of a byte in the vocabulary files (UTF-8 of its bytes_to_unicode code point).
std::string spelled(unsigned char b) {
    int cp = gpt2_byte_to_codepoint()[b];
    if (cp < 0x80) return std::string(1, (char)cp);
    return {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
}

// A toy vocabulary in GPT-2's file formats: the 256 bytes, the results of `merges` (ASCII "left right" lines,
// each result new), then <|endoftext|>. Returns {encoder.json, vocab.bpe}.
std::pair<std::string, std::string> write_toy_vocab(const testutil::TempDir& dir, const std::vector<std::string>& merges) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; b++) tokens.push_back(spelled((unsigned char)b));
    std::string bpe = "#version: 0.2\n";
    for (const std::string& m : merges) {
        std::string joined = m;
        joined.erase(std::remove(joined.begin(), joined.end(), ' '), joined.end());
        tokens.push_back(joined);
        bpe += m + "\n";
    }
    tokens.push_back("<|endoftext|>");
    std::string enc = "{";
    for (size_t id = 0; id < tokens.size(); id++) {
        // The byte alphabet has no control characters, so '"' and '\\' are the only keys JSON needs escaped.
        std::string key = tokens[id] == "\"" ? "\\\"" : tokens[id] == "\\" ? "\\\\" : tokens[id];
        enc += (id ? ", \"" : "\"") + key + "\": " + std::to_string(id);
    }
    write_file(dir / "encoder.json", enc + "}");
    write_file(dir / "vocab.bpe", bpe);
    return {dir / "encoder.json", dir / "vocab.bpe"};
}

} // namespace

TEST(TokenizerVectors, MatchTiktoken) {
    ASSERT_GE(vectors().cases.size(), 40u);
    for (const Vectors::Case& c : vectors().cases) {
        SCOPED_TRACE("text: " + c.quoted);
        EXPECT_EQ(gpt2().encode(c.text), c.ids);
    }
}

TEST(TokenizerVectors, DecodeRoundTrip) {
    for (const Vectors::Case& c : vectors().cases) {
        SCOPED_TRACE("text: " + c.quoted);
        EXPECT_EQ(gpt2().decode(gpt2().encode(c.text)), c.text);
        EXPECT_EQ(gpt2().decode(c.ids), c.text);
    }
}

TEST(TokenizerGPT2, VocabularyShape) {
    const GPT2Tokenizer& t = gpt2();
    EXPECT_TRUE(t.can_encode());
    EXPECT_EQ(t.vocab_size(), GPT2_VOCAB_SIZE);
    EXPECT_EQ(t.eot(), GPT2_EOT);
    EXPECT_EQ(t.token_bytes(GPT2_EOT), "<|endoftext|>");
    EXPECT_EQ(t.token_bytes(220), " ");
    EXPECT_EQ(t.token_bytes(198), "\n");
    EXPECT_EQ(t.token_bytes(464), "The");
    // Byte-level: exactly one single-byte token per byte value, so any byte sequence is representable.
    std::vector<int> single(256, 0);
    for (int id = 0; id < t.vocab_size(); id++)
        if (t.token_bytes(id).size() == 1) single[(unsigned char)t.token_bytes(id)[0]]++;
    EXPECT_EQ(std::count(single.begin(), single.end(), 1), 256);
}

TEST(TokenizerGPT2, EndOfTextTextIsNotSpecial) {
    std::vector<int> ids = gpt2().encode("<|endoftext|>");
    EXPECT_EQ(std::count(ids.begin(), ids.end(), GPT2_EOT), 0);
    EXPECT_EQ(ids.size(), 7u);
    EXPECT_EQ(gpt2().decode({GPT2_EOT}), "<|endoftext|>");
}

// Pieces far longer than any word: the merge loop must stay fast and the regex must not hit its limits.
TEST(TokenizerGPT2, VeryLongPieces) {
    const size_t n = 200000;
    std::vector<int> letters = gpt2().encode(std::string(n, 'a'));
    EXPECT_EQ(letters.size(), n / 4); // tiktoken: all "aaaa", id 24794
    EXPECT_EQ(std::count(letters.begin(), letters.end(), 24794), (long)(n / 4));
    std::string spaces = std::string(n, ' ') + "x";
    std::vector<int> ids = gpt2().encode(spaces);
    ASSERT_EQ(ids.size(), n);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 220), (long)(n - 1)); // \s+(?!\S) leaves one space for " x"
    EXPECT_EQ(ids.back(), gpt2().encode(" x").at(0));
    EXPECT_EQ(gpt2().decode(ids), spaces);
}

// GPT-2's own merge loop (encoder.py's bpe()): find the lowest-ranked pair, merge all its occurrences left to
// right, repeat. Quadratic, on GPT-2's spelling of the bytes; the reference for bpe() on long pieces.
std::vector<std::string> reference_bpe(const std::string& bytes) {
    static const std::map<std::pair<std::string, std::string>, int> ranks = [] {
        std::map<std::pair<std::string, std::string>, int> r;
        std::istringstream in(detail::read_text_file(gpt2_dir() + "/vocab.bpe"));
        std::string line;
        std::getline(in, line); // #version
        for (int rank = 0; std::getline(in, line);)
            if (!line.empty()) r[{line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)}] = rank++;
        return r;
    }();
    std::vector<std::string> word;
    for (unsigned char b : bytes) word.push_back(spelled(b));
    while (word.size() > 1) {
        int best = INT32_MAX;
        std::pair<std::string, std::string> pair;
        for (size_t i = 0; i + 1 < word.size(); i++) {
            auto it = ranks.find({word[i], word[i + 1]});
            if (it != ranks.end() && it->second < best) best = it->second, pair = it->first;
        }
        if (best == INT32_MAX) break;
        std::vector<std::string> merged;
        for (size_t i = 0; i < word.size(); i++) {
            if (i + 1 < word.size() && word[i] == pair.first && word[i + 1] == pair.second) {
                merged.push_back(pair.first + pair.second);
                i++;
            } else {
                merged.push_back(word[i]);
            }
        }
        word = merged;
    }
    return word;
}

std::string random_letters(size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::string s(n, 'a');
    for (char& c : s) c = (char)('a' + g() % 26);
    return s;
}

TEST(TokenizerGPT2, LongPiecesMergeAsGPT2Does) {
    for (unsigned seed : {1u, 2u, 3u}) {
        std::string word = random_letters(1500, seed);
        word[0] = ' '; // one " ?\p{L}+" piece
        std::vector<std::string> spelled_ids;
        for (int id : gpt2().encode(word)) {
            std::string sp;
            for (unsigned char b : gpt2().token_bytes(id)) sp += spelled(b);
            spelled_ids.push_back(sp);
        }
        EXPECT_EQ(spelled_ids, reference_bpe(word)) << "seed " << seed;
    }
}

// BPE is O(n log n) in the piece length: a 10 MB word of random letters takes well under 3 s of CPU (the
// sanitizer build, several times slower, checks a 1 MB word).
TEST(TokenizerGPT2, TenMegabyteWordInUnderThreeSeconds) {
#if defined(__SANITIZE_ADDRESS__)
    const size_t n = 1 << 20;
    const double limit_s = 2.0;
#else
    const size_t n = 10 << 20;
    const double limit_s = 3.0;
#endif
    std::string word = random_letters(n, 4);
    std::clock_t c0 = std::clock();
    std::vector<int> ids = gpt2().encode(word);
    double cpu = (double)(std::clock() - c0) / CLOCKS_PER_SEC;
    printf("%zu-byte word: %zu tokens in %.2f s of CPU\n", n, ids.size(), cpu);
    EXPECT_LT(cpu, limit_s);
    EXPECT_TRUE(gpt2().decode(ids) == word);
}

TEST(TokenizerTinyShakespeare, MatchesTiktoken) {
    const testutil::Corpus corpus = testutil::shakespeare();
    std::string text = detail::read_text_file(corpus.path);
    const auto& facts = vectors().facts;
    auto fact = [&](const char* name) { return facts.at(corpus.facts + "_" + name); };
    ASSERT_EQ(facts.count(corpus.facts + "_plain"), 1u);
    ASSERT_EQ(text.size(), fact("bytes").first) << corpus.path;
    const GPT2Tokenizer& t = gpt2();
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int> ids = t.encode(text);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    printf("%s: %zu bytes -> %zu tokens in %.0f ms\n", corpus.path.c_str(), text.size(), ids.size(), ms);
    EXPECT_EQ(ids.size(), fact("plain").first);
    EXPECT_EQ(fnv1a64_u16(ids), fact("plain").second);
    EXPECT_TRUE(t.decode(ids) == text) << "decode(encode(" << corpus.path << ")) differs from the text";
}

TEST(TokenizerLlmcFile, WriteReadRoundTrip) {
    testutil::TempDir dir;
    std::string path = dir / "gpt2_tokenizer.bin";
    gpt2().write_llmc_file(path);
    EXPECT_FALSE(file_exists(path + ".tmp"));

    // Header fields and size, read independently of the loader.
    File f(path, "rb");
    Header h = read_header(f, TOKENIZER_MAGIC, "tokenizer file");
    EXPECT_EQ(h[1], TOKENIZER_VERSION);
    EXPECT_EQ(h[2], GPT2_VOCAB_SIZE);
    EXPECT_EQ(h[3], GPT2_EOT);
    size_t expected_size = HEADER_BYTES;
    for (int id = 0; id < gpt2().vocab_size(); id++) expected_size += 1 + gpt2().token_bytes(id).size();
    EXPECT_EQ(f.size(), expected_size);

    GPT2Tokenizer t = GPT2Tokenizer::from_llmc_file(path);
    EXPECT_FALSE(t.can_encode());
    ASSERT_EQ(t.vocab_size(), GPT2_VOCAB_SIZE);
    EXPECT_EQ(t.eot(), GPT2_EOT);
    int differing = 0;
    for (int id = 0; id < t.vocab_size(); id++) differing += t.token_bytes(id) != gpt2().token_bytes(id);
    EXPECT_EQ(differing, 0);
    std::vector<int> ids = gpt2().encode("To be, or not to be: that is the question.");
    EXPECT_EQ(t.decode(ids), "To be, or not to be: that is the question.");
    std::string msg = error_of([&] { t.encode("hello"); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("only decode"), std::string::npos) << msg;
}

// Merge order decides the split: "a b" ranked before "b c" gives [ab][c], the other way round [a][bc].
TEST(TokenizerToyVocab, MergeRankOrder) {
    testutil::TempDir d1, d2;
    auto [enc1, bpe1] = write_toy_vocab(d1, {"a b", "b c"});
    GPT2Tokenizer t1 = GPT2Tokenizer::from_gpt2_files(enc1, bpe1);
    EXPECT_EQ(t1.vocab_size(), 259);
    EXPECT_EQ(t1.eot(), 258);
    std::vector<int> ids1 = t1.encode("abc");
    ASSERT_EQ(ids1.size(), 2u);
    EXPECT_EQ(t1.token_bytes(ids1[0]), "ab");
    EXPECT_EQ(t1.token_bytes(ids1[1]), "c");

    auto [enc2, bpe2] = write_toy_vocab(d2, {"b c", "a b"});
    GPT2Tokenizer t2 = GPT2Tokenizer::from_gpt2_files(enc2, bpe2);
    std::vector<int> ids2 = t2.encode("abc");
    ASSERT_EQ(ids2.size(), 2u);
    EXPECT_EQ(t2.token_bytes(ids2[0]), "a");
    EXPECT_EQ(t2.token_bytes(ids2[1]), "bc");
    // Non-ASCII bytes go through the byte alphabet: "é" is the two tokens 0xC3 0xA9.
    EXPECT_EQ(t2.encode("\xc3\xa9"), (std::vector<int>{0xC3, 0xA9}));
}

TEST(TokenizerErrors, MissingVocabularyFiles) {
    testutil::TempDir dir;
    std::string msg = error_of([&] { GPT2Tokenizer::from_gpt2_files(dir / "encoder.json", gpt2_dir() + "/vocab.bpe"); });
    EXPECT_NE(msg.find(dir / "encoder.json"), std::string::npos) << msg;
    msg = error_of([&] { GPT2Tokenizer::from_gpt2_files(gpt2_dir() + "/encoder.json", dir / "vocab.bpe"); });
    EXPECT_NE(msg.find(dir / "vocab.bpe"), std::string::npos) << msg;
}

TEST(TokenizerErrors, MalformedEncoderJson) {
    testutil::TempDir dir;
    auto [enc, bpe] = write_toy_vocab(dir, {"a b"});
    write_file(enc, "{\"a\": 0,\n\"b\": ");
    std::string msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(enc + ": malformed JSON"), std::string::npos) << msg;

    write_file(enc, "[1, 2, 3]");
    msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(enc), std::string::npos) << msg;
    EXPECT_NE(msg.find("JSON object"), std::string::npos) << msg;
}

// Nesting is refused where it opens (a value 100,000 arrays deep used to overflow the stack), and messages
// never echo the file's JSON: not a long value, not the parser's own excerpt of the text.
TEST(TokenizerErrors, EncoderJsonIsFlatAndNeverQuoted) {
    testutil::TempDir dir;
    auto [enc, bpe] = write_toy_vocab(dir, {"a b"});
    const std::string secret(5000, 'x');
    struct Case {
        std::string json, expected;
    };
    for (const Case& c : {Case{"{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}", "found a nested array"},
                          Case{"{\"a\": {\"b\": 1}}", "found a nested object"},
                          Case{"{\"a\": \"" + secret + "\"}", "has id of JSON type string"},
                          Case{"{\"a\": 18446744073709551615}", "has id 18446744073709551615"},
                          Case{"{\"a\": 1e400}", "malformed JSON (a number out of range)"},
                          Case{"{\"a\": -1}", "has id -1"},
                          Case{"{\"a\": 1, \"" + secret + "", "malformed JSON (syntax error at byte "}}) {
        write_file(enc, c.json);
        std::string msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
        EXPECT_NE(msg.find(enc + ": "), std::string::npos) << msg;
        EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
        EXPECT_LT(msg.size(), enc.size() + 120) << msg;
    }
}

TEST(TokenizerErrors, BadMergeLines) {
    testutil::TempDir dir;
    auto [enc, bpe] = write_toy_vocab(dir, {"a b", "c d"});
    write_file(bpe, "#version: 0.2\na b\nc d e\n");
    std::string msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(bpe + ":3: expected two symbols"), std::string::npos) << msg;

    write_file(bpe, "#version: 0.2\nab\n");
    msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(bpe + ":2: expected two symbols"), std::string::npos) << msg;

    // "b c" is a well-formed line, but "bc" is not in the toy encoder.
    write_file(bpe, "#version: 0.2\na b\nb c\n");
    msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(bpe + ":3: merge result \"bc\" is not in " + enc), std::string::npos) << msg;
}

// Merges come in the order BPE training made them: each from tokens that exist already, each making a new one.
TEST(TokenizerErrors, MergesOutOfOrder) {
    testutil::TempDir dir;
    auto [enc, bpe] = write_toy_vocab(dir, {"a b", "ab c"});
    write_file(bpe, "#version: 0.2\nab c\na b\n");
    std::string msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(bpe + ":2: merge symbol \"ab\" is neither a single byte nor made by an earlier line"),
              std::string::npos) << msg;
    write_file(bpe, "#version: 0.2\na b\nab c\na b\n");
    msg = error_of([&, enc = enc, bpe = bpe] { GPT2Tokenizer::from_gpt2_files(enc, bpe); });
    EXPECT_NE(msg.find(bpe + ":4: merge result \"ab\" is made by line 2 already"), std::string::npos) << msg;
}

TEST(TokenizerErrors, BadLlmcTokenizerFiles) {
    testutil::TempDir dir;
    std::string good = dir / "good.bin";
    gpt2().write_llmc_file(good);
    std::string bytes = detail::read_text_file(good);
    auto patched = [&](int word, int32_t value) {
        std::string b = bytes;
        memcpy(&b[word * 4], &value, 4);
        return b;
    };
    std::string path = dir / "bad.bin";

    write_file(path, patched(0, 20240326));
    std::string msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": bad magic number 20240326"), std::string::npos) << msg;

    write_file(path, patched(1, 1));
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": unsupported tokenizer file version 1"), std::string::npos) << msg;

    write_file(path, bytes.substr(0, HEADER_BYTES + 1000));
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": truncated tokenizer file"), std::string::npos) << msg;

    write_file(path, bytes.substr(0, bytes.size() - 1)); // only the last token's final byte is missing
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find("token 50256 of 50257 is cut off"), std::string::npos) << msg;

    // A header claiming far more tokens than the file holds is refused before anything is allocated for them.
    write_file(path, patched(2, 100000000));
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": truncated tokenizer file (header says 100000000 tokens"), std::string::npos) << msg;

    write_file(path, bytes.substr(0, 100));
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": truncated"), std::string::npos) << msg;

    write_file(path, bytes + "x");
    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(path); });
    EXPECT_NE(msg.find(path + ": 1 unexpected bytes"), std::string::npos) << msg;

    msg = error_of([&] { GPT2Tokenizer::from_llmc_file(dir / "missing.bin"); });
    EXPECT_NE(msg.find(dir / "missing.bin"), std::string::npos) << msg;
}

TEST(TokenizerErrors, TokenIdOutOfRange) {
    for (int id : {-1, GPT2_VOCAB_SIZE, 1 << 20}) {
        std::string msg = error_of([&] { gpt2().token_bytes(id); });
        EXPECT_NE(msg.find(strprintf("token id %d out of range", id)), std::string::npos) << msg;
    }
    std::string msg = error_of([&] { gpt2().decode({15496, GPT2_VOCAB_SIZE}); });
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST(TokenizerErrors, InvalidUtf8NamesTheOffset) {
    struct Case {
        std::string text;
        size_t offset;
    };
    for (const Case& c : {Case{"ab\xff", 2}, Case{"hello \x80", 6}, Case{"caf\xc3", 3},
                          Case{"abc\xed\xa0\x80", 3} /* surrogate */, Case{"x\xc0\xaf", 1} /* overlong '/' */,
                          Case{"ok \xf4\x90\x80\x80", 3} /* above U+10FFFF */}) {
        std::string msg = error_of([&] { gpt2().encode(c.text); });
        EXPECT_NE(msg.find(strprintf("invalid UTF-8 in the input at byte offset %zu ", c.offset)), std::string::npos)
            << msg;
    }
}

// The vocabulary the repository ships is GPT-2's, byte for byte: the checksums its README records (and that
// README's table is what this test reads, so the two cannot drift apart).
TEST(TokenizerShippedVocabulary, MatchesRecordedChecksums) {
    std::string readme = detail::read_text_file("dev/data/gpt2/README.md");
    for (const char* name : {"encoder.json", "vocab.bpe"}) {
        std::string row = "| `" + std::string(name) + "` |";
        size_t at = readme.find(row);
        ASSERT_NE(at, std::string::npos) << "dev/data/gpt2/README.md has no row for " << name;
        size_t open = readme.find('`', readme.find('|', at + row.size()) + 1);
        std::string recorded = readme.substr(open + 1, readme.find('`', open + 1) - open - 1);
        ASSERT_EQ(recorded.size(), 64u) << recorded;
        auto r = testutil::run("sha256sum dev/data/gpt2/" + std::string(name));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(r.output.substr(0, 64), recorded) << name;
    }
}
