#version 450
// nn_upsample_bilinear: torch's F.interpolate(x, size=(out_h, out_w), mode="bilinear",
// align_corners=ac) over the last two axes (no antialiasing, so a smaller size samples too):
// y[p, i, j] from the four pixels of x[p] around its source point, sy = (i + 0.5) in_h / out_h
// - 0.5 clamped at 0 (ac: i (in_h - 1) / (out_h - 1)), the same along x. SAM's mask and
// position-embedding resizes (reference spirula/reference/nn.py upsample_bilinear, the bound
// there). One thread per output element (workgroup 256, folded).
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
    uint align_corners;
} pc;

// the source coordinate of output index d along an axis of n_in -> n_out (torch's
// area_pixel_compute_source_index for the linear modes)
FN float source_coord(uint d, uint n_in, uint n_out) {
    if (pc.align_corners != 0u) {
        return n_out > 1u ? float(d) * (float(n_in - 1u) / float(n_out - 1u)) : 0.0f;
    }
    return max((float(d) + 0.5f) * (float(n_in) / float(n_out)) - 0.5f, 0.0f);
}

FN void nn_upsample_bilinear_body(uint i) {
    uint per = pc.out_h * pc.out_w;
    if (i >= pc.planes * per) {
        return;
    }
    uint p = i / per, r = i % per;
    float sy = source_coord(r / pc.out_w, pc.in_h, pc.out_h);
    float sx = source_coord(r % pc.out_w, pc.in_w, pc.out_w);
    uint y0 = min(uint(sy), pc.in_h - 1u), x0 = min(uint(sx), pc.in_w - 1u);
    uint y1 = min(y0 + 1u, pc.in_h - 1u), x1 = min(x0 + 1u, pc.in_w - 1u);
    float ly = sy - float(y0), lx = sx - float(x0);
    uint base = p * pc.in_h * pc.in_w;
    float top = (1.0f - lx) * x[base + y0 * pc.in_w + x0] + lx * x[base + y0 * pc.in_w + x1];
    float bottom = (1.0f - lx) * x[base + y1 * pc.in_w + x0] + lx * x[base + y1 * pc.in_w + x1];
    y[i] = (1.0f - ly) * top + ly * bottom;
}

void main() { nn_upsample_bilinear_body(global_index()); }
