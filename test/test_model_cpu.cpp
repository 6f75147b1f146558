// The CPU GPT-2 model as a whole: initialisation, loss at init with the real vocabulary, float vs double,
// input validation, determinism, the timing hooks and a few steps of plain SGD.
#include <gtest/gtest.h>

#include <cmath>
#include <omp.h>
#include <utility>
#include <vector>

#include "llmc/cpu/gpt2.h"

using namespace llmc;

namespace {

// GPT-2's vocabulary on a small d2-like body (L=2, C=64, NH=2), short context so wpe stays small.
GPT2Config small_config() {
    GPT2Config c = gpt2_config_for_depth(2);
    c.max_seq_len = 32;
    return c;
}

// The same body with a small vocabulary, for tests about the model's plumbing rather than GPT-2's output head.
GPT2Config small_vocab_config() {
    GPT2Config c = small_config();
    c.vocab_size = 1000;
    c.padded_vocab_size = 1024;
    return c;
}

struct Batch {
    int B, T;
    std::vector<int> inputs, targets;
    Batch(int B_, int T_, int V, uint64_t seed) : B(B_), T(T_) {
        Rng rng(seed);
        for (int i = 0; i < B * T; i++) inputs.push_back(rng.next_u32() % V);
        for (int i = 0; i < B * T; i++) targets.push_back(rng.next_u32() % V);
    }
};

template <typename Real> double mean_of(const Real* p, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s / n;
}
template <typename Real> double std_of(const Real* p, size_t n) {
    const double m = mean_of(p, n);
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (p[i] - m) * (p[i] - m);
    return std::sqrt(s / n);
}

} // namespace

TEST(ModelCPU, LossAtInitIsLogVocab) {
    const GPT2Config c = small_config();
    ASSERT_EQ(c.vocab_size, 50257);
    ASSERT_EQ(c.padded_vocab_size, 50304);
    GPT2CPU<float> m(c);
    m.init_random(1337);
    Batch batch(2, 16, c.vocab_size, 1);
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    EXPECT_NEAR(m.mean_loss, std::log(50257.0), 0.1);
    m.forward(batch.inputs.data(), nullptr, batch.B, batch.T);
    EXPECT_EQ(m.mean_loss, -1.0f);
}

TEST(ModelCPU, FloatMatchesDouble) {
    const GPT2Config c = small_config();
    GPT2CPU<float> mf(c);
    GPT2CPU<double> md(c);
    mf.init_random(42);
    md.init_random(42);
    for (size_t i = 0; i < mf.params_memory.size(); i++) ASSERT_EQ(mf.params_memory[i], (float)md.params_memory[i]);
    Batch batch(2, 16, c.vocab_size, 2);
    mf.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    md.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    EXPECT_NEAR(mf.mean_loss / md.mean_loss, 1.0, 1e-4);
    mf.backward();
    md.backward();
    // The gradients agree to float precision as a whole (relative L2 error).
    double num = 0, den = 0;
    for (size_t i = 0; i < mf.grads_memory.size(); i++) {
        const double d = mf.grads_memory[i] - md.grads_memory[i];
        num += d * d;
        den += md.grads_memory[i] * md.grads_memory[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-4);
}

TEST(ModelCPU, InitIsReproducibleAndSeeded) {
    const GPT2Config c = small_vocab_config();
    GPT2CPU<float> a(c), b(c), other(c);
    a.init_random(5);
    b.init_random(5);
    other.init_random(6);
    EXPECT_EQ(a.params_memory, b.params_memory);
    EXPECT_NE(a.params_memory, other.params_memory);
    EXPECT_NE(a.params.wte[0], other.params.wte[0]);
}

TEST(ModelCPU, InitStatistics) {
    const GPT2Config c = small_config();
    GPT2CPU<double> m(c);
    m.init_random(1);
    const auto sizes = parameter_sizes(c);
    const double proj = 0.02 / std::sqrt(2.0 * c.num_layers);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        const double* p = m.params.tensor(i);
        const size_t n = sizes[i];
        switch (i) {
        case WTE:
        case WPE:
        case QKVW:
        case FCW:
        case ATTPROJW:
        case FCPROJW: {
            const double expected = (i == ATTPROJW || i == FCPROJW) ? proj : 0.02;
            EXPECT_NEAR(std_of(p, n), expected, 0.05 * expected) << parameter_name(i);
            EXPECT_NEAR(mean_of(p, n), 0.0, 0.05 * expected) << parameter_name(i);
            break;
        }
        case LN1W:
        case LN2W:
        case LNFW:
            for (size_t j = 0; j < n; j++) ASSERT_EQ(p[j], 1.0) << parameter_name(i);
            break;
        default:
            for (size_t j = 0; j < n; j++) ASSERT_EQ(p[j], 0.0) << parameter_name(i);
        }
    }
    // Padded wte rows are drawn like the others, not zeroed.
    EXPECT_NE(m.params.wte[(size_t)c.padded_vocab_size * c.channels - 1], 0.0);
    EXPECT_EQ(m.num_parameters(), num_parameters(c));
}

