// radix_sort_scatter: stable scatter of one 8-bit digit pass. Twin of
// shaders/radix_sort_scatter.comp, with subgroups as 32-lane warps. Each
// workgroup re-reads its block in chunks of SORT_WG keys, in order; a key's
// output position is its (digit, block) offset from the scanned histogram,
// plus the keys with the same digit before it in the block: inside a warp
// from ballots over the digit's bits, across warps from per-warp digit
// counts in shared memory. One workgroup per block (folded).
// Contract: build/contracts/radix_sort_scatter.h, generated from shaders/radix_sort_scatter.comp.
#include "common/launch.cuh"
#include "common/radix.cuh"
#include "common/warp.cuh"
#include "radix_sort_scatter.h"

namespace {

using namespace spirula;
using namespace contract;

static_assert(LOCAL_THREADS == SORT_WG, "radix.cuh's workgroup is the shader's");

constexpr uint32_t N_WARPS = SORT_WG / WARP;
constexpr uint32_t COUNT_WORDS = RADIX / 4u;  // 8-bit counts, 4 per word (a count is at most 32)

__device__ __forceinline__ uint32_t sg_count(const uint32_t* s_count, uint32_t s, uint32_t d) {
    return (s_count[s * COUNT_WORDS + (d >> 2u)] >> (8u * (d & 3u))) & 0xffu;
}

__global__ void __launch_bounds__(LOCAL_THREADS)
    radix_sort_scatter_kernel(const uint32_t* keys_in, const uint32_t* vals_in, const uint32_t* hist,
                              const uint32_t* num_keys, uint32_t* keys_out, uint32_t* vals_out, Push pc) {
    __shared__ uint32_t s_offset[RADIX];                 // next output position per digit
    __shared__ uint32_t s_count[N_WARPS * COUNT_WORDS];  // per warp, the count of each digit in this chunk
    uint32_t block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;
    }
    uint32_t tid = threadIdx.x;
    uint32_t n = min(num_keys[pc.count_offset], pc.n_max);
    uint32_t first = block * SORT_BLOCK;
    if (first >= n) {
        return;  // the whole workgroup leaves together
    }
    for (uint32_t d = tid; d < RADIX; d += SORT_WG) {
        s_offset[d] = hist[d * pc.num_blocks + block];
    }
    const uint32_t sg = warp_id(), lane = lane_id();
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        for (uint32_t w = tid; w < N_WARPS * COUNT_WORDS; w += SORT_WG) {
            s_count[w] = 0u;
        }
        __syncthreads();
        uint32_t idx = first + k * SORT_WG + tid;
        bool valid = idx < n;
        uint32_t key = valid ? keys_in[idx] : 0u;
        uint32_t digit = (key >> pc.shift) & (RADIX - 1u);
        // lanes of this warp holding a valid key with the same digit
        unsigned peers = __ballot_sync(FULL_MASK, valid);
#pragma unroll
        for (uint32_t b = 0u; b < RADIX_BITS; ++b) {
            bool bit = ((digit >> b) & 1u) != 0u;
            unsigned vote = __ballot_sync(FULL_MASK, bit);
            peers &= bit ? vote : ~vote;
        }
        uint32_t rank = __popc(peers & lanes_below());
        if (valid && static_cast<uint32_t>(__ffs(peers) - 1) == lane) {
            atomicAdd(&s_count[sg * COUNT_WORDS + (digit >> 2u)], static_cast<uint32_t>(__popc(peers))
                                                                      << (8u * (digit & 3u)));
        }
        __syncthreads();
        if (valid) {
            uint32_t before = 0u;
            for (uint32_t s = 0u; s < sg; ++s) {
                before += sg_count(s_count, s, digit);
            }
            uint32_t pos = s_offset[digit] + before + rank;
            keys_out[pos] = key;
            vals_out[pos] = vals_in[idx];
        }
        __syncthreads();
        for (uint32_t d = tid; d < RADIX; d += SORT_WG) {
            uint32_t total = 0u;
            for (uint32_t s = 0u; s < N_WARPS; ++s) {
                total += sg_count(s_count, s, d);
            }
            s_offset[d] += total;
        }
        __syncthreads();
    }
}

}  // namespace

SPIRULA_EXPORT int radix_sort_scatter(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, radix_sort_scatter_kernel, a.keys_in, a.vals_in, a.hist, a.num_keys,
                           a.keys_out, a.vals_out, pc);
}
