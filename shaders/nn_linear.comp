#version 450
// nn_linear: y[r, o] = sum_i x[r, i] w[o, i] + bias[o], torch's nn.Linear (weights [out, in]),
// the neural-network runtime's matmul with weights (spirula/nn/, docs/design.md §3.3).
// Weights in fp16, two per word (low half first, each row padded to whole words with a zero
// half), decoded exactly (storage.glsl's half_to_float); activations, bias and the sum in
// f32, in the order i = 0, 1, ... (reference spirula/reference/nn.py linear). One thread per
// output element (workgroup 256, folded).
//   binding 0  x     [rows, n_in]                 f32  read
//   binding 1  w     [n_out, (n_in + 1) / 2]      u32  read   fp16 pairs
//   binding 2  bias  [n_out] (one word unused)    f32  read
//   binding 3  y     [rows, n_out]                f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "storage.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict readonly buffer WBuf { uint w[]; };
layout(std430, binding = 2) restrict readonly buffer BiasBuf { float bias[]; };
layout(std430, binding = 3) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n_in;
    uint n_out;
    uint has_bias;  // 0: no bias (the buffer is not read)
} pc;

FN void nn_linear_body(uint t) {
    if (t >= pc.rows * pc.n_out) {
        return;
    }
    uint r = t / pc.n_out;
    uint o = t - r * pc.n_out;
    uint words = (pc.n_in + 1u) / 2u;
    uint xa = r * pc.n_in;
    uint wa = o * words;
    float acc = 0.0f;
    uint pairs = pc.n_in / 2u;
    for (uint j = 0u; j < pairs; ++j) {
        uint h = w[wa + j];
        acc += x[xa + 2u * j] * half_to_float(h & 65535u);
        acc += x[xa + 2u * j + 1u] * half_to_float(h >> 16u);
    }
    if (pairs < words) {
        acc += x[xa + 2u * pairs] * half_to_float(w[wa + pairs] & 65535u);
    }
    y[t] = pc.has_bias != 0u ? acc + bias[o] : acc;
}

void main() { nn_linear_body(global_index()); }
