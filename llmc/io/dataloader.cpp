// Data shards and the loader over them (llmc/io/dataloader.h).
#include "llmc/io/dataloader.h"

#include <algorithm>
#include <glob.h>
#include <sys/stat.h>

namespace llmc {

bool is_directory(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> glob_files(const std::string& pattern) {
    std::vector<std::string> out;
    glob_t g;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) out.push_back(g.gl_pathv[i]);
    globfree(&g);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> resolve_shards(const std::string& spec, const std::string& split) {
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

size_t validate_shard_header(const std::string& path) {
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

DataLoader::DataLoader(const std::string& spec, const std::string& split, int B, int T, int vocab_size, bool overfit,
                       int rank, int world)
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

size_t DataLoader::batches_per_epoch() const {
    size_t n = 0;
    for (size_t t : shard_tokens_) n += (t - 1) / ((size_t)B_ * T_);
    return n;
}

void DataLoader::restore(const DataPosition& p) {
    if (p.shard < 0 || p.shard >= (int64_t)files_.size() || p.offset < 0 ||
        (size_t)p.offset + (size_t)B_ * T_ + 1 > shard_tokens_[p.shard])
        throw Error(strprintf("data position (shard %lld, token %lld) is outside %s",
                              (long long)p.shard, (long long)p.offset, files_[0].c_str()));
    load_shard(p.shard);
    pos_ = p;
}

void DataLoader::next_batch() {
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

void DataLoader::load_shard(int64_t idx) {
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

} // namespace llmc
