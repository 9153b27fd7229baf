#version 450
// nn_softmax: y = softmax(scale x) over the last axis (width C), numerically stable: the
// row's largest scaled value m is subtracted before exp, the sum of exp(scale x - m) divides
// (reference spirula/reference/nn.py softmax). Attention folds its 1 / sqrt(head width) into
// scale. One thread per row (workgroup 64, folded).
//   binding 0  x  [rows, C]  f32  read
//   binding 1  y  [rows, C]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint width;
    float scale;
} pc;

FN void nn_softmax_body(uint r) {
    if (r >= pc.rows) {
        return;
    }
    uint base = r * pc.width;
    float m = pc.scale * x[base];
    for (uint i = 1u; i < pc.width; ++i) {
        m = max(m, pc.scale * x[base + i]);
    }
    float sum = 0.0f;
    for (uint i = 0u; i < pc.width; ++i) {
        sum += exp(pc.scale * x[base + i] - m);
    }
    float inv = 1.0f / sum;
    for (uint i = 0u; i < pc.width; ++i) {
        y[base + i] = exp(pc.scale * x[base + i] - m) * inv;
    }
}

void main() { nn_softmax_body(global_index()); }
