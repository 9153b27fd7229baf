// The common subset of GLSL and CUDA C++ that the shared maths files
// (sh, projection, adam, finite, ssim, raster, random, step_params .glsl) are
// written in, so that each is defined once and compiled by both glslang and
// nvcc (docs/design.md, "One source of truth"). The shared files are GLSL
// with four conventions:
//   - FN before every function (CUDA: __device__ __forceinline__);
//   - OUT(T) / INOUT(T) for out / inout parameters (CUDA: T&), and
//     OUT_ARRAY(T) / INOUT_ARRAY(T) for array parameters (CUDA: T, a pointer);
//   - every float literal carries the f suffix (GLSL accepts it; in C++ an
//     unsuffixed literal would turn float maths into double maths);
//   - no swizzles, no GLSL-only constructors of arrays; UNROLL before loops
//     whose trip count is a compile-time constant on CUDA;
//   - PRECISE before a variable whose value two kernels must compute bit for
//     bit alike (GLSL precise: no contraction into fma, whatever each
//     shader's context; nvcc contracts one inlined expression tree alike).
// On CUDA the native_cuda/common/*.cuh wrappers include a shared file inside
// namespace spirula after glsl.cuh, which gives vec2/3/4, mat3 and the GLSL
// built-ins they use. This file holds macros only.
#ifndef SPIRULA_DIALECT_GLSL
#define SPIRULA_DIALECT_GLSL

#ifdef __CUDACC__
#define FN __device__ __forceinline__
#define OUT(T) T&
#define INOUT(T) T&
#define OUT_ARRAY(T) T
#define INOUT_ARRAY(T) T
#define UNROLL _Pragma("unroll")
#define PRECISE
#else
#define FN
#define OUT(T) out T
#define INOUT(T) inout T
#define OUT_ARRAY(T) out T
#define INOUT_ARRAY(T) inout T
#define UNROLL
#define PRECISE precise
#endif

#endif
