// GoogleTest entry point that ends the run with one plain "N passed, N failed, N skipped" line.
#include <cstdio>
#include <gtest/gtest.h>

namespace {
class SummaryLine : public testing::EmptyTestEventListener {
    void OnTestProgramEnd(const testing::UnitTest& u) override {
        printf("tests: %d passed, %d failed, %d skipped\n", u.successful_test_count(),
               u.failed_test_count(), u.skipped_test_count());
    }
};
} // namespace

int main(int argc, char** argv) {
    testing::InitGoogleTest(&argc, argv);
    testing::UnitTest::GetInstance()->listeners().Append(new SummaryLine);
    return RUN_ALL_TESTS();
}
