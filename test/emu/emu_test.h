/*
 * GPU tests under the emulator: GPU_TEST (test/gpu/gpu_test_util.cuh) becomes EMU_TEST when the GPU test
 * sources are built by the host compiler against test/emu/. Each test body then runs once per schedule
 * (forward, reverse, shuffled, warp-eager: block order, thread order, when collectives are released and WMMA
 * fragment layout), from the same random seed, and the test fails if
 *   - any schedule records an emulator fault (illegal launch, deadlock, divergent collective, bad WMMA use), or
 *     racecheck (test/emu/racecheck.h), on under the first schedule, finds a shared-memory hazard, or
 *   - the bytes the test copied back from the device differ between schedules (a race: some result depends
 *     on the order in which threads or blocks ran).
 */
#pragma once
#include <cstdint>
#include <cstdlib>
#include <gtest/gtest.h>
#include <random>

#include "test/emu/emu.h"
#include "test/emu/racecheck.h"

namespace emutest {

constexpr int kSchedules = 4;

// EMU_SCHEDULES=1 runs the forward schedule only (the sanitizer build in `make test`: memory errors do not
// need four orders, and the plain build has already compared them).
inline int schedules_to_run() {
    const char* e = std::getenv("EMU_SCHEDULES");
    const int n = e ? std::atoi(e) : kSchedules;
    return n < 1 ? 1 : (n > kSchedules ? kSchedules : n);
}

// reseed: resets the tests' random stream so that every schedule sees the same inputs.
inline void run_under_schedules(void (*body)(), void (*reseed)(uint64_t)) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE(testing::Message() << "input seed " << seed);
    uint64_t digests[kSchedules];
    const int n = schedules_to_run();
    const bool racecheck = emu::race::enabled();
    for (int s = 0; s < n; s++) {
        SCOPED_TRACE(testing::Message() << "schedule " << emu::schedule_name(s));
        emu::set_schedule(s);
        emu::race::set_enabled(racecheck && s == 0); // its findings do not depend on the schedule
        reseed(seed);
        emu::reset_output_digest();
        body();
        for (const std::string& f : emu::take_faults()) ADD_FAILURE() << "emulator fault: " << f;
        digests[s] = emu::output_digest();
        if (testing::Test::HasFailure() || testing::Test::IsSkipped()) break;
        if (s > 0) {
            EXPECT_EQ(digests[0], digests[s]) << "the device results differ between the forward and the "
                                              << emu::schedule_name(s) << " schedule: a race";
        }
    }
    emu::set_schedule(0);
    emu::race::set_enabled(racecheck);
}

} // namespace emutest

#define EMU_TEST(suite, name)                                                                                          \
    static void emu_body_##suite##_##name();                                                                           \
    TEST(Emu##suite, name) { ::emutest::run_under_schedules(emu_body_##suite##_##name, ::gputest::reseed); }           \
    static void emu_body_##suite##_##name()
