// EWA projection, forward and backward: shaders/include/projection.glsl (with
// its SPIRULA_PROJECTION_VJP half), compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_PROJECTION_CUH
#define SPIRULA_PROJECTION_CUH

#include "glsl.cuh"

namespace spirula {
#define SPIRULA_PROJECTION_VJP
#include "sh.glsl"
#include "projection.glsl"
}  // namespace spirula

#endif
