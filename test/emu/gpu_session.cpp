// The emulated tier's GPU profile session (llmc/profiler/gpu_session.h). The emulated runtime has no CUPTI to
// trace with, so a GPU backend asked to profile under the emulator refuses with one line naming the flag.
#include "llmc/profiler/gpu_session.h"

#include "llmc/util/utils.h"

namespace llmc::prof {

std::unique_ptr<ProfileSession> make_gpu_profile_session(const SessionOptions& so, ProfileContext) {
    throw UsageError(so.flag + ": the emulated CUDA runtime has no CUPTI to trace with");
}

} // namespace llmc::prof
