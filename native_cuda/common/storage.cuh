// Compact storage: shaders/include/storage.glsl, compiled for CUDA (dialect.glsl).
#ifndef SPIRULA_STORAGE_CUH
#define SPIRULA_STORAGE_CUH

#include "glsl.cuh"
#include "random.cuh"

namespace spirula {
#include "storage.glsl"
}  // namespace spirula

#endif
