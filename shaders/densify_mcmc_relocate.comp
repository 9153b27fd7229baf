#version 450
// densify_mcmc_relocate: a splat drawn c times hands part of itself to c new
// copies. With n = min(c + 1, 51) splats sharing it, each gets
//     opacity' = 1 - (1 - opacity)^(1/n)
//     scale'   = scale * opacity / sum_{i=1..n} sum_{k=0..i-1} C(i-1, k) (-1)^k opacity'^(k+1) / sqrt(k+1)
// so that their sum renders like the original (MCMC paper, eq. 9; gsplat's
// compute_relocation), opacity' clamped to [min_opacity, 1 - 2^-23]. With
// RESET_SOURCE its Adam moments restart at 0. copies[i] is cleared for reuse.
// One thread per splat i < n (workgroup 256, folded).
//   binding 0  opacities   [N]    f32  read/write  logit
//   binding 1  scales      [N,3]  f32  read/write  log
//   binding 2  copies      [N]    u32  read/write
//   binding 3-12  Adam moments m, v of means, quats, scales, opacities, sh  f32 write (RESET_SOURCE)
// COMPACT_ROWS (spec): m_sh / v_sh and the moments of means, quats, scales hold the
// rows of include/storage.glsl; a reset writes whole 32-bit words (bf16 0 is 0
// bits), so the bindings keep their f32 type.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "storage.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool RESET_SOURCE = true;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool COMPACT_ROWS = false;

layout(std430, binding = 0) buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 1) buffer ScalesBuf { float scales[]; };
layout(std430, binding = 2) buffer CopiesBuf { uint copies[]; };
layout(std430, binding = 3) writeonly buffer MMeansBuf { float m_means[]; };
layout(std430, binding = 4) writeonly buffer VMeansBuf { float v_means[]; };
layout(std430, binding = 5) writeonly buffer MQuatsBuf { vec4 m_quats[]; };
layout(std430, binding = 6) writeonly buffer VQuatsBuf { vec4 v_quats[]; };
layout(std430, binding = 7) writeonly buffer MScalesBuf { float m_scales[]; };
layout(std430, binding = 8) writeonly buffer VScalesBuf { float v_scales[]; };
layout(std430, binding = 9) writeonly buffer MOpacitiesBuf { float m_opacities[]; };
layout(std430, binding = 10) writeonly buffer VOpacitiesBuf { float v_opacities[]; };
layout(std430, binding = 11) writeonly buffer MShBuf { float m_sh[]; };
layout(std430, binding = 12) writeonly buffer VShBuf { float v_sh[]; };

layout(push_constant) uniform Push {
    uint n;
    float min_opacity;
} pc;

#include "zero_moments.glsl"

const uint MAX_SHARE = 51u;

FN void densify_mcmc_relocate_body(uint i) {
    if (i >= pc.n || copies[i] == 0u) {
        return;
    }
    uint n_share = min(copies[i] + 1u, MAX_SHARE);
    copies[i] = 0u;
    float o = 1.0f / (1.0f + exp(-opacities[i]));
    float o_new = 1.0f - pow(1.0f - o, 1.0f / float(n_share));
    float denom = 0.0f;
    for (uint a = 1u; a <= n_share; ++a) {
        float binom = 1.0f;  // C(a - 1, k), updated along k
        for (uint k = 0u; k < a; ++k) {
            float sign = (k & 1u) == 0u ? 1.0f : -1.0f;
            denom += binom * sign / sqrt(float(k + 1u)) * pow(o_new, float(k + 1u));
            binom = binom * float(a - 1u - k) / float(k + 1u);
        }
    }
    float coeff = o / denom;
    o_new = clamp(o_new, pc.min_opacity, 1.0f - 1.1920929e-07f);
    opacities[i] = log(o_new / (1.0f - o_new));
    for (uint k = 0u; k < 3u; ++k) {
        scales[3u * i + k] += log(coeff);
    }
    if (RESET_SOURCE) {
        zero_moments(i);
    }
}

void main() { densify_mcmc_relocate_body(global_index()); }
