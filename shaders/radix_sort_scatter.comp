#version 450
// radix_sort_scatter: stable scatter of one 8-bit digit pass over blocks of
// SORT_BLOCK keys. Each subgroup ranks a contiguous slice of its block
// (SORT_CHUNKS chunks of gl_SubgroupSize keys, in order) with ballots over
// the digit's bits and its own per-digit counts in shared memory: no
// workgroup barrier while ranking. Then the block's digit totals are scanned,
// the keys (and after them the values) are placed in digit order in shared
// memory, and written out from there: consecutive threads write consecutive
// addresses inside each digit's run. A key's output position is its (digit,
// block) offset from the scanned histogram plus the keys with the same digit
// before it in the block. One workgroup per block (folded), SORT_WG threads.
//   binding 0  keys_in   [>= n]             u32  read
//   binding 1  vals_in   [>= n]             u32  read
//   binding 2  hist      [256 * num_blocks] u32  read   exclusive prefix sum of radix_sort_count's
//   binding 3  num_keys  [count_offset + 1] u32  read   n = min(num_keys[count_offset], n_max)
//   binding 4  keys_out  [>= n]             u32  write
//   binding 5  vals_out  [>= n]             u32  write
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"
#include "radix.glsl"

// The device's subgroup sizes (VulkanDevice defines them from its range):
// they size the per-subgroup counts. Without them: any size from 8 to 128.
#ifndef SUBGROUP_SIZE_MIN
#define SUBGROUP_SIZE_MIN 8
#endif
#ifndef SUBGROUP_SIZE_MAX
#define SUBGROUP_SIZE_MAX 128
#endif

layout(local_size_x = 128) in;

layout(std430, binding = 0) restrict readonly buffer KeysInBuf { uint keys_in[]; };
layout(std430, binding = 1) restrict readonly buffer ValsInBuf { uint vals_in[]; };
layout(std430, binding = 2) restrict readonly buffer HistBuf { uint hist[]; };
layout(std430, binding = 3) restrict readonly buffer NumKeysBuf { uint num_keys[]; };
layout(std430, binding = 4) restrict writeonly buffer KeysOutBuf { uint keys_out[]; };
layout(std430, binding = 5) restrict writeonly buffer ValsOutBuf { uint vals_out[]; };

layout(push_constant) uniform Push {
    uint n_max;
    uint count_offset;
    uint shift;
    uint num_blocks;
} pc;

const uint MAX_SUBGROUPS = SORT_WG / SUBGROUP_SIZE_MIN;
// A slice holds at most SUBGROUP_SIZE_MAX * SORT_CHUNKS keys: its per-digit
// counts in 8-bit fields where that fits in 255, else 16-bit fields.
const uint COUNT_BITS = SUBGROUP_SIZE_MAX * SORT_CHUNKS <= 255u ? 8u : 16u;
const uint COUNTS_PER_WORD = 32u / COUNT_BITS;
const uint COUNT_MASK = (1u << COUNT_BITS) - 1u;
const uint ROW_WORDS = RADIX / COUNTS_PER_WORD;
shared uint s_count[MAX_SUBGROUPS * ROW_WORDS];  // per subgroup, the keys of each digit in its slice
shared uint s_start[RADIX];                      // per digit, its first position in the block
shared uint s_base[RADIX];                       // per digit, output position minus block position
shared uint s_buf[SORT_BLOCK];                   // the block's keys, then its values, in digit order

uint count_word(uint s, uint d) { return s * ROW_WORDS + d / COUNTS_PER_WORD; }
uint count_shift(uint d) { return COUNT_BITS * (d % COUNTS_PER_WORD); }
uint count_of(uint s, uint d) { return (s_count[count_word(s, d)] >> count_shift(d)) & COUNT_MASK; }

