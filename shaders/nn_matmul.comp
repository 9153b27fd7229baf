#version 450
// nn_matmul: batched f32 matrix product c[z, i, j] = sum_k a[z, i, k] b[z, k, j], each operand
// read through strides so that attention needs no copies (spirula/nn/ attention: Q K^T reads
// K with its strides swapped, P V writes the heads side by side). A batch index z is split as
// (outer, inner) = (z / inner_count, z % inner_count) (e.g. batch and head), each with its own
// stride per operand, and each operand starts at its own offset (K and V inside one qkv
// row). Sum in f32 in the order k = 0, 1, ... (reference spirula/reference/nn.py matmul).
// One thread per output element (workgroup 256, folded).
//   binding 0  a  [...]  f32  read
//   binding 1  b  [...]  f32  read
//   binding 2  c  [...]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer ABuf { float a[]; };
layout(std430, binding = 1) restrict readonly buffer BBuf { float b[]; };
layout(std430, binding = 2) restrict writeonly buffer CBuf { float c[]; };

// element offsets and strides; a at (outer, inner, i, k), b at (outer, inner, k, j), c at
// (outer, inner, i, j)
layout(push_constant) uniform Push {
    uint batch;  // outer x inner
    uint inner_count;
    uint m;
    uint n;
    uint k;
    uint a_offset;
    uint b_offset;
    uint c_offset;
    uint a_outer;
    uint a_inner;
    uint a_row;
    uint a_col;
    uint b_outer;
    uint b_inner;
    uint b_row;
    uint b_col;
    uint c_outer;
    uint c_inner;
    uint c_row;
    uint c_col;
} pc;

FN void nn_matmul_body(uint t) {
    uint mn = pc.m * pc.n;
    if (t >= pc.batch * mn) {
        return;
    }
    uint z = t / mn;
    uint ij = t - z * mn;
    uint i = ij / pc.n;
    uint j = ij - i * pc.n;
    uint zo = z / pc.inner_count;
    uint zi = z - zo * pc.inner_count;
    uint pa = pc.a_offset + zo * pc.a_outer + zi * pc.a_inner + i * pc.a_row;
    uint pb = pc.b_offset + zo * pc.b_outer + zi * pc.b_inner + j * pc.b_col;
    float acc = 0.0f;
    for (uint q = 0u; q < pc.k; ++q) {
        acc += a[pa + q * pc.a_col] * b[pb + q * pc.b_row];
    }
    c[pc.c_offset + zo * pc.c_outer + zi * pc.c_inner + i * pc.c_row + j * pc.c_col] = acc;
}

void main() { nn_matmul_body(global_index()); }
