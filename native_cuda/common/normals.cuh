// Normal consistency maths (2DGS): shaders/include/normals.glsl, compiled for CUDA
// (dialect.glsl).
#ifndef SPIRULA_NORMALS_CUH
#define SPIRULA_NORMALS_CUH

#include "glsl.cuh"

namespace spirula {
#include "normals.glsl"
}  // namespace spirula

#endif
