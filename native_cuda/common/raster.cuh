// Compositing rules (docs/design.md §2.4): shaders/include/raster.glsl, compiled for CUDA
// (dialect.glsl).
#ifndef SPIRULA_RASTER_CUH
#define SPIRULA_RASTER_CUH

#include "glsl.cuh"

namespace spirula {
#include "raster.glsl"
}  // namespace spirula

#endif
