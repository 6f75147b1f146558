// Data loader (llmc/io/dataloader.h) and model/state files (llmc/io/checkpoint.h): batches, resume position,
// and every error path on bad files.
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <random>
#include <string>
#include <vector>

#include "llmc/io/checkpoint.h"
#include "llmc/io/dataloader.h"
#include "test/test_util.h"

using namespace llmc;
using testutil::TempDir;

namespace {
std::vector<uint16_t> random_tokens(size_t n, int vocab, unsigned seed) {
    std::mt19937 g(seed);
    std::vector<uint16_t> t(n);
    for (auto& x : t) x = (uint16_t)(g() % vocab);
    return t;
}
// Expects `fn` to throw llmc::Error whose message contains every one of `parts`.
template <typename F> void expect_error(F fn, std::vector<std::string> parts) {
    try {
        fn();
        ADD_FAILURE() << "no error thrown";
    } catch (const Error& e) {
        for (auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
}
void write_raw(const std::string& path, const Header& h, const void* data, size_t n) {
    File f(path, "wb");
    f.write(h.data(), HEADER_BYTES);
    f.write(data, n);
}
} // namespace

TEST(DataLoader, BatchesAreConsecutiveWindowsAcrossShards) {
    TempDir d;
    auto a = random_tokens(100, 500, 1), b = random_tokens(60, 500, 2);
    write_shard(d / "x_train_000.bin", a);
    write_shard(d / "x_train_001.bin", b);
    write_shard(d / "x_val_000.bin", random_tokens(50, 500, 3));
    DataLoader dl(d.path, "train", 2, 10, 500);
    ASSERT_EQ(dl.files().size(), 2u);
    EXPECT_EQ(dl.total_tokens(), 160u);
    EXPECT_EQ(dl.batches_per_epoch(), 4u + 2u); // 99/20 + 59/20
    std::vector<const std::vector<uint16_t>*> expect_src{&a, &a, &a, &a, &b, &b, &a};
    std::vector<int> expect_off{0, 20, 40, 60, 0, 20, 0};
    for (size_t k = 0; k < expect_src.size(); k++) {
        dl.next_batch();
        for (int i = 0; i < 20; i++) {
            ASSERT_EQ(dl.inputs()[i], (*expect_src[k])[expect_off[k] + i]) << "batch " << k;
            ASSERT_EQ(dl.targets()[i], (*expect_src[k])[expect_off[k] + i + 1]) << "batch " << k;
        }
    }
}

// Data-parallel ranks (llmc/train/dist.h): rank r of N takes the r-th of every N batches one loader reads, shard
// changes and epoch wrap included, and all ranks stand at that loader's position after each round.
TEST(DataLoader, RanksShareTheBatchesOfOneLoader) {
    TempDir d;
    write_shard(d / "r_train_000.bin", random_tokens(173, 500, 11));
    write_shard(d / "r_train_001.bin", random_tokens(97, 500, 12));
    write_shard(d / "r_train_002.bin", random_tokens(131, 500, 13));
    for (int world : {2, 3}) {
        DataLoader one(d.path, "train", 2, 10, 500);
        std::vector<DataLoader> ranks;
        for (int r = 0; r < world; r++) ranks.emplace_back(d.path, "train", 2, 10, 500, false, r, world);
        for (int round = 0; round < 12; round++) {
            for (int r = 0; r < world; r++) {
                one.next_batch();
                ranks[r].next_batch();
                ASSERT_EQ(std::vector<int>(ranks[r].inputs(), ranks[r].inputs() + 20),
                          std::vector<int>(one.inputs(), one.inputs() + 20))
                    << "world " << world << " round " << round << " rank " << r;
                ASSERT_EQ(std::vector<int>(ranks[r].targets(), ranks[r].targets() + 20),
                          std::vector<int>(one.targets(), one.targets() + 20));
            }
            for (int r = 0; r < world; r++) {
                EXPECT_EQ(ranks[r].position().shard, one.position().shard);
                EXPECT_EQ(ranks[r].position().offset, one.position().offset);
            }
        }
    }
}

TEST(DataLoader, PositionRestoresTheSameBatch) {
    TempDir d;
    write_shard(d / "s_train.bin", random_tokens(1000, 300, 4));
    DataLoader dl(d / "s_train.bin", "train", 4, 8, 300);
    for (int i = 0; i < 5; i++) dl.next_batch();
    DataPosition p = dl.position();
    dl.next_batch();
    std::vector<int> expected(dl.inputs(), dl.inputs() + 32);
    DataLoader other(d / "s_train.bin", "train", 4, 8, 300);
    other.restore(p);
    other.next_batch();
    EXPECT_EQ(std::vector<int>(other.inputs(), other.inputs() + 32), expected);
}

TEST(DataLoader, OverfitRepeatsTheFirstBatch) {
    TempDir d;
    auto t = random_tokens(500, 300, 5);
    write_shard(d / "o_train.bin", t);
    DataLoader dl(d / "o_train.bin", "train", 2, 8, 300, /*overfit=*/true);
    for (int k = 0; k < 3; k++) {
        dl.next_batch();
        for (int i = 0; i < 16; i++) ASSERT_EQ(dl.inputs()[i], t[i]);
    }
}

TEST(DataLoader, GlobSelectsSortedShards) {
    TempDir d;
    write_shard(d / "b.bin", random_tokens(40, 10, 6));
    write_shard(d / "a.bin", random_tokens(40, 10, 7));
    write_shard(d / "c.txt", random_tokens(40, 10, 8));
    auto files = resolve_shards(d.path + "/*.bin", "train");
    ASSERT_EQ(files.size(), 2u);
    EXPECT_EQ(files[0], d / "a.bin");
    EXPECT_EQ(files[1], d / "b.bin");
}

TEST(DataLoader, ErrorsNameTheFile) {
    TempDir d;
    auto tok = random_tokens(64, 100, 9);
    expect_error([&] { DataLoader(d / "missing.bin", "train", 1, 8, 100); }, {"missing.bin", "no such file"});
    expect_error([&] { DataLoader(d.path, "train", 1, 8, 100); }, {d.path, "no *train*.bin"});
    expect_error([&] { DataLoader(d.path + "/*.nothing", "train", 1, 8, 100); }, {"no files match"});
    expect_error([&] { resolve_shards("data/tinyshakespeare_nope", "train"); }, {"make tinyshakespeare"});

    Header h = make_header(SHARD_MAGIC, SHARD_VERSION);
    h[2] = 64;
    write_raw(d / "trunc.bin", h, tok.data(), 63 * 2);
    expect_error([&] { DataLoader(d / "trunc.bin", "train", 1, 8, 100); }, {"trunc.bin", "truncated"});
    auto longer = random_tokens(69, 100, 9); // the 64 tokens and 10 bytes more
    write_raw(d / "long.bin", h, longer.data(), 64 * 2 + 10);
    expect_error([&] { DataLoader(d / "long.bin", "train", 1, 8, 100); }, {"long.bin", "after its 64 tokens"});
    Header bad = h;
    bad[0] = 12345;
    write_raw(d / "magic.bin", bad, tok.data(), 128);
    expect_error([&] { DataLoader(d / "magic.bin", "train", 1, 8, 100); }, {"magic.bin", "bad magic number 12345"});
    bad = h;
    bad[1] = 7;
    write_raw(d / "version.bin", bad, tok.data(), 128);
    expect_error([&] { DataLoader(d / "version.bin", "train", 1, 8, 100); }, {"version.bin", "version 7"});
    write_raw(d / "tiny.bin", h, tok.data(), 0);
    expect_error([&] { DataLoader(d / "tiny.bin", "train", 1, 8, 100); }, {"tiny.bin", "truncated"});
    {
        File f(d / "short_header.bin", "wb");
        f.write(h.data(), 100);
    }
    expect_error([&] { DataLoader(d / "short_header.bin", "train", 1, 8, 100); }, {"short_header.bin", "header"});
    auto big = tok;
    big[37] = 100; // == vocab size: out of range
    write_shard(d / "range.bin", big);
    expect_error([&] { DataLoader(d / "range.bin", "train", 1, 8, 100); }, {"range.bin", "token 37 has id 100"});
    write_shard(d / "few.bin", tok);
    expect_error([&] { DataLoader(d / "few.bin", "train", 8, 8, 100); }, {"few.bin", "fewer than one batch"});
}

// Only regular files are read: a directory has no size (a FIFO, which would block the open until a writer came,
// is tried by the program tests, under a timeout).
TEST(DataLoader, RefusesWhatIsNotARegularFile) {
    TempDir d;
    ASSERT_EQ(mkdir((d / "dir_train.bin").c_str(), 0755), 0);
    expect_error([&] { DataLoader(d.path + "/*.bin", "train", 1, 8, 100); }, {"dir_train.bin", "is a directory"});
    expect_error([&] { File(d.path, "rb"); }, {d.path, "is a directory"});
}

namespace {
GPT2Config tiny_config() {
    GPT2Config c;
    c.max_seq_len = 16;
    c.vocab_size = 50;
    c.padded_vocab_size = 64;
    c.num_layers = 2;
    c.num_heads = 2;
    c.channels = 8;
    return c;
}
std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(g);
    return v;
}
} // namespace

TEST(Checkpoint, ModelFileRoundTripFp32AndBf16) {
    TempDir d;
    GPT2Config c = tiny_config();
    auto p = random_floats(num_parameters(c), 10);
    save_model(d / "m3.bin", c, p.data(), MODEL_VERSION_FP32);
    ModelFile m = load_model(d / "m3.bin");
    EXPECT_EQ(m.version, MODEL_VERSION_FP32);
    EXPECT_EQ(m.config.num_layers, 2);
    EXPECT_EQ(m.config.padded_vocab_size, 64);
    EXPECT_EQ(m.params, p);

    save_model(d / "m5.bin", c, p.data(), MODEL_VERSION_BF16);
    ModelFile b = load_model(d / "m5.bin");
    EXPECT_EQ(b.version, MODEL_VERSION_BF16);
    ASSERT_EQ(b.params.size(), p.size());
    for (size_t i = 0; i < p.size(); i++) {
        // bf16 keeps 8 significant bits: round to nearest is within half a unit in the last place, 2^-8 relative.
        ASSERT_LE(std::fabs(b.params[i] - p[i]), std::fabs(p[i]) * (1.0f / 256)) << i;
        ASSERT_EQ(b.params[i], bf16_to_float(float_to_bf16(b.params[i]))) << "not a bf16 value";
    }
}

TEST(Checkpoint, Bf16RoundsToNearestEven) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
    // 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST(Checkpoint, StateRoundTripWithAndWithoutMaster) {
    TempDir d;
    TrainState s;
    s.step = 12345678901LL;
    s.rng_state = 0xDEADBEEFCAFEF00Dull;
    s.data = {3, 4000000000LL};
    s.B = 4;
    s.T = 64;
    s.world = 8;
    s.m = random_floats(100, 1);
    s.v = random_floats(100, 2);
    save_state(d / "s.bin", s);
    TrainState r = load_state(d / "s.bin", 100, s.step);
    EXPECT_EQ(r.world, 8);
    EXPECT_EQ(r.step, s.step);
    EXPECT_EQ(r.rng_state, s.rng_state);
    EXPECT_EQ(r.data.shard, 3);
    EXPECT_EQ(r.data.offset, 4000000000LL);
    EXPECT_EQ(r.B, 4);
    EXPECT_EQ(r.T, 64);
    EXPECT_EQ(r.m, s.m);
    EXPECT_EQ(r.v, s.v);
    EXPECT_TRUE(r.master.empty());
    s.master = random_floats(100, 3);
    save_state(d / "s2.bin", s);
    EXPECT_EQ(load_state(d / "s2.bin", 100, s.step).master, s.master);
    expect_error([&] { load_state(d / "s.bin", 99, s.step); }, {"s.bin", "100 parameters", "99"});
    // A state file from before data parallelism (0 in the rank-count field) was written by one process; a
    // negative count is damage.
    std::string bytes = testutil::slurp(d / "s.bin");
    for (int32_t world : {0, -2}) {
        memcpy(&bytes[ST_WORLD * 4], &world, 4);
        std::ofstream(d / "s3.bin", std::ios::binary) << bytes;
        if (world == 0) EXPECT_EQ(load_state(d / "s3.bin", 100, s.step).world, 1);
        else expect_error([&] { load_state(d / "s3.bin", 100, s.step); }, {"s3.bin", "negative rank count -2"});
    }
}

