// Adam: shaders/include/adam.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_ADAM_CUH
#define SPIRULA_ADAM_CUH

#include "glsl.cuh"

namespace spirula {
#include "adam.glsl"
}  // namespace spirula

#endif
