#version 450
// sift_downsample: the base of the next SIFT octave: every other pixel of level S of the
// octave below (reference spirula/reference/sift.py downsample). One thread per output
// pixel, workgroup 256, folded.
//   binding 0  src  [...]  f32  read   the finer level at src_offset, [.., src_width]
//   binding 1  dst  [...]  f32  write  [height, width] at dst_offset
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer SrcBuf { float src[]; };
layout(std430, binding = 1) restrict writeonly buffer DstBuf { float dst[]; };

layout(push_constant) uniform Push {
    uint src_offset;
    uint src_width;
    uint dst_offset;
    uint width;  // of dst
    uint height;
} pc;

FN void sift_downsample_body(uint i) {
    if (i >= pc.width * pc.height) {
        return;
    }
    uint x = i % pc.width, y = i / pc.width;
    dst[pc.dst_offset + i] = src[pc.src_offset + 2u * y * pc.src_width + 2u * x];
}

void main() { sift_downsample_body(global_index()); }
