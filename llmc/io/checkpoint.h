/*
 * Model files and training-state files (llm.c formats, doc/formats.md), and the checkpoint directory.
 *
 * A checkpoint at step N is model_%08d.bin + state_%08d.bin in the output directory. Both are written
 * atomically, model first: the latest checkpoint is the highest N for which both files exist, so a crash
 * between the two writes falls back to the previous complete one.
 */
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "llmc/io/dataloader.h"
#include "llmc/io/formats.h"
#include "llmc/model/gpt2_config.h"

namespace llmc {

// bf16 is the top half of an fp32; conversion rounds to nearest even (NaN stays NaN).
inline uint16_t float_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
inline float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct ModelFile {
    GPT2Config config;
    std::vector<float> params; // num_parameters(config) values in llm.c order
    int version = MODEL_VERSION_FP32;
};

// The model file at `path`, checked whole; `with_params` false reads its shape only (params stays empty).
ModelFile load_model(const std::string& path, bool with_params = true);

/*
 * The model a program's -e names, one way for every program: dN is GPT-2 of depth N (llmc/model/gpt2_config.h;
 * `layers` > 0 overrides its L) with weights drawn from `seed` (init_gpt2_parameters); anything else must be an
 * llm.c model file (fp32 or bf16), read as fp32. weights = false reads the shape alone (a file's header, no
 * parameters drawn): the checks a program makes before it allocates. Errors name -e.
 */
struct ModelSource {
    GPT2Config cfg;
    std::vector<float> params; // num_parameters(cfg) fp32 values in llm.c order; empty when weights = false
    bool random = false;       // dN: weights drawn from the seed
};

ModelSource load_model_source(const std::string& spec, unsigned long long seed, bool weights = true,
                                     int layers = 0);

void save_model(const std::string& path, const GPT2Config& c, const float* params,
                       int version = MODEL_VERSION_FP32);

/*
 * Everything besides the weights that a bit-exact resume needs. `master` holds fp32 master weights when the
 * model file is bf16 (the GPU trainer); empty when the model file itself is fp32.
 */
struct TrainState {
    int64_t step = 0;       // optimizer steps completed
    uint64_t rng_state = 0; // sampler RNG
    DataPosition data;      // train loader position for the next step
    int B = 0, T = 0;       // micro-batch shape the data position refers to
    int world = 1;          // data-parallel ranks that trained it (m and v are whole: every rank's shard)
    std::vector<float> m, v, master;
};

// Header fields of the state file; 64-bit values take two int32 slots (low word first).
enum StateField { ST_STEP = 2, ST_RNG = 4, ST_SHARD = 6, ST_OFFSET = 8, ST_NPARAMS = 10, ST_HAS_MASTER = 12, ST_B, ST_T, ST_WORLD };
inline void header_set64(Header& h, int i, uint64_t v) {
    h[i] = (int32_t)(uint32_t)v;
    h[i + 1] = (int32_t)(uint32_t)(v >> 32);
}
inline uint64_t header_get64(const Header& h, int i) { return (uint64_t)(uint32_t)h[i] | ((uint64_t)(uint32_t)h[i + 1] << 32); }

void save_state(const std::string& path, const TrainState& s);

// `expected_step`: the step the checkpoint's file names say it is at (find_latest_checkpoint); the state must
// agree, so a damaged or misplaced state file is refused before training writes anything from it.
TrainState load_state(const std::string& path, size_t expected_params, int64_t expected_step);

std::string checkpoint_model_path(const std::string& dir, int64_t step);
// What a rank's backend records beside the checkpoint for a bitwise resume (TrainBackend::save_run_choices).
std::string checkpoint_choices_path(const std::string& dir, int64_t step, int rank);
std::string checkpoint_state_path(const std::string& dir, int64_t step);

// The step N >= 1 of a checkpoint file name "<prefix>N.bin" as checkpoint_*_path write it (at least 8 digits),
// or -1 when `name` is not one.
int64_t checkpoint_step_of(const std::string& name, const std::string& prefix);

// Highest step with both files present in `dir`, or -1 when there is none.
int64_t find_latest_checkpoint(const std::string& dir);

// The checkpoint files in `dir` (model_N.bin and state_N.bin, complete or not), by name; empty when none.
std::vector<std::string> checkpoint_files(const std::string& dir);

/*
 * What a run killed while it wrote left in `dir`: the temporaries of its atomic writes (model_N.bin.tmp,
 * state_N.bin.tmp, choices_N_rankR.txt.tmp, main.log.tmp). Only a run that holds the directory's lock may call it.
 * Returns how many were removed.
 */
int remove_stale_temporaries(const std::string& dir);

} // namespace llmc
