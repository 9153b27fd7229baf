#version 450
// spin (test kernel): a dependent arithmetic loop of `iters` steps per thread,
// so a dispatch lasts long enough to compare GPU timestamps with wall time.
//   binding 0  out  [n] u32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) writeonly buffer OutBuf { uint out_words[]; };

layout(push_constant) uniform Push {
    uint n;
    uint iters;
} pc;

void main() {
    uint i = global_index();
    uint h = i;
    for (uint k = 0u; k < pc.iters; ++k) {
        h = h * 1664525u + 1013904223u;
    }
    if (i < pc.n) {
        out_words[i] = h;
    }
}
