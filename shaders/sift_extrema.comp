#version 450
// sift_extrema: SIFT keypoints of one octave (VLFeat's detector; reference
// spirula/reference/sift.py detect). A DoG value v of an interior level (1..levels) and
// pixel (1..w-2, 1..h-2) is a candidate when v >= 0.8 peak_threshold and above all 26
// neighbours, or the mirror for minima. Up to five Newton steps b = -H^-1 g (central
// differences; Gaussian elimination with partial pivoting, b = 0 below a 1e-10 pivot) move
// it by a pixel while |b_x| or |b_y| > 0.6. Kept when the refined contrast
// |v + g.b / 2| > peak_threshold, the edge score tr^2 / det of the 2x2 Hessian is in
// [0, (e + 1)^2 / e), |b| < 1.5 on each axis, the refined position is inside the octave
// and the level within -1..levels, and (has_mask) the image pixel holding it is not 0 in
// the mask. One thread per (level, pixel), workgroup 256, folded.
//   binding 0  dog        [...]           f32  read   levels + 2 planes at dog_offset
//   binding 1  mask       [H,W]           u32  read   0: no keypoint there (read when has_mask)
//   binding 2  keypoints  [capacity,8]    f32  write  x, y, sigma (octave pixels), level sn,
//                                                     contrast, octave, level index s, 0
//   binding 3  counts     [2]             u32  add    counts[0]: keypoints found (may pass capacity)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer DogBuf { float dog[]; };
layout(std430, binding = 1) restrict readonly buffer MaskBuf { uint mask[]; };
layout(std430, binding = 2) restrict writeonly buffer KeypointsBuf { float keypoints[]; };
layout(std430, binding = 3) restrict buffer CountsBuf { uint counts[]; };

layout(push_constant) uniform Push {
    uint width;  // of the octave
    uint height;
    uint levels;  // S: the levels searched, 1..S of the S + 2 DoG planes
    uint dog_offset;
    int octave;
    float xper;  // 2^octave: octave pixels to image pixels
    float peak_threshold;
    float edge_threshold;
    float sigma0;
    uint image_width;
    uint image_height;
    uint has_mask;
    uint capacity;
} pc;

FN float dog_at(uint plane, int s, int x, int y) {
    return dog[pc.dog_offset + uint(s) * plane + uint(y) * pc.width + uint(x)];
}

