#version 450
// sift_blur: one pass of the separable Gaussian of the SIFT scale space: along x (axis 0)
// or y (axis 1), taps[taps_offset + k], k = 0..2 radius, the image padded by its edge
// pixels (reference spirula/reference/sift.py blur_rows, blur_cols). One thread per
// pixel, workgroup 256, folded.
//   binding 0  src   [...]  f32  read   [height, width] at src_offset
//   binding 1  taps  [...]  f32  read   the normalised kernels of every blur, concatenated
//   binding 2  dst   [...]  f32  write  [height, width] at dst_offset
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer SrcBuf { float src[]; };
layout(std430, binding = 1) restrict readonly buffer TapsBuf { float taps[]; };
layout(std430, binding = 2) restrict writeonly buffer DstBuf { float dst[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint src_offset;
    uint dst_offset;
    uint taps_offset;
    int radius;
    uint axis;  // 0: along x (rows), 1: along y (columns)
} pc;

FN void sift_blur_body(uint i) {
    if (i >= pc.width * pc.height) {
        return;
    }
    int x = int(i % pc.width), y = int(i / pc.width);
    int n = pc.axis == 0u ? int(pc.width) : int(pc.height);
    int c = pc.axis == 0u ? x : y;
    float acc = 0.0f;
    for (int k = -pc.radius; k <= pc.radius; ++k) {
        int j = min(max(c + k, 0), n - 1);
        uint p = pc.axis == 0u ? uint(y) * pc.width + uint(j) : uint(j) * pc.width + uint(x);
        acc += taps[pc.taps_offset + uint(k + pc.radius)] * src[pc.src_offset + p];
    }
    dst[pc.dst_offset + i] = acc;
}

void main() { sift_blur_body(global_index()); }
