#version 450
// nn_gelu: y = x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))), torch's nn.GELU() (the erf form,
// approximate='none'). erf from Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7 on [0, inf),
// odd in x (reference spirula/reference/nn.py gelu, which uses the exact erf; the bound in
// tests/test_nn.py). x and y are distinct buffers (restrict bindings). One thread per
// element (workgroup 256, folded).
//   binding 0  x  [count]  f32  read
//   binding 1  y  [count]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint count;
} pc;

// erf(z) for z >= 0: 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1 / (1 + p z)
FN float erf_nonneg(float z) {
    float t = 1.0f / (1.0f + 0.3275911f * z);
    float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    return 1.0f - poly * exp(-z * z);
}

FN void nn_gelu_body(uint i) {
    if (i >= pc.count) {
        return;
    }
    float v = x[i];
    float e = erf_nonneg(max(v, -v) * 0.70710678f);
    y[i] = 0.5f * v * (1.0f + (v < 0.0f ? -e : e));
}

void main() { nn_gelu_body(global_index()); }
