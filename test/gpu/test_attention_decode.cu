// Decode attention (llmc/attention_decode.cuh) against the CPU reference's row (cpu::attention_row, in double)
// on the same bf16-rounded inputs, at lengths around the 64-position split: 1, 2, 63, 64, 65, 1000, 1024, and
// with rows for only some of the cache's sequences (the others stopped).
// Tolerance: relative L2 1e-2 per sequence, from the bf16 output (fp32 softmax and sums throughout).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/attention_decode.cuh"
#include "llmc/cpu/attention.h"
#include "test/gpu/gpu_test_util.cuh"

using gputest::DeviceBuffer;
using llmc::floatX;

namespace {

// Cache sequences of the given lengths, caches of maxT positions, and one query row for each cache sequence
// named in `rows` (all of them, in order, when empty): the rows of a decode step after some sequences stopped.
// Cache positions past a sequence's length, and every position of a sequence no row names, hold NaN: a kernel
// that reads one fails the comparison. The query sits in a (R, 3C) row, as in qkv.
void check_decode(const std::vector<int>& lens, int maxT, int NH, int HS, std::vector<int> rows = {}) {
    const int S = (int)lens.size(), C = NH * HS;
    if (rows.empty())
        for (int b = 0; b < S; b++) rows.push_back(b);
    const int R = (int)rows.size();
    const std::vector<float> q = gputest::bf16_round(gputest::random_normal((size_t)R * 3 * C));
    std::vector<float> k = gputest::bf16_round(gputest::random_normal((size_t)S * maxT * C));
    std::vector<float> v = gputest::bf16_round(gputest::random_normal((size_t)S * maxT * C));
    for (int b = 0; b < S; b++) {
        const bool named = std::find(rows.begin(), rows.end(), b) != rows.end();
        for (size_t i = ((size_t)b * maxT + (named ? lens[b] : 0)) * C; i < (size_t)(b + 1) * maxT * C; i++)
            k[i] = v[i] = NAN;
    }
    std::vector<int> row_len;
    for (int b : rows) row_len.push_back(lens[b]);
    DeviceBuffer<floatX> d_q(gputest::to_bf16(q)), d_k(gputest::to_bf16(k)), d_v(gputest::to_bf16(v));
    DeviceBuffer<int> d_seq(rows), d_len(row_len);
    DeviceBuffer<float> d_partial(llmc::attention_decode_scratch_floats(R, NH, HS, maxT));
    DeviceBuffer<floatX> d_out((size_t)R * C);
    d_partial.poison();
    d_out.poison();
    llmc::attention_decode(d_out, d_partial, d_q, 3 * C, d_k, d_v, d_seq, d_len, R, maxT, NH, HS, 0);
    const std::vector<float> out = gputest::to_float(d_out.download());

    for (int r = 0; r < R; r++) {
        const int b = rows[r], n = lens[b];
        std::vector<double> ref(C), att(n);
        std::vector<double> qd(q.begin() + (size_t)r * 3 * C, q.begin() + (size_t)r * 3 * C + C);
        std::vector<double> kd(k.begin() + (size_t)b * maxT * C, k.begin() + ((size_t)b * maxT + n) * C);
        std::vector<double> vd(v.begin() + (size_t)b * maxT * C, v.begin() + ((size_t)b * maxT + n) * C);
        for (int h = 0; h < NH; h++)
            llmc::cpu::attention_row(ref.data() + h * HS, att.data(), qd.data() + h * HS, kd.data() + h * HS,
                                     vd.data() + h * HS, C, n, HS);
        const std::vector<float> got(out.begin() + (size_t)r * C, out.begin() + (size_t)(r + 1) * C);
        EXPECT_TRUE(gputest::close_rel(got, gputest::narrow(ref), 1e-2,
                                       "row " + std::to_string(r) + " (sequence " + std::to_string(b) + ", len " +
                                           std::to_string(n) + ")"));
    }
}

} // namespace

GPU_TEST(GpuAttentionDecode, PartialSplitLengths) {
    REQUIRE_GPU();
    check_decode({1, 2, 63, 64, 65, 1000, 1024}, 1024, 2, 64);
}

GPU_TEST(GpuAttentionDecode, HeadSizes32And128) {
    REQUIRE_GPU();
    check_decode({1, 65, 130}, 130, 3, 32);
    check_decode({64, 7}, 100, 1, 128);
}

// GPT-2's 12 heads of 64, ragged lengths in one batch.
GPU_TEST(GpuAttentionDecode, GPT2ShapeBatch) {
    REQUIRE_GPU();
    check_decode({300, 17, 129, 1}, gputest::kEmulated ? 300 : 1024, 12, 64);
}

// Sequences 1 and 4 have stopped: the rows are the running ones, and each reads its own sequence's cache
// (the stopped ones are NaN throughout, so reading them fails).
GPU_TEST(GpuAttentionDecode, RowsOfTheRunningSequencesOnly) {
    REQUIRE_GPU();
    check_decode({70, 5, 130, 1, 64}, 130, 2, 64, {0, 2, 3});
    check_decode({70, 5, 130, 1, 64}, 130, 2, 64, {2});
}

GPU_TEST(GpuAttentionDecode, UnsupportedShapesThrow) {
    REQUIRE_GPU();
    auto call = [](int B, int HS) {
        llmc::attention_decode(nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr, nullptr, B, 8, 1, HS, 0);
    };
    EXPECT_THROW(call(1, 48), llmc::Error);
    EXPECT_THROW(call(0, 64), llmc::Error);
}
