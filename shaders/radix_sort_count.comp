#version 450
// radix_sort_count: per block of SORT_BLOCK keys, the histogram of one digit
// of digit_bits bits ((key >> shift) & (2^digit_bits - 1)), stored
// digit-major so that one exclusive prefix sum over it gives every
// (digit, block)'s first output position. With drop (the first pass of a
// 32-bit sort), keys equal to DROPPED_KEY count in one more slot, digit
// 2^digit_bits, after every digit: they go to the end, where they belong.
// One workgroup per block (folded); blocks past the key count write zeros.
//   binding 0  keys      [>= n]                        u32  read
//   binding 1  num_keys  [count_offset + 1]            u32  read   n = min(num_keys[count_offset], n_max)
//   binding 2  hist      [(2^digit_bits + drop) * num_blocks] u32  write  hist[d * num_blocks + block]
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
    uint digit_bits;  // 1..RADIX_BITS
    uint drop;        // 1: keys equal to DROPPED_KEY take slot 2^digit_bits
} pc;

shared uint s_hist[RADIX_SLOTS];

void main() {
    uint block = linear_group_id();
    if (block >= pc.num_blocks) {
        return;  // folding rounded the grid up
    }
    uint tid = gl_LocalInvocationID.x;
    uint mask = (1u << pc.digit_bits) - 1u;
    uint slots = mask + 1u + pc.drop;
    for (uint d = tid; d < slots; d += SORT_WG) {
        s_hist[d] = 0u;
    }
    barrier();
    uint n = min(num_keys[pc.count_offset], pc.n_max);
    uint first = block * SORT_BLOCK;
    for (uint k = 0u; k < SORT_CHUNKS; ++k) {
        uint idx = first + k * SORT_WG + tid;
        if (idx < n) {
            uint key = keys[idx];
            uint digit = (pc.drop != 0u && key == DROPPED_KEY) ? mask + 1u : (key >> pc.shift) & mask;
            atomicAdd(s_hist[digit], 1u);
        }
    }
    barrier();
    for (uint d = tid; d < slots; d += SORT_WG) {
        hist[d * pc.num_blocks + block] = s_hist[d];
    }
}
