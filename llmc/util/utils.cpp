// Errors, formatting, hashing and files (llmc/util/utils.h).
#include "llmc/util/utils.h"

#include <cstdarg>
#include <cerrno>
#include <cstring>
#include <sys/file.h>

namespace llmc {

std::string strprintf(const char* fmt, ...) {
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    const int n = vsnprintf(nullptr, 0, fmt, ap); // the length, so no message is ever cut
    va_end(ap);
    std::string out(n > 0 ? (size_t)n : 0, '\0');
    if (n > 0) vsnprintf(out.data(), (size_t)n + 1, fmt, again);
    va_end(again);
    return out;
}

uint64_t fnv1a_floats(const float* x, size_t n) {
    uint64_t h = kFnvOffset;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        h = (h ^ bits) * kFnvPrime;
    }
    return h;
}

void check_output_file(const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return; // a new name (a missing directory fails when it is written)
        throw Error(strprintf("%s: cannot write (%s)", path.c_str(), strerror(errno))); // ENOTDIR: under a file
    }
    if (S_ISREG(st.st_mode)) return;
    const char* what = S_ISLNK(st.st_mode)   ? "a symbolic link"
                       : S_ISDIR(st.st_mode) ? "a directory"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                                              : "not a regular file";
    throw Error(strprintf("%s: exists and is %s; an output must be a regular file or a new name", path.c_str(), what));
}

void check_output_dir(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            throw Error(strprintf("%s: cannot create directory (exists and is not a directory)", path.c_str()));
        if (access(path.c_str(), W_OK | X_OK) != 0)
            throw Error(strprintf("%s: cannot write into the directory (%s)", path.c_str(), strerror(errno)));
        return;
    }
    if (errno != ENOENT) throw Error(strprintf("%s: cannot create directory (%s)", path.c_str(), strerror(errno)));
    std::string parent = path;
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    const size_t slash = parent.find_last_of('/');
    parent = slash == std::string::npos ? "." : slash == 0 ? "/" : parent.substr(0, slash);
    try {
        check_output_dir(parent);
    } catch (const Error&) {
        throw Error(strprintf("%s: cannot create directory (%s is not a writable directory)", path.c_str(),
                              parent.c_str()));
    }
}

void make_dirs(const std::string& path) {
    int err = 0;
    for (size_t i = 1; i <= path.size() && !err; i++) {
        if (i < path.size() && path[i] != '/') continue;
        if (mkdir(path.substr(0, i).c_str(), 0777) != 0 && errno != EEXIST) err = errno;
    }
    struct stat st;
    if (err || stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw Error(strprintf("%s: cannot create directory (%s)", path.c_str(),
                              err ? strerror(err) : "exists and is not a directory"));
}

FILE* File::open_regular(const std::string& path, const char* mode) {
    int fd = ::open(path.c_str(), (strchr(mode, '+') ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return nullptr;
    struct stat st;
    if (fstat(fd, &st) != 0) st.st_mode = 0;
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(strprintf("%s: cannot open (%s)", path.c_str(),
                              S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file"));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE* f = fdopen(fd, mode);
    if (!f) ::close(fd);
    return f;
}

FILE* File::open_output(const std::string& path, const char* mode) {
    check_output_file(path);
    const int flags = O_WRONLY | O_CREAT | (mode[0] == 'a' ? O_APPEND : O_TRUNC) | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    int fd = ::open(path.c_str(), flags, 0666);
    if (fd < 0) return nullptr; // ELOOP: a link made since the check
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { // replaced by a FIFO or a device since the check
        ::close(fd);
        check_output_file(path);
        throw Error(strprintf("%s: cannot open (not a regular file)", path.c_str()));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE* f = fdopen(fd, mode);
    if (!f) ::close(fd);
    return f;
}

DirLock::DirLock(const std::string& dir, const std::string& flag) {
    const std::string path = dir + "/" + kFileName;
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd_ < 0 || fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        const int err = errno;
        if (fd_ >= 0) ::close(fd_);
        throw Error(strprintf("%s %s: cannot lock the directory (%s: %s)", flag.c_str(), dir.c_str(), path.c_str(),
                              fd_ >= 0 ? "not a regular file" : strerror(err)));
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = {};
        const ssize_t n = pread(fd_, pid, sizeof pid - 1, 0);
        ::close(fd_);
        std::string holder = n > 0 ? std::string(pid, (size_t)n) : "";
        while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
        throw Error(strprintf("%s %s: in use by another run (pid %s); wait for it to end or choose another %s",
                              flag.c_str(), dir.c_str(), holder.empty() ? "unknown" : holder.c_str(), flag.c_str()));
    }
    // The pid is only for the message of whoever comes second: the lock holds whether or not it is written.
    const std::string me = std::to_string(getpid()) + "\n";
    if (ftruncate(fd_, 0) == 0) (void)!pwrite(fd_, me.data(), me.size(), 0);
}

DirLock::~DirLock() {
    if (fd_ >= 0) ::close(fd_); // releases the lock
}

void AtomicFile::commit() {
    if (fflush(file_.get()) != 0 || fsync(fileno(file_.get())) != 0)
        throw Error(strprintf("%s: flush failed (%s)", tmp_.c_str(), strerror(errno)));
    file_.close();
    if (rename(tmp_.c_str(), path_.c_str()) != 0)
        throw Error(strprintf("%s: rename failed (%s)", path_.c_str(), strerror(errno)));
    committed_ = true;
    std::string dir = path_.substr(0, path_.find_last_of('/') == std::string::npos ? 0 : path_.find_last_of('/'));
    int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        ::close(fd);
    }
}

} // namespace llmc
