// report.html through scripts/report_html.py (llmc/profiler/report_page.h).
#include "llmc/profiler/report_page.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "llmc/util/utils.h"

extern char** environ;

namespace llmc::prof {

namespace {

const char* kScript = "scripts/report_html.py";

// The directory of the running program ("" when /proc does not say).
std::string program_dir() {
    char buf[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return "";
    std::string exe(buf, (size_t)n);
    return exe.substr(0, exe.find_last_of('/'));
}

// The script beside the program, else in the working directory; "" when neither has it.
std::string find_script() {
    const std::string exe_dir = program_dir();
    char cwd[PATH_MAX];
    const bool here = getcwd(cwd, sizeof(cwd)) && exe_dir == cwd; // then the relative path names it
    if (!here && !exe_dir.empty() && file_exists(exe_dir + "/" + kScript)) return exe_dir + "/" + kScript;
    return file_exists(kScript) ? kScript : "";
}

// The python3 to run the script with: the virtual environment scripts/deps.sh makes where the system python3 takes
// no pip installs (.venv beside the program, or in the working directory), else the python3 on PATH.
std::string find_python() {
    const std::string exe_dir = program_dir();
    for (const std::string& venv : {exe_dir + "/.venv/bin/python3", std::string(".venv/bin/python3")})
        if (!exe_dir.empty() && access(venv.c_str(), X_OK) == 0) return venv;
    return "python3";
}

// `s` as one shell word: as it is when it needs no quoting, else in single quotes.
std::string shell_word(const std::string& s) {
    if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@+,%") ==
                          std::string::npos)
        return s;
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// The last non-empty line of `text`, trimmed.
std::string last_line(const std::string& text) {
    size_t end = text.find_last_not_of(" \t\r\n");
    if (end == std::string::npos) return "";
    size_t start = text.find_last_of('\n', end);
    start = start == std::string::npos ? 0 : start + 1;
    return text.substr(start, end - start + 1);
}

// Runs PYTHON SCRIPT DIR with its output to /dev/null and its errors collected; the exit status (-1: not run,
// 127: no python3), and what it printed on stderr.
int run_script(const std::string& python, const std::string& script, const std::string& dir, std::string& errors) {
    int fds[2];
    if (pipe(fds) != 0) return errors = strerror(errno), -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    std::vector<std::string> args = {python, script, dir};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    pid_t pid;
    int rc = posix_spawnp(&pid, python.c_str(), &fa, nullptr, argv.data(), environ); // a path with '/' is not searched
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errors = rc == ENOENT ? "python3 not found on PATH" : strerror(rc);
        return rc == ENOENT ? 127 : -1;
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
        if (n > 0) errors.append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

ReportPage write_report_page(const std::string& dir) {
    ReportPage page;
    const std::string script = find_script(), python = find_python();
    page.command = shell_word(python) + " " + shell_word(script.empty() ? kScript : script) + " " + shell_word(dir);
    if (script.empty()) {
        page.why_not = std::string(kScript) + " is neither beside the program nor in the working directory";
        return page;
    }
    std::string errors;
    const int rc = run_script(python, script, dir, errors);
    page.written = rc == 0 && file_exists(dir + "/report.html");
    if (!page.written) {
        std::string why = last_line(errors);
        const std::string prefix = "report_html.py: error: ";
        if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
        page.why_not = !why.empty() ? why
                       : rc == 0    ? "the script wrote no page"
                                    : strprintf("the script exited with %d", rc);
    }
    return page;
}

std::string report_not_written_line(const ReportPage& page) {
    return "profile: report.html not written (" + page.why_not + "); write it with: " + page.command;
}

} // namespace llmc::prof
