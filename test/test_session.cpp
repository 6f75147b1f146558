// The profile session (llmc/profiler/session.h) driven as a training loop drives it, over a scripted event
// source: when the source is armed, which steps it records, when the profile directory is written. No GPU.
#include <gtest/gtest.h>
#include <memory>
#include <string>
#include <vector>

#include "llmc/profiler/session.h"
#include "test/scripted_source.h"
#include "test/test_util.h"

using namespace llmc;
using namespace llmc::prof;
using testutil::ScriptedSource;

namespace {

struct SessionRun {
    std::string log;
    testutil::TempDir dir;
    std::string profile() const { return dir / "p"; }
};

// Steps [start_step, max_steps) with the window [first, first + count).
void drive(SessionRun& r, int first, int count, int start_step, int max_steps, bool slow, bool can_start = true) {
    ProfileContext ctx;
    ctx.program = "test";
    ProfileSession s({r.profile(), first, count}, ctx, std::make_unique<ScriptedSource>(&r.log, slow, can_start));
    for (int step = start_step; step < max_steps; step++) {
        s.begin_step(step);
        s.end_step(100);
        if (s.step_done(step + 1 == max_steps)) r.log += "written ";
    }
}

} // namespace

TEST(ProfileSession, ArmsASlowSourceOneStepAheadAndWritesWhenTheWindowCloses) {
    SessionRun r;
    drive(r, 2, 3, 0, 8, true);
    // The source gets the run's step numbers as the step lines print them: indices 2-4 are steps 3-5.
    EXPECT_EQ(r.log, "start begin3 flush begin4 flush begin5 flush stop written ");
    auto steps = testutil::read_csv(r.profile() + "/steps.csv");
    ASSERT_EQ(steps.size(), 3u);
    EXPECT_EQ(steps[0]["tokens"], "100");
    for (int i = 0; i < 3; i++) EXPECT_EQ(steps[i]["step"], std::to_string(3 + i));
    EXPECT_NE(testutil::slurp(r.profile() + "/summary.txt").find("device    scripted"), std::string::npos);
}

TEST(ProfileSession, AFastSourceStartsAtOnce) {
    SessionRun r;
    drive(r, 1, 2, 0, 5, false);
    EXPECT_EQ(r.log, "start flush begin2 flush begin3 flush stop written ");
}

// Work between steps (validation, samples, checkpoints) is recorded between the window's first and last step only:
// before the first (the source already armed) and after the window it is not the profile's.
TEST(ProfileSession, RecordsWorkBetweenTheWindowsSteps) {
    SessionRun r;
    ProfileContext ctx;
    ProfileSession s({r.profile(), 2, 3}, ctx, std::make_unique<ScriptedSource>(&r.log, true));
    for (int step = 0; step < 8; step++) {
        s.boundary_work(step % 2 ? "val" : "checkpoint", 1e-3 * step); // what the run did after step `step`
        s.begin_step(step);
        s.end_step(100);
        s.step_done(step + 1 == 8);
    }
    auto rows = testutil::read_csv(r.profile() + "/outside_steps.csv");
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0]["kind"], "val");
    EXPECT_EQ(rows[0]["after_step"], "3"); // the step lines' numbers: step index 2 is step 3
    EXPECT_EQ(rows[0]["wall_ms"], "3.000");
    EXPECT_EQ(rows[1]["kind"], "checkpoint");
    EXPECT_EQ(rows[1]["after_step"], "4");
    EXPECT_EQ(rows[1]["wall_ms"], "4.000");
}

TEST(ProfileSession, ARefusedSourceRecordsNothing) {
    SessionRun r;
    drive(r, 0, 2, 0, 4, true, false);
    EXPECT_EQ(r.log, "refused ");
    EXPECT_FALSE(file_exists(r.profile() + "/summary.txt"));
}

TEST(ProfileSession, ARunEndingBeforeTheWindowWritesNothing) {
    SessionRun r;
    drive(r, 5, 2, 0, 3, true);
    EXPECT_EQ(r.log, "");
    EXPECT_FALSE(file_exists(r.profile() + "/summary.txt"));
}

// The directory is made when the session starts: a path that is a file, or lies under one, is refused then (before
// the run's work), naming the flag.
TEST(ProfileSession, RefusesADirectoryItCannotMakeAtOnce) {
    testutil::TempDir dir;
    const std::string file = dir / "a_file";
    ASSERT_EQ(testutil::run("echo keep > '" + file + "'").exit_code, 0);
    std::string log;
    for (const std::string& path : {file, file + "/sub"}) {
        try {
            ProfileSession s({path, 0, 1, 15, false, "-o"}, ProfileContext{},
                             std::make_unique<ScriptedSource>(&log, false));
            ADD_FAILURE() << path << " was accepted";
        } catch (const Error& e) {
            EXPECT_EQ(std::string(e.what()).rfind("-o: " + path + ": cannot create directory", 0), 0u) << e.what();
        }
    }
    EXPECT_EQ(log, "") << "the source started";
    EXPECT_EQ(testutil::slurp(file), "keep\n");
    // Missing parents are made.
    ProfileSession s({dir / "x/y/p", 0, 1}, ProfileContext{}, std::make_unique<ScriptedSource>(&log, false));
    EXPECT_TRUE(file_exists(dir / "x/y/p"));
}

// A directory that cannot be written when the window closes (here: replaced by a file meanwhile) does not end
// the run: the session says so, goes on, and throw_if_not_written reports it at the run's end.
TEST(ProfileSession, AFailedWriteIsReportedAtTheEnd) {
    SessionRun r;
    ProfileSession s({r.profile(), 0, 1}, ProfileContext{}, std::make_unique<ScriptedSource>(&r.log, false));
    ASSERT_EQ(testutil::run("rmdir '" + r.profile() + "' && echo x > '" + r.profile() + "'").exit_code, 0);
    s.begin_step(0);
    s.end_step(100);
    testing::internal::CaptureStderr();
    EXPECT_TRUE(s.step_done(true));
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("profile: not written: "), std::string::npos) << err;
    EXPECT_NE(s.write_error(), "");
    try {
        s.throw_if_not_written();
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("--profile: ", 0), 0u) << e.what();
    }
}
