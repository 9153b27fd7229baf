// Appearance correction maths (PPISP, bilateral grid): shaders/include/appearance.glsl,
// compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_APPEARANCE_CUH
#define SPIRULA_APPEARANCE_CUH

#include "glsl.cuh"

namespace spirula {
#include "appearance.glsl"
}  // namespace spirula

#endif
