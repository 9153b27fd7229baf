#version 450
// densify_mcmc_weights: MCMC densification (Kheradmand et al. 2024, as gsplat's
// MCMCStrategy), step 1: each splat's sampling weight (its opacity) and
// whether it is dead (opacity <= min_opacity, or any of its opacity, mean,
// scale, rotation or SH coefficients not finite). With ALIVE_ONLY, dead splats weigh 0
// (relocation samples sources among the living).
// One thread per splat i < n (workgroup 256, folded).
//   binding 0  opacities  [N]  f32  read   logits
//   binding 1  weights    [N]  f32  write  opacity (0 for dead when ALIVE_ONLY)
//   binding 2  dead       [N]  u32  write  1 if dead (scanned in place afterwards)
//   binding 3  means      [N,3] f32  read
//   binding 4  scales     [N,3] f32  read   log
//   binding 5  quats      [N,4] f32  read
//   binding 6  sh         [N,K,3] f32  read  K = SH_COEFFS
#extension GL_GOOGLE_include_directive : require
// culls or flags splats by whether their values are finite: IEEE Inf and NaN kept
#define SPIRULA_PRESERVE_INF_NAN
#include "common.glsl"
#include "finite.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool ALIVE_ONLY = true;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool COMPACT_ROWS = false;  // sh holds include/storage.glsl's rows

layout(std430, binding = 0) readonly buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 1) writeonly buffer WeightsBuf { float weights[]; };
layout(std430, binding = 2) writeonly buffer DeadBuf { uint dead[]; };
layout(std430, binding = 3) readonly buffer MeansBuf { float means[]; };
layout(std430, binding = 4) readonly buffer ScalesBuf { float scales[]; };
layout(std430, binding = 5) readonly buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 6) readonly buffer ShBuf { float sh[]; };

layout(push_constant) uniform Push {
    uint n;
    float min_opacity;
} pc;

#include "splat_finite.glsl"

FN void densify_mcmc_weights_body(uint i) {
    if (i >= pc.n) {
        return;
    }
    float logit = opacities[i];
    float o = 1.0f / (1.0f + exp(-logit));
    // a non-finite splat counts as dead (relocated, so repaired) and weighs 0:
    // one NaN weight would poison the whole prefix sum and stop all sampling
    bool bad = !splat_finite(i);
    bool is_dead = bad || o <= pc.min_opacity;
    weights[i] = ((ALIVE_ONLY && is_dead) || bad) ? 0.0f : o;
    dead[i] = is_dead ? 1u : 0u;
}

void main() { densify_mcmc_weights_body(global_index()); }
