#version 450
// fpbo: fused projection backward + optimizer. One thread per splat: sums the
// gradients of its projections in every view (the maths of projection_bwd),
// adds the regularizers, applies Adam to every attribute in place, then (MCMC)
// perturbs the position with opacity-gated noise shaped by its covariance and
// (ADC) accumulates its screen-space gradient norm for density control.
// Stored attributes are raw: log-scales and opacity logits. Workgroup 128, folded.
// A step whose intersections overflowed the buffers (count > capacity) changes
// nothing: the trainer grows them and runs the step again.
//   binding 0-4   means [N,3], quats [N,4], scales [N,3] (log), opacities [N] (logit),
//                 sh [N,K,3]                            f32  read/write
//   binding 5-14  Adam first/second moments of each     f32  read/write
//   binding 15    cameras      [V,20]   f32  read
//   binding 16    radii        [V*N,2]  i32  read
//   binding 17-20 grad_xy [V*N,2], grad_conics [V*N,3], grad_rgb [V*N,3],
//                 grad_opacity [V*N]    f32  read   (from rasterize_bwd)
//   binding 21    params       StepParams    read   learning rates, Adam step, regularizers
//   binding 22    num_isects   [..]     u32  read   count at count_offset
//   binding 23    grad2d_sum   [N]      f32  read/write  (ADC_STATS) sum of |dL/dmean2d| (normalized)
//   binding 24    vis_count    [N]      u32  read/write  (ADC_STATS) views the splat was visible in
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"
#define SPIRULA_PROJECTION_VJP
#include "sh.glsl"
#include "projection.glsl"
#include "adam.glsl"
#include "random.glsl"
#include "step_params.glsl"

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SH_DEGREE = 0;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool MCMC_NOISE = false;
layout(constant_id = 3) const bool ADC_STATS = false;

layout(std430, binding = 0) buffer MeansBuf { float means[]; };
layout(std430, binding = 1) buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 2) buffer ScalesBuf { float scales[]; };
layout(std430, binding = 3) buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 4) buffer ShBuf { float sh[]; };
layout(std430, binding = 5) buffer MMeansBuf { float m_means[]; };
layout(std430, binding = 6) buffer VMeansBuf { float v_means[]; };
layout(std430, binding = 7) buffer MQuatsBuf { vec4 m_quats[]; };
layout(std430, binding = 8) buffer VQuatsBuf { vec4 v_quats[]; };
layout(std430, binding = 9) buffer MScalesBuf { float m_scales[]; };
layout(std430, binding = 10) buffer VScalesBuf { float v_scales[]; };
layout(std430, binding = 11) buffer MOpacitiesBuf { float m_opacities[]; };
layout(std430, binding = 12) buffer VOpacitiesBuf { float v_opacities[]; };
layout(std430, binding = 13) buffer MShBuf { float m_sh[]; };
layout(std430, binding = 14) buffer VShBuf { float v_sh[]; };
layout(std430, binding = 15) readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 16) readonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 17) readonly buffer GradXyBuf { GRAD_T grad_xy[]; };
layout(std430, binding = 18) readonly buffer GradConicsBuf { GRAD_T grad_conics[]; };
layout(std430, binding = 19) readonly buffer GradRgbBuf { GRAD_T grad_rgb[]; };
layout(std430, binding = 20) readonly buffer GradOpacityBuf { GRAD_T grad_opacity[]; };
layout(std430, binding = 21) readonly buffer ParamsBuf { StepParams params; };
layout(std430, binding = 22) readonly buffer NumIsectsBuf { uint num_isects[]; };
layout(std430, binding = 23) buffer Grad2dSumBuf { float grad2d_sum[]; };
layout(std430, binding = 24) buffer VisCountBuf { uint vis_count[]; };

layout(push_constant) uniform Push {
    uint n;
    uint n_views;
    uint width;
    uint height;
    float eps2d;
    uint count_offset;
    uint isect_capacity;
} pc;

