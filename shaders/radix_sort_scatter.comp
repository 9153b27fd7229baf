#version 450
// radix_sort_scatter: stable scatter of one 8-bit digit pass. Each workgroup
// re-reads its block in chunks of SORT_WG keys, in order; a key's output
// position is its (digit, block) offset from the scanned histogram, plus the
// keys with the same digit before it in the block. Ranks inside a subgroup
// come from ballots over the digit's bits (any subgroup size up to 128);
// across subgroups from per-subgroup digit counts in shared memory.
// One workgroup per block (folded), SORT_WG threads.
//   binding 0  keys_in   [>= n]             u32  read
//   binding 1  vals_in   [>= n]             u32  read
//   binding 2  hist      [256 * num_blocks] u32  read   exclusive prefix sum of radix_sort_count's
//   binding 3  num_keys  [count_offset + 1] u32  read   n = min(num_keys[count_offset], n_max)
//   binding 4  keys_out  [>= n]             u32  write
//   binding 5  vals_out  [>= n]             u32  write
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#include "common.glsl"
#include "radix.glsl"

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

const uint MAX_SUBGROUPS = SORT_WG / 4u;  // subgroups of at least 4 lanes
shared uint s_offset[RADIX];              // next output position per digit
// per subgroup, the count of each digit in this chunk: 8-bit fields, 4 per word
// (a count is at most the subgroup size, at most 128)
shared uint s_count[MAX_SUBGROUPS * (RADIX / 4u)];

uint sg_count(uint s, uint d) { return (s_count[s * (RADIX / 4u) + (d >> 2u)] >> (8u * (d & 3u))) & 0xffu; }

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
    for (uint d = tid; d < RADIX; d += SORT_WG) {
        s_offset[d] = hist[d * pc.num_blocks + block];
    }
    uint sg = gl_SubgroupID;
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        for (uint w = tid; w < MAX_SUBGROUPS * (RADIX / 4u); w += SORT_WG) {
            s_count[w] = 0u;
        }
        barrier();
        uint idx = first + k * SORT_WG + tid;
        bool valid = idx < n;
        uint key = valid ? keys_in[idx] : 0u;
        uint digit = (key >> pc.shift) & (RADIX - 1u);
        // lanes of this subgroup holding a valid key with the same digit
        uvec4 peers = subgroupBallot(valid);
        for (uint b = 0u; b < RADIX_BITS; ++b) {
            bool bit = ((digit >> b) & 1u) != 0u;
            uvec4 vote = subgroupBallot(bit);
            peers &= bit ? vote : ~vote;
        }
        uint rank = subgroupBallotExclusiveBitCount(peers);
        if (valid && subgroupBallotFindLSB(peers) == gl_SubgroupInvocationID) {
            atomicAdd(s_count[sg * (RADIX / 4u) + (digit >> 2u)], subgroupBallotBitCount(peers) << (8u * (digit & 3u)));
        }
        barrier();
        if (valid) {
            uint before = 0u;
            for (uint s = 0u; s < sg; ++s) {
                before += sg_count(s, digit);
            }
            uint pos = s_offset[digit] + before + rank;
            keys_out[pos] = key;
            vals_out[pos] = vals_in[idx];
        }
        barrier();
        for (uint d = tid; d < RADIX; d += SORT_WG) {
            uint total = 0u;
            for (uint s = 0u; s < gl_NumSubgroups; ++s) {
                total += sg_count(s, d);
            }
            s_offset[d] += total;
        }
        barrier();
    }
}
