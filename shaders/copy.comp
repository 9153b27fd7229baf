#version 450
// copy: dst[dst_offset + i] = src[src_offset + i] for i < count.
// The runtime's D2D copy, and the H2D/D2H step through host staging memory.
// Elements are 32-bit words, or uvec4 when VEC4=1 (offsets and count then in
// uvec4s): a vec4 copy reaches ~97% of the H200's bandwidth, a scalar one ~77%.
// One thread per element, grid-stride loop; workgroup 256.
//   binding 0  src  [>= src_offset + count] word  read
//   binding 1  dst  [>= dst_offset + count] word  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

#ifndef VEC4
#define VEC4 0
#endif
#if VEC4
#define WORD uvec4
#else
#define WORD uint
#endif

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer SrcBuf { WORD src[]; };
layout(std430, binding = 1) writeonly buffer DstBuf { WORD dst[]; };

layout(push_constant) uniform Push {
    uint src_offset;
    uint dst_offset;
    uint count;
} pc;

FN void copy_body(uint i) { dst[pc.dst_offset + i] = src[pc.src_offset + i]; }

void main() {
    for (uint i = global_index(); i < pc.count; i += grid_stride()) {
        copy_body(i);
    }
}
