// Model files, training-state files and the checkpoint directory (llmc/io/checkpoint.h).
#include "llmc/io/checkpoint.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <dirent.h>

#include "llmc/model/gpt2_init.h"

namespace llmc {

ModelFile load_model(const std::string& path, bool with_params) {
    File f(path, "rb");
    Header h = read_header(f, MODEL_MAGIC, "model file");
    ModelFile m;
    m.version = h[1];
    if (m.version != MODEL_VERSION_FP32 && m.version != MODEL_VERSION_BF16)
        throw Error(strprintf("%s: unsupported model file version %d (expected %d for fp32 or %d for bf16)",
                              path.c_str(), h[1], MODEL_VERSION_FP32, MODEL_VERSION_BF16));
    GPT2Config& c = m.config;
    c.max_seq_len = h[2];
    c.vocab_size = h[3];
    c.num_layers = h[4];
    c.num_heads = h[5];
    c.channels = h[6];
    c.padded_vocab_size = h[7];
    validate_config(c, path); // after this, sizes computed from the shape cannot overflow
    size_t n = num_parameters(c), elem = m.version == MODEL_VERSION_FP32 ? 4 : 2;
    size_t expected = HEADER_BYTES + n * elem;
    if (f.size() != expected)
        throw Error(strprintf("%s: %s model file (header says %zu parameters = %zu bytes, file has %zu)", path.c_str(),
                              f.size() < expected ? "truncated" : "oversized", n, expected, f.size()));
    if (!with_params) return m;
    m.params.resize(n);
    if (m.version == MODEL_VERSION_FP32) {
        f.read(m.params.data(), n * 4, "parameters");
    } else {
        std::vector<uint16_t> raw(n);
        f.read(raw.data(), n * 2, "parameters");
        for (size_t i = 0; i < n; i++) m.params[i] = bf16_to_float(raw[i]);
    }
    return m;
}

ModelSource load_model_source(const std::string& spec, unsigned long long seed, bool weights,
                                     int layers) {
    ModelSource src;
    int depth;
    if (parse_depth_descriptor(spec, &depth)) {
        src.random = true;
        src.cfg = gpt2_config_for_depth(depth);
        if (layers > 0) src.cfg.num_layers = layers;
        validate_config(src.cfg, "-e " + spec); // before num_parameters(): d99999 would overflow it
        if (weights) {
            src.params.resize(num_parameters(src.cfg));
            init_gpt2_parameters(src.params.data(), src.cfg, seed);
        }
        return src;
    }
    if (layers > 0) throw UsageError("--layers: only for a dN model (-e)");
    if (!file_exists(spec))
        throw UsageError(strprintf("-e: '%s' is neither dN (e.g. d12) nor an existing model file", spec.c_str()));
    ModelFile mf = load_model(spec, weights);
    src.cfg = mf.config;
    src.params = std::move(mf.params);
    return src;
}

void save_model(const std::string& path, const GPT2Config& c, const float* params,
                       int version) {
    Header h = make_header(MODEL_MAGIC, version);
    h[2] = c.max_seq_len;
    h[3] = c.vocab_size;
    h[4] = c.num_layers;
    h[5] = c.num_heads;
    h[6] = c.channels;
    h[7] = c.padded_vocab_size;
    size_t n = num_parameters(c);
    AtomicFile f(path);
    f.write(h.data(), HEADER_BYTES);
    if (version == MODEL_VERSION_FP32) {
        f.write(params, n * 4);
    } else {
        std::vector<uint16_t> raw(n);
        for (size_t i = 0; i < n; i++) raw[i] = float_to_bf16(params[i]);
        f.write(raw.data(), n * 2);
    }
    f.commit();
}

void save_state(const std::string& path, const TrainState& s) {
    Header h = make_header(STATE_MAGIC, STATE_VERSION);
    size_t n = s.m.size();
    header_set64(h, ST_STEP, (uint64_t)s.step);
    header_set64(h, ST_RNG, s.rng_state);
    header_set64(h, ST_SHARD, (uint64_t)s.data.shard);
    header_set64(h, ST_OFFSET, (uint64_t)s.data.offset);
    header_set64(h, ST_NPARAMS, n);
    h[ST_HAS_MASTER] = s.master.empty() ? 0 : 1;
    h[ST_B] = s.B;
    h[ST_T] = s.T;
    h[ST_WORLD] = s.world;
    AtomicFile f(path);
    f.write(h.data(), HEADER_BYTES);
    f.write(s.m.data(), n * 4);
    f.write(s.v.data(), n * 4);
    if (!s.master.empty()) f.write(s.master.data(), n * 4);
    f.commit();
}

TrainState load_state(const std::string& path, size_t expected_params, int64_t expected_step) {
    File f(path, "rb");
    Header h = read_header(f, STATE_MAGIC, "training state file");
    if (h[1] != STATE_VERSION)
        throw Error(strprintf("%s: unsupported training state version %d (expected %d)", path.c_str(), h[1],
                              STATE_VERSION));
    size_t n = header_get64(h, ST_NPARAMS);
    if (n != expected_params)
        throw Error(strprintf("%s: state is for %zu parameters, the model has %zu", path.c_str(), n, expected_params));
    int64_t step = (int64_t)header_get64(h, ST_STEP);
    if (step != expected_step)
        throw Error(strprintf("%s: state is for step %lld, its file name says step %lld", path.c_str(),
                              (long long)step, (long long)expected_step));
    bool has_master = h[ST_HAS_MASTER] != 0;
    size_t expected = checked_add(HEADER_BYTES, checked_mul(n, 4 * (has_master ? 3 : 2), path.c_str()), path.c_str());
    if (f.size() != expected)
        throw Error(strprintf("%s: %s training state file (expected %zu bytes, file has %zu)", path.c_str(),
                              f.size() < expected ? "truncated" : "oversized", expected, f.size()));
    TrainState s;
    s.step = step;
    s.rng_state = header_get64(h, ST_RNG);
    s.data.shard = (int64_t)header_get64(h, ST_SHARD);
    s.data.offset = (int64_t)header_get64(h, ST_OFFSET);
    s.B = h[ST_B];
    s.T = h[ST_T];
    s.world = h[ST_WORLD] == 0 ? 1 : h[ST_WORLD]; // 0: written before data parallelism, by one process
    if (s.world < 0) throw Error(strprintf("%s: negative rank count %d in header", path.c_str(), s.world));
    s.m.resize(n);
    s.v.resize(n);
    f.read(s.m.data(), n * 4, "first moments");
    f.read(s.v.data(), n * 4, "second moments");
    if (has_master) {
        s.master.resize(n);
        f.read(s.master.data(), n * 4, "master weights");
    }
    return s;
}

std::string checkpoint_model_path(const std::string& dir, int64_t step) {
    return dir + strprintf("/model_%08lld.bin", (long long)step);
}

std::string checkpoint_choices_path(const std::string& dir, int64_t step, int rank) {
    return dir + strprintf("/choices_%08lld_rank%d.txt", (long long)step, rank);
}

std::string checkpoint_state_path(const std::string& dir, int64_t step) {
    return dir + strprintf("/state_%08lld.bin", (long long)step);
}

int64_t checkpoint_step_of(const std::string& name, const std::string& prefix) {
    const size_t digits = name.size() - std::min(name.size(), prefix.size() + 4);
    if (digits < 8 || digits > 18 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".bin") != 0)
        return -1;
    int64_t step = 0;
    for (size_t i = prefix.size(); i < prefix.size() + digits; i++) {
        if (name[i] < '0' || name[i] > '9') return -1;
        step = step * 10 + (name[i] - '0');
    }
    // Longer than 8 digits only when the 8-digit form cannot hold the step: one spelling per step.
    if (step < 1 || (digits > 8 && name[prefix.size()] == '0')) return -1;
    return step;
}

