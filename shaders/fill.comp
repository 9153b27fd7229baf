#version 450
// fill: dst[offset + i] = value for i < count (the runtime's memset).
// Elements are 32-bit words, or uvec4 when VEC4=1 (offset and count then in
// uvec4s). One thread per element, grid-stride loop; workgroup 256.
//   binding 0  dst  [>= offset + count] word  write
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

layout(std430, binding = 0) writeonly buffer DstBuf { WORD dst[]; };

layout(push_constant) uniform Push {
    uint offset;
    uint count;
    uint value;
} pc;

FN void fill_body(uint i) { dst[pc.offset + i] = WORD(pc.value); }

void main() {
    for (uint i = global_index(); i < pc.count; i += grid_stride()) {
        fill_body(i);
    }
}
