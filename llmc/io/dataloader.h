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
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/io/formats.h"
#include "llmc/util/utils.h"

namespace llmc {

bool is_directory(const std::string& p);                        // false for anything else, or nothing there
std::vector<std::string> glob_files(const std::string& pattern); // the matches, sorted; none: empty

/*
 * Expands a data spec to a sorted list of shard files. `split` ("train" or "val") selects shards inside a
 * directory. An empty result throws, with a hint when the spec looks like the unprepared quick-start path.
 */
std::vector<std::string> resolve_shards(const std::string& spec, const std::string& split);

// Checks a shard's header against its size; returns its token count.
size_t validate_shard_header(const std::string& path);

// Where a loader stands: enough to resume on the same batch.
struct DataPosition {
    int64_t shard = 0;
    int64_t offset = 0; // token index of the next batch's first token within the shard
};

class DataLoader {
public:
    // `overfit`: every batch is the first B*T+1 tokens of the first shard (-a 1).
    DataLoader(const std::string& spec, const std::string& split, int B, int T, int vocab_size, bool overfit = false,
               int rank = 0, int world = 1);

    int B() const { return B_; }
    int T() const { return T_; }
    const std::vector<std::string>& files() const { return files_; }
    size_t total_tokens() const { return total_tokens_; }
    // Batches in one pass over all shards (what -x defaults to: one epoch).
    size_t batches_per_epoch() const;
    DataPosition position() const { return pos_; }

    // Continues from `p` (a position() of a loader over the same shards and shape); Error if it lies outside them.
    void restore(const DataPosition& p);
    // Fills inputs()/targets() with this rank's next (B, T) batch, passing over the other ranks' ones.
    void next_batch();
    const int* inputs() const { return inputs_.data(); }
    const int* targets() const { return targets_.data(); }

private:
    void load_shard(int64_t idx); // reads and checks every token id of shard idx, unless it is loaded

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
