// Model files (llmc/io/checkpoint.h load_model): header, shape validation, size check, fp32 and bf16 payloads. An
// accepted file's tensors must all lie inside its parameter buffer.
#include "llmc/io/checkpoint.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz::write_input("model.bin", data, size);
    fuzz::expect_only_llmc_errors([&] {
        llmc::ModelFile m = llmc::load_model(path);
        fuzz::check(m.params.size() == llmc::num_parameters(m.config), "parameter count differs from the shape's");
        llmc::ParameterTensors<float> t;
        t.point_into(m.params.data(), m.config);
        auto sizes = llmc::parameter_sizes(m.config);
        const float* end = m.params.data() + m.params.size();
        for (int i = 0; i < llmc::NUM_PARAMETER_TENSORS; i++)
            fuzz::check(t.tensor(i) >= m.params.data() && t.tensor(i) + sizes[i] <= end, "tensor outside the buffer");
    });
    return 0;
}