FN void sift_extrema_body(uint i) {
    uint plane = pc.width * pc.height;
    if (i >= pc.levels * plane) {
        return;
    }
    int s = 1 + int(i / plane);
    int x = int(i % pc.width), y = int((i % plane) / pc.width);
    int w = int(pc.width), h = int(pc.height);
    if (x < 1 || y < 1 || x > w - 2 || y > h - 2) {
        return;
    }
    float v = dog_at(plane, s, x, y);
    bool is_max = v >= 0.8f * pc.peak_threshold;
    bool is_min = v <= -0.8f * pc.peak_threshold;
    if (!is_max && !is_min) {
        return;
    }
    for (int ds = -1; ds <= 1; ++ds) {
        for (int dy = -1; dy <= 1; ++dy) {
            for (int dx = -1; dx <= 1; ++dx) {
                if (ds != 0 || dy != 0 || dx != 0) {
                    float n = dog_at(plane, s + ds, x + dx, y + dy);
                    is_max = is_max && v > n;
                    is_min = is_min && v < n;
                }
            }
        }
    }
    if (!is_max && !is_min) {
        return;
    }
    float A[9];
    float b[3];
    float gx = 0.0f, gy = 0.0f, gs = 0.0f, dxx = 0.0f, dyy = 0.0f, dxy = 0.0f;
    for (int iter = 0; iter < 5; ++iter) {
        v = dog_at(plane, s, x, y);
        float xp = dog_at(plane, s, x + 1, y), xm = dog_at(plane, s, x - 1, y);
        float yp = dog_at(plane, s, x, y + 1), ym = dog_at(plane, s, x, y - 1);
        float sp = dog_at(plane, s + 1, x, y), sm = dog_at(plane, s - 1, x, y);
        gx = 0.5f * (xp - xm);
        gy = 0.5f * (yp - ym);
        gs = 0.5f * (sp - sm);
        dxx = xp + xm - 2.0f * v;
        dyy = yp + ym - 2.0f * v;
        float dss = sp + sm - 2.0f * v;
        dxy = 0.25f * (dog_at(plane, s, x + 1, y + 1) + dog_at(plane, s, x - 1, y - 1) -
                       dog_at(plane, s, x - 1, y + 1) - dog_at(plane, s, x + 1, y - 1));
        float dxs = 0.25f * (dog_at(plane, s + 1, x + 1, y) + dog_at(plane, s - 1, x - 1, y) -
                             dog_at(plane, s + 1, x - 1, y) - dog_at(plane, s - 1, x + 1, y));
        float dys = 0.25f * (dog_at(plane, s + 1, x, y + 1) + dog_at(plane, s - 1, x, y - 1) -
                             dog_at(plane, s + 1, x, y - 1) - dog_at(plane, s - 1, x, y + 1));
        A[0] = dxx;
        A[1] = dxy;
        A[2] = dxs;
        A[3] = dxy;
        A[4] = dyy;
        A[5] = dys;
        A[6] = dxs;
        A[7] = dys;
        A[8] = dss;
        b[0] = -gx;
        b[1] = -gy;
        b[2] = -gs;
        bool singular = false;
        for (int j = 0; j < 3; ++j) {
            int best = j;
            for (int r = j + 1; r < 3; ++r) {
                if (abs(A[3 * r + j]) > abs(A[3 * best + j])) {
                    best = r;
                }
            }
            if (singular || abs(A[3 * best + j]) < 1e-10f) {
                singular = true;
            } else {
                for (int c = 0; c < 3; ++c) {
                    float t = A[3 * best + c];
                    A[3 * best + c] = A[3 * j + c];
                    A[3 * j + c] = t;
                }
                float tb = b[best];
                b[best] = b[j];
                b[j] = tb;
                float piv = A[3 * j + j];
                for (int c = 0; c < 3; ++c) {
                    A[3 * j + c] /= piv;
                }
                b[j] /= piv;
                for (int r = j + 1; r < 3; ++r) {
                    float f = A[3 * r + j];
                    for (int c = 0; c < 3; ++c) {
                        A[3 * r + c] -= f * A[3 * j + c];
                    }
                    b[r] -= f * b[j];
                }
            }
        }
        if (singular) {
            b[0] = 0.0f;
            b[1] = 0.0f;
            b[2] = 0.0f;
        } else {
            b[1] -= b[2] * A[5];
            b[0] -= b[2] * A[2];
            b[0] -= b[1] * A[1];
        }
        int mx = (b[0] > 0.6f && x < w - 2 ? 1 : 0) + (b[0] < -0.6f && x > 1 ? -1 : 0);
        int my = (b[1] > 0.6f && y < h - 2 ? 1 : 0) + (b[1] < -0.6f && y > 1 ? -1 : 0);
        if (mx == 0 && my == 0) {
            break;
        }
        x += mx;
        y += my;
    }
    float val = v + 0.5f * (gx * b[0] + gy * b[1] + gs * b[2]);
    float score = (dxx + dyy) * (dxx + dyy) / (dxx * dyy - dxy * dxy);
    float xn = float(x) + b[0], yn = float(y) + b[1], sn = float(s - 1) + b[2];
    float te = pc.edge_threshold;
    bool good = abs(val) > pc.peak_threshold && score < (te + 1.0f) * (te + 1.0f) / te && score >= 0.0f &&
                abs(b[0]) < 1.5f && abs(b[1]) < 1.5f && abs(b[2]) < 1.5f && xn >= 0.0f && xn <= float(w - 1) &&
                yn >= 0.0f && yn <= float(h - 1) && sn >= -1.0f && sn <= float(pc.levels + 1u);
    if (!good) {
        return;
    }
    if (pc.has_mask != 0u) {
        uint mx = min(uint(xn * pc.xper + 0.5f), pc.image_width - 1u);
        uint my = min(uint(yn * pc.xper + 0.5f), pc.image_height - 1u);
        if (mask[my * pc.image_width + mx] == 0u) {
            return;
        }
    }
    uint k = atomicAdd(counts[0], 1u);
    if (k < pc.capacity) {
        keypoints[8u * k] = xn;
        keypoints[8u * k + 1u] = yn;
        keypoints[8u * k + 2u] = pc.sigma0 * pow(2.0f, sn / float(pc.levels));
        keypoints[8u * k + 3u] = sn;
        keypoints[8u * k + 4u] = val;
        keypoints[8u * k + 5u] = float(pc.octave);
        keypoints[8u * k + 6u] = float(s - 1);
        keypoints[8u * k + 7u] = 0.0f;
    }
}

void main() { sift_extrema_body(global_index()); }
