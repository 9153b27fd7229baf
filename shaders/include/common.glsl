// Shared helpers for every Spirula kernel (GLSL only: CUDA has its own in
// native_cuda/common/launch.cuh), and the dialect (dialect.glsl) that the bodies of
// the single-source kernels are written in.
#ifndef SPIRULA_COMMON_GLSL
#define SPIRULA_COMMON_GLSL
#include "dialect.glsl"

// Workgroup index across a 1D dispatch that the runtime folded into (x, y)
// because it exceeded maxComputeWorkGroupCount[0] (Device.fold_groups).
uint linear_group_id() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// Macros, not functions: gl_WorkGroupSize takes its value from the
// `layout(local_size_x = ...) in;` declaration only after that declaration,
// and this file is included before it.

// One thread per element across a folded 1D dispatch.
#define global_index() (linear_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x)

// Total threads of a (possibly folded) 1D dispatch: the grid-stride step.
#define grid_stride() (gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_WorkGroupSize.x)

#endif
