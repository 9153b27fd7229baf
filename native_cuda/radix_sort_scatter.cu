// Hand-written for speed: warp ballots rank the keys, a __shared__ reorder writes runs (docs/performance.md).
// radix_sort_scatter: stable scatter of one 8-bit digit pass over blocks of
// SORT_BLOCK keys. Twin of shaders/radix_sort_scatter.comp, with subgroups as
// 32-lane warps: each warp ranks a contiguous slice of its block (SORT_CHUNKS
// chunks of 32 keys, in order) with ballots over the digit's bits and its own
// per-digit counts in shared memory; then the block's digit totals are
// scanned, the keys (then the values) placed in digit order in shared memory
// and written out from there, each digit's run to consecutive addresses. One
// workgroup per block (folded).
// Contract: build/contracts/radix_sort_scatter.h, generated from shaders/radix_sort_scatter.comp.
#include "common/launch.cuh"
#include "common/radix.cuh"
#include "common/warp.cuh"
#include "radix_sort_scatter.h"

namespace {

using namespace spirula;
using namespace contract;

static_assert(LOCAL_THREADS == SORT_WG, "radix.cuh's workgroup is the shader's");
static_assert(RADIX == 2u * SORT_WG, "two digits a thread in the scan of the totals");

constexpr uint32_t N_WARPS = SORT_WG / WARP;
// a slice holds at most 32 * SORT_CHUNKS = 512 keys: 16-bit counts, 2 per word (the shader's COUNT_BITS)
constexpr uint32_t COUNT_BITS = 16u, COUNTS_PER_WORD = 2u, COUNT_MASK = 0xffffu;
constexpr uint32_t ROW_WORDS = RADIX / COUNTS_PER_WORD;

__device__ __forceinline__ uint32_t count_word(uint32_t s, uint32_t d) { return s * ROW_WORDS + d / COUNTS_PER_WORD; }
__device__ __forceinline__ uint32_t count_shift(uint32_t d) { return COUNT_BITS * (d % COUNTS_PER_WORD); }
__device__ __forceinline__ uint32_t count_of(const uint32_t* s_count, uint32_t s, uint32_t d) {
    return (s_count[count_word(s, d)] >> count_shift(d)) & COUNT_MASK;
}

__global__ void __launch_bounds__(LOCAL_THREADS)
    radix_sort_scatter_kernel(const uint32_t* keys_in, const uint32_t* vals_in, const uint32_t* hist,
                              const uint32_t* num_keys, uint32_t* keys_out, uint32_t* vals_out, Push pc) {
    __shared__ uint32_t s_count[N_WARPS * ROW_WORDS];  // per warp, the keys of each digit in its slice
    __shared__ uint32_t s_start[RADIX];                // per digit, its first position in the block
    __shared__ uint32_t s_base[RADIX];                 // per digit, output position minus block position
    __shared__ uint32_t s_buf[SORT_BLOCK];             // the block's keys, then its values, in digit order
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
    for (uint32_t w = tid; w < N_WARPS * ROW_WORDS; w += SORT_WG) {
        s_count[w] = 0u;
    }
    const uint32_t sg = warp_id(), lane = lane_id();
    const uint32_t slice = first + sg * WARP * SORT_CHUNKS;
    uint32_t key[SORT_CHUNKS];
#pragma unroll
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        uint32_t idx = slice + k * WARP + lane;
        key[k] = idx < n ? keys_in[idx] : 0u;
    }
    __syncthreads();  // the counts are zero

    // 1. ranks inside the slice: keys of the same digit in earlier chunks, then in lower lanes
    uint32_t pos[SORT_CHUNKS];
#pragma unroll
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        bool valid = slice + k * WARP + lane < n;
        uint32_t digit = (key[k] >> pc.shift) & (RADIX - 1u);
        unsigned peers = __ballot_sync(FULL_MASK, valid);
#pragma unroll
        for (uint32_t b = 0u; b < RADIX_BITS; ++b) {
            bool bit = ((digit >> b) & 1u) != 0u;
            unsigned vote = __ballot_sync(FULL_MASK, bit);
            peers &= bit ? vote : ~vote;
        }
        uint32_t earlier = count_of(s_count, sg, digit);
        __syncwarp();  // every lane has read the count before its digit's first lane adds to it
        if (valid && static_cast<uint32_t>(__ffs(peers) - 1) == lane) {
            atomicAdd(&s_count[count_word(sg, digit)], static_cast<uint32_t>(__popc(peers)) << count_shift(digit));
        }
        __syncwarp();
        pos[k] = earlier + static_cast<uint32_t>(__popc(peers & lanes_below()));
    }
    __syncthreads();

    // 2. the block's digit totals, scanned: two digits a thread
    uint32_t d0 = 2u * tid;
    uint32_t t0 = 0u, t1 = 0u;
#pragma unroll
    for (uint32_t s = 0u; s < N_WARPS; ++s) {
        t0 += count_of(s_count, s, d0);
        t1 += count_of(s_count, s, d0 + 1u);
    }
    uint32_t inclusive = warp_inclusive_add(t0 + t1);
    if (lane == WARP - 1u) {
        s_buf[sg] = inclusive;  // each warp's total (s_buf is free until step 3)
    }
    __syncthreads();
    uint32_t start = inclusive - t0 - t1;
    for (uint32_t s = 0u; s < sg; ++s) {
        start += s_buf[s];
    }
    s_start[d0] = start;
    s_start[d0 + 1u] = start + t0;
    s_base[d0] = hist[d0 * pc.num_blocks + block] - start;
    s_base[d0 + 1u] = hist[(d0 + 1u) * pc.num_blocks + block] - (start + t0);
    __syncthreads();

    // 3. the keys in digit order in shared memory: block position = digit start
    // + the digit's keys in earlier warps' slices + the rank in this slice
#pragma unroll
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        if (slice + k * WARP + lane < n) {
            uint32_t digit = (key[k] >> pc.shift) & (RADIX - 1u);
            uint32_t p = s_start[digit] + pos[k];
            for (uint32_t s = 0u; s < sg; ++s) {
                p += count_of(s_count, s, digit);
            }
            pos[k] = p;
            s_buf[p] = key[k];
        }
    }
    __syncthreads();
    // 4. written out in block order: each digit's run to consecutive addresses
    uint32_t m = min(n - first, SORT_BLOCK);
    uint32_t out_pos[SORT_CHUNKS];
#pragma unroll
    for (uint32_t j = 0u; j < SORT_CHUNKS; ++j) {
        uint32_t i = j * SORT_WG + tid;
        if (i < m) {
            uint32_t k = s_buf[i];
            out_pos[j] = s_base[(k >> pc.shift) & (RADIX - 1u)] + i;
            keys_out[out_pos[j]] = k;
        }
    }
    __syncthreads();
    // 5. the values the same way
#pragma unroll
    for (uint32_t k = 0u; k < SORT_CHUNKS; ++k) {
        uint32_t idx = slice + k * WARP + lane;
        if (idx < n) {
            s_buf[pos[k]] = vals_in[idx];
        }
    }
    __syncthreads();
#pragma unroll
    for (uint32_t j = 0u; j < SORT_CHUNKS; ++j) {
        uint32_t i = j * SORT_WG + tid;
        if (i < m) {
            vals_out[out_pos[j]] = s_buf[i];
        }
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
