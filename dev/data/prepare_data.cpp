/*
 * prepare_data: tokenizes UTF-8 text with GPT-2's BPE and writes llm.c data shards (uint16 tokens).
 *
 *   prepare_data [--gpt2-dir DIR] FILE OUT.bin
 *       the plain GPT-2 encoding of FILE as one shard
 *   prepare_data [--gpt2-dir DIR] --tinyshakespeare FILE OUTDIR
 *       llm.c's tinyshakespeare layout, token for token what dev/data/tinyshakespeare.py writes: every
 *       "\n\n"-separated section is a document preceded by <|endoftext|>; the first 32768 tokens are the
 *       validation split. Also writes the llm.c tokenizer file the trainer decodes samples with.
 *
 * DIR holds GPT-2's encoder.json and vocab.bpe (default $GPT2_VOCAB_DIR, else the repository's dev/data/gpt2).
 */
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <vector>

#include "llmc/io/formats.h"
#include "llmc/io/tokenizer.h"
#include "llmc/util/flags.h"
#include "llmc/util/utils.h"

using namespace llmc;

// llm.c's validation split for tinyshakespeare.
constexpr size_t TINYSHAKESPEARE_VAL_TOKENS = 32768;

struct Args {
    std::string gpt2_dir = default_gpt2_vocab_dir(), input, output;
    bool tinyshakespeare = false, help = false;
};

// The flag table (llmc/util/flags.h), bound to `a`; the two file arguments are positional.
static FlagTable prepare_flags(Args& a, std::vector<std::string>* files) {
    FlagTable t("usage: prepare_data [--gpt2-dir DIR] FILE OUT.bin\n"
                "       prepare_data [--gpt2-dir DIR] --tinyshakespeare FILE OUTDIR\n"
                "\n"
                "Encodes the UTF-8 text FILE with GPT-2's tokenizer into llm.c data shards; FILE OUT.bin writes the\n"
                "whole encoding as one shard.");
    t.add({"", "--tinyshakespeare", "",
           "write OUTDIR/tiny_shakespeare_{val,train}.bin as llm.c does (an <|endoftext|>\n"
           "before every blank-line-separated section, the first 32768 tokens for\n"
           "validation) and OUTDIR/gpt2_tokenizer.bin; OUTDIR is created if missing",
           flag::on(a.tinyshakespeare)});
    t.add({"", "--gpt2-dir", "DIR", "directory with encoder.json and vocab.bpe",
           flag::text(a.gpt2_dir, "empty directory name"),
           "$GPT2_VOCAB_DIR, else dev/data/gpt2 beside this program"});
    t.add(help_flag(a.help));
    return t.positionals(files);
}

static Args parse_args(int argc, char** argv) {
    Args a;
    std::vector<std::string> files;
    prepare_flags(a, &files).parse(argc, argv);
    if (a.help) return a;
    if (files.size() != 2)
        throw UsageError(strprintf("expected 2 arguments (FILE and %s), got %zu (see prepare_data --help)",
                                   a.tinyshakespeare ? "OUTDIR" : "OUT.bin", files.size()));
    a.input = files[0];
    a.output = files[1];
    return a;
}

