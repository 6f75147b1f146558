/*
 * report.html, the profile directory's one page to look at (doc/profiling.md, "report.html"): written by
 * scripts/report_html.py from the directory's files once the writers have written them. The page logic is the
 * script's; this runs it. The script is found beside the program (its directory's scripts/report_html.py) or in
 * the working directory, and runs under the python3 of the .venv that scripts/deps.sh makes where the system
 * python3 takes no pip installs (beside the program or in the working directory), else the python3 on PATH. The
 * profile is complete without the page: when python3, plotly or the script is missing, or the script fails, the
 * page is not written and the reason and the command that writes it later are returned, for one line of the run's
 * output.
 */
#pragma once
#include <string>

namespace llmc::prof {

struct ReportPage {
    bool written = false;
    std::string why_not; // when not written: the reason, one line
    std::string command; // the command that writes (or rewrites) the page: PYTHON SCRIPT DIR
};

// Runs scripts/report_html.py on the profile directory `dir` (its output: dir/report.html).
ReportPage write_report_page(const std::string& dir);

// The one line a run prints when the page was not written: the reason and the command that writes it.
std::string report_not_written_line(const ReportPage& page);

} // namespace llmc::prof
