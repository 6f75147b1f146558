// The data a report page embeds (scripts/report_html.py, compare_profiles.py): the JSON object of its
// <script type="application/json" id="report-data">, which the page's script draws (test_report.cpp,
// test_train_cpu.cpp).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "test/test_util.h"

namespace testutil {

// The page's data; null where the page has none (or there is no page).
inline nlohmann::json page_data(const std::string& page) {
    const std::string html = slurp(page), open = "<script type=\"application/json\" id=\"report-data\">";
    size_t start = html.find(open);
    if (start == std::string::npos) return nullptr;
    start += open.size();
    std::string text = html.substr(start, html.find("</script>", start) - start);
    for (size_t at; (at = text.find("<\\/")) != std::string::npos;) text.replace(at, 3, "</");
    return nlohmann::json::parse(text);
}

} // namespace testutil
