// The data-parallel layer's transport-free parts: shards, gradient buckets, the merged profile's analysis and the
// link's peak (llmc/train/dist.h, llmc/model/gpt2_config.h, llmc/profiler/distributed.h, llmc/profiler/nvml_sampler.h).
// The runs under mpirun are in test_train_cpu.cpp.
#include <gtest/gtest.h>
#include <random>
#include <thread>

#include "llmc/model/gpt2_config.h"
#include "llmc/profiler/cpu_timers.h"
#include "llmc/profiler/distributed.h"
#include "llmc/profiler/nvml_sampler.h"
#include "test/test_util.h"

using namespace llmc;

TEST(Distributed, ShardsCoverTheBufferOnceInRankOrder) {
    std::mt19937 g(5);
    for (int trial = 0; trial < 200; trial++) {
        size_t n = g() % 10000;
        int world = 1 + (int)(g() % 9);
        size_t next = 0, smallest = n, largest = 0;
        for (int r = 0; r < world; r++) {
            Shard s = shard_of(n, r, world);
            EXPECT_EQ(s.begin, next) << n << " " << world << " " << r;
            next = s.end;
            smallest = std::min(smallest, s.size()), largest = std::max(largest, s.size());
        }
        EXPECT_EQ(next, n);
        EXPECT_LE(largest - smallest, 1u); // balanced
    }
}

TEST(Distributed, BusBandwidthFollowsTheRingFactor) {
    // 8 ranks, 1 GB each in 1 s: a ring all-reduce moves 2*7/8 of it over each link, the others 7/8.
    EXPECT_DOUBLE_EQ(prof::bus_bandwidth(Collective::all_reduce, 1e9, 1.0, 8), 1.75);
    EXPECT_DOUBLE_EQ(prof::bus_bandwidth(Collective::reduce_scatter, 1e9, 1.0, 8), 0.875);
    EXPECT_DOUBLE_EQ(prof::bus_bandwidth(Collective::all_gather, 1e9, 0.5, 8), 1.75);
    EXPECT_EQ(prof::bus_bandwidth(Collective::all_reduce, 1e9, 0.0, 8), 0.0); // no time measured: no figure
}

TEST(Distributed, SummaryNamesTheStragglerAndTheHiddenShare) {
    std::mt19937 g(11);
    std::uniform_real_distribution<double> u(0.1, 1.0);
    const int world = 4, steps = 5;
    std::vector<prof::RankRecord> ranks(world);
    for (int r = 0; r < world; r++) {
        prof::RankRecord& rec = ranks[r];
        rec.rank = r, rec.steps = steps, rec.step_seconds = steps * u(g);
        const double seconds = u(g) * 1e-3;
        for (int i = 0; i < steps; i++) rec.comm.add(Collective::all_reduce, 4000, seconds / steps); // small
        rec.comm.add(Collective::all_reduce, 1 << 20, 2e-3);                                      // and large
        rec.comm.exposed_seconds = rec.comm.seconds[(int)Collective::all_reduce] * u(g);
    }
    // Rank 0 has the longest steps but waited for communication through nearly all of them: the others kept it
    // waiting, so it is not the straggler.
    ranks[0].step_seconds = 10.0 * steps;
    ranks[0].comm.add(Collective::all_reduce, 1 << 20, 9.99 * steps - ranks[0].comm.seconds[(int)Collective::all_reduce]);
    ranks[0].comm.exposed_seconds = 9.99 * steps;
    double comm_sum = 0, exposed_sum = 0, longest = 0;
    int slowest = -1;
    for (const prof::RankRecord& rec : ranks) {
        comm_sum += rec.comm.seconds[(int)Collective::all_reduce];
        exposed_sum += rec.comm.exposed_seconds;
        const double computing = rec.step_seconds - rec.comm.exposed_seconds; // the straggler computes longest
        if (computing > longest) longest = computing, slowest = rec.rank;
    }
    ASSERT_NE(slowest, 0);
    prof::DistributedSummary s = prof::summarize_ranks(ranks);
    EXPECT_EQ(s.world, world);
    EXPECT_EQ(s.straggler, slowest);
    // Only the collectives that ran: all_reduce's large messages, then its small ones (latency, not compared with
    // a peak).
    ASSERT_EQ(s.collectives.size(), 2u);
    EXPECT_FALSE(s.collectives[0].small);
    EXPECT_TRUE(s.collectives[1].small);
    EXPECT_EQ(s.collectives[0].calls, world + 1); // rank 0 has two large ones
    EXPECT_EQ(s.collectives[1].calls, world * steps);
    EXPECT_EQ(s.collectives[1].bytes, world * steps * 4000);
    EXPECT_NEAR(s.collectives[0].seconds + s.collectives[1].seconds, comm_sum / world, 1e-12);
    EXPECT_NEAR(s.comm_seconds, comm_sum / world / steps, 1e-12);
    EXPECT_NEAR(s.hidden_share, 1 - exposed_sum / comm_sum, 1e-12);
    for (int r = 0; r < world; r++) {
        EXPECT_NEAR(s.step_ms[r], 1e3 * ranks[r].step_seconds / steps, 1e-9);
        EXPECT_NEAR(s.wait_ms[r], 1e3 * ranks[r].comm.exposed_seconds / steps, 1e-9);
    }
    std::string text = prof::format_distributed(s);
    EXPECT_TRUE(testutil::has(text, "rank " + std::to_string(slowest))) << text;
    size_t at = text.find("<- straggler");
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(text.find("<- straggler", at + 1), std::string::npos) << text; // once
    EXPECT_EQ(text.rfind("\nrank " + std::to_string(slowest) + " ", at), text.rfind('\n', at)) << text;
    EXPECT_TRUE(testutil::has(text, "\nall_reduce small ")) << text;
    EXPECT_TRUE(testutil::has(text, "\nall_reduce      ")) << text;
    EXPECT_TRUE(testutil::has(text, "small: messages under 64 KiB")) << text;
    EXPECT_TRUE(testutil::has(text, "peak unknown")) << text; // no rank knew its link
}

