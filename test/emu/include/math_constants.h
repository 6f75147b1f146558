// The constants of the toolkit's math_constants.h that the kernels use.
#pragma once
#include <cmath>

#define CUDART_INF_F INFINITY
#define CUDART_NAN_F NAN
#define CUDART_INF ((double)INFINITY)
