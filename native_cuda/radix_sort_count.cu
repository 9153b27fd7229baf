// Hand-written for speed: a __shared__ histogram and shared atomics (docs/performance.md, the sort's rows).
// radix_sort_count: per block of SORT_BLOCK keys, the histogram of one 8-bit
// digit ((key >> shift) & 255), stored digit-major so that one exclusive
// prefix sum over it gives every (digit, block)'s first output position.
// Twin of shaders/radix_sort_count.comp. One workgroup per block (folded);
// blocks past the key count write zeros.
// Contract: build/contracts/radix_sort_count.h, generated from shaders/radix_sort_count.comp.
#include "common/launch.cuh"
#include "common/radix.cuh"
#include "radix_sort_count.h"

namespace {

using namespace spirula;
using namespace contract;

static_assert(LOCAL_THREADS == SORT_WG, "radix.cuh's workgroup is the shader's");

__global__ void __launch_bounds__(LOCAL_THREADS)
    radix_sort_count_kernel(const uint32_t* keys, const uint32_t* num_keys, uint32_t* hist, Push pc) {
    __shared__ uint32_t s_hist[RADIX];
    uint32_t block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;  // folding rounded the grid up
    }
    uint32_t tid = threadIdx.x;
    for (uint32_t d = tid; d < RADIX; d += SORT_WG) {
        s_hist[d] = 0u;
    }
    __syncthreads();
    uint32_t n = min(num_keys[pc.count_offset], pc.n_max);
    uint32_t first = block * SORT_BLOCK;
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        uint32_t idx = first + k * SORT_WG + tid;
        if (idx < n) {
            atomicAdd(&s_hist[(keys[idx] >> pc.shift) & (RADIX - 1u)], 1u);
        }
    }
    __syncthreads();
    for (uint32_t d = tid; d < RADIX; d += SORT_WG) {
        hist[d * pc.num_blocks + block] = s_hist[d];
    }
}

}  // namespace

SPIRULA_EXPORT int radix_sort_count(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, radix_sort_count_kernel, a.keys, a.num_keys, a.hist, pc);
}