// A ring is as fast as its slowest link: the summary compares with the smallest peak any rank knows.
TEST(Distributed, SummaryComparesBusBandwidthWithTheSlowestLink) {
    std::vector<prof::RankRecord> ranks(3);
    const double peaks[] = {0.0, 450.0, 32.0}; // rank 0 does not know its link
    for (int r = 0; r < 3; r++) {
        ranks[r].rank = r, ranks[r].steps = 1, ranks[r].step_seconds = 1;
        ranks[r].comm.calls[(int)Collective::all_gather] = 1;
        ranks[r].comm.bytes[(int)Collective::all_gather] = 3'000'000'000;
        ranks[r].comm.seconds[(int)Collective::all_gather] = 0.5;
        ranks[r].link = {r == 1 ? LinkKind::nvlink : LinkKind::pcie, peaks[r]};
    }
    prof::DistributedSummary s = prof::summarize_ranks(ranks);
    EXPECT_EQ(s.link.kind, LinkKind::pcie);
    EXPECT_EQ(s.link.peak_gbps, 32.0);
    ASSERT_EQ(s.collectives.size(), 1u);
    EXPECT_DOUBLE_EQ(s.collectives[0].bus_gbps, 3.0 * 2 / 3 / 0.5); // (N-1)/N of 3 GB in 0.5 s
    EXPECT_DOUBLE_EQ(s.collectives[0].of_peak, 4.0 / 32.0);
    std::string text = prof::format_distributed(s);
    EXPECT_TRUE(testutil::has(text, "12.5%")) << text;
    EXPECT_TRUE(testutil::has(text, "link: PCIe, peak 32.0 GB/s")) << text;
}

// The gradient buckets: every parameter in exactly one, each layer's ranges inside its tensors.
TEST(Distributed, LayerBucketsCoverEveryParameterOnce) {
    std::mt19937 g(3);
    for (int trial = 0; trial < 20; trial++) {
        GPT2Config c;
        c.num_layers = 1 + (int)(g() % 6);
        c.channels = 8 * (1 + (int)(g() % 8));
        c.num_heads = 1;
        c.max_seq_len = 1 + (int)(g() % 64);
        c.vocab_size = 1 + (int)(g() % 300);
        c.padded_vocab_size = c.vocab_size + (int)(g() % 64);
        std::vector<int> owner(num_parameters(c), 0);
        for (int l = -1; l < c.num_layers; l++)
            for (const ParamRange& r : layer_parameter_ranges(c, l))
                for (size_t i = r.offset; i < r.offset + r.count; i++) owner.at(i)++;
        for (size_t i = 0; i < owner.size(); i++) ASSERT_EQ(owner[i], 1) << "parameter " << i << ", trial " << trial;
        EXPECT_EQ(layer_parameter_ranges(c, 0).size(), 12u);
        EXPECT_EQ(layer_parameter_ranges(c, -1).size(), 4u);
    }
}

