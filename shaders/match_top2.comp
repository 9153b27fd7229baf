#version 450
// match_top2: brute-force nearest neighbours of SIFT descriptors, as COLMAP's brute-force
// matcher (and SiftGPU's) ranks them: by the dot product of the uint8 descriptors (about
// 512^2 cos of their angle: RootSIFT or L2 descriptors are unit vectors times 512), the
// largest first; per query row the train row with the largest dot and the two largest
// dots (reference spirula/reference/match.py top2). Exact: integer sums, at most
// 128 x 255^2 < 2^24. Ties keep the first train row (COLMAP's strict >). One thread per
// query row up to the capacity (rows past the count return at once), workgroup 64; the
// query row is held in registers, the train rows stream through the cache.
//   binding 0  descriptors  [2*capacity,32]  u32  read   image a's rows from 0, b's from capacity; 4 bytes a word
//   binding 1  sizes        [2]              u32  read   rows of a, rows of b
//   binding 2  top2         [capacity,4]     u32  write  best train row (0xffffffff: none), best dot, second dot, 0
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer DescriptorsBuf { uint descriptors[]; };
layout(std430, binding = 1) restrict readonly buffer SizesBuf { uint sizes[]; };
layout(std430, binding = 2) restrict writeonly buffer Top2Buf { uint top2[]; };

layout(push_constant) uniform Push {
    uint capacity;
    uint direction;  // 0: a's rows against b's, 1: b's against a's
} pc;

FN uint byte_dot(uint x, uint y) {
    return (x & 255u) * (y & 255u) + ((x >> 8u) & 255u) * ((y >> 8u) & 255u) +
           ((x >> 16u) & 255u) * ((y >> 16u) & 255u) + (x >> 24u) * (y >> 24u);
}

FN void match_top2_body(uint k) {
    uint n_query = pc.direction == 0u ? sizes[0] : sizes[1];
    uint n_train = pc.direction == 0u ? sizes[1] : sizes[0];
    if (k >= min(n_query, pc.capacity)) {
        return;
    }
    uint query = 32u * ((pc.direction == 0u ? 0u : pc.capacity) + k);
    uint train = 32u * (pc.direction == 0u ? pc.capacity : 0u);
    uint q[32];
    UNROLL
    for (uint w = 0u; w < 32u; ++w) {
        q[w] = descriptors[query + w];
    }
    uint best = 0u;
    uint second = 0u;
    uint best_row = 0xffffffffu;
    n_train = min(n_train, pc.capacity);
    for (uint j = 0u; j < n_train; ++j) {
        uint base = train + 32u * j;
        uint dot = 0u;
        UNROLL
        for (uint w = 0u; w < 32u; ++w) {
            dot += byte_dot(q[w], descriptors[base + w]);
        }
        if (dot > best) {
            second = best;
            best = dot;
            best_row = j;
        } else if (dot > second) {
            second = dot;
        }
    }
    top2[4u * k] = best_row;
    top2[4u * k + 1u] = best;
    top2[4u * k + 2u] = second;
    top2[4u * k + 3u] = 0u;
}

void main() { match_top2_body(global_index()); }
