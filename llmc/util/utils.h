/*
 * Shared host utilities: errors, checked file I/O, atomic writes.
 *
 * Library code never exits: it throws llmc::Error with a one-line message that names the file or flag at
 * fault. Program entry points catch it, print "error: <message>" and exit non-zero (2 for usage errors,
 * 1 for everything else). That keeps every error path testable from GoogleTest.
 */
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace llmc {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Bad command line: programs exit with status 2.
struct UsageError : Error {
    using Error::Error;
};

std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// FNV-1a over n bytes, continuing from h: identities that must not change from one build or rank to the next
// (a cache file's name, a run's flags and files).
constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;
inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * kFnvPrime;
    return h;
}
// The same rule over n floats' bit patterns, one multiply per float (weights: hundreds of MB).
uint64_t fnv1a_floats(const float* x, size_t n);

// a * b and a + b, or an Error naming `what` when the result does not fit in size_t.
inline size_t checked_mul(size_t a, size_t b, const char* what) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r)) throw Error(strprintf("%s: size overflows (%zu * %zu)", what, a, b));
    return r;
}
inline size_t checked_add(size_t a, size_t b, const char* what) {
    size_t r;
    if (__builtin_add_overflow(a, b, &r)) throw Error(strprintf("%s: size overflows (%zu + %zu)", what, a, b));
    return r;
}

/*
 * RAII FILE*; opening failure names the path and the OS reason. A file opened for reading must be a regular
 * file: a directory has no size, and a FIFO or device would block or never end. The open itself does not
 * block (O_NONBLOCK), so a FIFO is refused instead of waiting for a reader or a writer. A file opened for writing
 * ("w" or "a") is an output (check_output_file): a regular file or a new name; a symbolic link is not followed.
 */
class File {
public:
    File(const std::string& path, const char* mode)
        : path_(path), f_(mode[0] == 'r' ? open_regular(path, mode) : open_output(path, mode)) {
        if (!f_) throw Error(strprintf("%s: cannot open (%s)", path.c_str(), strerror(errno)));
    }
    ~File() { if (f_) fclose(f_); }
    File(const File&) = delete;
    File& operator=(const File&) = delete;
    FILE* get() const { return f_; }
    const std::string& path() const { return path_; }
    size_t size() const {
        long pos = ftell(f_);
        fseek(f_, 0, SEEK_END);
        long n = ftell(f_);
        fseek(f_, pos, SEEK_SET);
        return (size_t)n;
    }
    // Reads exactly n bytes or throws (a short read means a truncated file).
    void read(void* dst, size_t n, const char* what = "data") {
        if (n && fread(dst, 1, n, f_) != n)
            throw Error(strprintf("%s: truncated file (could not read %zu bytes of %s)", path_.c_str(), n, what));
    }
    void write(const void* src, size_t n) {
        if (n && fwrite(src, 1, n, f_) != n)
            throw Error(strprintf("%s: write failed (%s)", path_.c_str(), strerror(errno)));
    }
    void seek(size_t off) {
        if (fseek(f_, (long)off, SEEK_SET) != 0) throw Error(strprintf("%s: seek failed", path_.c_str()));
    }
    // Closes and reports deferred write errors (disk full shows up here, not in fwrite).
    void close() {
        FILE* f = f_;
        f_ = nullptr;
        if (fclose(f) != 0) throw Error(strprintf("%s: close failed (%s)", path_.c_str(), strerror(errno)));
    }

private:
    static FILE* open_regular(const std::string& path, const char* mode);
    static FILE* open_output(const std::string& path, const char* mode);
    std::string path_;
    FILE* f_;
};

/*
 * Every program's output files: a path that exists must be a regular file, which the output replaces. A device, a
 * FIFO, a directory or a symbolic link given as an output is refused (Error naming the path): replacing it would
 * turn a device into a file or drop a link, and writing through one would change what the link points to.
 * Programs call it for each output before their long work; AtomicFile checks again when it writes.
 */
void check_output_file(const std::string& path);

// An output directory, checked before the work without creating anything: an existing path must be a directory
// this process can write into; a new one must be creatable, i.e. its nearest existing ancestor a writable
// directory (a path under a file is refused). Error names the path, as make_dirs's.
void check_output_dir(const std::string& path);

/*
 * Atomic file write: data goes to "<path>.tmp", is fsync'ed, then renamed over <path> and the directory is
 * fsync'ed. A crash at any point leaves either the old file or the new one, never a torn one. Without
 * commit() (an exception mid-write) the temp file is removed and <path> is untouched. <path> must be new or a
 * regular file (check_output_file).
 */
class AtomicFile {
public:
    explicit AtomicFile(const std::string& path) : path_(checked(path)), tmp_(path + ".tmp"), file_(tmp_, "wb") {}
    ~AtomicFile() {
        if (!committed_) unlink(tmp_.c_str());
    }
    void write(const void* src, size_t n) { file_.write(src, n); }
    void commit();

private:
    static const std::string& checked(const std::string& path) {
        check_output_file(path);
        return path;
    }
    std::string path_, tmp_;
    File file_;
    bool committed_ = false;
};

inline bool file_exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

/*
 * An advisory lock on a directory that one process at a time writes into (a training run's -o): flock(2) on
 * DIR/.lock, whose text is the holder's pid. It is held until the object dies, or its process does (the kernel
 * releases it then, so a killed run never leaves the directory locked). A second taker is refused with an Error
 * that names `flag`, the directory and the holder's pid. The directory must exist; the lock file stays.
 */
class DirLock {
public:
    DirLock(const std::string& dir, const std::string& flag);
    ~DirLock();
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    static constexpr const char* kFileName = ".lock";

private:
    int fd_ = -1;
};

// mkdir -p; an error names the path.
void make_dirs(const std::string& path);

/*
 * Data-parallel ranks other than 0 set this (llmc/train/dist.h): rank 0 prints the one error line for all of
 * them, and the others still exit with the status.
 */
inline bool& errors_quiet() {
    static bool quiet = false;
    return quiet;
}

// The exit status an error gets: 2 for a usage error, 1 for anything else.
inline int exit_code_for(const std::exception& e) { return dynamic_cast<const UsageError*>(&e) ? 2 : 1; }

// Program entry: runs fn, turning errors into one line on stderr and exit_code_for() the error. Running out of
// host memory names what to change, in the program's own flags (`oom_hint`; "" names nothing).
constexpr const char* kTrainOomHint = "try a smaller -b, -t or model";
template <typename Fn> int main_guard(Fn&& fn, const char* oom_hint = kTrainOomHint) {
    try {
        return fn();
    } catch (const UsageError& e) {
        if (!errors_quiet()) fprintf(stderr, "error: %s\n", e.what());
        return 2;
    } catch (const Error& e) {
        if (!errors_quiet()) fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        if (!errors_quiet()) fprintf(stderr, *oom_hint ? "error: out of memory (%s)\n" : "error: out of memory\n", oom_hint);
        return 1;
    } catch (const std::exception& e) {
        // Not one of ours (std::length_error, std::filesystem_error, ...): still one line and exit 1.
        if (!errors_quiet()) fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}

} // namespace llmc
