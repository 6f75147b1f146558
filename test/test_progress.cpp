// Progress lines (llmc/util/progress.h): durations, the step lines' ETA, and Progress printing at most every few
// seconds, driven by a fake clock.
#include <gtest/gtest.h>
#include <string>

#include "llmc/util/progress.h"
#include "test/test_util.h"

using namespace llmc;

TEST(Progress, Durations) {
    EXPECT_EQ(format_duration(0.04), "0.0 s");
    EXPECT_EQ(format_duration(9.94), "9.9 s");
    EXPECT_EQ(format_duration(42.4), "42 s");
    EXPECT_EQ(format_duration(185), "3m 05s");
    EXPECT_EQ(format_duration(7620), "2h 07m");
    EXPECT_EQ(format_duration(-1), "-");
    EXPECT_EQ(format_duration(NAN), "-");
}

TEST(Progress, EtaAtTheMeanPace) {
    // 3 of 12 done in 30 s: 9 left at 10 s each.
    EXPECT_EQ(elapsed_and_eta(30, 3, 12), "30 s elapsed, ETA 1m 30s");
    EXPECT_EQ(elapsed_and_eta(30, 12, 12), "30 s elapsed, ETA 0.0 s");
    EXPECT_EQ(elapsed_and_eta(0.5, 0, 12), "0.5 s elapsed"); // no pace yet
}

// A line at most every `every` seconds of the fake clock, none for the last item or for quick work.
TEST(Progress, PrintsAtMostEverySoOften) {
    testutil::TempDir dir;
    FILE* f = fopen((dir / "out").c_str(), "w+");
    ASSERT_TRUE(f);
    double now = 100;
    Progress p("val loss", "batch", 5.0, f, [&] { return now; });
    for (int i = 1; i <= 10; i++) {
        now += 2; // 2 s per item: lines after items 3 (6 s), 6 (12 s) and 9 (18 s)
        p.tick(i, 10);
    }
    Progress quick("quick", "item", 5.0, f, [&] { return now; });
    for (int i = 1; i <= 10; i++) quick.tick(i, 10); // the clock stands still
    fclose(f);
    EXPECT_EQ(testutil::slurp(dir / "out"), "val loss: batch 3/10, 6.0 s elapsed, ETA 14 s\n"
                                            "val loss: batch 6/10, 12 s elapsed, ETA 8.0 s\n"
                                            "val loss: batch 9/10, 18 s elapsed, ETA 2.0 s\n");
}

// The step lines' ETA: steps at their own mean time, boundary work (val, sample, checkpoint) at its own mean per
// event. A 10 s val loss before step 1 of 200 (1 s steps, val every 50) is 4 more val losses, not 199 x 11 s.
TEST(Progress, RunEtaCountsBoundaryWorkByItsOwnCost) {
    RunEta eta;
    const long every[RunEta::kinds] = {50, 0, 100};
    eta.boundary(RunEta::val, 10.0);
    eta.step(1.0);
    EXPECT_DOUBLE_EQ(eta.eta(1, 200, every), 199 * 1.0 + 4 * 10.0); // val at 50, 100, 150, 200; no checkpoint cost yet
    eta.step(3.0);
    eta.boundary(RunEta::checkpoint, 6.0);
    EXPECT_DOUBLE_EQ(eta.eta(2, 200, every), 198 * 2.0 + 4 * 10.0 + 2 * 6.0);
    // A last step that is no multiple still has its boundary work; the boundary of the step just done counts.
    const long odd[RunEta::kinds] = {50, 0, 0};
    EXPECT_DOUBLE_EQ(eta.eta(50, 130, odd), 80 * 2.0 + 3 * 10.0); // 50, 100, 130
    EXPECT_DOUBLE_EQ(eta.eta(130, 130, odd), 10.0);              // the last val loss
}
