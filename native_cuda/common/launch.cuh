// The C ABI every kernel of libspirula_cuda.so exports, and the helpers that
// give CUDA kernels the GLSL built-ins they mirror (shaders/include/common.glsl).
//
// One launch function per kernel, named like its shader (`copy` runs
// shaders/copy.comp; a hand-written twin native_cuda/<name>.cu or the entry
// point generated for a single-source kernel exports it): it takes the Vulkan
// dispatch as it was recorded (workgroups, buffers in binding order with
// their sizes, push constant words in block order, specialization constants
// by constant_id, compile-time variant flags) and launches on the given
// stream. It returns the cudaError_t of the launch; cudaErrorInvalidValue
// when the record does not fit the kernel's contract: the counts of buffers,
// push words or constants, or a buffer's size (the .cu file and the .comp
// file have drifted apart, or the caller bound the wrong buffer).
//
// The contract itself (typed Push, Spec and Args structs, the local size and
// `unpack`, which checks a record and reads it) is generated from the shader
// into build/contracts/<kernel>.h (spirula/contract/headers.py, run by
// scripts/build_cuda.sh); its checks use the helpers below.
#ifndef SPIRULA_LAUNCH_CUH
#define SPIRULA_LAUNCH_CUH

#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

extern "C" {
typedef struct {
    uint32_t grid[3];  // workgroups, as the Vulkan dispatch
    uint32_t n_buffers;
    void* buffers[32];   // device pointers in binding order (fpbo binds 28)
    uint64_t sizes[32];  // bytes of each buffer
    uint32_t n_push;
    uint32_t push[32];  // push-constant words, block order (floats as their bits)
    uint32_t n_spec;
    uint32_t spec[16];  // specialization constants by constant_id (bool: 0/1)
    uint32_t flags;     // compile-time variants of the GLSL kernel, a bit per define
                        // (spirula/contract/headers.py FLAGS; <kernel>.h names each as <DEFINE>::FLAG)
    void* stream;       // cudaStream_t
} SpirulaLaunch;
}

#define SPIRULA_EXPORT extern "C" __attribute__((visibility("default")))

namespace spirula {

// ---- GLSL built-ins of a dispatch (common.glsl) ------------------------------
// Workgroup index across a 1D dispatch the runtime folded into (x, y).
__device__ __forceinline__ uint32_t linear_group_id() { return blockIdx.y * gridDim.x + blockIdx.x; }
// One thread per element across a folded 1D dispatch.
__device__ __forceinline__ uint32_t global_index() { return linear_group_id() * blockDim.x + threadIdx.x; }
// Total threads of a (possibly folded) 1D dispatch: the grid-stride step.
__device__ __forceinline__ uint32_t grid_stride() { return gridDim.x * gridDim.y * blockDim.x; }
// gl_LocalInvocationIndex
__device__ __forceinline__ uint32_t local_index() {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}

// ---- host side: checking and reading the launch record (generated unpack) -------
constexpr int INVALID_LAUNCH = static_cast<int>(cudaErrorInvalidValue);

// The record has the kernel's shape: its buffers, push words and spec constants.
inline bool shape_ok(const SpirulaLaunch* L, uint32_t buffers, uint32_t push, uint32_t spec) {
    return L != nullptr && L->n_buffers == buffers && L->n_push == push && L->n_spec == spec;
}

// Binding `binding` as `out`: an array of T (its size a whole number of Ts)
// or a single T (at least sizeof(T) bytes); a buffer with bytes is not null.
template <class T>
inline bool bind(const SpirulaLaunch* L, uint32_t binding, T*& out, bool array) {
    const uint64_t size = L->sizes[binding];
    out = static_cast<T*>(L->buffers[binding]);
    if (size > 0u && out == nullptr) {
        return false;
    }
    return array ? size % sizeof(T) == 0u : size >= sizeof(T);
}

// The 32-bit word of a specialization constant as its type.
inline float spec_float(uint32_t word) {
    float f;
    std::memcpy(&f, &word, sizeof(f));
    return f;
}

// Launch `kernel` over the recorded workgroups with `block` threads each.
// An empty grid launches nothing, as an empty Vulkan dispatch does.
template <class... Params, class... Args>
inline int launch(const SpirulaLaunch* L, dim3 block, void (*kernel)(Params...), Args... args) {
    dim3 grid(L->grid[0], L->grid[1], L->grid[2]);
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) {
        return cudaSuccess;
    }
    kernel<<<grid, block, 0, static_cast<cudaStream_t>(L->stream)>>>(args...);
    return static_cast<int>(cudaGetLastError());
}

}  // namespace spirula

#endif