TEST(ModelCPU, RejectsBadInput) {
    const GPT2Config c = small_vocab_config();
    GPT2CPU<float> m(c);
    m.init_random(1);
    Batch batch(1, 4, c.vocab_size, 3);
    EXPECT_THROW(m.backward(), Error); // no forward yet
    std::vector<int> bad = batch.inputs;
    bad[2] = c.vocab_size;
    EXPECT_THROW(m.forward(bad.data(), nullptr, 1, 4), Error);
    bad[2] = -1;
    EXPECT_THROW(m.forward(bad.data(), nullptr, 1, 4), Error);
    EXPECT_THROW(m.forward(batch.inputs.data(), bad.data(), 1, 4), Error);
    std::vector<int> long_seq(c.max_seq_len + 1, 0);
    EXPECT_THROW(m.forward(long_seq.data(), nullptr, 1, c.max_seq_len + 1), Error);
    EXPECT_THROW(m.forward(batch.inputs.data(), nullptr, 0, 4), Error);
    m.forward(batch.inputs.data(), nullptr, 1, 4);
    EXPECT_THROW(m.backward(), Error); // no targets, no loss to differentiate
    EXPECT_THROW(m.probs(1, 0), Error);
    m.forward(batch.inputs.data(), batch.targets.data(), 1, 4);
    m.backward();
    EXPECT_THROW(m.backward(), Error);  // the probabilities were consumed
    EXPECT_THROW(m.probs(0, 0), Error); // and overwritten by dlogits
}

TEST(ModelCPU, ProbsAreDistributionsOverRealVocab) {
    const GPT2Config c = small_config();
    GPT2CPU<float> m(c);
    m.init_random(3);
    Batch batch(2, 8, c.vocab_size, 4);
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    double loss = 0;
    for (int b = 0; b < batch.B; b++)
        for (int t = 0; t < batch.T; t++) {
            const float* p = m.probs(b, t);
            double sum = 0;
            for (int i = 0; i < c.vocab_size; i++) {
                ASSERT_GE(p[i], 0.0f);
                sum += p[i];
            }
            EXPECT_NEAR(sum, 1.0, 1e-5);
            for (int i = c.vocab_size; i < c.padded_vocab_size; i++) ASSERT_EQ(p[i], 0.0f);
            loss -= std::log(p[batch.targets[b * batch.T + t]]);
        }
    EXPECT_NEAR(loss / (batch.B * batch.T), m.mean_loss, 1e-4);
}

TEST(ModelCPU, ForwardBackwardIsDeterministic) {
    const GPT2Config c = small_config();
    GPT2CPU<float> m(c);
    m.init_random(9);
    Batch batch(2, 16, c.vocab_size, 5), other(3, 32, c.vocab_size, 6);
    auto step = [&] {
        m.zero_grad();
        m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
        const float loss = m.mean_loss;
        m.backward();
        return std::make_pair(loss, m.grads_memory);
    };
    const auto first = step();
    // A larger batch in between reallocates the activations; the next small step must not notice.
    m.forward(other.inputs.data(), other.targets.data(), other.B, other.T);
    m.backward();
    const auto second = step();
    EXPECT_EQ(first.first, second.first);
    EXPECT_EQ(first.second, second.second);
    // With the project's own GEMM every output has one owner thread and a fixed summation order, so even the
    // thread count does not matter (a BLAS library promises that only for a fixed thread count).
    const cpu_blas::Library* library = cpu_blas::active();
    cpu_blas::use(nullptr);
    const auto own = step();
    const int threads = omp_get_max_threads();
    omp_set_num_threads(threads == 1 ? 2 : 1);
    const auto third = step();
    omp_set_num_threads(threads);
    cpu_blas::use(library);
    EXPECT_EQ(own.first, third.first);
    EXPECT_EQ(own.second, third.second);
}

