// The common subset of GLSL and CUDA C++ that the shared maths files
// (sh, projection, adam, finite, ssim, raster, random, step_params .glsl) and
// the bodies of the single-source kernels (a shader's code below its layout
// declarations; spirula/contract/cuda_entry.py) are written in, so that each
// is defined once and compiled by both glslang and nvcc (docs/design.md §3.2,
// docs/cuda.md "Single-source kernels"). They are GLSL with these conventions:
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
// built-ins they use; a kernel's body becomes the member functions of a struct
// whose members are its buffers (pointers, named as in GLSL), pc and its
// specialization constants, so it reads them as GLSL reads its globals. A body
// include (splat_finite.glsl, zero_moments.glsl: functions over a kernel's
// buffers by name) has no include guard and comes after the push-constant
// block; CUDA includes it inside that struct. This file holds macros only.
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
