#version 450
// tile_ranges: the [start, end) range of each tile in the tile-sorted
// intersection list. Tiles with no intersection keep the (0, 0) the caller
// filled. One thread per intersection j < m (workgroup 256, folded).
//   binding 0  isect_keys  [>= m]     u32  read   sorted tile keys
//   binding 1  num_isects  [off + 1]  u32  read   m = min(num_isects[count_offset], m_max)
//   binding 2  ranges      [C*T, 2]   u32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer IsectKeysBuf { uint isect_keys[]; };
layout(std430, binding = 1) restrict readonly buffer NumIsectsBuf { uint num_isects[]; };
layout(std430, binding = 2) restrict writeonly buffer RangesBuf { uvec2 ranges[]; };

layout(push_constant) uniform Push {
    uint m_max;
    uint count_offset;
} pc;

FN void tile_ranges_body(uint j) {
    uint m = min(num_isects[pc.count_offset], pc.m_max);
    if (j >= m) {
        return;
    }
    uint key = isect_keys[j];
    if (j == 0u || isect_keys[j - 1u] != key) {
        ranges[key].x = j;
    }
    if (j == m - 1u || isect_keys[j + 1u] != key) {
        ranges[key].y = j + 1u;
    }
}

void main() { tile_ranges_body(global_index()); }
