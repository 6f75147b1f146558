// The attention kernels alone, for the machine-code check (make sass_check, scripts/check_sass.py): nvcc compiles
// this with -Xptxas -v and the script reads the object's SASS and the ptxas report.
#include "llmc/attention.cuh"

namespace llmc {
namespace attention_detail {
template __global__ void attention_forward_kernel<64>(floatX*, float*, const floatX*, int, int);
template __global__ void attention_backward_dkdv_kernel<64>(floatX*, const floatX*, const float*, const float*,
                                                            const floatX*, int, int);
template __global__ void attention_backward_dq_kernel<64>(floatX*, const floatX*, const float*, const float*,
                                                          const floatX*, int, int);
} // namespace attention_detail
} // namespace llmc