// A state file's step must be the one its name says: a damaged step (0, negative, huge) is refused.
TEST(Checkpoint, StateStepMustMatchItsName) {
    TempDir d;
    TrainState s;
    s.m = s.v = std::vector<float>(10, 1.0f);
    for (int64_t step : {(int64_t)0, (int64_t)-1, (int64_t)1 << 31, (int64_t)1 << 40, INT64_MIN}) {
        s.step = step;
        save_state(d / "state_00000004.bin", s);
        expect_error([&] { load_state(d / "state_00000004.bin", 10, 4); },
                     {"state_00000004.bin", strprintf("state is for step %lld, its file name says step 4", (long long)step)});
    }
}

TEST(Checkpoint, FileNamesSpellEachStepOneWay) {
    EXPECT_EQ(checkpoint_step_of("state_00000004.bin", "state_"), 4);
    EXPECT_EQ(checkpoint_step_of("state_2147483647.bin", "state_"), 2147483647);
    EXPECT_EQ(checkpoint_step_of("model_00000012.bin", "model_"), 12);
    for (const char* bad : {"state_00000000.bin", "state_-0000001.bin", "state_+0000001.bin", "state_0000001.bin",
                            "state_000000001.bin", "state_00000001.bix", "state_0000000x.bin", "model_00000001.bin",
                            "state_.bin", "", "state_99999999999999999999.bin"})
        EXPECT_EQ(checkpoint_step_of(bad, "state_"), -1) << bad;
}

