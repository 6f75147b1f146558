/*
 * The BLAS library the CPU matmuls (llmc/cpu/matmul.h) hand their GEMMs to, found at run time.
 *
 * The programs build and run without one: the library is opened with dlopen on first use, so a machine without
 * it gets the project's own GEMM and nothing is linked at build time. Which library, from LLMC_CPU_BLAS:
 *   auto (default)  OpenBLAS's OpenMP build, else BLIS's OpenMP build, else ours
 *   openblas, blis  that library (its OpenMP build where installed, else the one its soname resolves to);
 *                   an error when it is not installed
 *   ours            the project's own GEMM everywhere
 * Only OpenMP builds are taken by default: they run on the same libgomp threads as the rest of the step, where
 * a pthread build's own threads would compete with the program's waiting OpenMP threads for the cores.
 *
 * Determinism: with a fixed thread count both libraries give the same bits run to run (they split M and N over
 * threads, never K); a different thread count may change the last bits, unlike the project's own GEMM.
 */
#pragma once
#include <string>

namespace llmc::cpu_blas {

// The CBLAS entry points used, row-major only. Transpose flags: false = CblasNoTrans, true = CblasTrans.
typedef void (*SgemmFn)(int order, int ta, int tb, int m, int n, int k, float alpha, const float* a, int lda,
                        const float* b, int ldb, float beta, float* c, int ldc);
typedef void (*DgemmFn)(int order, int ta, int tb, int m, int n, int k, double alpha, const double* a, int lda,
                        const double* b, int ldb, double beta, double* c, int ldc);
constexpr int ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112;

struct Library {
    std::string name;  // "OpenBLAS 0.3.21 NO_LAPACKE ... Zen MAX_THREADS=64 (OpenMP build)", "BLIS 0.9.0 (OpenMP build)"
    std::string brief; // "OpenBLAS 0.3.21", "BLIS 0.9.0"
    std::string path; // the file dlopen opened
    SgemmFn sgemm = nullptr;
    DgemmFn dgemm = nullptr;
    void (*set_threads)(int) = nullptr;
};

// The library the matmuls use (null: the project's own GEMM), chosen once from LLMC_CPU_BLAS. Throws
// llmc::Error naming LLMC_CPU_BLAS for an unknown value or a library asked for by name that is not installed.
const Library* active();
// Which GEMM the matmuls use: the library's full name (the profile's context) or its brief one (banners), or
// "own GEMM".
std::string describe(bool brief = false);
// A library by name ("openblas" or "blis"), opened once; null when it is not installed. For benchmarks and tests.
const Library* find(const std::string& name);
// Makes the matmuls use `lib` (null: ours) from now on, whatever LLMC_CPU_BLAS says. For benchmarks and tests.
void use(const Library* lib);

// Sets the library's thread count to the OpenMP one (omp_get_max_threads) when it changed since the last call.
void match_threads(const Library& lib);

// row-major C (m, n) = op(A) op(B) + beta C; op(X) = X^T when its flag is set. lda, ldb, ldc: row strides.
void gemm(const Library& lib, bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc);
void gemm(const Library& lib, bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc);

} // namespace llmc::cpu_blas
