#version 450
// intersect_tile_count: each Gaussian's tile count, in depth order, so that
// an exclusive prefix sum of it (prefix_sum) gives where each Gaussian's
// intersections start, front to back.
// One thread per sorted position p < n (workgroup 256, folded).
//   binding 0  sorted_ids  [n] u32  read   (camera, Gaussian) index i in depth order
//   binding 1  tile_counts [n] u32  read   per i, from projection_fwd
//   binding 2  offsets     [n] u32  write  tile_counts[sorted_ids[p]]
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer SortedIdsBuf { uint sorted_ids[]; };
layout(std430, binding = 1) restrict readonly buffer TileCountsBuf { uint tile_counts[]; };
layout(std430, binding = 2) restrict writeonly buffer OffsetsBuf { uint offsets[]; };

layout(push_constant) uniform Push {
    uint n;
} pc;

FN void intersect_tile_count_body(uint p) {
    if (p < pc.n) {
        offsets[p] = tile_counts[sorted_ids[p]];
    }
}

void main() { intersect_tile_count_body(global_index()); }
