// How the tests check a script's refusal (scripts/*.py): one line of output, in the script's own words ("sweep.py:
// error: ..."), naming what it refuses, and the exit status the project gives it: 2 for a bad flag, 1 for a file it
// cannot use.
#pragma once
#include <algorithm>
#include <gtest/gtest.h>
#include <string>

#include "test/test_util.h"

namespace testutil {

inline void expect_one_line(const RunResult& r, int code, const std::string& prefix, const std::string& part) {
    EXPECT_EQ(r.exit_code, code) << r.output;
    EXPECT_EQ(r.output.rfind(prefix, 0), 0u) << r.output;
    EXPECT_TRUE(has(r.output, part)) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

} // namespace testutil
