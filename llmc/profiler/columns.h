/*
 * The writers' column tables (llmc/profiler/writers.cpp): each table of the profile is described once, as a list
 * of columns, and its CSV file, its rows in profile.json and its table in summary.txt are all written from that
 * description. A column says how to get its value from a row and, for each output, under which name it appears
 * there (none: not in that output), in which unit (the value times `mul` over `div`) and with which printf
 * format. Unknown values (NaN) are an empty CSV cell, a JSON null and "-" in summary.txt. Included by
 * writers.cpp alone: the JSON library stays out of the programs' translation units.
 */
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "llmc/util/utils.h"

namespace llmc::prof {

// A cell before formatting: a number, a count, text, a flag, or (JSON only) a whole object.
using Value = std::variant<double, long long, std::string, bool, nlohmann::json>;

// Rates and ratios in a CSV (TFLOP/s, GB/s, FLOP/B, percentages, ceilings): six significant digits, since a CPU's
// rates are thousandths of a TFLOP/s and fixed decimals would round them away.
inline constexpr const char* RATE = "%.6g";

// TFLOP/s in summary.txt: one decimal, or three significant digits below 1 (a CPU's rates would all read 0.0).
inline constexpr const char* TFLOPS = "TFLOP/s";

// How one output shows a column. name: the CSV header, the JSON key ("a/b": key b of the object a) or the
// summary.txt heading; empty: the column is not in that output. A number is shown as value * mul / div with the
// printf format fmt (JSON: unformatted). align: 'l' or 'r' in summary.txt, 0: text left, numbers right; empty:
// what an empty text shows as there.
struct Shown {
    std::string name;
    const char* fmt = "%.3f";
    double mul = 1, div = 1;
    char align = 0;
    const char* empty = "";
};

template <class Row>
struct Column {
    std::function<Value(const Row&)> get;
    Shown csv, json, text;
    int text_at = 0; // the column's place in summary.txt's table, where that order is not the CSV's
};
template <class Row>
using Columns = std::vector<Column<Row>>;

namespace columns {

// printf-style number; NaN becomes `none`.
inline std::string number(double v, const char* fmt, const char* none) {
    if (!std::isfinite(v)) return none;
    char buf[64];
    snprintf(buf, sizeof(buf), fmt, v);
    return buf;
}

inline std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

inline std::string csv_line(const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); i++) line += (i ? "," : "") + csv_field(cells[i]);
    return line + "\n";
}

// A cell as text: the CSV's (`none` "") or summary.txt's (`none` "-").
inline std::string cell(const Value& v, const Shown& how, const char* none) {
    if (const double* d = std::get_if<double>(&v)) {
        const double x = *d * how.mul / how.div;
        return number(x, how.fmt != TFLOPS ? how.fmt : std::fabs(x) >= 1 ? "%.1f" : "%.3g", none);
    }
    if (const long long* i = std::get_if<long long>(&v)) return std::to_string(*i);
    if (const std::string* s = std::get_if<std::string>(&v)) return s->empty() ? how.empty : *s;
    if (const bool* b = std::get_if<bool>(&v)) return *b ? "1" : "0";
    return none;
}

inline nlohmann::json json_value(const Value& v, const Shown& how) {
    if (const double* d = std::get_if<double>(&v)) return *d * how.mul / how.div; // NaN dumps as null
    if (const long long* i = std::get_if<long long>(&v)) return *i;
    if (const std::string* s = std::get_if<std::string>(&v)) return *s;
    if (const bool* b = std::get_if<bool>(&v)) return *b;
    return std::get<nlohmann::json>(v);
}

// A plain-text table: columns padded to their widest cell, left or right aligned.
class TextTable {
public:
    TextTable(std::vector<std::string> headers, std::string align) : align_(std::move(align)) {
        rows_.push_back(std::move(headers));
    }
    void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
    std::string str() const {
        std::vector<size_t> w(rows_[0].size(), 0);
        for (const auto& r : rows_)
            for (size_t i = 0; i < r.size(); i++) w[i] = std::max(w[i], r[i].size());
        std::string out;
        for (const auto& r : rows_) {
            std::string line = "  ";
            for (size_t i = 0; i < r.size(); i++) {
                std::string pad(w[i] - r[i].size(), ' ');
                line += align_[i] == 'l' ? r[i] + pad : pad + r[i];
                if (i + 1 < r.size()) line += "  ";
            }
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out += line + "\n";
        }
        return out;
    }

private:
    std::string align_;
    std::vector<std::vector<std::string>> rows_;
};

} // namespace columns

// The CSV file of a table: its header line, then a line per row.
template <class Row>
std::string csv_table(const Columns<Row>& cols, const std::vector<Row>& rows) {
    std::vector<std::string> header;
    for (const Column<Row>& c : cols)
        if (!c.csv.name.empty()) header.push_back(c.csv.name);
    std::string s = columns::csv_line(header);
    for (const Row& r : rows) {
        std::vector<std::string> cells;
        for (const Column<Row>& c : cols)
            if (!c.csv.name.empty()) cells.push_back(columns::cell(c.get(r), c.csv, ""));
        s += columns::csv_line(cells);
    }
    return s;
}

// One row as a JSON object.
template <class Row>
nlohmann::json json_object(const Columns<Row>& cols, const Row& r) {
    nlohmann::json j = nlohmann::json::object();
    for (const Column<Row>& c : cols) {
        const std::string& key = c.json.name;
        if (key.empty()) continue;
        const size_t slash = key.find('/');
        nlohmann::json& at = slash == std::string::npos ? j[key] : j[key.substr(0, slash)][key.substr(slash + 1)];
        at = columns::json_value(c.get(r), c.json);
    }
    return j;
}

template <class Row>
nlohmann::json json_array(const Columns<Row>& cols, const std::vector<Row>& rows) {
    nlohmann::json a = nlohmann::json::array();
    for (const Row& r : rows) a.push_back(json_object(cols, r));
    return a;
}

// summary.txt's table of the first max_rows rows, in the columns' text_at order.
template <class Row>
std::string text_table(const Columns<Row>& cols, const std::vector<Row>& rows, size_t max_rows = SIZE_MAX) {
    std::vector<const Column<Row>*> shown;
    for (const Column<Row>& c : cols)
        if (!c.text.name.empty()) shown.push_back(&c);
    std::stable_sort(shown.begin(), shown.end(), [](auto* a, auto* b) { return a->text_at < b->text_at; });
    std::vector<std::vector<std::string>> cells(std::min(rows.size(), max_rows));
    std::vector<std::string> headers;
    std::string align;
    for (const Column<Row>* c : shown) {
        headers.push_back(c->text.name);
        char a = c->text.align;
        for (size_t i = 0; i < cells.size(); i++) {
            const Value v = c->get(rows[i]);
            if (!a) a = std::holds_alternative<std::string>(v) ? 'l' : 'r';
            cells[i].push_back(columns::cell(v, c->text, "-"));
        }
        align += a ? a : 'r';
    }
    columns::TextTable t(headers, align);
    for (auto& row : cells) t.row(std::move(row));
    return t.str();
}

} // namespace llmc::prof