void main() {
    uint g = global_index();
    if (g >= pc.n || num_isects[pc.count_offset] > pc.isect_capacity) {
        return;
    }
    const int degree = int(SH_DEGREE);
    const int n_coeffs = (degree + 1) * (degree + 1);
    vec3 mean = vec3(means[3u * g], means[3u * g + 1u], means[3u * g + 2u]);
    vec4 quat = quats[g];
    vec3 log_scale = vec3(scales[3u * g], scales[3u * g + 1u], scales[3u * g + 2u]);
    vec3 scale = exp(log_scale);
    float logit = opacities[g];
    float opacity = 1.0 / (1.0 + exp(-logit));
    uint sh_base = g * SH_COEFFS * 3u;
    float coeffs[48];
    for (int k = 0; k < 3 * n_coeffs; ++k) {
        coeffs[k] = sh[sh_base + uint(k)];
    }

    vec3 g_mean = vec3(0.0);
    vec4 g_quat = vec4(0.0);
    vec3 g_scale = vec3(0.0);
    float g_opacity = 0.0;
    float g_sh[48];
    for (int k = 0; k < 48; ++k) {
        g_sh[k] = 0.0;
    }
    float grad2d = 0.0;
    uint seen = 0u;
    for (uint c = 0u; c < pc.n_views; ++c) {
        uint i = c * pc.n + g;
        if (radii[i].x == 0 && radii[i].y == 0) {
            continue;
        }
        Camera cam = LOAD_CAMERA(cameras, c);
        vec2 v_xy = vec2(GRAD_LOAD(grad_xy, 2u * i), GRAD_LOAD(grad_xy, 2u * i + 1u));
        vec3 v_con = vec3(GRAD_LOAD(grad_conics, 3u * i), GRAD_LOAD(grad_conics, 3u * i + 1u),
                          GRAD_LOAD(grad_conics, 3u * i + 2u));
        vec3 v_rgb = vec3(GRAD_LOAD(grad_rgb, 3u * i), GRAD_LOAD(grad_rgb, 3u * i + 1u),
                          GRAD_LOAD(grad_rgb, 3u * i + 2u));
        g_opacity += GRAD_LOAD(grad_opacity, i);
        projection_vjp(cam, mean, quat, scale, degree, coeffs, float(pc.width), float(pc.height), pc.eps2d,
                       v_xy, v_con, v_rgb, g_mean, g_quat, g_scale, g_sh);
        grad2d += length(v_xy * vec2(params.grad_norm_scale_x, params.grad_norm_scale_y));
        seen += 1u;
    }
    float n_splats = float(max(params.n_splats, 1u));
    // through the activations, plus the regularizers' gradients
    g_scale = g_scale * scale + params.scale_reg / (3.0 * n_splats) * scale;
    g_opacity = (g_opacity + params.opacity_reg / n_splats) * opacity * (1.0 - opacity);

    float b1 = params.beta1, b2 = params.beta2, c1 = params.bias1, c2 = params.bias2, eps = params.adam_eps;
    for (uint k = 0u; k < 3u; ++k) {
        uint j = 3u * g + k;
        float m = m_means[j], v = v_means[j];
        mean[k] = adam_update(mean[k], g_mean[k], m, v, params.lr_means, b1, b2, c1, c2, eps);
        m_means[j] = m;
        v_means[j] = v;
        m = m_scales[j];
        v = v_scales[j];
        log_scale[k] = adam_update(log_scale[k], g_scale[k], m, v, params.lr_scales, b1, b2, c1, c2, eps);
        m_scales[j] = m;
        v_scales[j] = v;
    }
    vec4 mq = m_quats[g], vq = v_quats[g];
    for (int k = 0; k < 4; ++k) {
        float m = mq[k], v = vq[k];
        quat[k] = adam_update(quat[k], g_quat[k], m, v, params.lr_quats, b1, b2, c1, c2, eps);
        mq[k] = m;
        vq[k] = v;
    }
    m_quats[g] = mq;
    v_quats[g] = vq;
    {
        float m = m_opacities[g], v = v_opacities[g];
        logit = adam_update(logit, g_opacity, m, v, params.lr_opacities, b1, b2, c1, c2, eps);
        m_opacities[g] = m;
        v_opacities[g] = v;
    }
    for (uint k = 0u; k < SH_COEFFS * 3u; ++k) {
        uint j = sh_base + k;
        float grad = k < uint(3 * n_coeffs) ? g_sh[k] : 0.0;
        float m = m_sh[j], v = v_sh[j];
        float lr = k < 3u ? params.lr_sh0 : params.lr_shN;
        sh[j] = adam_update(sh[j], grad, m, v, lr, b1, b2, c1, c2, eps);
        m_sh[j] = m;
        v_sh[j] = v;
    }

    if (MCMC_NOISE && params.noise_scale > 0.0) {
        // gsplat's MCMC: noise ~ Sigma n, gated to nearly transparent splats
        float o = 1.0 / (1.0 + exp(-logit));
        float gate = 1.0 / (1.0 + exp(-100.0 * ((1.0 - o) - 0.995)));
        vec3 s = exp(log_scale);
        mat3 R = quat_to_rotmat(quat * inversesqrt(dot(quat, quat)));
        mat3 M = mat3(R[0] * s.x, R[1] * s.y, R[2] * s.z);
        vec2 n01 = random_normal2(params.seed, g, 0u);
        vec2 n23 = random_normal2(params.seed, g, 2u);
        vec3 noise = (M * transpose(M)) * vec3(n01, n23.x);
        mean += noise * gate * params.noise_scale;
    }
    means[3u * g] = mean.x;
    means[3u * g + 1u] = mean.y;
    means[3u * g + 2u] = mean.z;
    quats[g] = quat;
    scales[3u * g] = log_scale.x;
    scales[3u * g + 1u] = log_scale.y;
    scales[3u * g + 2u] = log_scale.z;
    opacities[g] = logit;
    if (ADC_STATS && seen > 0u) {
        grad2d_sum[g] += grad2d;
        vis_count[g] += seen;
    }
}
