#version 450
// radix_sort_count: per block of SORT_BLOCK keys, the histogram of one 8-bit
// digit ((key >> shift) & 255), stored digit-major so that one exclusive
// prefix sum over it gives every (digit, block)'s first output position.
// One workgroup per block (folded); blocks past the key count write zeros.
//   binding 0  keys      [>= n]             u32  read
//   binding 1  num_keys  [count_offset + 1] u32  read   n = min(num_keys[count_offset], n_max)
//   binding 2  hist      [256 * num_blocks] u32  write  hist[d * num_blocks + block]
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "radix.glsl"

layout(local_size_x = 128) in;

layout(std430, binding = 0) restrict readonly buffer KeysBuf { uint keys[]; };
layout(std430, binding = 1) restrict readonly buffer NumKeysBuf { uint num_keys[]; };
layout(std430, binding = 2) restrict writeonly buffer HistBuf { uint hist[]; };

layout(push_constant) uniform Push {
    uint n_max;
    uint count_offset;
    uint shift;
    uint num_blocks;
} pc;

shared uint s_hist[RADIX];

void main() {
    uint block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;  // folding rounded the grid up
    }
    uint tid = gl_LocalInvocationID.x;
    for (uint d = tid; d < RADIX; d += SORT_WG) {
        s_hist[d] = 0u;
    }
    barrier();
    uint n = min(num_keys[pc.count_offset], pc.n_max);
    uint first = block * SORT_BLOCK;
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        uint idx = first + k * SORT_WG + tid;
        if (idx < n) {
            atomicAdd(s_hist[(keys[idx] >> pc.shift) & (RADIX - 1u)], 1u);
        }
    }
    barrier();
    for (uint d = tid; d < RADIX; d += SORT_WG) {
        hist[d * pc.num_blocks + block] = s_hist[d];
    }
}
