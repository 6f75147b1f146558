// The prepare_data program (dev/data/prepare_data.cpp), run as a subprocess from the repo root: its command line,
// its errors, and the shards it writes, checked against tiktoken's reference in test/data/tokenizer_vectors.txt.
#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "llmc/io/formats.h"
#include "llmc/io/tokenizer.h"
#include "test/test_util.h"

using namespace llmc;

namespace {

std::string gpt2_dir() { return testutil::vocab_dir(); }
std::string shakespeare() { return testutil::shakespeare().path; }

struct Fact {
    size_t count;
    std::string hash;
};

// The reference's facts about the text shakespeare() reads ("<corpus>_<name> count [hash]" lines): its count and,
// for token streams, their hash.
const Fact& reference(const std::string& name) {
    static const std::map<std::string, Fact> facts = [] {
        std::map<std::string, Fact> m;
        const std::string prefix = testutil::shakespeare().facts + "_";
        std::istringstream in(detail::read_text_file("test/data/tokenizer_vectors.txt"));
        for (std::string line; std::getline(in, line);) {
            if (line.rfind(prefix, 0) != 0) continue;
            std::istringstream f(line.substr(prefix.size()));
            std::string key;
            Fact fact{0, ""};
            f >> key >> fact.count >> fact.hash;
            m[key] = fact;
        }
        return m;
    }();
    auto it = facts.find(name);
    if (it == facts.end())
        throw Error("test/data/tokenizer_vectors.txt: no " + testutil::shakespeare().facts + "_" + name);
    return it->second;
}

// 64-bit FNV-1a over the little-endian uint16 token stream, as in dev/data/gen_tokenizer_vectors.py.
std::string fnv1a64(const std::vector<uint16_t>& tokens) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint16_t t : tokens)
        for (int byte : {t & 0xff, t >> 8}) h = (h ^ (uint64_t)byte) * 0x100000001b3ull;
    return strprintf("%016llx", (unsigned long long)h);
}

// Reads a data shard, checking its header against its size.
std::vector<uint16_t> read_shard(const std::string& path) {
    File f(path, "rb");
    Header h = read_header(f, SHARD_MAGIC, "data shard");
    EXPECT_EQ(h[1], SHARD_VERSION) << path;
    EXPECT_EQ(f.size(), HEADER_BYTES + 2 * (size_t)h[2]) << path;
    std::vector<uint16_t> tokens(h[2]);
    f.read(tokens.data(), tokens.size() * 2, "tokens");
    return tokens;
}

int count_lines(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

} // namespace

TEST(PrepareDataCli, Help) {
    for (const char* flag : {"--help", "-h"}) {
        auto r = testutil::run(std::string("./prepare_data ") + flag);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(r.output.rfind("usage: prepare_data", 0), 0u) << r.output;
        EXPECT_NE(r.output.find("--tinyshakespeare"), std::string::npos) << r.output;
    }
}

TEST(PrepareDataCli, UnknownFlag) {
    auto r = testutil::run("./prepare_data --bogus in.txt out.bin");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind("error: unknown flag '--bogus' (see --help)", 0), 0u) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

TEST(PrepareDataCli, MissingArguments) {
    for (const char* args : {"", "in.txt", "--tinyshakespeare in.txt", "in.txt out.bin extra", "--gpt2-dir"}) {
        auto r = testutil::run(std::string("./prepare_data ") + args);
        EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
        EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
        EXPECT_EQ(count_lines(r.output), 1) << r.output;
    }
}