TEST(Checkpoint, ErrorsNameTheFile) {
    TempDir d;
    GPT2Config c = tiny_config();
    auto p = random_floats(num_parameters(c), 11);
    expect_error([&] { load_model(d / "none.bin"); }, {"none.bin", "cannot open"});
    save_model(d / "m.bin", c, p.data());
    {
        std::vector<char> bytes(HEADER_BYTES + p.size() * 4);
        File f(d / "m.bin", "rb");
        f.read(bytes.data(), bytes.size());
        File t(d / "trunc.bin", "wb");
        t.write(bytes.data(), bytes.size() - 4);
        bytes[0] ^= 1;
        File m(d / "magic.bin", "wb");
        m.write(bytes.data(), bytes.size());
    }
    expect_error([&] { load_model(d / "trunc.bin"); }, {"trunc.bin", "truncated model file"});
    expect_error([&] { load_model(d / "magic.bin"); }, {"magic.bin", "bad magic number"});
    Header h = make_header(MODEL_MAGIC, 4);
    write_raw(d / "v4.bin", h, p.data(), 16);
    expect_error([&] { load_model(d / "v4.bin"); }, {"v4.bin", "version 4"});
    h = make_header(MODEL_MAGIC, 3);
    h[2] = 16, h[3] = 50, h[4] = 2, h[5] = 3, h[6] = 8, h[7] = 64; // C=8 not divisible by NH=3
    write_raw(d / "shape.bin", h, p.data(), 16);
    expect_error([&] { load_model(d / "shape.bin"); }, {"shape.bin", "invalid model shape"});
    // Dimensions whose parameter count overflows 64 bits: refused for the shape, before any size is computed.
    h[2] = 1, h[3] = 1, h[4] = 1800000000, h[5] = 1, h[6] = INT32_MAX, h[7] = 1;
    write_raw(d / "wrap.bin", h, std::vector<char>(4096).data(), 4096);
    expect_error([&] { load_model(d / "wrap.bin"); }, {"wrap.bin", "invalid model shape", "L=1800000000"});

    TrainState s;
    s.m = s.v = std::vector<float>(10, 1.0f);
    save_state(d / "st.bin", s);
    {
        std::vector<char> bytes(HEADER_BYTES + 80);
        File f(d / "st.bin", "rb");
        f.read(bytes.data(), bytes.size());
        File t(d / "st_trunc.bin", "wb");
        t.write(bytes.data(), bytes.size() - 1);
    }
    expect_error([&] { load_state(d / "st_trunc.bin", 10, 0); }, {"st_trunc.bin", "truncated training state"});
    expect_error([&] { load_state(d / "m.bin", 10, 0); }, {"m.bin", "bad magic"});
}

