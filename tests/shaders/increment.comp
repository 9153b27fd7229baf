#version 450
// increment (test kernel): dst[i] = src[i] + 1 for i < n: chained src->dst->src
// it makes a long series of dependent dispatches with an exact answer.
//   binding 0  src  [n] u32  read
//   binding 1  dst  [n] u32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer SrcBuf { uint src[]; };
layout(std430, binding = 1) writeonly buffer DstBuf { uint dst[]; };

layout(push_constant) uniform Push {
    uint n;
} pc;

void main() {
    uint i = global_index();
    if (i < pc.n) {
        dst[i] = src[i] + 1u;
    }
}
