#version 450
// intersect_tile_write: one (tile key, id) pair per Gaussian-tile overlap,
// written front to back: key = camera * tiles_per_image + tile, id = the
// (camera, Gaussian) index i. A stable sort by key then groups the pairs by
// tile while keeping the depth order inside each tile.
// One thread per depth-sorted position p < n (workgroup 256, folded). Pairs
// past `capacity` are dropped (the caller sees the total and grows).
//   binding 0  sorted_ids  [n]       u32  read
//   binding 1  offsets     [n]       u32  read   exclusive prefix sum of the counts
//   binding 2  tile_counts [n]       u32  read
//   binding 3  xyop        [n,4]     f32  read
//   binding 4  radii       [n,2]     i32  read
//   binding 5  isect_keys  [capacity] u32 write
//   binding 6  isect_ids   [capacity] u32 write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer SortedIdsBuf { uint sorted_ids[]; };
layout(std430, binding = 1) readonly buffer OffsetsBuf { uint offsets[]; };
layout(std430, binding = 2) readonly buffer TileCountsBuf { uint tile_counts[]; };
layout(std430, binding = 3) readonly buffer XyopBuf { vec4 xyop[]; };
layout(std430, binding = 4) readonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 5) writeonly buffer IsectKeysBuf { uint isect_keys[]; };
layout(std430, binding = 6) writeonly buffer IsectIdsBuf { uint isect_ids[]; };

layout(push_constant) uniform Push {
    uint n;               // cameras * Gaussians
    uint n_gaussians;
    uint tile_width;
    uint tile_height;
    uint capacity;
} pc;

void main() {
    uint p = global_index();
    if (p >= pc.n) {
        return;
    }
    uint id = sorted_ids[p];
    if (tile_counts[id] == 0u) {
        return;
    }
    uint out_i = offsets[p];
    vec2 mean2d = xyop[id].xy;
    vec2 radius = vec2(radii[id]);
    uvec2 tmin = uvec2(clamp(floor(mean2d / 16.0 - radius / 16.0), vec2(0.0),
                             vec2(pc.tile_width, pc.tile_height)));
    uvec2 tmax = uvec2(clamp(ceil(mean2d / 16.0 + radius / 16.0), vec2(0.0),
                             vec2(pc.tile_width, pc.tile_height)));
    uint base = (id / pc.n_gaussians) * pc.tile_width * pc.tile_height;
    for (uint ty = tmin.y; ty < tmax.y; ++ty) {
        for (uint tx = tmin.x; tx < tmax.x; ++tx) {
            if (out_i < pc.capacity) {
                isect_keys[out_i] = base + ty * pc.tile_width + tx;
                isect_ids[out_i] = id;
            }
            ++out_i;
        }
    }
}
