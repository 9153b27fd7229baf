#version 450
// densify_adc_classify: adaptive density control (Kerbl et al. 2023, as
// gsplat's DefaultStrategy), step 1: what becomes of each splat and how many
// splats it leaves. A splat whose mean screen-space gradient exceeds
// grow_grad2d is cloned when small (largest scale <= grow_scale3d) and split
// in two when large; then every resulting splat with opacity < min_opacity,
// or (prune_big) larger than prune_scale3d, is pruned, and so is a diverged
// splat (any parameter not finite, finite.glsl), whatever its gradient.
// One thread per splat i < n (workgroup 256, folded).
//   binding 0  scales      [N,3]  f32  read   log
//   binding 1  opacities   [N]    f32  read   logit
//   binding 2  grad2d_sum  [N]    f32  read   from fpbo
//   binding 3  vis_count   [N]    u32  read
//   binding 4  actions     [N]    u32  write  0 keep, 1 clone, 2 split
//   binding 5  out_counts  [N]    u32  write  0, 1 or 2 (scanned into output offsets)
//   binding 6  means       [N,3]  f32  read
//   binding 7  quats       [N,4]  f32  read
//   binding 8  sh          [N,K,3] f32 read   K = SH_COEFFS
#extension GL_GOOGLE_include_directive : require
// culls or flags splats by whether their values are finite: IEEE Inf and NaN kept
#define SPIRULA_PRESERVE_INF_NAN
#include "common.glsl"
#include "finite.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint SH_COEFFS = 1;
layout(constant_id = 1) const bool COMPACT_ROWS = false;  // sh holds include/storage.glsl's rows

layout(std430, binding = 0) readonly buffer ScalesBuf { float scales[]; };
layout(std430, binding = 1) readonly buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 2) readonly buffer Grad2dSumBuf { float grad2d_sum[]; };
layout(std430, binding = 3) readonly buffer VisCountBuf { uint vis_count[]; };
layout(std430, binding = 4) writeonly buffer ActionsBuf { uint actions[]; };
layout(std430, binding = 5) writeonly buffer OutCountsBuf { uint out_counts[]; };
layout(std430, binding = 6) readonly buffer MeansBuf { float means[]; };
layout(std430, binding = 7) readonly buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 8) readonly buffer ShBuf { float sh[]; };

layout(push_constant) uniform Push {
    uint n;
    float grow_grad2d;
    float grow_scale3d;   // already times the scene extent
    float prune_scale3d;  // already times the scene extent
    float min_opacity;
    uint prune_big;
    uint grow;
} pc;

#include "splat_finite.glsl"

const float SPLIT_SHRINK = 1.6f;

FN void densify_adc_classify_body(uint i) {
    if (i >= pc.n) {
        return;
    }
    float largest = exp(max(scales[3u * i], max(scales[3u * i + 1u], scales[3u * i + 2u])));
    float o = 1.0f / (1.0f + exp(-opacities[i]));
    float grad = grad2d_sum[i] / float(max(vis_count[i], 1u));
    bool high = pc.grow != 0u && grad > pc.grow_grad2d;
    bool small = largest <= pc.grow_scale3d;
    uint action = high ? (small ? 1u : 2u) : 0u;
    float child = action == 2u ? largest / SPLIT_SHRINK : largest;
    bool prune = o < pc.min_opacity || (pc.prune_big != 0u && child > pc.prune_scale3d) || !splat_finite(i);
    actions[i] = action;
    out_counts[i] = prune ? 0u : (action == 0u ? 1u : 2u);
}

void main() { densify_adc_classify_body(global_index()); }
