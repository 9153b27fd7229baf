// radix_sort_count: per block of SORT_BLOCK keys, the histogram of one 8-bit
// digit ((key >> shift) & 255), stored digit-major so that one exclusive
// prefix sum over it gives every (digit, block)'s first output position.
// Twin of shaders/radix_sort_count.comp. One workgroup (128) per block
// (folded); blocks past the key count write zeros.
//   binding 0  keys      [>= n]             u32  read
//   binding 1  num_keys  [count_offset + 1] u32  read   n = min(num_keys[count_offset], n_max)
//   binding 2  hist      [256 * num_blocks] u32  write  hist[d * num_blocks + block]
#include "common/launch.cuh"
#include "common/radix.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n_max;
    uint32_t count_offset;
    uint32_t shift;
    uint32_t num_blocks;
};

__global__ void __launch_bounds__(SORT_WG)
radix_sort_count_kernel(const uint32_t* keys, const uint32_t* num_keys, uint32_t* hist, Push pc) {
    __shared__ uint32_t s_hist[RADIX];
    uint32_t block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;                                    // folding rounded the grid up
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
    SPIRULA_CONTRACT(L, 3, 4, 0);
    return launch(L, dim3(SORT_WG), radix_sort_count_kernel, buffer<const uint32_t>(L, 0),
                  buffer<const uint32_t>(L, 1), buffer<uint32_t>(L, 2), push_block<Push>(L));
}