TEST(ModelCPU, TimesEverySubBlock) {
    const GPT2Config c = small_vocab_config();
    GPT2CPU<float> m(c);
    m.init_random(1);
    SubBlockTimes times;
    m.timings = &times;
    Batch batch(1, 8, c.vocab_size, 7);
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    m.backward();
    for (int s = 0; s <= (int)SubBlock::classifier; s++) {
        const bool once = s == (int)SubBlock::encoder || s == (int)SubBlock::lnf || s == (int)SubBlock::classifier;
        for (Phase p : {Phase::fwd, Phase::bwd}) {
            EXPECT_EQ(times.calls[s][(int)p], once ? 1 : c.num_layers)
                << subblock_name((SubBlock)s) << " " << phase_name(p);
            EXPECT_GE(times.seconds[s][(int)p], 0.0);
        }
    }
    EXPECT_EQ(times.calls[(int)SubBlock::optimizer][(int)Phase::opt], 0);
    EXPECT_GT(times.seconds[(int)SubBlock::classifier][(int)Phase::fwd], 0.0);
}

TEST(ModelCPU, SgdLowersLossOnFixedBatch) {
    const GPT2Config c = small_config();
    GPT2CPU<float> m(c);
    m.init_random(11);
    Batch batch(2, 16, c.vocab_size, 8);
    std::vector<float> losses;
    for (int step = 0; step < 6; step++) {
        m.zero_grad();
        m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
        losses.push_back(m.mean_loss);
        m.backward();
        for (size_t i = 0; i < m.params_memory.size(); i++) m.params_memory[i] -= 0.05f * m.grads_memory[i];
    }
    for (size_t i = 1; i < losses.size(); i++) EXPECT_LT(losses[i], losses[i - 1]) << "step " << i;
    EXPECT_LT(losses.back(), losses.front() - 1.0);
}

// --energy's CPU replays (GPT2CPU::replay): the forward replayed whole gives the step's gradients again, bit for
// bit; one backward sub-block replayed twice adds exactly twice its gradient to its own parameters and nothing to
// any other's; before a backward there is nothing to replay.
TEST(ModelCPU, EnergyReplaysRunOneSubBlocksOpsOnTheStepsBuffers) {
    const GPT2Config c = small_vocab_config();
    GPT2CPU<float> m(c);
    m.init_random(3);
    Batch batch(2, 16, c.vocab_size, 4);
    EXPECT_THROW(m.replay(SubBlock::qkv, Phase::fwd, 1), Error);
    m.forward(batch.inputs.data(), batch.targets.data(), batch.B, batch.T);
    m.zero_grad();
    m.backward();
    const std::vector<float> step = m.grads_memory;
    m.replay(SubBlock::qkv, Phase::fwd, 3); // the same inputs, the same outputs
    m.zero_grad();
    m.replay_forward();
    m.backward();
    EXPECT_TRUE(m.grads_memory == step) << "the replayed step's gradients";
    m.zero_grad();
    m.replay(SubBlock::qkv, Phase::bwd, 2);
    const auto sizes = parameter_sizes(c);
    size_t off = 0, changed = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        for (size_t j = off; j < off + sizes[i]; j++) {
            if (i == QKVW || i == QKVB) {
                ASSERT_EQ(m.grads_memory[j], 2 * step[j]) << parameter_name(i) << "[" << j - off << "]";
                changed += step[j] != 0;
            } else {
                ASSERT_EQ(m.grads_memory[j], 0.0f) << parameter_name(i) << "[" << j - off << "]";
            }
        }
        off += sizes[i];
    }
    EXPECT_GT(changed, 0u);
}
