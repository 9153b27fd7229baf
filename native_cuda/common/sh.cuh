// Real spherical harmonics: shaders/include/sh.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_SH_CUH
#define SPIRULA_SH_CUH

#include "glsl.cuh"

namespace spirula {
#include "sh.glsl"
}  // namespace spirula

#endif
