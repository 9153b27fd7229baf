#version 450
// match_mutual: COLMAP's tests on match_top2's neighbours (reference
// spirula/reference/match.py mutual): a query keeps its best train row when the angle
// acos(min(dot / 512^2, 1)) of the best is at most max_distance and below max_ratio times
// that of the second best (the ratio test), in both directions, and the two are each
// other's best (the cross check). One thread per row of image a up to the capacity,
// workgroup 64.
//   binding 0  forward   [capacity,4]  u32  read   match_top2 of a's rows against b's
//   binding 1  backward  [capacity,4]  u32  read   match_top2 of b's rows against a's
//   binding 2  sizes     [2]           u32  read   rows of a, rows of b
//   binding 3  matches   [capacity]    u32  write  b's row matched to a's row (0xffffffff: none)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) restrict readonly buffer ForwardBuf { uint forward[]; };
layout(std430, binding = 1) restrict readonly buffer BackwardBuf { uint backward[]; };
layout(std430, binding = 2) restrict readonly buffer SizesBuf { uint sizes[]; };
layout(std430, binding = 3) restrict writeonly buffer MatchesBuf { uint matches[]; };

layout(push_constant) uniform Push {
    uint capacity;
    float max_ratio;     // COLMAP's 0.8
    float max_distance;  // COLMAP's 0.7 (radians)
} pc;

// COLMAP's FindBestMatchesOneWay: distances are angles, dots normalised by 512^2
// (exact in float32: a dot is below 2^24).
FN bool passes(uint best, uint second) {
    float d1 = acos(min(float(best) * 3.814697265625e-6f, 1.0f));
    if (d1 > pc.max_distance) {
        return false;
    }
    float d2 = acos(min(float(second) * 3.814697265625e-6f, 1.0f));
    return d1 < pc.max_ratio * d2;
}

FN void match_mutual_body(uint k) {
    uint n_a = min(sizes[0], pc.capacity);
    uint n_b = min(sizes[1], pc.capacity);
    if (k >= n_a) {
        return;
    }
    uint j = forward[4u * k];
    uint result = 0xffffffffu;
    if (j < n_b && passes(forward[4u * k + 1u], forward[4u * k + 2u]) && backward[4u * j] == k &&
        passes(backward[4u * j + 1u], backward[4u * j + 2u])) {
        result = j;
    }
    matches[k] = result;
}

void main() { match_mutual_body(global_index()); }
