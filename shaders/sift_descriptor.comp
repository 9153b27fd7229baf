#version 450
// sift_descriptor: the 4x4x8 SIFT histogram of each oriented keypoint (VLFeat; reference
// spirula/reference/sift.py descriptor_hist): the gradients of its level within VLFeat's
// window (W = floor(sqrt 2 SBP 5 / 2 + 0.5), SBP = magnif sigma; samples inside the
// octave's 1-pixel border), in the keypoint's frame in units of SBP, each weighted by
// magnitude x exp(-|n|^2 / 8) and spread trilinearly over the two nearest spatial bins
// per axis and the two nearest of 8 orientation bins. One thread per (keypoint, spatial
// bin): it visits the samples within one bin of its bin's centre only. Unnormalised, in
// VLFeat's order (orientation + 8 x bin + 32 y bin); sift_normalize follows. Workgroup 64.
//   binding 0  gauss     [...]                  f32  read   every octave's levels (octaves[])
//   binding 1  octaves   [O,4]                  u32  read   width, height, gauss offset, 0
//   binding 2  oriented  [capacity,8]           f32  read   sift_orientation's records
//   binding 3  counts    [2]                    u32  read   counts[1]: oriented keypoints
//   binding 4  hist      [capacity,128]         f32  write  the histograms
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer GaussBuf { float gauss[]; };
layout(std430, binding = 1) restrict readonly buffer OctavesBuf { uint octaves[]; };
layout(std430, binding = 2) restrict readonly buffer OrientedBuf { float oriented[]; };
layout(std430, binding = 3) restrict readonly buffer CountsBuf { uint counts[]; };
layout(std430, binding = 4) restrict writeonly buffer HistBuf { float hist[]; };

layout(push_constant) uniform Push {
    int first_octave;
    uint levels;    // Gaussian levels an octave (S + 3)
    uint capacity;  // of oriented
    float magnif;
} pc;

#include "sift_gradient.glsl"

FN void sift_descriptor_body(uint t) {
    uint k = t / 16u;
    if (k >= min(counts[1], pc.capacity)) {
        return;
    }
    int bx = int(t % 4u) - 2, by = int((t / 4u) % 4u) - 2;
    float x = oriented[8u * k], y = oriented[8u * k + 1u], sigma = oriented[8u * k + 2u];
    float angle0 = oriented[8u * k + 3u];
    uint oi = uint(int(oriented[8u * k + 4u]) - pc.first_octave);
    int w = int(octaves[4u * oi]), h = int(octaves[4u * oi + 1u]);
    uint base = octaves[4u * oi + 2u] + uint(int(oriented[8u * k + 5u]) + 1) * uint(w * h);
    int xi = int(x + 0.5f), yi = int(y + 0.5f);
    float st0 = sin(angle0), ct0 = cos(angle0);
    float sbp = pc.magnif * sigma;
    int W = int(floor(1.41421356f * sbp * 2.5f + 0.5f));
    // the bin's centre (bx + 1/2, by + 1/2) in pixels from the keypoint, the square's reach
    float cx = float(bx) + 0.5f, cy = float(by) + 0.5f;
    float ox = sbp * (ct0 * cx - st0 * cy), oy = sbp * (st0 * cx + ct0 * cy);
    float reach = sbp * (abs(ct0) + abs(st0)) + 1.0f;
    int x0 = max(max(-W, 1 - xi), int(floor(x - float(xi) + ox - reach)));
    int x1 = min(min(W, w - xi - 2), int(ceil(x - float(xi) + ox + reach)));
    int y0 = max(max(-W, 1 - yi), int(floor(y - float(yi) + oy - reach)));
    int y1 = min(min(W, h - yi - 2), int(ceil(y - float(yi) + oy + reach)));
    float acc[8];
    for (int i = 0; i < 8; ++i) {
        acc[i] = 0.0f;
    }
    for (int dyi = y0; dyi <= y1; ++dyi) {
        for (int dxi = x0; dxi <= x1; ++dxi) {
            float dx = float(xi + dxi) - x, dy = float(yi + dyi) - y;
            float nx = (ct0 * dx + st0 * dy) / sbp, ny = (-st0 * dx + ct0 * dy) / sbp;
            float wx = 1.0f - abs(nx - cx), wy = 1.0f - abs(ny - cy);
            if (wx > 0.0f && wy > 0.0f) {
                vec2 g = sift_gradient(base, w, h, xi + dxi, yi + dyi);
                float theta = g.y - angle0;
                while (theta > 6.2831853f) {
                    theta -= 6.2831853f;
                }
                while (theta < 0.0f) {
                    theta += 6.2831853f;
                }
                float nt = 8.0f * theta / 6.2831853f;
                int bt = int(floor(nt));
                float rt = nt - float(bt);
                float win = exp(-(nx * nx + ny * ny) / 8.0f);
                float m = win * g.x * wx * wy;
                acc[bt % 8] += m * (1.0f - rt);
                acc[(bt + 1) % 8] += m * rt;
            }
        }
    }
    uint out_base = 128u * k + 8u * uint(bx + 2) + 32u * uint(by + 2);
    for (int i = 0; i < 8; ++i) {
        hist[out_base + uint(i)] = acc[i];
    }
}

void main() { sift_descriptor_body(global_index()); }