// True when both paths name the same existing file (links and different spellings included).
static bool same_file(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    return stat(a.c_str(), &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// The files a run would write, checked before the text is encoded: each must be new or a regular file
// (check_output_file: not a device, a link or a directory), OUTDIR a directory or new, and none an input, which
// the write would replace.
static void check_outputs(const Args& a) {
    std::vector<std::string> outputs{a.output};
    if (a.tinyshakespeare) {
        struct stat st;
        if (stat(a.output.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
            throw Error(strprintf("%s: exists and is not a directory (OUTDIR)", a.output.c_str()));
        outputs = {a.output + "/tiny_shakespeare_val.bin", a.output + "/tiny_shakespeare_train.bin",
                   a.output + "/gpt2_tokenizer.bin"};
    }
    for (const std::string& out : outputs) {
        check_output_file(out);
        for (const std::string& in : {a.input, a.gpt2_dir + "/encoder.json", a.gpt2_dir + "/vocab.bpe"})
            if (same_file(out, in))
                throw UsageError(strprintf("%s: is the input %s; writing it would destroy it", out.c_str(), in.c_str()));
    }
}

static GPT2Tokenizer load_tokenizer(const std::string& dir) {
    std::string encoder = dir + "/encoder.json", merges = dir + "/vocab.bpe";
    for (const std::string& f : {encoder, merges})
        if (!file_exists(f))
            throw Error(f + ": not found; GPT-2's encoder.json and vocab.bpe ship in the repository's dev/data/gpt2 "
                            "(pass --gpt2-dir or set GPT2_VOCAB_DIR to a directory that has them)");
    return GPT2Tokenizer::from_gpt2_files(encoder, merges);
}

static void write_tokens(const std::string& path, const int* ids, size_t n) {
    std::vector<uint16_t> tokens(n);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > 65535)
            throw Error(strprintf("%s: token %d does not fit the shard's uint16", path.c_str(), ids[i]));
        tokens[i] = (uint16_t)ids[i];
    }
    write_shard(path, tokens);
    printf("wrote %zu tokens to %s\n", n, path.c_str());
}

int run(int argc, char** argv) {
    Args a = parse_args(argc, argv);
    if (a.help) {
        Args defaults;
        fputs(prepare_flags(defaults, nullptr).help().c_str(), stdout);
        return 0;
    }
    check_outputs(a);
    GPT2Tokenizer tok = load_tokenizer(a.gpt2_dir);
    File in(a.input, "rb");
    std::string text(in.size(), '\0');
    in.read(text.data(), text.size(), "text");

    auto t0 = std::chrono::steady_clock::now();
    std::vector<int> ids;
    try {
        if (!a.tinyshakespeare) {
            ids = tok.encode(text);
        } else {
            // Sections as Python's text.split("\n\n"); each keeps its separator, which follows it in the text.
            for (size_t start = 0;;) {
                size_t sep = text.find("\n\n", start);
                size_t end = sep == std::string::npos ? text.size() : sep + 2;
                ids.push_back(tok.eot());
                std::vector<int> s = tok.encode(std::string_view(text).substr(start, end - start));
                ids.insert(ids.end(), s.begin(), s.end());
                if (sep == std::string::npos) break;
                start = end;
            }
        }
    } catch (const Error& e) {
        throw Error(a.input + ": " + e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    printf("encoded %s: %zu bytes -> %zu tokens in %.0f ms\n", a.input.c_str(), text.size(), ids.size(), ms);

    if (!a.tinyshakespeare) {
        write_tokens(a.output, ids.data(), ids.size());
        return 0;
    }
    if (ids.size() <= TINYSHAKESPEARE_VAL_TOKENS)
        throw Error(strprintf("%s: only %zu tokens, the val split alone takes %zu", a.input.c_str(), ids.size(),
                              TINYSHAKESPEARE_VAL_TOKENS));
    make_dirs(a.output);
    write_tokens(a.output + "/tiny_shakespeare_val.bin", ids.data(), TINYSHAKESPEARE_VAL_TOKENS);
    write_tokens(a.output + "/tiny_shakespeare_train.bin", ids.data() + TINYSHAKESPEARE_VAL_TOKENS,
                 ids.size() - TINYSHAKESPEARE_VAL_TOKENS);
    std::string tok_path = a.output + "/gpt2_tokenizer.bin";
    tok.write_llmc_file(tok_path);
    printf("wrote %s (%d tokens)\n", tok_path.c_str(), tok.vocab_size());
    return 0;
}

int main(int argc, char** argv) {
    return main_guard([&] { return run(argc, argv); }, "");
}
