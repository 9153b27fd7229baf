#version 450
// nn_add: y = a + b, b broadcast by repetition: a viewed as [planes, rows, cols] and b as
// [b_planes, b_rows, b_cols] whose sizes divide a's, y[p, r, c] = a[p, r, c] + b[p % b_planes,
// r % b_rows, c % b_cols]. A residual connection (b as a), an embedding added to every batch
// item (b_planes 1), a window's embedding tiled over a grid (Hiera's, SAM 2). One f32 add:
// exact against f32(a + b) (reference spirula/reference/nn.py add). One thread per element
// (workgroup 256, folded).
//   binding 0  a  [planes, rows, cols]        f32  read
//   binding 1  b  [b_planes, b_rows, b_cols]  f32  read
//   binding 2  y  [planes, rows, cols]        f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer ABuf { float a[]; };
layout(std430, binding = 1) restrict readonly buffer BBuf { float b[]; };
layout(std430, binding = 2) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint planes;
    uint rows;
    uint cols;
    uint b_planes;
    uint b_rows;
    uint b_cols;
} pc;

FN void nn_add_body(uint i) {
    if (i >= pc.planes * pc.rows * pc.cols) {
        return;
    }
    uint c = i % pc.cols, r = (i / pc.cols) % pc.rows, p = i / (pc.cols * pc.rows);
    y[i] = a[i] + b[((p % pc.b_planes) * pc.b_rows + r % pc.b_rows) * pc.b_cols + c % pc.b_cols];
}

void main() { nn_add_body(global_index()); }
