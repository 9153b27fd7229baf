#version 450
// intersect_tile_write: one (tile key, id) pair per Gaussian-tile overlap,
// written front to back: key = camera * tiles_per_image + tile, id = the
// (camera, Gaussian) index i. A stable sort by key then groups the pairs by
// tile while keeping the depth order inside each tile.
// One thread per intersection j < min(total, capacity) (workgroup 256,
// folded): it finds its Gaussian by binary search in the exclusive prefix sum
// of the depth-ordered tile counts (the last p with offsets[p] <= j; Gaussians
// touching no tile share their successor's offset and are never the answer),
// then its tile: the k-th that tile culling keeps in that Gaussian's box, row
// by row (cull_nth, include/raster.glsl: the predicate projection_fwd counted
// with). Load is balanced however many tiles a Gaussian covers, and the
// writes are contiguous.
//   binding 0  sorted_ids  [n]        u32  read   (camera, Gaussian) index in depth order
//   binding 1  offsets     [n]        u32  read   exclusive prefix sum of the counts
//   binding 2  totals      [..]       u32  read   intersection count at count_offset
//   binding 3  xyop        [C*N,4]    f32  read
//   binding 4  radii       [C*N,2]    i32  read
//   binding 5  isect_keys  [capacity] u32  write
//   binding 6  isect_ids   [capacity] u32  write
//   binding 7  conics      [C*N,4]    f32  read
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "raster.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer SortedIdsBuf { uint sorted_ids[]; };
layout(std430, binding = 1) restrict readonly buffer OffsetsBuf { uint offsets[]; };
layout(std430, binding = 2) restrict readonly buffer TotalsBuf { uint totals[]; };
layout(std430, binding = 3) restrict readonly buffer XyopBuf { vec4 xyop[]; };
layout(std430, binding = 4) restrict readonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 5) restrict writeonly buffer IsectKeysBuf { uint isect_keys[]; };
layout(std430, binding = 6) restrict writeonly buffer IsectIdsBuf { uint isect_ids[]; };
layout(std430, binding = 7) restrict readonly buffer ConicsBuf { vec4 conics[]; };

layout(push_constant) uniform Push {
    uint n;  // cameras * Gaussians
    uint n_gaussians;
    uint tile_width;
    uint tile_height;
    uint capacity;
    uint count_offset;
} pc;

FN void intersect_tile_write_body(uint j) {
    if (j >= min(totals[pc.count_offset], pc.capacity) || pc.n == 0u) {
        return;
    }
    uint lo = 0u, hi = pc.n - 1u;
    while (lo < hi) {
        uint mid = (lo + hi + 1u) >> 1u;
        if (offsets[mid] <= j) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    uint id = sorted_ids[lo];
    uint k = j - offsets[lo];
    vec4 g = xyop[id];
    vec2 mean2d = vec2(g.x, g.y);
    vec2 radius = vec2(radii[id]);
    vec2 tile_min, tile_max;
    tile_rect(mean2d, radius, vec2(pc.tile_width, pc.tile_height), tile_min, tile_max);
    vec4 q = conics[id];
    uvec2 tile = uvec2(cull_nth(mean2d, cull_ellipse(vec3(q.x, q.y, q.z), g.z), tile_min, tile_max, float(k)));
    uint tx = tile.x, ty = tile.y;
    isect_keys[j] = (id / pc.n_gaussians) * pc.tile_width * pc.tile_height + ty * pc.tile_width + tx;
    isect_ids[j] = id;
}

void main() { intersect_tile_write_body(global_index()); }