TEST(PrepareDataCli, MissingInputFile) {
    testutil::TempDir dir;
    auto r = testutil::run("./prepare_data --gpt2-dir " + gpt2_dir() + " " + (dir / "nope.txt") + " " + (dir / "o.bin"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("error: " + (dir / "nope.txt") + ": cannot open", 0), 0u) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
    EXPECT_FALSE(file_exists(dir / "o.bin"));
}

TEST(PrepareDataCli, MissingVocabularyNamesFileAndRemedy) {
    testutil::TempDir dir;
    auto r = testutil::run("GPT2_VOCAB_DIR=" + dir.path + " ./prepare_data " + shakespeare() + " " + (dir / "o.bin"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("error: " + (dir / "encoder.json") + ": not found", 0), 0u) << r.output;
    EXPECT_NE(r.output.find("dev/data/gpt2"), std::string::npos) << r.output;
    EXPECT_EQ(count_lines(r.output), 1) << r.output;
}

// With neither --gpt2-dir nor GPT2_VOCAB_DIR, the vocabulary that ships beside the program is used, from any working
// directory.
TEST(PrepareDataCli, DefaultVocabularyIsTheShippedOne) {
    testutil::TempDir dir;
    char cwd[4096];
    ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
    std::string text = shakespeare();
    if (text[0] != '/') text = std::string(cwd) + "/" + text;
    auto r = testutil::run("cd " + dir.path + " && env -u GPT2_VOCAB_DIR " + cwd + "/prepare_data " + text + " o.bin");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<uint16_t> tokens = read_shard(dir / "o.bin");
    EXPECT_EQ(fnv1a64(tokens), reference("plain").hash);
}

// Not a regular file as input: one line and exit 1 (a directory used to abort on an uncaught std::length_error,
// a FIFO to block the open forever).
TEST(PrepareDataCli, InputThatIsNotARegularFile) {
    testutil::TempDir dir;
    ASSERT_EQ(mkfifo((dir / "fifo").c_str(), 0644), 0);
    for (const std::string& in : {dir.path, dir / "fifo"}) {
        auto r = testutil::run("timeout 60 ./prepare_data --gpt2-dir " + gpt2_dir() + " " + in + " " + (dir / "o.bin"));
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output.rfind("error: " + in + ": cannot open (", 0), 0u) << r.output;
        EXPECT_EQ(count_lines(r.output), 1) << r.output;
        EXPECT_FALSE(file_exists(dir / "o.bin"));
    }
}

// An output that is one of the inputs is refused before anything is written: the input stays as it was.
TEST(PrepareDataCli, OutputThatIsAnInput) {
    testutil::TempDir dir;
    std::string vocab = dir / "gpt2", in = dir / "tiny_shakespeare_val.bin";
    ASSERT_EQ(testutil::run("mkdir " + vocab + " && cp " + gpt2_dir() + "/encoder.json " + gpt2_dir() + "/vocab.bpe " +
                            vocab + " && echo 'To be, or not to be: that is the question.' > " + in)
                  .exit_code,
              0);
    struct Case {
        std::string args, output, input;
    };
    for (const Case& c : {Case{in + " " + in, in, in}, Case{in + " " + dir.path + "/./tiny_shakespeare_val.bin",
                                                          dir.path + "/./tiny_shakespeare_val.bin", in},
                          Case{in + " " + vocab + "/vocab.bpe", vocab + "/vocab.bpe", vocab + "/vocab.bpe"},
                          Case{"--tinyshakespeare " + in + " " + dir.path, in, in}}) {
        std::string before = testutil::slurp(c.input);
        auto r = testutil::run("./prepare_data --gpt2-dir " + vocab + " " + c.args);
        EXPECT_EQ(r.exit_code, 2) << r.output;
        EXPECT_EQ(r.output, "error: " + c.output + ": is the input " + c.input + "; writing it would destroy it\n");
        EXPECT_EQ(testutil::slurp(c.input), before) << c.input;
    }
}

// An output that exists and is not a regular file (a device, a FIFO, a directory, a symbolic link) or that lies
// under a file is refused before the text is encoded, and left as it was: a device stays a device (it became a
// 1030-byte regular file), a link stays a link and its target is unchanged.
TEST(PrepareDataCli, OutputThatIsNotARegularFile) {
    testutil::TempDir dir;
    const std::string in = dir / "in.txt", target = dir / "target.bin";
    ASSERT_EQ(testutil::run("echo 'To be, or not to be' > " + in + " && echo keep > " + target + " && ln -s " + target +
                            " " + (dir / "link.bin") + " && mkdir " + (dir / "adir") + " && mkfifo " + (dir / "fifo"))
                  .exit_code,
              0);
    struct Case {
        std::string output, what;
    };
    std::vector<Case> cases = {{dir / "link.bin", "is a symbolic link"},
                               {dir / "adir", "is a directory"},
                               {dir / "fifo", "is a FIFO"}};
    // A character device (the numbers of /dev/null) where this user may make one.
    if (testutil::run("mknod " + (dir / "chardev") + " c 1 3").exit_code == 0)
        cases.push_back({dir / "chardev", "is a device"});
    else
        printf("note: this user may not make a device node; the device case is not run\n");
    auto kind = [](const std::string& p) { return testutil::run("stat -c %F " + p).output; };
    for (const Case& c : cases) {
        const std::string before = kind(c.output);
        auto r = testutil::run("timeout 60 ./prepare_data --gpt2-dir " + gpt2_dir() + " " + in + " " + c.output);
        EXPECT_EQ(r.exit_code, 1) << r.output;
        EXPECT_EQ(r.output, "error: " + c.output + ": exists and " + c.what +
                                "; an output must be a regular file or a new name\n");
        EXPECT_EQ(kind(c.output), before) << c.output;
    }
    EXPECT_EQ(testutil::slurp(target), "keep\n");
    auto under = testutil::run("./prepare_data --gpt2-dir " + gpt2_dir() + " " + in + " " + target + "/o.bin");
    EXPECT_EQ(under.exit_code, 1) << under.output;
    EXPECT_EQ(under.output, "error: " + target + "/o.bin: cannot write (Not a directory)\n");
    auto outdir = testutil::run("./prepare_data --gpt2-dir " + gpt2_dir() + " --tinyshakespeare " + in + " " + target);
    EXPECT_EQ(outdir.exit_code, 1) << outdir.output;
    EXPECT_EQ(outdir.output, "error: " + target + ": exists and is not a directory (OUTDIR)\n");
    EXPECT_EQ(testutil::slurp(target), "keep\n");
}

// make tinyshakespeare without a network: one line that says how to use a local copy (it printed curl's retries
// and a URL). The script runs from a copy of the repository's layout, so the repository's data/ is not touched;
// the address is this machine's discard port, which refuses the connection at once.
TEST(PrepareDataCli, TinyShakespeareDownloadFailureSaysHowToUseALocalCopy) {
    testutil::TempDir dir;
    ASSERT_EQ(testutil::run("mkdir -p " + (dir / "dev/data") + " && cp dev/data/tinyshakespeare.sh " + (dir / "dev/data/"))
                  .exit_code,
              0);
    const std::string url = "http://127.0.0.1:9/input.txt";
    auto r = testutil::run("TINYSHAKESPEARE_URL=" + url + " bash " + (dir / "dev/data/tinyshakespeare.sh"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    // "downloading URL", then the error.
    EXPECT_EQ(count_lines(r.output), 2) << r.output;
    EXPECT_NE(r.output.find("error: could not download " + url + " ("), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("); to use a local copy of the text: TINYSHAKESPEARE=/path/to/input.txt make tinyshakespeare\n"),
              std::string::npos) << r.output;
    EXPECT_FALSE(file_exists(dir / "data/tinyshakespeare/input.txt"));
    EXPECT_FALSE(file_exists(dir / "data/tinyshakespeare/input.txt.part"));
}

TEST(PrepareDataCli, InvalidUtf8Input) {
    testutil::TempDir dir;
    std::string in = dir / "bad.txt";
    {
        File f(in, "wb");
        f.write("good text\n\xc3(", 12);
        f.close();
    }
    auto r = testutil::run("./prepare_data --gpt2-dir " + gpt2_dir() + " " + in + " " + (dir / "o.bin"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("error: " + in + ": invalid UTF-8 in the input at byte offset 10"), std::string::npos)
        << r.output;
    EXPECT_FALSE(file_exists(dir / "o.bin"));
}

TEST(PrepareDataShards, PlainEncoding) {
    testutil::TempDir dir;
    std::string out = dir / "plain.bin";
    auto r = testutil::run("./prepare_data --gpt2-dir " + gpt2_dir() + " " + shakespeare() + " " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(strprintf("wrote %zu tokens to %s", reference("plain").count, out.c_str())),
              std::string::npos)
        << r.output;
    std::vector<uint16_t> tokens = read_shard(out);
    EXPECT_EQ(tokens.size(), reference("plain").count);
    EXPECT_EQ(fnv1a64(tokens), reference("plain").hash);
}

TEST(PrepareDataShards, TinyShakespeareLayout) {
    testutil::TempDir dir;
    std::string out = dir / "new/tinyshakespeare"; // created by prepare_data, parents included
    auto r = testutil::run("GPT2_VOCAB_DIR=" + gpt2_dir() + " ./prepare_data --tinyshakespeare " + shakespeare() + " " +
                           out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(" ms"), std::string::npos) << "no encode time in: " << r.output;

    std::vector<uint16_t> val = read_shard(out + "/tiny_shakespeare_val.bin");
    std::vector<uint16_t> train = read_shard(out + "/tiny_shakespeare_train.bin");
    EXPECT_EQ(val.size(), 32768u);
    EXPECT_EQ(val.size(), reference("val").count);
    EXPECT_EQ(train.size(), reference("train").count);
    EXPECT_EQ(fnv1a64(val), reference("val").hash);
    EXPECT_EQ(fnv1a64(train), reference("train").hash);
    EXPECT_NE(r.output.find(strprintf("wrote %zu tokens to %s/tiny_shakespeare_val.bin", val.size(), out.c_str())),
              std::string::npos) << r.output;
    EXPECT_NE(r.output.find(strprintf("wrote %zu tokens to %s/tiny_shakespeare_train.bin", train.size(), out.c_str())),
              std::string::npos) << r.output;

    // Document structure, decoded with the tokenizer file written alongside: each section of the text, split as
    // Python's str.split("\n\n"), is EOT followed by the tokens of the section and its separator.
    ASSERT_FALSE(val.empty());
    EXPECT_EQ(val[0], GPT2_EOT);
    GPT2Tokenizer tok = GPT2Tokenizer::from_llmc_file(out + "/gpt2_tokenizer.bin");
    EXPECT_EQ(tok.vocab_size(), GPT2_VOCAB_SIZE);
    EXPECT_EQ(tok.eot(), GPT2_EOT);
    std::string text = detail::read_text_file(shakespeare());
    std::vector<std::string> sections;
    for (size_t start = 0;;) {
        size_t sep = text.find("\n\n", start);
        sections.push_back(text.substr(start, sep == std::string::npos ? std::string::npos : sep + 2 - start));
        if (sep == std::string::npos) break;
        start = sep + 2;
    }
    EXPECT_EQ(sections.size(), reference("sections").count);

    std::vector<int> all(val.begin(), val.end());
    all.insert(all.end(), train.begin(), train.end());
    std::vector<std::string> docs;
    for (size_t i = 0; i < all.size(); i++) {
        if (all[i] == GPT2_EOT) {
            docs.emplace_back();
        } else {
            ASSERT_FALSE(docs.empty()) << "tokens before the first EOT";
            docs.back() += tok.token_bytes(all[i]);
        }
    }
    ASSERT_EQ(docs.size(), sections.size());
    int mismatched = 0;
    for (size_t i = 0; i < docs.size(); i++)
        if (docs[i] != sections[i] && mismatched++ < 3) ADD_FAILURE() << "section " << i << " differs";
    EXPECT_EQ(mismatched, 0);
}