namespace {
// One rank whose all-reduce takes `delay` and records, per call, which buffer range it summed and on which thread
// (the sum over one rank is the buffer itself: it adds 1 to mark what it touched); the call `fail_at` throws.
class SlowCommunicator : public Communicator {
public:
    SlowCommunicator(std::chrono::milliseconds delay, int fail_at = -1)
        : Communicator(0, 1), delay_(delay), fail_at_(fail_at) {}
    void barrier() override {}
    struct Call {
        const float* buf;
        size_t n;
        std::thread::id thread;
    };
    std::vector<Call> calls;

protected:
    void all_reduce_impl(float* buf, size_t n) override {
        std::this_thread::sleep_for(delay_);
        if (attempts_++ == fail_at_) throw Error("link down");
        calls.push_back({buf, n, std::this_thread::get_id()});
        for (size_t i = 0; i < n; i++) buf[i] += 1;
    }
    void all_reduce_impl(double*, size_t) override {}
    void reduce_scatter_impl(float*, size_t) override {}
    void all_gather_impl(float*, size_t) override {}
    void broadcast_impl(void*, size_t) override {}

private:
    std::chrono::milliseconds delay_;
    int fail_at_, attempts_ = 0;
};
} // namespace

// The CPU trainer's overlap: buckets are summed in posting order on another thread while the caller goes on;
// wait() returns when all are done, and only the wait counts as exposed.
TEST(Distributed, BackgroundReducerOverlapsTheCaller) {
    using namespace std::chrono;
    SlowCommunicator comm(milliseconds(100));
    std::vector<float> buf(100, 0.0f);
    {
        BackgroundReducer reducer(comm);
        auto t0 = steady_clock::now();
        const int64_t t0_ns = steady_ns();
        reducer.post(buf.data(), {{10, 5}, {40, 10}}, 1);
        reducer.post(buf.data(), {{0, 10}}, -1);
        EXPECT_LT(duration<double>(steady_clock::now() - t0).count(), 0.05) << "post() waited for a collective";
        std::this_thread::sleep_for(milliseconds(500)); // the caller's compute: longer than the 300 ms of collectives
        reducer.wait();
        // Each bucket's time, in order, on the profile's clock: its collectives' 100 ms each, one after the other.
        const std::vector<BackgroundReducer::Timing> times = reducer.take_timings();
        ASSERT_EQ(times.size(), 2u);
        EXPECT_EQ(times[0].tag, 1);
        EXPECT_EQ(times[1].tag, -1);
        EXPECT_GE(times[0].start_ns, t0_ns);
        EXPECT_GE(times[0].end_ns - times[0].start_ns, 195'000'000); // two ranges, 100 ms each
        EXPECT_GE(times[1].start_ns, times[0].end_ns);
        EXPECT_GE(times[1].end_ns - times[1].start_ns, 95'000'000);
        EXPECT_TRUE(reducer.take_timings().empty()); // taken once
    }
    ASSERT_EQ(comm.calls.size(), 3u);
    const std::pair<size_t, size_t> order[] = {{10, 5}, {40, 10}, {0, 10}};
    for (int i = 0; i < 3; i++) {
        EXPECT_EQ(comm.calls[i].buf, buf.data() + order[i].first) << i;
        EXPECT_EQ(comm.calls[i].n, order[i].second) << i;
        EXPECT_NE(comm.calls[i].thread, std::this_thread::get_id()) << i;
    }
    for (size_t i = 0; i < buf.size(); i++)
        EXPECT_EQ(buf[i], (i < 15 || (i >= 40 && i < 50)) ? 1.0f : 0.0f) << i; // each range summed once
    const CommStats& st = comm.stats();
    EXPECT_EQ(st.calls[(int)Collective::all_reduce], 3);
    EXPECT_EQ(st.bytes[(int)Collective::all_reduce], 25 * 4);
    EXPECT_GE(st.total_seconds(), 0.295);
    EXPECT_LT(st.exposed_seconds, 0.5 * st.total_seconds()) << "the collectives ran beside the caller";

    // A collective on the training thread is exposed whole.
    std::vector<float> one(4, 0.0f);
    double before = comm.stats().exposed_seconds;
    comm.all_reduce_sum(one.data(), one.size());
    EXPECT_GE(comm.stats().exposed_seconds - before, 0.099);
}

TEST(Distributed, BackgroundReducerWaitRethrowsItsError) {
    SlowCommunicator comm(std::chrono::milliseconds(1), 1);
    std::vector<float> buf(8, 0.0f);
    BackgroundReducer reducer(comm);
    reducer.post(buf.data(), {{0, 4}}, 0);
    reducer.post(buf.data(), {{4, 4}}, 1);
    EXPECT_THROW(reducer.wait(), Error);
    reducer.post(buf.data(), {{4, 4}}, 1); // usable again after the error was reported
    reducer.wait();
    EXPECT_EQ(comm.calls.size(), 2u);
}