void main() {
    uint block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;
    }
    uint tid = gl_LocalInvocationID.x;
    uint n = min(num_keys[pc.count_offset], pc.n_max);
    uint first = block * SORT_BLOCK;
    if (first >= n) {
        return;  // the whole workgroup leaves together
    }
    for (uint w = tid; w < MAX_SUBGROUPS * ROW_WORDS; w += SORT_WG) {
        s_count[w] = 0u;
    }
    // this subgroup's slice: its lanes are local invocations sg * size .. (sg + 1) * size - 1
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint slice = first + sg * gl_SubgroupSize * SORT_CHUNKS;
    uint key[SORT_CHUNKS];
    [[unroll]]
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        uint idx = slice + k * gl_SubgroupSize + lane;
        key[k] = idx < n ? keys_in[idx] : 0u;
    }
    barrier();  // the counts are zero

    // 1. ranks inside the slice: keys of the same digit in earlier chunks, then in lower lanes
    uint pos[SORT_CHUNKS];
    [[unroll]]
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        bool valid = slice + k * gl_SubgroupSize + lane < n;
        uint digit = (key[k] >> pc.shift) & (RADIX - 1u);
        uvec4 peers = subgroupBallot(valid);
        for (uint b = 0u; b < RADIX_BITS; ++b) {
            bool bit = ((digit >> b) & 1u) != 0u;
            uvec4 vote = subgroupBallot(bit);
            peers &= bit ? vote : ~vote;
        }
        uint earlier = count_of(sg, digit);
        subgroupBarrier();  // every lane has read the count before its digit's first lane adds to it
        if (valid && subgroupBallotFindLSB(peers) == lane) {
            atomicAdd(s_count[count_word(sg, digit)], subgroupBallotBitCount(peers) << count_shift(digit));
        }
        subgroupBarrier();
        pos[k] = earlier + subgroupBallotExclusiveBitCount(peers);
    }
    barrier();

    // 2. the block's digit totals, scanned: two digits a thread (RADIX = 2 * SORT_WG)
    uint d0 = 2u * tid;
    uint t0 = 0u, t1 = 0u;
    for (uint s = 0u; s < gl_NumSubgroups; ++s) {
        t0 += count_of(s, d0);
        t1 += count_of(s, d0 + 1u);
    }
    uint inclusive = subgroupInclusiveAdd(t0 + t1);
    if (lane == gl_SubgroupSize - 1u) {
        s_buf[sg] = inclusive;  // each subgroup's total (s_buf is free until step 3)
    }
    barrier();
    uint start = inclusive - t0 - t1;
    for (uint s = 0u; s < sg; ++s) {
        start += s_buf[s];
    }
    s_start[d0] = start;
    s_start[d0 + 1u] = start + t0;
    s_base[d0] = hist[d0 * pc.num_blocks + block] - start;
    s_base[d0 + 1u] = hist[(d0 + 1u) * pc.num_blocks + block] - (start + t0);
    barrier();

    // 3. the keys in digit order in shared memory: block position = digit start
    // + the digit's keys in earlier subgroups' slices + the rank in this slice
    [[unroll]]
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        if (slice + k * gl_SubgroupSize + lane < n) {
            uint digit = (key[k] >> pc.shift) & (RADIX - 1u);
            uint p = s_start[digit] + pos[k];
            for (uint s = 0u; s < sg; ++s) {
                p += count_of(s, digit);
            }
            pos[k] = p;
            s_buf[p] = key[k];
        }
    }
    barrier();
    // 4. written out in block order: each digit's run to consecutive addresses
    uint m = min(n - first, SORT_BLOCK);
    uint out_pos[SORT_CHUNKS];
    [[unroll]]
    for (uint j = 0u; j < SORT_CHUNKS; ++j) {
        uint i = j * SORT_WG + tid;
        if (i < m) {
            uint k = s_buf[i];
            out_pos[j] = s_base[(k >> pc.shift) & (RADIX - 1u)] + i;
            keys_out[out_pos[j]] = k;
        }
    }
    barrier();
    // 5. the values the same way
    [[unroll]]
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        uint idx = slice + k * gl_SubgroupSize + lane;
        if (idx < n) {
            s_buf[pos[k]] = vals_in[idx];
        }
    }
    barrier();
    [[unroll]]
    for (uint j = 0u; j < SORT_CHUNKS; ++j) {
        uint i = j * SORT_WG + tid;
        if (i < m) {
            vals_out[out_pos[j]] = s_buf[i];
        }
    }
}
