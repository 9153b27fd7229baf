// Counter-based random numbers: shaders/include/random.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_RANDOM_CUH
#define SPIRULA_RANDOM_CUH

#include "glsl.cuh"

namespace spirula {
#include "random.glsl"
}  // namespace spirula

#endif
