// The C ABI every kernel of libspirula_cuda.so exports, and the helpers that
// give CUDA kernels the GLSL built-ins they mirror (shaders/include/common.glsl).
//
// One launch function per kernel, named like its shader (native_cuda/copy.cu
// exports `copy`, the twin of shaders/copy.comp): it takes the Vulkan
// dispatch as it was recorded (workgroups, buffers in binding order, push
// constant words in block order, specialization constants by constant_id,
// compile-time variant flags) and launches on the given stream. It returns
// the cudaError_t of the launch; cudaErrorInvalidValue when the counts of
// buffers, push words or constants differ from the kernel's contract (the
// .cu file and the .comp file have drifted apart).
#ifndef SPIRULA_LAUNCH_CUH
#define SPIRULA_LAUNCH_CUH

#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

extern "C" {
typedef struct {
    uint32_t grid[3];        // workgroups, as the Vulkan dispatch
    uint32_t n_buffers;
    void*    buffers[32];    // device pointers in binding order (fpbo binds 26)
    uint32_t n_push;
    uint32_t push[32];       // push-constant words, block order (floats as their bits)
    uint32_t n_spec;
    uint32_t spec[16];       // specialization constants by constant_id (bool: 0/1)
    uint32_t flags;          // compile-time variants of the GLSL kernel: bit 0 = VEC4, bit 1 = FLOAT,
                             // bit 2 = SH_VEC4
    void*    stream;         // cudaStream_t
} SpirulaLaunch;
}

#define SPIRULA_EXPORT extern "C" __attribute__((visibility("default")))

// flags: the GLSL kernels' compile-time defines (a define set to 1 sets its bit)
#define SPIRULA_FLAG_VEC4 1u     // copy, fill: uvec4 elements
#define SPIRULA_FLAG_FLOAT 2u    // prefix_sum: float32 values
#define SPIRULA_FLAG_SH_VEC4 4u  // fpbo: SH coefficients and moments as vec4s (3K % 4 == 0)

namespace spirula {

// ---- GLSL built-ins of a dispatch (common.glsl) ------------------------------
// Workgroup index across a 1D dispatch the runtime folded into (x, y).
__device__ __forceinline__ uint32_t linear_group_id() {
    return blockIdx.y * gridDim.x + blockIdx.x;
}
// One thread per element across a folded 1D dispatch.
__device__ __forceinline__ uint32_t global_index() {
    return linear_group_id() * blockDim.x + threadIdx.x;
}
// Total threads of a (possibly folded) 1D dispatch: the grid-stride step.
__device__ __forceinline__ uint32_t grid_stride() {
    return gridDim.x * gridDim.y * blockDim.x;
}
// gl_LocalInvocationIndex
__device__ __forceinline__ uint32_t local_index() {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}

// ---- host side: reading the launch record -------------------------------------
inline bool contract_ok(const SpirulaLaunch* L, uint32_t buffers, uint32_t push, uint32_t spec) {
    return L != nullptr && L->n_buffers == buffers && L->n_push == push && L->n_spec == spec;
}

template <class T>
inline T* buffer(const SpirulaLaunch* L, int binding) {
    return static_cast<T*>(L->buffers[binding]);
}

// The push-constant block as the kernel's struct (32-bit members, block order).
template <class Push>
inline Push push_block(const SpirulaLaunch* L) {
    static_assert(sizeof(Push) % 4 == 0, "push blocks hold 32-bit words");
    Push p;
    std::memcpy(&p, L->push, sizeof(Push));
    return p;
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

// First line of every launch function: reject a record whose shape is not
// this kernel's contract (n bindings, n push words, n spec constants).
#define SPIRULA_CONTRACT(L, n_buffers, n_push, n_spec)                   \
    do {                                                                 \
        if (!spirula::contract_ok((L), (n_buffers), (n_push), (n_spec))) \
            return static_cast<int>(cudaErrorInvalidValue);              \
    } while (0)

#endif
