#version 450
// nn_upsample_bicubic: torch's F.interpolate(x, size=(out_h, out_w), mode="bicubic",
// align_corners=ac) over the last two axes (no antialiasing): y[p, i, j] = sum over the 4 x 4
// pixels of x[p] from floor(s) - 1 to floor(s) + 2 (each index clamped into the image) of
// the Keys cubic weights (A = -0.75) of t = s - floor(s), s = (i + 0.5) in_h / out_h - 0.5
// (not clamped, unlike the linear modes; ac: i (in_h - 1) / (out_h - 1)), the same along x.
// Hiera's position embedding resize (SAM 2). Reference spirula/reference/nn.py
// upsample_bicubic, the bound there. One thread per output element (workgroup 256, folded).
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
// area_pixel_compute_source_index with cubic = true)
FN float cubic_source(uint d, uint n_in, uint n_out) {
    if (pc.align_corners != 0u) {
        return n_out > 1u ? float(d) * (float(n_in - 1u) / float(n_out - 1u)) : 0.0f;
    }
    return (float(d) + 0.5f) * (float(n_in) / float(n_out)) - 0.5f;
}

// Keys' cubic convolution weights (A = -0.75) of the taps at floor - 1 .. floor + 2
FN vec4 cubic_weights(float t) {
    const float A = -0.75f;
    float a = t + 1.0f, u = 1.0f - t, b = u + 1.0f;
    return vec4(((A * a - 5.0f * A) * a + 8.0f * A) * a - 4.0f * A, ((A + 2.0f) * t - (A + 3.0f)) * t * t + 1.0f,
                ((A + 2.0f) * u - (A + 3.0f)) * u * u + 1.0f, ((A * b - 5.0f * A) * b + 8.0f * A) * b - 4.0f * A);
}

FN float tap(uint base, int row, int col) {
    uint r = uint(min(max(row, 0), int(pc.in_h) - 1)), c = uint(min(max(col, 0), int(pc.in_w) - 1));
    return x[base + r * pc.in_w + c];
}

FN void nn_upsample_bicubic_body(uint i) {
    uint per = pc.out_h * pc.out_w;
    if (i >= pc.planes * per) {
        return;
    }
    uint p = i / per, r = i % per;
    float sy = cubic_source(r / pc.out_w, pc.in_h, pc.out_h);
    float sx = cubic_source(r % pc.out_w, pc.in_w, pc.out_w);
    float fy = floor(sy), fx = floor(sx);
    vec4 wy = cubic_weights(sy - fy), wx = cubic_weights(sx - fx);
    int y0 = int(fy) - 1, x0 = int(fx) - 1;
    uint base = p * pc.in_h * pc.in_w;
    float sum = 0.0f;
    for (int k = 0; k < 4; ++k) {
        float row = wx.x * tap(base, y0 + k, x0) + wx.y * tap(base, y0 + k, x0 + 1) + wx.z * tap(base, y0 + k, x0 + 2) +
                    wx.w * tap(base, y0 + k, x0 + 3);
        sum += (k == 0 ? wy.x : k == 1 ? wy.y : k == 2 ? wy.z : wy.w) * row;
    }
    y[i] = sum;
}

void main() { nn_upsample_bicubic_body(global_index()); }
