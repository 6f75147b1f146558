// test/emu/rewrite.py, the source rewrite of the emulated GPU tier: what it turns into emulator calls, that it
// keeps every line where it was, and that it stops on what it cannot honour instead of passing it through.
#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>
#include <string>

#include "test/test_util.h"

using testutil::has;

namespace {

struct Rewritten {
    int exit_code;
    std::string text;   // the rewritten file (empty on failure)
    std::string output; // what the script printed
};

Rewritten rewrite(const std::string& source) {
    testutil::TempDir dir;
    {
        std::ofstream(dir / "in.cu") << source;
    }
    auto r = testutil::run("python3 test/emu/rewrite.py " + (dir / "in.cu") + " " + (dir / "out.cu"));
    return {r.exit_code, r.exit_code == 0 ? testutil::slurp(dir / "out.cu") : "", r.output};
}

int lines(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

} // namespace

TEST(EmuRewrite, LaunchesBecomeEmulatorCallsOnTheSameLines) {
    const std::string src = "void f(float* x, cudaStream_t s) {\n"
                            "    k<<<1, 32>>>(x);\n"
                            "    ns::kern<T, 4><<<dim3(a, b), 128,\n"
                            "                    smem, s>>>(x, 1);\n"
                            "    // a comment about k<<<1, 1>>>(x) stays as it is\n"
                            "    const char* msg = \"<<<not a launch>>>\";\n"
                            "}\n";
    Rewritten r = rewrite(src);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.text, "::emu::launch(\"k\", k, (1), (32))(x);")) << r.text;
    EXPECT_TRUE(has(r.text, "::emu::launch(\"ns::kern<T, 4>\", ns::kern<T, 4>, (dim3(a, b)), (128), (smem), (s))"))
        << r.text;
    EXPECT_TRUE(has(r.text, "// a comment about k<<<1, 1>>>(x) stays as it is")) << r.text;
    EXPECT_TRUE(has(r.text, "\"<<<not a launch>>>\"")) << r.text;
    EXPECT_EQ(lines(r.text), lines(src) + 1) << "one #line directive and not a line more";
    EXPECT_TRUE(has(r.text, "#line 1 ")) << r.text;
}

TEST(EmuRewrite, SharedDeclarationsBecomePerBlockStorage) {
    Rewritten r = rewrite("__global__ void __launch_bounds__(256, 2) k(float* x) {\n"
                          "    __shared__ float tile[2][33];\n"
                          "    __shared__ typename R::TempStorage tmp;\n"
                          "    extern __shared__ __align__(128) unsigned char smem[];\n"
                          "}\n");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.text, "float (&tile)[2][33] = ::emu::shared_var<float[2][33]>(")) << r.text;
    EXPECT_TRUE(has(r.text, "typename R::TempStorage& tmp = ::emu::shared_var<typename R::TempStorage>(")) << r.text;
    EXPECT_TRUE(has(r.text, "unsigned char* smem = static_cast<unsigned char*>(::emu::dynamic_shared_storage());"))
        << r.text;
    EXPECT_TRUE(has(r.text, "{ ::emu::launch_bounds_check(256, \"k\");")) << r.text;
}

TEST(EmuRewrite, StopsOnWhatTheEmulatorCannotHonour) {
    struct Case {
        const char* source;
        const char* message;
    };
    for (Case c : {Case{"__global__ void k() { asm volatile(\"bar.sync 0;\"); }\n", "inline PTX"},
                   Case{"__global__ void k() { __shared__ float a[4], b[4]; }\n", "several declarators"},
                   Case{"__global__ void k() { __shared__ float a = 0; }\n", "initialiser"},
                   Case{"__global__ void k() { __shared__ float a[]; }\n", "unsized"},
                   Case{"void f() { k<<<1, 2, 3, 4, 5>>>(); }\n", "5 parts"},
                   Case{"void f() { k<<<1, 2>>>; }\n", "argument list"},
                   Case{"__managed__ float x;\n", "managed memory"},
                   // inline PTX in the branch the emulated build compiles is still refused
                   Case{"__device__ void f() { asm(\"ret;\"); }\n#ifdef LLMC_EMU\n#else\n#endif\n", "inline PTX"}}) {
        Rewritten r = rewrite(c.source);
        EXPECT_NE(r.exit_code, 0) << c.source;
        EXPECT_TRUE(has(r.output, c.message)) << c.source << " -> " << r.output;
        EXPECT_TRUE(has(r.output, "in.cu:line 1")) << "the error names the file and line: " << r.output;
    }
}

// The branches an emulated build never compiles (#else of #ifdef LLMC_EMU, #ifndef LLMC_EMU) keep their inline PTX
// and are not rewritten; everything else is, including code after them (line numbers kept).
TEST(EmuRewrite, LeavesTheDeviceOnlyBranchesAlone) {
    const std::string src = "__device__ void f(float* x) {\n"
                            "#ifdef LLMC_EMU\n"
                            "    emu_f(x);\n"
                            "#else\n"
                            "    asm volatile(\"st.global.f32 [%0], 1.0;\" :: \"l\"(x));\n"
                            "#endif\n"
                            "#if !defined(LLMC_EMU)\n"
                            "    asm(\"ret;\");\n"
                            "#endif\n"
                            "}\n"
                            "void g() { k<<<1, 32>>>(); }\n";
    Rewritten r = rewrite(src);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.text, "asm volatile(\"st.global.f32 [%0], 1.0;\" :: \"l\"(x));")) << r.text;
    EXPECT_TRUE(has(r.text, "::emu::launch(\"k\", k, (1), (32))();")) << r.text;
    // inline PTX in the branch the emulated build does compile is refused, with its line
    Rewritten refused = rewrite("__device__ void f() {\n#ifdef LLMC_EMU\n    asm(\"ret;\");\n#endif\n}\n");
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_TRUE(has(refused.output, "in.cu:line 3: inline PTX")) << refused.output;
}
