/*
 * llm.c file formats: every file starts with a header of 256 little-endian int32, then its payload.
 * See doc/formats.md for the field-by-field layout.
 */
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/util/utils.h"

namespace llmc {

constexpr int HEADER_INTS = 256;
constexpr size_t HEADER_BYTES = HEADER_INTS * sizeof(int32_t);
using Header = std::array<int32_t, HEADER_INTS>;

constexpr int32_t SHARD_MAGIC = 20240520, SHARD_VERSION = 1;
constexpr int32_t MODEL_MAGIC = 20240326, MODEL_VERSION_FP32 = 3, MODEL_VERSION_BF16 = 5;
constexpr int32_t TOKENIZER_MAGIC = 20240328, TOKENIZER_VERSION = 2;
constexpr int32_t STATE_MAGIC = 20240527, STATE_VERSION = 1;

constexpr int GPT2_VOCAB_SIZE = 50257;
constexpr int GPT2_EOT = 50256;

// Reads the header and checks its magic; `what` names the kind of file in the error ("data shard").
inline Header read_header(File& f, int32_t magic, const char* what) {
    Header h{};
    if (f.size() < HEADER_BYTES)
        throw Error(strprintf("%s: truncated %s (%zu bytes, smaller than the %zu-byte header)", f.path().c_str(), what,
                              f.size(), HEADER_BYTES));
    f.read(h.data(), HEADER_BYTES, "header");
    if (h[0] != magic)
        throw Error(strprintf("%s: bad magic number %d (expected %d for a %s)", f.path().c_str(), h[0], magic, what));
    return h;
}

inline Header make_header(int32_t magic, int32_t version) {
    Header h{};
    h[0] = magic;
    h[1] = version;
    return h;
}

// A data shard: header (magic, version, token count) then uint16 tokens. Written atomically.
inline void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
    if (tokens.size() > INT32_MAX) throw Error(strprintf("%s: too many tokens for one shard", path.c_str()));
    Header h = make_header(SHARD_MAGIC, SHARD_VERSION);
    h[2] = (int32_t)tokens.size();
    AtomicFile f(path);
    f.write(h.data(), HEADER_BYTES);
    f.write(tokens.data(), tokens.size() * sizeof(uint16_t));
    f.commit();
}

} // namespace llmc
