/*
 * Data loader over llm.c token shards.
 *
 * A data spec (-i / -j) is a directory (its shards whose names contain "train" / "val", sorted), a glob, or
 * one file. Every shard's header is checked when the loader opens (magic, version, token count against the
 * file size), and every token id when its shard is loaded (< vocab size), so bad data fails at start with
 * the file named rather than as garbage mid-run.
 *
 * Batches follow llm.c: B*T+1 consecutive tokens give inputs [0, B*T) and targets [1, B*T]; the position
 * then advances by B*T; a shard with too few tokens left moves on to the next one, wrapping after the last.
 * One shard is resident at a time. position()/restore() make resume exact.
 *
 * Data-parallel rank `rank` of `world` (llmc/train/dist.h) takes the rank-th of every `world` consecutive
 * batches of that sequence, so the ranks together read the batches one process would, in the same shards at
 * rank-specific positions. The position is the sequence's, past the last batch any rank has taken: the same on
 * every rank after each step.
 */
#pragma once
#include <algorithm>
#include <glob.h>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "llmc/formats.h"
#include "llmc/utils.h"

namespace llmc {

inline bool is_directory(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

inline std::vector<std::string> glob_files(const std::string& pattern) {
    std::vector<std::string> out;
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) out.push_back(g.gl_pathv[i]);
    globfree(&g);
    std::sort(out.begin(), out.end());
    return out;
}

/*
 * Expands a data spec to a sorted list of shard files. `split` ("train" or "val") selects shards inside a
 * directory. An empty result throws, with a hint when the spec looks like the unprepared quick-start path.
 */
inline std::vector<std::string> resolve_shards(const std::string& spec, const std::string& split) {
    std::vector<std::string> files;
    if (is_directory(spec)) {
        files = glob_files(spec + "/*" + split + "*.bin");
        if (files.empty())
            throw Error(strprintf("%s: no *%s*.bin shards in this directory", spec.c_str(), split.c_str()));
    } else if (spec.find_first_of("*?[") != std::string::npos) {
        files = glob_files(spec);
        if (files.empty()) throw Error(strprintf("%s: no files match this pattern", spec.c_str()));
    } else if (file_exists(spec)) {
        files.push_back(spec);
    } else if (spec.find("tinyshakespeare") != std::string::npos) {
        throw Error(strprintf("%s: not found; prepare it with `make tinyshakespeare` "
                              "(TINYSHAKESPEARE=/path/to/input.txt make tinyshakespeare to use a local copy)",
                              spec.c_str()));
    } else {
        throw Error(strprintf("%s: no such file or directory", spec.c_str()));
    }
    return files;
}

// Checks a shard's header against its size; returns its token count.
inline size_t validate_shard_header(const std::string& path) {
    File f(path, "rb");
    Header h = read_header(f, SHARD_MAGIC, "data shard");
    if (h[1] != SHARD_VERSION)
        throw Error(strprintf("%s: unsupported data shard version %d (expected %d)", path.c_str(), h[1], SHARD_VERSION));
    if (h[2] < 0) throw Error(strprintf("%s: negative token count %d in header", path.c_str(), h[2]));
    size_t ntok = (size_t)h[2], expected = HEADER_BYTES + ntok * sizeof(uint16_t);
    if (f.size() < expected)
        throw Error(strprintf("%s: truncated data shard (header says %zu tokens = %zu bytes, file has %zu)",
                              path.c_str(), ntok, expected, f.size()));
    if (f.size() > expected)
        throw Error(strprintf("%s: data shard has %zu bytes after its %zu tokens (corrupt header?)", path.c_str(),
                              f.size() - expected, ntok));
    return ntok;
}

// Where a loader stands: enough to resume on the same batch.
struct DataPosition {
    int64_t shard = 0;
    int64_t offset = 0; // token index of the next batch's first token within the shard
};

class DataLoader {
public:
    // `overfit`: every batch is the first B*T+1 tokens of the first shard (-a 1).
    DataLoader(const std::string& spec, const std::string& split, int B, int T, int vocab_size, bool overfit = false,
               int rank = 0, int world = 1)
        : B_(B), T_(T), vocab_size_(vocab_size), rank_(rank), world_(world), overfit_(overfit),
          files_(resolve_shards(spec, split)) {
        size_t need = (size_t)B * T + 1;
        for (const auto& f : files_) {
            size_t n = validate_shard_header(f);
            if (n < need)
                throw Error(strprintf("%s: %zu tokens, fewer than one batch needs (B*T+1 = %zu); lower -b or -t",
                                      f.c_str(), n, need));
            shard_tokens_.push_back(n);
            total_tokens_ += n;
        }
        inputs_.resize((size_t)B * T);
        targets_.resize((size_t)B * T);
        restore(DataPosition{});
    }

    const std::vector<std::string>& files() const { return files_; }
    size_t total_tokens() const { return total_tokens_; }
    // Batches in one pass over all shards (what -x defaults to: one epoch).
    size_t batches_per_epoch() const {
        size_t n = 0;
        for (size_t t : shard_tokens_) n += (t - 1) / ((size_t)B_ * T_);
        return n;
    }
    DataPosition position() const { return pos_; }

    void restore(const DataPosition& p) {
        if (p.shard < 0 || p.shard >= (int64_t)files_.size() || p.offset < 0 ||
            (size_t)p.offset + (size_t)B_ * T_ + 1 > shard_tokens_[p.shard])
            throw Error(strprintf("data position (shard %lld, token %lld) is outside %s",
                                  (long long)p.shard, (long long)p.offset, files_[0].c_str()));
        load_shard(p.shard);
        pos_ = p;
    }

    // Fills inputs()/targets() with this rank's next (B, T) batch, passing over the other ranks' ones.
    void next_batch() {
        size_t bt = (size_t)B_ * T_;
        for (int r = 0; r < world_; r++) {
            if (overfit_) pos_ = DataPosition{};
            if ((size_t)pos_.offset + bt + 1 > shard_tokens_[pos_.shard]) {
                pos_.shard = (pos_.shard + 1) % (int64_t)files_.size();
                pos_.offset = 0;
            }
            if (r == rank_) {
                load_shard(pos_.shard);
                const uint16_t* src = tokens_.data() + pos_.offset;
                for (size_t i = 0; i < bt; i++) {
                    inputs_[i] = src[i];
                    targets_[i] = src[i + 1];
                }
            }
            pos_.offset += (int64_t)bt;
        }
    }
    const int* inputs() const { return inputs_.data(); }
    const int* targets() const { return targets_.data(); }

private:
    void load_shard(int64_t idx) {
        if (idx == loaded_) return;
        const std::string& path = files_[idx];
        File f(path, "rb");
        f.seek(HEADER_BYTES);
        tokens_.resize(shard_tokens_[idx]);
        f.read(tokens_.data(), tokens_.size() * sizeof(uint16_t), "tokens");
        for (size_t i = 0; i < tokens_.size(); i++)
            if (tokens_[i] >= vocab_size_)
                throw Error(strprintf("%s: token %zu has id %u, out of range for vocabulary size %d", path.c_str(), i,
                                      tokens_[i], vocab_size_));
        loaded_ = idx;
    }

    int B_, T_, vocab_size_, rank_, world_;
    bool overfit_;
    std::vector<std::string> files_;
    std::vector<size_t> shard_tokens_;
    size_t total_tokens_ = 0;
    std::vector<uint16_t> tokens_;
    int64_t loaded_ = -1;
    DataPosition pos_;
    std::vector<int> inputs_, targets_;
};

} // namespace llmc
