// Per-step scalars of a training step: shaders/include/step_params.glsl,
// compiled for CUDA (dialect.glsl). Kernels bind it as `const StepParams*`.
#ifndef SPIRULA_STEP_PARAMS_CUH
#define SPIRULA_STEP_PARAMS_CUH

#include "glsl.cuh"

namespace spirula {
#include "step_params.glsl"
static_assert(sizeof(StepParams) == 140, "StepParams is 140 bytes (std430)");
}  // namespace spirula

#endif
