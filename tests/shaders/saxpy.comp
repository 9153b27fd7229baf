#version 450
// saxpy (test kernel): y[i] = a * x[i] + y[i] for i < n. One thread per element.
//   binding 0  x  [n] f32  read
//   binding 1  y  [n] f32  read/write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(constant_id = 0) const float SCALE = 1.0;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint n;
    float a;
} pc;

void main() {
    uint i = global_index();
    if (i < pc.n) {
        y[i] = SCALE * pc.a * x[i] + y[i];
    }
}
