// Block-wide exclusive prefix sum of one value (uint32_t or float: scan.glsl's
// SCAN_T) per thread: the twin of shaders/include/scan.glsl, with GLSL's subgroups as 32-lane warps: an
// inclusive warp scan, then the first warp scans the per-warp totals.
// Call from uniform control flow (it contains barriers) with the
// ScanShared the caller declares __shared__.
#ifndef SPIRULA_SCAN_CUH
#define SPIRULA_SCAN_CUH

#include <cstdint>

#include "warp.cuh"

namespace spirula {

template <class T>
struct ScanShared {
    T subgroup[256 / WARP];  // one slot per warp, workgroups of up to 256 threads
    T total;
};

template <class T>
__device__ __forceinline__ T block_exclusive_scan(ScanShared<T>& s, T value, T& total) {
    const uint32_t lane = lane_id(), warp = warp_id(), n_warps = num_warps();
    T inclusive = warp_inclusive_add(value);
    if (lane == WARP - 1u) {
        s.subgroup[warp] = inclusive;
    }
    __syncthreads();
    if (warp == 0u) {
        T carry = T(0);
        for (uint32_t base = 0u; base < n_warps; base += WARP) {
            uint32_t i = base + lane;
            T x = i < n_warps ? s.subgroup[i] : T(0);
            T scanned = warp_inclusive_add(x);
            if (i < n_warps) {
                s.subgroup[i] = carry + scanned - x;
            }
            carry += warp_add(x);
        }
        if (lane == 0u) {
            s.total = carry;
        }
    }
    __syncthreads();
    total = s.total;
    T result = s.subgroup[warp] + inclusive - value;
    __syncthreads();  // the shared slots may be reused by the caller's next scan
    return result;
}

}  // namespace spirula

#endif
