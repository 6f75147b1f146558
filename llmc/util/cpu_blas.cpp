#include "llmc/util/cpu_blas.h"

#include <dlfcn.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "llmc/util/utils.h"

namespace llmc::cpu_blas {
namespace {

#if defined(__x86_64__)
#define LLMC_MULTIARCH "/usr/lib/x86_64-linux-gnu/"
#elif defined(__aarch64__)
#define LLMC_MULTIARCH "/usr/lib/aarch64-linux-gnu/"
#else
#define LLMC_MULTIARCH "/usr/lib/"
#endif

struct Candidate {
    const char* path;
    bool openmp_build; // a file only the OpenMP build installs
};

// Debian's and Ubuntu's OpenMP builds first, then whatever the soname resolves to (by name only).
const std::map<std::string, std::vector<Candidate>> CANDIDATES = {
    {"openblas", {{LLMC_MULTIARCH "openblas-openmp/libopenblas.so.0", true}, {"libopenblas.so.0", false}}},
    {"blis", {{LLMC_MULTIARCH "blis-openmp/libblis.so.4", true}, {"libblis.so.4", false}}},
};

template <typename F> F symbol(void* handle, const char* name) { return reinterpret_cast<F>(dlsym(handle, name)); }

std::unique_ptr<Library> open_library(const std::string& name, bool openmp_only) {
    for (const Candidate& c : CANDIDATES.at(name)) {
        if (openmp_only && !c.openmp_build) continue;
        // RTLD_LOCAL: OpenBLAS and BLIS export the same cblas_* names; each stays behind its own handle.
        void* h = dlopen(c.path, RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        auto lib = std::make_unique<Library>();
        lib->sgemm = symbol<SgemmFn>(h, "cblas_sgemm");
        lib->dgemm = symbol<DgemmFn>(h, "cblas_dgemm");
        if (!lib->sgemm || !lib->dgemm) { // a build without CBLAS: not usable
            dlclose(h);
            continue;
        }
        Dl_info info{};
        lib->path = dladdr((void*)lib->sgemm, &info) && info.dli_fname ? info.dli_fname : c.path;
        if (name == "openblas") {
            auto config = symbol<const char* (*)()>(h, "openblas_get_config");
            auto parallel = symbol<int (*)()>(h, "openblas_get_parallel"); // 0 serial, 1 pthreads, 2 OpenMP
            lib->set_threads = symbol<void (*)(int)>(h, "openblas_set_num_threads");
            const int p = parallel ? parallel() : -1;
            lib->name = strprintf("%s (%s build)", config ? config() : "OpenBLAS",
                                  p == 2 ? "OpenMP" : p == 1 ? "pthreads" : p == 0 ? "serial" : "unknown");
            // "OpenBLAS 0.3.21 NO_LAPACKE ...": its first two words
            lib->brief = lib->name.substr(0, lib->name.find(' ', lib->name.find(' ') + 1));
        } else {
            auto version = symbol<const char* (*)()>(h, "bli_info_get_version_str");
            auto openmp = symbol<long (*)()>(h, "bli_info_get_enable_openmp");
            auto pthreads = symbol<long (*)()>(h, "bli_info_get_enable_pthreads");
            lib->set_threads = symbol<void (*)(int)>(h, "bli_thread_set_num_threads");
            const char* kind = openmp && openmp() ? "OpenMP" : pthreads && pthreads() ? "pthreads" : "serial";
            lib->name = strprintf("BLIS %s (%s build)", version ? version() : "?", kind);
            lib->brief = strprintf("BLIS %s", version ? version() : "?");
        }
        return lib;
    }
    return nullptr;
}

std::mutex mutex;
std::map<std::string, std::unique_ptr<Library>> opened; // by name + whether only OpenMP builds were accepted
std::atomic<const Library*> chosen{nullptr};
std::atomic<bool> decided{false};
std::atomic<int> threads_set{0};

const Library* open_cached(const std::string& name, bool openmp_only) {
    std::lock_guard<std::mutex> lock(mutex);
    const std::string key = name + (openmp_only ? "/openmp" : "");
    auto it = opened.find(key);
    if (it == opened.end()) it = opened.emplace(key, open_library(name, openmp_only)).first;
    return it->second.get();
}

} // namespace

const Library* find(const std::string& name) {
    if (!CANDIDATES.count(name)) throw Error("cpu_blas: unknown library '" + name + "' (openblas, blis)");
    return open_cached(name, false);
}

void use(const Library* lib) {
    chosen = lib;
    decided = true;
    threads_set = 0;
}

const Library* active() {
    if (decided) return chosen;
    const char* env = getenv("LLMC_CPU_BLAS");
    const std::string want = env && *env ? env : "auto";
    const Library* lib = nullptr;
    if (want == "auto") {
        lib = open_cached("openblas", true);
        if (!lib) lib = open_cached("blis", true);
    } else if (want == "openblas" || want == "blis") {
        lib = open_cached(want, true);
        if (!lib) lib = open_cached(want, false);
        if (!lib)
            throw Error(strprintf("LLMC_CPU_BLAS=%s: %s is not installed (no %s); unset it to use the project's own "
                                  "GEMM",
                                  want.c_str(), want == "blis" ? "BLIS" : "OpenBLAS",
                                  CANDIDATES.at(want).back().path));
    } else if (want != "ours") {
        throw Error("LLMC_CPU_BLAS: unknown value '" + want + "' (auto, ours, openblas, blis)");
    }
    chosen = lib;
    decided = true;
    return lib;
}

std::string describe(bool brief) {
    const Library* lib = active();
    return lib ? (brief ? lib->brief : lib->name) : std::string("own GEMM");
}

void match_threads(const Library& lib) {
#ifdef _OPENMP
    const int n = omp_get_max_threads();
#else
    const int n = 1; // a build without OpenMP (the fuzz targets): one thread
#endif
    if (lib.set_threads && threads_set.exchange(n) != n) lib.set_threads(n);
}

void gemm(const Library& lib, bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
    match_threads(lib);
    lib.sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

void gemm(const Library& lib, bool ta, bool tb, int m, int n, int k, const double* a, int lda, const double* b,
          int ldb, double beta, double* c, int ldc) {
    match_threads(lib);
    lib.dgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

} // namespace llmc::cpu_blas
