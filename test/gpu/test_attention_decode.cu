// Decode attention (llmc/attention_decode.cuh) against the CPU reference's row (cpu::attention_row, in double)
// on the same bf16-rounded inputs, at lengths around the 64-position split: 1, 2, 63, 64, 65, 1000, 1024.
// Tolerance: relative L2 1e-2 per sequence, from the bf16 output (fp32 softmax and sums throughout).
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

// Sequences of the given lengths in one batch, caches of maxT positions. Cache positions past a sequence's
// length hold NaN: a kernel that reads one fails the comparison. The query sits in a (B, 3C) row, as in qkv.
void check_decode(const std::vector<int>& lens, int maxT, int NH, int HS) {
    const int B = (int)lens.size(), C = NH * HS;
    const std::vector<float> q = gputest::bf16_round(gputest::random_normal((size_t)B * 3 * C));
    std::vector<float> k = gputest::bf16_round(gputest::random_normal((size_t)B * maxT * C));
    std::vector<float> v = gputest::bf16_round(gputest::random_normal((size_t)B * maxT * C));
    for (int b = 0; b < B; b++)
        for (size_t i = ((size_t)b * maxT + lens[b]) * C; i < (size_t)(b + 1) * maxT * C; i++) k[i] = v[i] = NAN;
    DeviceBuffer<floatX> d_q(gputest::to_bf16(q)), d_k(gputest::to_bf16(k)), d_v(gputest::to_bf16(v));
    DeviceBuffer<int> d_len(lens);
    DeviceBuffer<float> d_partial(llmc::attention_decode_scratch_floats(B, NH, HS, maxT));
    DeviceBuffer<floatX> d_out((size_t)B * C);
    d_partial.poison();
    d_out.poison();
    llmc::attention_decode(d_out, d_partial, d_q, 3 * C, d_k, d_v, d_len, B, maxT, NH, HS, 0);
    const std::vector<float> out = gputest::to_float(d_out.download());

    for (int b = 0; b < B; b++) {
        const int n = lens[b];
        std::vector<double> ref(C), att(n);
        std::vector<double> qd(q.begin() + (size_t)b * 3 * C, q.begin() + (size_t)b * 3 * C + C);
        std::vector<double> kd(k.begin() + (size_t)b * maxT * C, k.begin() + ((size_t)b * maxT + n) * C);
        std::vector<double> vd(v.begin() + (size_t)b * maxT * C, v.begin() + ((size_t)b * maxT + n) * C);
        for (int h = 0; h < NH; h++)
            llmc::cpu::attention_row(ref.data() + h * HS, att.data(), qd.data() + h * HS, kd.data() + h * HS,
                                     vd.data() + h * HS, C, n, HS);
        const std::vector<float> got(out.begin() + (size_t)b * C, out.begin() + (size_t)(b + 1) * C);
        EXPECT_TRUE(gputest::close_rel(got, gputest::narrow(ref), 1e-2, "len " + std::to_string(n)));
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

GPU_TEST(GpuAttentionDecode, UnsupportedShapesThrow) {
    REQUIRE_GPU();
    EXPECT_THROW(llmc::attention_decode(nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr, 1, 8, 1, 48, 0),
                 llmc::Error);
    EXPECT_THROW(llmc::attention_decode(nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr, 0, 8, 1, 64, 0),
                 llmc::Error);
}