TEST(Distributed, LinkPeaksPerNvlinkVersionAndPcieGeneration) {
    // NVLink: the datasheets' totals (bidirectional, all links) over the link count, per direction.
    EXPECT_DOUBLE_EQ(18 * prof::nvlink_gbps_per_link(6), 900.0 / 2); // H100 SXM: NVLink 4.0, 18 links
    EXPECT_DOUBLE_EQ(12 * prof::nvlink_gbps_per_link(4), 600.0 / 2); // A100 SXM: NVLink 3.0, 12 links
    EXPECT_DOUBLE_EQ(12 * prof::nvlink_gbps_per_link(5), 600.0 / 2); // NVLink 3.1 (what A100s report)
    EXPECT_DOUBLE_EQ(6 * prof::nvlink_gbps_per_link(2), 300.0 / 2);  // V100 SXM2: NVLink 2.0, 6 links
    EXPECT_DOUBLE_EQ(18 * prof::nvlink_gbps_per_link(7), 1800.0 / 2); // B200: NVLink 5.0, 18 links
    EXPECT_EQ(prof::nvlink_gbps_per_link(0), 0.0);                   // NVML's "invalid"
    EXPECT_EQ(prof::nvlink_gbps_per_link(8), 0.0);                   // newer than the table: unknown, not a guess
    // PCIe x16, per direction: the figures usually quoted (within their rounding).
    EXPECT_NEAR(16 * prof::pcie_gbps_per_lane(3), 15.75, 0.01);
    EXPECT_NEAR(16 * prof::pcie_gbps_per_lane(4), 31.5, 0.01);
    EXPECT_NEAR(16 * prof::pcie_gbps_per_lane(5), 63.0, 0.05);
    EXPECT_NEAR(16 * prof::pcie_gbps_per_lane(6), 121.0, 0.05);
    EXPECT_DOUBLE_EQ(prof::pcie_gbps_per_lane(2), 2 * prof::pcie_gbps_per_lane(1)); // same code, twice the rate
    EXPECT_EQ(prof::pcie_gbps_per_lane(0), 0.0);
    EXPECT_EQ(prof::pcie_gbps_per_lane(7), 0.0);
}

namespace {
// A fake NVML device for read_link: the entry points are plain function pointers, so its state is global.
struct FakeLinks {
    unsigned nvlinks = 0, active = 0, version = 0; // links that exist, how many of them are active, their version
    unsigned pcie_gen = 0, pcie_width = 0;         // 0: NVML does not answer
};
FakeLinks links;
prof::NvmlApi fake_link_api() {
    prof::NvmlApi a;
    a.nvlink_state = [](prof::nvmlDevice_t, unsigned i, int* on) {
        return i < links.nvlinks ? (*on = i < links.active, prof::NVML_SUCCESS) : 2; // invalid argument
    };
    a.nvlink_version = [](prof::nvmlDevice_t, unsigned i, unsigned* v) {
        return i < links.nvlinks ? (*v = links.version, prof::NVML_SUCCESS) : 2;
    };
    a.pcie_max_generation = [](prof::nvmlDevice_t, unsigned* g) {
        return links.pcie_gen ? (*g = links.pcie_gen, prof::NVML_SUCCESS) : 3; // not supported
    };
    a.pcie_max_width = [](prof::nvmlDevice_t, unsigned* w) {
        return links.pcie_width ? (*w = links.pcie_width, prof::NVML_SUCCESS) : 3;
    };
    return a;
}
} // namespace

TEST(Distributed, LinkIsTheActiveNvlinksElsePcie) {
    const prof::NvmlApi api = fake_link_api();
    std::mt19937 g(11);
    for (int trial = 0; trial < 50; trial++) {
        links.nvlinks = g() % 19, links.active = g() % (links.nvlinks + 1), links.version = 1 + g() % 7;
        links.pcie_gen = g() % 7, links.pcie_width = links.pcie_gen ? 1u << (g() % 5) : 0;
        SCOPED_TRACE(testing::Message() << links.active << " of " << links.nvlinks << " NVLinks v" << links.version
                                        << ", PCIe gen " << links.pcie_gen << " x" << links.pcie_width);
        const Link l = prof::read_link(api, nullptr);
        if (links.active > 0) {
            EXPECT_EQ(l.kind, LinkKind::nvlink);
            EXPECT_DOUBLE_EQ(l.peak_gbps, links.active * prof::nvlink_gbps_per_link(links.version));
        } else if (links.pcie_gen > 0) {
            EXPECT_EQ(l.kind, LinkKind::pcie);
            EXPECT_DOUBLE_EQ(l.peak_gbps, links.pcie_width * prof::pcie_gbps_per_lane(links.pcie_gen));
        } else {
            EXPECT_EQ(l.kind, LinkKind::unknown);
            EXPECT_EQ(l.peak_gbps, 0.0);
        }
    }
    // A driver without the link queries: unknown.
    const Link none = prof::read_link(prof::NvmlApi{}, nullptr);
    EXPECT_EQ(none.kind, LinkKind::unknown);
    EXPECT_EQ(none.peak_gbps, 0.0);
}
