// GLSL subgroup operations as warp operations: a subgroup is a 32-lane warp
// (gl_SubgroupSize = 32, gl_SubgroupID = the warp of gl_LocalInvocationIndex).
// Every function here is called by all 32 lanes of the warp.
#ifndef SPIRULA_WARP_CUH
#define SPIRULA_WARP_CUH

#include <cstdint>

#include "launch.cuh"

namespace spirula {

constexpr uint32_t WARP = 32u;
constexpr unsigned FULL_MASK = 0xffffffffu;

__device__ __forceinline__ uint32_t lane_id() { return local_index() & (WARP - 1u); }
__device__ __forceinline__ uint32_t warp_id() { return local_index() / WARP; }
__device__ __forceinline__ uint32_t num_warps() { return (blockDim.x * blockDim.y * blockDim.z + WARP - 1u) / WARP; }
// lanes below this one (subgroupBallotExclusiveBitCount's mask)
__device__ __forceinline__ unsigned lanes_below() { return (1u << lane_id()) - 1u; }

// subgroupInclusiveAdd (T: uint32_t or float)
template <class T>
__device__ __forceinline__ T warp_inclusive_add(T v) {
    const uint32_t lane = lane_id();
#pragma unroll
    for (uint32_t d = 1u; d < WARP; d <<= 1u) {
        T o = __shfl_up_sync(FULL_MASK, v, d);
        if (lane >= d) v += o;
    }
    return v;
}

// subgroupAdd
__device__ __forceinline__ uint32_t warp_add(uint32_t v) {
#pragma unroll
    for (uint32_t d = WARP / 2u; d > 0u; d >>= 1u)
        v += __shfl_xor_sync(FULL_MASK, v, d);
    return v;
}
__device__ __forceinline__ float warp_add(float v) {
#pragma unroll
    for (uint32_t d = WARP / 2u; d > 0u; d >>= 1u)
        v += __shfl_xor_sync(FULL_MASK, v, d);
    return v;
}

}  // namespace spirula

#endif
