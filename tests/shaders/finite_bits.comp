#version 450
// finite_bits (test kernel): finite1 of finite.glsl on raw float bits.
//   binding 0  words   [n] u32  read   IEEE 754 bits
//   binding 1  finite  [n] u32  write  1 if finite1(uintBitsToFloat(word))
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "finite.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer WordsBuf { uint words[]; };
layout(std430, binding = 1) writeonly buffer FiniteBuf { uint finite[]; };

layout(push_constant) uniform Push {
    uint n;
} pc;

void main() {
    uint i = global_index();
    if (i < pc.n) {
        finite[i] = finite1(uintBitsToFloat(words[i])) ? 1u : 0u;
    }
}
