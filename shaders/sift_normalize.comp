#version 450
// sift_normalize: SIFT histograms to descriptors as COLMAP stores them (reference
// spirula/reference/sift.py normalize): L2-normalised (VLFeat adds FLT_EPSILON to the
// norm), clamped at 0.2, L2-normalised again; with root (COLMAP's L1_ROOT, RootSIFT)
// L1-normalised and square-rooted; then min(255, round(512 d)) as bytes in COLMAP's
// (UBC) order: orientation bin k of each spatial cell at (8 - k) % 8. One thread per
// oriented keypoint, workgroup 64.
//   binding 0  hist         [capacity,128]  f32  read   sift_descriptor's histograms
//   binding 1  counts       [2]             u32  read   counts[1]: oriented keypoints
//   binding 2  descriptors  [capacity,32]   u32  write  128 bytes a keypoint, 4 a word (little end first)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer HistBuf { float hist[]; };
layout(std430, binding = 1) restrict readonly buffer CountsBuf { uint counts[]; };
layout(std430, binding = 2) restrict writeonly buffer DescriptorsBuf { uint descriptors[]; };

layout(push_constant) uniform Push {
    uint capacity;
    uint root;  // 1: RootSIFT (L1_ROOT), 0: L2
} pc;

FN void sift_normalize_body(uint k) {
    if (k >= min(counts[1], pc.capacity)) {
        return;
    }
    uint base = 128u * k;
    float s2 = 0.0f;
    for (uint i = 0u; i < 128u; ++i) {
        s2 += hist[base + i] * hist[base + i];
    }
    float n1 = sqrt(s2) + 1.1920929e-7f;
    float c2 = 0.0f;
    for (uint i = 0u; i < 128u; ++i) {
        float c = min(hist[base + i] / n1, 0.2f);
        c2 += c * c;
    }
    float n2 = sqrt(c2) + 1.1920929e-7f;
    float l1 = 0.0f;
    for (uint i = 0u; i < 128u; ++i) {
        l1 += min(hist[base + i] / n1, 0.2f) / n2;
    }
    if (l1 <= 0.0f) {
        l1 = 1.0f;
    }
    for (uint word = 0u; word < 32u; ++word) {
        uint packed = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            uint u = 4u * word + j;  // COLMAP's index: cell 8 + (8 - k) % 8
            uint src = base + (u / 8u) * 8u + (8u - u % 8u) % 8u;
            float d = min(hist[src] / n1, 0.2f) / n2;
            if (pc.root != 0u) {
                d = sqrt(d / l1);
            }
            uint q = uint(min(floor(512.0f * d + 0.5f), 255.0f));
            packed |= q << (8u * j);
        }
        descriptors[32u * k + word] = packed;
    }
}

void main() { sift_normalize_body(global_index()); }
