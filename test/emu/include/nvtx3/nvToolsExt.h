// Emulated NVTX: the subset llmc/nvtx.h uses, with NVTX's names and types, doing nothing (the emulated tier has no
// profiler to report ranges to; llmc::Range's own bookkeeping, which the tests check, is independent of NVTX).
// With it the emulated tier needs no CUDA toolkit.
#pragma once
#include <cstddef>
#include <cstdint>

struct nvtxDomainRegistration_st;
typedef struct nvtxDomainRegistration_st* nvtxDomainHandle_t;

#define NVTX_VERSION 3
enum nvtxMessageType_t { NVTX_MESSAGE_UNKNOWN = 0, NVTX_MESSAGE_TYPE_ASCII = 1 };
union nvtxMessageValue_t {
    const char* ascii;
    const wchar_t* unicode;
};
struct nvtxEventAttributes_t {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    uint64_t payload;
    int32_t messageType;
    nvtxMessageValue_t message;
};
#define NVTX_EVENT_ATTRIB_STRUCT_SIZE ((uint16_t)(sizeof(nvtxEventAttributes_t)))

inline nvtxDomainHandle_t nvtxDomainCreateA(const char*) { return nullptr; }
inline int nvtxDomainRangePushEx(nvtxDomainHandle_t, const nvtxEventAttributes_t*) { return 0; }
inline int nvtxDomainRangePop(nvtxDomainHandle_t) { return 0; }
