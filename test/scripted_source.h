// A profile event source without a device or timers, for tests of the profile session and of the programs that
// drive one (test_session.cpp, test/gpu/test_gpu_backends.cu).
#pragma once
#include <memory>
#include <string>

#include "llmc/profiler/session.h"

namespace testutil {

// Logs what the session asks of it; each recorded step is one 1 ms kernel inside a 2 ms step.
class ScriptedSource : public llmc::prof::EventSource {
public:
    ScriptedSource(std::string* log, bool slow, bool can_start = true) : log_(log), slow_(slow), can_start_(can_start) {}
    bool start() override {
        *log_ += can_start_ ? "start " : "refused ";
        return can_start_;
    }
    bool slow_start() const override { return slow_; }
    void begin_step(int index) override {
        *log_ += "begin" + std::to_string(index) + " ";
        uint64_t t = (uint64_t)index * 2000000;
        rec_.steps.push_back({index, t, t + 2000000, 0});
        llmc::prof::KernelRecord k;
        k.name = "void llmc::work_kernel(float*)", k.start_ns = t, k.end_ns = t + 1000000;
        rec_.kernels.push_back(k);
    }
    void end_step(long tokens) override { rec_.steps.back().tokens = tokens; }
    bool flush() override {
        *log_ += "flush ";
        return true;
    }
    void stop() override { *log_ += "stop "; }
    llmc::prof::ProfileRecords take() override { return std::move(rec_); }
    void complete_context(llmc::prof::ProfileContext& ctx) override { ctx.device = "scripted"; }

private:
    std::string* log_;
    bool slow_, can_start_;
    llmc::prof::ProfileRecords rec_;
};

} // namespace testutil
