#version 450
// rasterize_chunks: the table of rasterize_bwd's workgroups (tile-list splitting, docs/design.md
// §2.4). Tile t = camera * tiles + tile with list [s, e), n = e - s > 0, has ceil(n / chunk)
// chunks; chunk k gets id t + s / chunk + k, injective over the tiles (f(t) + ceil(n / chunk)
// - 1 < f(t + 1) since s / chunk + ceil(n / chunk) <= (s + n) / chunk + 1) and below
// C * tiles + ceil(capacity / chunk) + 1. The caller fills the table with CHUNK_NONE first;
// empty tiles (range (0, 0)) have no chunk. One thread per tile (256, folded).
//   binding 0  ranges       [C*T,2]   u32  read   per tile [start, end) in isect_ids
//   binding 1  chunk_table  [I,2]     u32  write  chunk_table[id] = (t, k)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "raster.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer RangesBuf { uvec2 ranges[]; };
layout(std430, binding = 1) restrict writeonly buffer ChunkTableBuf { uvec2 chunk_table[]; };

layout(push_constant) uniform Push {
    uint tiles;      // C * tiles
    uint chunk;      // entries of a chunk (a multiple of TILE_PIXELS)
    uint chunk_ids;  // entries of chunk_table
} pc;

FN void rasterize_chunks_body(uint t) {
    if (t >= pc.tiles) {
        return;
    }
    uvec2 range = ranges[t];
    uint n = range.y - range.x;
    uint first = t + range.x / pc.chunk;
    uint chunks = (n + pc.chunk - 1u) / pc.chunk;
    for (uint k = 0u; k < chunks && first + k < pc.chunk_ids; ++k) {
        chunk_table[first + k] = uvec2(t, k);
    }
}

void main() { rasterize_chunks_body(global_index()); }
