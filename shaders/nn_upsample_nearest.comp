#version 450
// nn_upsample_nearest: torch's F.interpolate(x, size=(out_h, out_w), mode="nearest") over the
// last two axes: y[p, i, j] = x[p, min(floor(i in_h / out_h), in_h - 1), min(floor(j in_w /
// out_w), in_w - 1)] (torch's legacy nearest, not "nearest-exact"). SAM 2's FPN top-down
// path (2x). A copy, exact (reference spirula/reference/nn.py upsample_nearest). One thread
// per output element (workgroup 256, folded).
//   binding 0  x  [planes, in_h, in_w]    f32  read
//   binding 1  y  [planes, out_h, out_w]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) restrict writeonly buffer YBuf { float y[]; };

layout(push_constant) uniform Push {
    uint planes;
    uint in_h;
    uint in_w;
    uint out_h;
    uint out_w;
    uint align_corners;  // unused: the resize kernels' common push block
} pc;

FN void nn_upsample_nearest_body(uint i) {
    uint per = pc.out_h * pc.out_w;
    if (i >= pc.planes * per) {
        return;
    }
    uint p = i / per, r = i % per;
    // floor(d scale) with torch's f32 scale in / out
    uint sy = min(uint(float(r / pc.out_w) * (float(pc.in_h) / float(pc.out_h))), pc.in_h - 1u);
    uint sx = min(uint(float(r % pc.out_w) * (float(pc.in_w) / float(pc.out_w))), pc.in_w - 1u);
    y[i] = x[(p * pc.in_h + sy) * pc.in_w + sx];
}

void main() { nn_upsample_nearest_body(global_index()); }