int64_t find_latest_checkpoint(const std::string& dir) {
    int64_t best = -1;
    DIR* d = opendir(dir.c_str());
    if (!d) return -1;
    while (dirent* e = readdir(d)) {
        int64_t step = checkpoint_step_of(e->d_name, "state_");
        if (step > best && file_exists(checkpoint_model_path(dir, step))) best = step;
    }
    closedir(d);
    return best;
}

namespace {

// The names in `dir` for which keep(name) holds, sorted.
template <typename Keep> std::vector<std::string> names_in(const std::string& dir, Keep keep) {
    std::vector<std::string> out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d))
        if (keep(std::string(e->d_name))) out.push_back(e->d_name);
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

bool is_checkpoint_file(const std::string& name) {
    return checkpoint_step_of(name, "model_") > 0 || checkpoint_step_of(name, "state_") > 0;
}

} // namespace

std::vector<std::string> checkpoint_files(const std::string& dir) { return names_in(dir, is_checkpoint_file); }

int remove_stale_temporaries(const std::string& dir) {
    auto stale = [](const std::string& name) {
        if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) return false;
        const std::string base = name.substr(0, name.size() - 4);
        if (base == "main.log" || is_checkpoint_file(base)) return true;
        int64_t step;
        int rank, used = 0;
        return sscanf(base.c_str(), "choices_%" SCNd64 "_rank%d.txt%n", &step, &rank, &used) == 2 &&
               used == (int)base.size();
    };
    int removed = 0;
    for (const std::string& name : names_in(dir, stale)) removed += unlink((dir + "/" + name).c_str()) == 0;
    return removed;
}

} // namespace llmc
