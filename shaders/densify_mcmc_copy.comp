#version 450
// densify_mcmc_copy: give drawn sources' attributes to their new copies. New
// splats (APPEND) start with Adam moments at 0; relocated ones too with
// RESET_MOMENTS, else they keep their slot's moments (gsplat 1.5.3's relocate),
// except a slot whose splat had diverged (a non-finite opacity, mean, scale,
// rotation or SH coefficient): its moments may be NaN too and would turn the copy NaN again.
//   APPEND = false (relocation): one thread per splat i < n; dead splat i
//     (dead_offsets[i + 1] > dead_offsets[i]) becomes a copy of draw
//     j = dead_offsets[i]'s source.
//   APPEND = true (growth): one thread per draw j < count; splat n + j
//     becomes a copy of draw j's source.
// Workgroup 256, folded.
// COMPACT_ROWS (spec): sh, m_sh / v_sh and the moments of means, quats, scales hold
// the rows of include/storage.glsl; a copy or reset moves whole 32-bit words (bf16
// 0 is 0 bits), so the bindings keep their f32 type.
//   binding 0-4   means [N,3], quats [N,4], scales [N,3], opacities [N], sh [N,K,3]  f32  read/write
//   binding 5-14  Adam moments m, v of the same                              f32  write
//   binding 15    dead_offsets [N]   u32  read   exclusive prefix sum of the dead flags
//   binding 16    totals       [..]  u32  read   dead count at dead_total_offset
//   binding 17    sample_src   [..]  u32  read
//   binding 18    weight_totals [..] f32  read   total sampling weight at weight_total_offset
//                                                 (0: nothing was drawn)
#extension GL_GOOGLE_include_directive : require
// culls or flags splats by whether their values are finite: IEEE Inf and NaN kept
#define SPIRULA_PRESERVE_INF_NAN
#include "common.glsl"
#include "finite.glsl"
#include "storage.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool APPEND = false;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool RESET_MOMENTS = true;
layout(constant_id = 3) const bool COMPACT_ROWS = false;

layout(std430, binding = 0) buffer MeansBuf { float means[]; };
layout(std430, binding = 1) buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 2) buffer ScalesBuf { float scales[]; };
layout(std430, binding = 3) buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 4) buffer ShBuf { float sh[]; };
layout(std430, binding = 5) writeonly buffer MMeansBuf { float m_means[]; };
layout(std430, binding = 6) writeonly buffer VMeansBuf { float v_means[]; };
layout(std430, binding = 7) writeonly buffer MQuatsBuf { vec4 m_quats[]; };
layout(std430, binding = 8) writeonly buffer VQuatsBuf { vec4 v_quats[]; };
layout(std430, binding = 9) writeonly buffer MScalesBuf { float m_scales[]; };
layout(std430, binding = 10) writeonly buffer VScalesBuf { float v_scales[]; };
layout(std430, binding = 11) writeonly buffer MOpacitiesBuf { float m_opacities[]; };
layout(std430, binding = 12) writeonly buffer VOpacitiesBuf { float v_opacities[]; };
layout(std430, binding = 13) writeonly buffer MShBuf { float m_sh[]; };
layout(std430, binding = 14) writeonly buffer VShBuf { float v_sh[]; };
layout(std430, binding = 15) readonly buffer DeadOffsetsBuf { uint dead_offsets[]; };
layout(std430, binding = 16) readonly buffer TotalsBuf { uint totals[]; };
layout(std430, binding = 17) readonly buffer SampleSrcBuf { uint sample_src[]; };
layout(std430, binding = 18) readonly buffer WeightTotalsBuf { float weight_totals[]; };

layout(push_constant) uniform Push {
    uint n;                  // splats before this step
    uint count;              // APPEND: draws
    uint dead_total_offset;  // relocation: where the dead count is in totals
    uint weight_total_offset;
} pc;

#include "splat_finite.glsl"
#include "zero_moments.glsl"

// t: a splat (relocation) or a draw (APPEND)
FN void densify_mcmc_copy_body(uint t) {
    uint dst, src;
    if (APPEND) {
        if (t >= pc.count) {
            return;
        }
        dst = pc.n + t;
        src = sample_src[t];
    } else {
        if (t >= pc.n) {
            return;
        }
        uint next = t + 1u < pc.n ? dead_offsets[t + 1u] : totals[pc.dead_total_offset];
        if (next == dead_offsets[t]) {
            return;  // alive
        }
        dst = t;
        src = sample_src[dead_offsets[t]];
    }
    if (!(weight_totals[pc.weight_total_offset] > 0.0f)) {
        return;
    }
    bool reset = APPEND || RESET_MOMENTS || !splat_finite(dst);
    for (uint k = 0u; k < 3u; ++k) {
        means[3u * dst + k] = means[3u * src + k];
        scales[3u * dst + k] = scales[3u * src + k];
    }
    quats[dst] = quats[src];
    opacities[dst] = opacities[src];
    uint sh_words = sh_row_words(COMPACT_ROWS, SH_COEFFS);  // whole words: a copy is a copy
    for (uint k = 0u; k < sh_words; ++k) {
        sh[sh_words * dst + k] = sh[sh_words * src + k];
    }
    if (reset) {
        zero_moments(dst);
    }
}

void main() { densify_mcmc_copy_body(global_index()); }
