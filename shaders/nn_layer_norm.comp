#version 450
// nn_layer_norm: torch's nn.LayerNorm over the last axis (width C): mean, then the biased
// variance of the differences (two passes, f32), y = (x - mean) inversesqrt(var + eps) gamma
// + beta (reference spirula/reference/nn.py layer_norm). One thread per row (workgroup 64,
// folded): rows are hundreds of values wide in SAM's models.
//   binding 0  x      [rows, C]  f32  read
//   binding 1  gamma  [C]        f32  read
//   binding 2  beta   [C]        f32  read
//   binding 3  y      [rows, C]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict readonly buffer GammaBuf { float gamma[]; };
layout(std430, binding = 2) restrict readonly buffer BetaBuf { float beta[]; };
layout(std430, binding = 3) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint width;
    float eps;
} pc;

FN void nn_layer_norm_body(uint r) {
    if (r >= pc.rows) {
        return;
    }
    uint base = r * pc.width;
    float sum = 0.0f;
    for (uint i = 0u; i < pc.width; ++i) {
        sum += x[base + i];
    }
    float mean = sum / float(pc.width);
    float sq = 0.0f;
    for (uint i = 0u; i < pc.width; ++i) {
        float d = x[base + i] - mean;
        sq += d * d;
    }
    float inv = inversesqrt(sq / float(pc.width) + pc.eps);
    for (uint i = 0u; i < pc.width; ++i) {
        y[base + i] = (x[base + i] - mean) * inv * gamma[i] + beta[i];
    }
}

void main() { nn_layer_norm_body(global_index()); }
