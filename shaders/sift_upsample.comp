#version 450
// sift_upsample: the SIFT scale space's first octave (first_octave -1): the grey image
// doubled as VLFeat doubles it (reference spirula/reference/sift.py upsample): output
// pixel (2x + i, 2y + j) is the bilinear value half a step past input pixel (x, y),
// rows first: r = (a + right) / 2, then (row y + row y + 1) / 2; the last row and column
// repeated. One thread per output pixel (4 w h), workgroup 256, folded.
//   binding 0  src  [h,w]    f32  read   the grey image in [0, 1]
//   binding 1  dst  [>= off + 4hw]  f32  write  the doubled image at dst_offset, [2h,2w]
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer SrcBuf { float src[]; };
layout(std430, binding = 1) restrict writeonly buffer DstBuf { float dst[]; };

layout(push_constant) uniform Push {
    uint width;  // of src
    uint height;
    uint dst_offset;
} pc;

// row y of the image, upsampled along x, at output column u
FN float sift_up_row(uint y, uint u) {
    uint x = u / 2u;
    float a = src[y * pc.width + x];
    if (u % 2u == 0u) {
        return a;
    }
    return 0.5f * (a + src[y * pc.width + min(x + 1u, pc.width - 1u)]);
}

FN void sift_upsample_body(uint i) {
    uint w2 = 2u * pc.width;
    if (i >= w2 * 2u * pc.height) {
        return;
    }
    uint u = i % w2, v = i / w2, y = v / 2u;
    float a = sift_up_row(y, u);
    float value = a;
    if (v % 2u == 1u) {
        value = 0.5f * (a + sift_up_row(min(y + 1u, pc.height - 1u), u));
    }
    dst[pc.dst_offset + i] = value;
}

void main() { sift_upsample_body(global_index()); }