TEST(Checkpoint, AtomicWriteLeavesOldFileOnFailureAndNoTempFile) {
    TempDir d;
    GPT2Config c = tiny_config();
    auto p = random_floats(num_parameters(c), 12);
    save_model(d / "m.bin", c, p.data());
    {
        AtomicFile f(d / "m.bin");
        f.write("garbage", 7);
        // destroyed without commit(): as if the writer crashed or threw mid-write
    }
    EXPECT_EQ(load_model(d / "m.bin").params, p);
    EXPECT_FALSE(file_exists(d / "m.bin.tmp"));
}

TEST(Checkpoint, LatestNeedsBothFiles) {
    TempDir d;
    EXPECT_EQ(find_latest_checkpoint(d.path), -1);
    EXPECT_EQ(find_latest_checkpoint(d / "missing_dir"), -1);
    GPT2Config c = tiny_config();
    auto p = random_floats(num_parameters(c), 13);
    TrainState s;
    s.m = s.v = std::vector<float>(p.size(), 0.0f);
    for (int step : {10, 20}) {
        save_model(checkpoint_model_path(d.path, step), c, p.data());
        save_state(checkpoint_state_path(d.path, step), s);
    }
    save_model(checkpoint_model_path(d.path, 30), c, p.data()); // crash before its state was written
    EXPECT_EQ(find_latest_checkpoint(d.path), 20);
    EXPECT_EQ(checkpoint_model_path("out", 20), "out/model_00000020.bin");
}
