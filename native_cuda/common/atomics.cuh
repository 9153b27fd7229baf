// Float atomic adds and the buffers that receive them (GRAD_T, GRAD_LOAD, ATOMIC_ADD):
// shaders/include/atomics.glsl, compiled for CUDA (native float atomics).
#ifndef SPIRULA_ATOMICS_CUH
#define SPIRULA_ATOMICS_CUH

#include "atomics.glsl"

#endif
