// SSIM window and constants: shaders/include/ssim.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_SSIM_CUH
#define SPIRULA_SSIM_CUH

#include "glsl.cuh"

namespace spirula {
#include "ssim.glsl"
}  // namespace spirula

#endif
