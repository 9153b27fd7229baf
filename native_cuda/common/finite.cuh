// Whether a splat is finite: shaders/include/finite.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_FINITE_CUH
#define SPIRULA_FINITE_CUH

#include "glsl.cuh"
#include "random.cuh"

namespace spirula {
#include "finite.glsl"
}  // namespace spirula

#endif
