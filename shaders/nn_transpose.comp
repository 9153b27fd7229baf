#version 450
// nn_transpose: the last two axes swapped, y[p, s, r] = x[p, r, s] (x [planes, rows, cols]):
// between the convolutions' channels-first [C, H W] and Hiera's channels-last [H W, C]
// (SAM 2's permutes). A copy, exact. One thread per output element (workgroup 256, folded).
//   binding 0  x  [planes, rows, cols]  f32  read
//   binding 1  y  [planes, cols, rows]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint planes;
    uint rows;
    uint cols;
} pc;

FN void nn_transpose_body(uint i) {
    if (i >= pc.planes * pc.rows * pc.cols) {
        return;
    }
    uint r = i % pc.rows, s = (i / pc.rows) % pc.cols, p = i / (pc.rows * pc.cols);
    y[i] = x[(p * pc.rows + r) * pc.cols + s];
}

void main() { nn_transpose_body(global_index()); }
