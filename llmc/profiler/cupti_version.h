/*
 * CUPTI's API version at run time against the one a program was built for. Activity records are read as the
 * structs of the headers built against (CUpti_ActivityKernel10, ...), while CUPTI fills the newest struct of its
 * own API version: with a libcupti of another version the records would be misread without any error, so the
 * profiler refuses to start (llmc/profiler/cupti_collector.cuh) and the build line names both versions.
 * Plain C++, no CUPTI types: tested on the CPU.
 */
#pragma once
#include <cstdint>
#include <string>

#include "llmc/util/utils.h"

namespace llmc::prof {

// "" when the versions match, else the one line that refuses the run.
inline std::string cupti_version_mismatch(uint32_t runtime, uint32_t built) {
    if (runtime == built) return "";
    return strprintf("profiler: the CUPTI library loaded has API version %u, this program was built for %u (its "
                     "activity records would be misread); run it with the CUPTI of the CUDA toolkit it was built with",
                     runtime, built);
}

// The build line's part: "CUPTI API 130000", or with a mismatch "CUPTI API 130100 (built for 130000)".
inline std::string cupti_version_text(uint32_t runtime, uint32_t built) {
    return runtime == built ? strprintf("CUPTI API %u", runtime)
                            : strprintf("CUPTI API %u (built for %u)", runtime, built);
}

} // namespace llmc::prof
