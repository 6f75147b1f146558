/*
 * The cache of measured roofline ceilings, shared by the GPU calibration (llmc/profiler/calibrate.cuh) and the
 * CPU one (llmc/profiler/cpu_source.cpp): one small "key value" text file per measured configuration in
 * $XDG_CACHE_HOME/llmc or ~/.cache/llmc. An entry counts only when its identity lines (device, threads,
 * shapes, ...) all match what would be measured now; deleting the file measures again.
 */
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace llmc::prof::ceiling_cache {

using Lines = std::vector<std::pair<std::string, std::string>>;

// "" when neither $XDG_CACHE_HOME nor $HOME is set: then nothing is cached.
std::string dir();

// The file's "key value" lines ('#' starts a comment); empty when it is missing or unreadable.
std::map<std::string, std::string> read(const std::string& path);

/*
 * The measured value of `key` in `found`: a finite positive number written in full, else 0, which means "measure
 * again" (a missing or damaged entry: "inf", "1e309", "-3", "12abc" would otherwise give ceilings of no use).
 */
double measured(const std::map<std::string, std::string>& found, const std::string& key);

// Whether every identity line is in `found` with the same value.
bool matches(const std::map<std::string, std::string>& found, const Lines& identity);

// Writes `lines` under a comment line, atomically, creating the cache directory; throws llmc::Error.
void write(const std::string& path, const std::string& comment, const Lines& lines);

} // namespace llmc::prof::ceiling_cache
