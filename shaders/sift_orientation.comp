#version 450
// sift_orientation: the orientations of each SIFT keypoint (VLFeat; reference
// spirula/reference/sift.py orientation_hist, orientation_peaks): a 36-bin histogram of
// the gradient angles of its level within radius W = floor(4.5 sigma) (r^2 < W^2 + 0.6),
// each sample weighted by magnitude x exp(-r^2 / (2 (1.5 sigma)^2)) and split linearly
// between its two nearest bins, smoothed six times by a circular (1, 1, 1) / 3; each
// peak above both neighbours and 0.8 of the maximum, in bin order, up to
// max_orientations, refined by a parabola, becomes an oriented keypoint. One thread per
// keypoint of keypoints (those counts[0] says were written), workgroup 64.
//   binding 0  gauss      [...]            f32  read   every octave's levels (octaves[])
//   binding 1  octaves    [O,4]            u32  read   width, height, gauss offset, 0 per octave
//   binding 2  keypoints  [capacity,8]     f32  read   sift_extrema's records
//   binding 3  oriented   [capacity_oriented,8] f32  write  x, y, sigma (octave pixels), angle,
//                                                      octave, level index s, keypoint, 0
//   binding 4  counts     [2]              u32  add    counts[1]: oriented keypoints (may pass capacity)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer GaussBuf { float gauss[]; };
layout(std430, binding = 1) restrict readonly buffer OctavesBuf { uint octaves[]; };
layout(std430, binding = 2) restrict readonly buffer KeypointsBuf { float keypoints[]; };
layout(std430, binding = 3) restrict writeonly buffer OrientedBuf { float oriented[]; };
layout(std430, binding = 4) restrict buffer CountsBuf { uint counts[]; };

layout(push_constant) uniform Push {
    int first_octave;
    uint levels;    // Gaussian levels an octave (S + 3)
    uint capacity;  // of keypoints
    uint capacity_oriented;
    uint max_orientations;
} pc;

#include "sift_gradient.glsl"

const int SIFT_BINS = 36;

FN void sift_orientation_body(uint k) {
    if (k >= min(counts[0], pc.capacity)) {
        return;
    }
    float x = keypoints[8u * k], y = keypoints[8u * k + 1u], sigma = keypoints[8u * k + 2u];
    float octave = keypoints[8u * k + 5u], level = keypoints[8u * k + 6u];
    uint oi = uint(int(octave) - pc.first_octave);
    int w = int(octaves[4u * oi]), h = int(octaves[4u * oi + 1u]);
    uint base = octaves[4u * oi + 2u] + uint(int(level) + 1) * uint(w * h);
    int xi = int(x + 0.5f), yi = int(y + 0.5f);
    float sw = 1.5f * sigma;
    int W = int(floor(3.0f * sw));
    float hist[36];
    for (int i = 0; i < SIFT_BINS; ++i) {
        hist[i] = 0.0f;
    }
    for (int ys = max(-W, -yi); ys <= min(W, h - 1 - yi); ++ys) {
        for (int xs = max(-W, -xi); xs <= min(W, w - 1 - xi); ++xs) {
            float dx = float(xi + xs) - x, dy = float(yi + ys) - y;
            float r2 = dx * dx + dy * dy;
            if (r2 < float(W * W) + 0.6f) {
                vec2 g = sift_gradient(base, w, h, xi + xs, yi + ys);
                float m = g.x * exp(-r2 / (2.0f * sw * sw));
                float fbin = float(SIFT_BINS) * g.y / 6.2831853f;
                int bin = int(floor(fbin - 0.5f));
                float rbin = fbin - float(bin) - 0.5f;
                hist[(bin + SIFT_BINS) % SIFT_BINS] += (1.0f - rbin) * m;
                hist[(bin + 1) % SIFT_BINS] += rbin * m;
            }
        }
    }
    // six circular (1, 1, 1) / 3 passes (through a second array: the in-place form with a
    // carried previous value came out wrong on lavapipe)
    float smoothed[36];
    for (int iter = 0; iter < 6; ++iter) {
        for (int i = 0; i < SIFT_BINS; ++i) {
            smoothed[i] = (hist[(i + SIFT_BINS - 1) % SIFT_BINS] + hist[i] + hist[(i + 1) % SIFT_BINS]) / 3.0f;
        }
        for (int i = 0; i < SIFT_BINS; ++i) {
            hist[i] = smoothed[i];
        }
    }
    float maxh = 0.0f;
    for (int i = 0; i < SIFT_BINS; ++i) {
        maxh = max(maxh, hist[i]);
    }
    uint found = 0u;
    for (int i = 0; i < SIFT_BINS; ++i) {
        float h0 = hist[i], hm = hist[(i + SIFT_BINS - 1) % SIFT_BINS], hp = hist[(i + 1) % SIFT_BINS];
        if (found < pc.max_orientations && h0 > 0.8f * maxh && h0 > hm && h0 > hp) {
            float di = -0.5f * (hp - hm) / (hp + hm - 2.0f * h0);
            float angle = 6.2831853f * (float(i) + di + 0.5f) / float(SIFT_BINS);
            found += 1u;
            uint j = atomicAdd(counts[1], 1u);
            if (j < pc.capacity_oriented) {
                oriented[8u * j] = x;
                oriented[8u * j + 1u] = y;
                oriented[8u * j + 2u] = sigma;
                oriented[8u * j + 3u] = angle;
                oriented[8u * j + 4u] = octave;
                oriented[8u * j + 5u] = level;
                oriented[8u * j + 6u] = float(k);
                oriented[8u * j + 7u] = 0.0f;
            }
        }
    }
}

void main() { sift_orientation_body(global_index()); }
