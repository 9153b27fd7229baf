// fpbo: fused projection backward + optimizer. Twin of shaders/fpbo.comp.
// One thread per splat: sums the gradients of its projections in every view
// (the maths of projection_bwd), adds the regularizers, applies Adam to every
// attribute in place, then (MCMC_NOISE) perturbs the position with
// opacity-gated noise shaped by its covariance and (ADC_STATS) accumulates
// its screen-space gradient norm for density control (with ABSGRAD, the norm
// of the per-pixel absolute gradient sums). Stored attributes are
// raw: log-scales and opacity logits. Workgroup 128, folded. A step whose
// intersections overflowed the buffers (count > capacity) changes nothing.
//   binding 0-4   means [N,3], quats [N,4], scales [N,3] (log), opacities [N] (logit),
//                 sh [N,K,3]                            f32  read/write
//   binding 5-14  Adam first/second moments of each     f32  read/write
//   binding 15    cameras      [V,20]   f32  read
//   binding 16    radii        [V*N,2]  i32  read
//   binding 17-20 grad_xy [V*N,2], grad_conics [V*N,3], grad_rgb [V*N,3],
//                 grad_opacity [V*N]    f32  read   (from rasterize_bwd)
//   binding 21    params       StepParams    read
//   binding 22    num_isects   [..]     u32  read   count at count_offset
//   binding 23    grad2d_sum   [N]      f32  read/write  (ADC_STATS)
//   binding 24    vis_count    [N]      u32  read/write  (ADC_STATS)
//   binding 25    grad_xy_abs  [V*N,2]  f32  read   (ADC_STATS and ABSGRAD) per-pixel |dL/dmean2d|
//                                                   sums: the statistic then uses them (AbsGS)
//   constant_id 0 SH_DEGREE (a template parameter here), 1 SH_COEFFS,
//   2 MCMC_NOISE, 3 ADC_STATS, 4 N_VIEWS, 5 ABSGRAD
//   flag SH_VEC4: the SH coefficients and their moments move as float4s
//
// The SH coefficients' gradient: the shader keeps, per view, the SH basis
// and the clamp-masked colour gradient and forms grad(f) = sum over views of
// basis_c[f / 3] * v_raw_c[f % 3] in the Adam loop, views in order from 0.0.
// Here N_VIEWS = 1 does exactly that (ONE_VIEW); other N_VIEWS accumulate the
// same products, in the same view order, into a register array while
// walking the views (a view a splat is invisible in adds 0 * 0 = +0 in the
// shader, which changes no sum: the result is the same float).
#include "common/adam.cuh"
#include "common/launch.cuh"
#include "common/moments.cuh"
#include "common/projection.cuh"
#include "common/random.cuh"
#include "common/step_params.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n;
    uint32_t n_views;
    uint32_t width;
    uint32_t height;
    float eps2d;
    uint32_t count_offset;
    uint32_t isect_capacity;
};

struct Spec {
    uint32_t sh_coeffs;
    bool mcmc_noise;
    bool adc_stats;
    uint32_t n_views;
    bool absgrad;
    bool sh_vec4;
};

struct Args {
    float* means;
    float4* quats;
    float* scales;
    float* opacities;
    float* sh;
    spirula::Moments mo;       // bindings 5-14
    const float* cameras;
    const int2* radii;
    const float* grad_xy;
    const float* grad_conics;
    const float* grad_rgb;
    const float* grad_opacity;
    const StepParams* params;
    const uint32_t* num_isects;
    float* grad2d_sum;
    uint32_t* vis_count;
    const float* grad_xy_abs;
};

__device__ __forceinline__ float& component(float4& v, uint32_t e) {
    return e == 0u ? v.x : (e == 1u ? v.y : (e == 2u ? v.z : v.w));
}

template <int SH_DEGREE, bool ONE_VIEW>
__global__ void __launch_bounds__(128) fpbo_kernel(Args a, Push pc, Spec sp) {
    uint32_t g = global_index();
    if (g >= pc.n || a.num_isects[pc.count_offset] > pc.isect_capacity) {
        return;
    }
    const StepParams* params = a.params;
    constexpr int degree = SH_DEGREE;
    constexpr uint32_t n_active = 3u * (SH_DEGREE + 1u) * (SH_DEGREE + 1u);   // active coefficient floats
    const uint32_t n_floats = 3u * sp.sh_coeffs;
    const uint32_t sh_base = g * n_floats;
    const float* sh = a.sh;
    vec3 mean = make3(a.means[3u * g], a.means[3u * g + 1u], a.means[3u * g + 2u]);
    vec4 quat = load4(a.quats, g);
    vec3 log_scale = make3(a.scales[3u * g], a.scales[3u * g + 1u], a.scales[3u * g + 2u]);
    vec3 scale = make3(expf(log_scale.x), expf(log_scale.y), expf(log_scale.z));
    float logit = a.opacities[g];
    float opacity = 1.0f / (1.0f + expf(-logit));

    vec3 g_mean = make3(0.0f, 0.0f, 0.0f);
    vec4 g_quat = make4(0.0f, 0.0f, 0.0f, 0.0f);
    vec3 g_scale = make3(0.0f, 0.0f, 0.0f);
    float g_opacity = 0.0f;
    float grad2d = 0.0f;
    uint32_t seen = 0u;
    // ONE_VIEW: the view's basis and masked colour gradient (0 when invisible);
    // otherwise the SH gradient accumulated over the views
    float view_basis[16];
    vec3 view_vraw = make3(0.0f, 0.0f, 0.0f);
    float g_sh[ONE_VIEW ? 1 : n_active];
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        view_basis[k] = 0.0f;
    }
#pragma unroll
    for (int k = 0; k < (ONE_VIEW ? 1 : int(n_active)); ++k) {
        g_sh[k] = 0.0f;
    }
    const uint32_t n_views = ONE_VIEW ? 1u : sp.n_views;
    for (uint32_t c = 0u; c < n_views; ++c) {
        uint32_t i = c * pc.n + g;
        int2 r = a.radii[i];
        if (r.x == 0 && r.y == 0) {
            continue;
        }
        Camera cam = LOAD_CAMERA(a.cameras, c);
        vec2 v_xy = make2(a.grad_xy[2u * i], a.grad_xy[2u * i + 1u]);
        vec3 v_con = make3(a.grad_conics[3u * i], a.grad_conics[3u * i + 1u], a.grad_conics[3u * i + 2u]);
        vec3 v_rgb = make3(a.grad_rgb[3u * i], a.grad_rgb[3u * i + 1u], a.grad_rgb[3u * i + 2u]);
        g_opacity += a.grad_opacity[i];
        projection_geometry_vjp(cam, mean, quat, scale, float(pc.width), float(pc.height), pc.eps2d, v_xy, v_con,
                                g_mean, g_quat, g_scale);
        vec3 delta = mean - camera_position(cam);
        float inv_len = inversesqrt(dot(delta, delta));
        vec3 dir = delta * inv_len;
        float basis[16];
        sh_basis(degree, dir, basis);
        vec3 raw = make3(0.0f, 0.0f, 0.0f);
#pragma unroll
        for (uint32_t k = 0u; k < n_active / 3u; ++k) {
            raw += basis[k] * make3(sh[sh_base + 3u * k], sh[sh_base + 3u * k + 1u], sh[sh_base + 3u * k + 2u]);
        }
        vec3 v_raw = v_rgb * vec3(greaterThanEqual(raw + 0.5f, vec3(0.0f)));
        float w[16];
#pragma unroll
        for (uint32_t k = 0u; k < n_active / 3u; ++k) {
            w[k] = dot(make3(sh[sh_base + 3u * k], sh[sh_base + 3u * k + 1u], sh[sh_base + 3u * k + 2u]), v_raw);
            if (ONE_VIEW) {
                view_basis[k] = basis[k];
            } else {
#pragma unroll
                for (uint32_t ch = 0u; ch < 3u; ++ch) {
                    g_sh[ONE_VIEW ? 0u : 3u * k + ch] += basis[k] * v_raw[int(ch)];
                }
            }
        }
        sh_direction_vjp(SH_DEGREE, dir, inv_len, w, g_mean);
        view_vraw = v_raw;
        vec2 v_stat = sp.absgrad ? make2(a.grad_xy_abs[2u * i], a.grad_xy_abs[2u * i + 1u]) : v_xy;
        vec2 gn = v_stat * make2(params->grad_norm_scale_x, params->grad_norm_scale_y);
        grad2d += sqrtf(gn.x * gn.x + gn.y * gn.y);
        seen += 1u;
    }
    float n_splats = float(max(params->n_splats, 1u));
    // through the activations, plus the regularizers' gradients
    g_scale = g_scale * scale + params->scale_reg / (3.0f * n_splats) * scale;
    g_opacity = (g_opacity + params->opacity_reg / n_splats) * opacity * (1.0f - opacity);

    float b1 = params->beta1, b2 = params->beta2, c1 = params->bias1, c2 = params->bias2, eps = params->adam_eps;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        uint32_t j = 3u * g + uint32_t(k);
        float m = a.mo.m_means[j], v = a.mo.v_means[j];
        mean[k] = adam_update(mean[k], g_mean[k], m, v, params->lr_means, b1, b2, c1, c2, eps);
        a.mo.m_means[j] = m;
        a.mo.v_means[j] = v;
        m = a.mo.m_scales[j];
        v = a.mo.v_scales[j];
        log_scale[k] = adam_update(log_scale[k], g_scale[k], m, v, params->lr_scales, b1, b2, c1, c2, eps);
        a.mo.m_scales[j] = m;
        a.mo.v_scales[j] = v;
    }
    {
        float4 mq = a.mo.m_quats[g], vq = a.mo.v_quats[g];
        quat.x = adam_update(quat.x, g_quat.x, mq.x, vq.x, params->lr_quats, b1, b2, c1, c2, eps);
        quat.y = adam_update(quat.y, g_quat.y, mq.y, vq.y, params->lr_quats, b1, b2, c1, c2, eps);
        quat.z = adam_update(quat.z, g_quat.z, mq.z, vq.z, params->lr_quats, b1, b2, c1, c2, eps);
        quat.w = adam_update(quat.w, g_quat.w, mq.w, vq.w, params->lr_quats, b1, b2, c1, c2, eps);
        a.mo.m_quats[g] = mq;
        a.mo.v_quats[g] = vq;
    }
    {
        float m = a.mo.m_opacities[g], v = a.mo.v_opacities[g];
        logit = adam_update(logit, g_opacity, m, v, params->lr_opacities, b1, b2, c1, c2, eps);
        a.mo.m_opacities[g] = m;
        a.mo.v_opacities[g] = v;
    }
    // SH: gradient of float f = coefficient f / 3, channel f % 3. The active
    // floats (compile-time f) come first, unrolled; the rest have gradient 0.
    float lr_sh0 = params->lr_sh0, lr_shN = params->lr_shN;
    if (sp.sh_vec4) {
        float4* sh4 = reinterpret_cast<float4*>(a.sh);
        float4* m4 = reinterpret_cast<float4*>(a.mo.m_sh);
        float4* v4 = reinterpret_cast<float4*>(a.mo.v_sh);
        constexpr uint32_t active_vec4 = (n_active + 3u) / 4u;
        const uint32_t n_vec4 = n_floats / 4u;
#pragma unroll
        for (uint32_t j = 0u; j < active_vec4; ++j) {
            if (j >= n_vec4) {
                break;
            }
            uint32_t idx = sh_base / 4u + j;
            float4 p = sh4[idx], m = m4[idx], v = v4[idx];
#pragma unroll
            for (uint32_t e = 0u; e < 4u; ++e) {
                uint32_t f = 4u * j + e;
                float grad = 0.0f;
                if (f < n_active) {
                    if (ONE_VIEW) {
                        grad += view_basis[f / 3u] * view_vraw[int(f % 3u)];
                    } else {
                        grad = g_sh[ONE_VIEW ? 0u : f];
                    }
                }
                float& pe = component(p, e);
                pe = adam_update(pe, grad, component(m, e), component(v, e), f < 3u ? lr_sh0 : lr_shN, b1, b2, c1,
                                 c2, eps);
            }
            sh4[idx] = p;
            m4[idx] = m;
            v4[idx] = v;
        }
        for (uint32_t j = active_vec4; j < n_vec4; ++j) {
            uint32_t idx = sh_base / 4u + j;
            float4 p = sh4[idx], m = m4[idx], v = v4[idx];
#pragma unroll
            for (uint32_t e = 0u; e < 4u; ++e) {
                uint32_t f = 4u * j + e;
                float& pe = component(p, e);
                pe = adam_update(pe, 0.0f, component(m, e), component(v, e), f < 3u ? lr_sh0 : lr_shN, b1, b2, c1,
                                 c2, eps);
            }
            sh4[idx] = p;
            m4[idx] = m;
            v4[idx] = v;
        }
    } else {
#pragma unroll
        for (uint32_t f = 0u; f < n_active; ++f) {
            if (f >= n_floats) {
                break;
            }
            float grad = 0.0f;
            if (ONE_VIEW) {
                grad += view_basis[f / 3u] * view_vraw[int(f % 3u)];
            } else {
                grad = g_sh[ONE_VIEW ? 0u : f];
            }
            uint32_t j = sh_base + f;
            float m = a.mo.m_sh[j], v = a.mo.v_sh[j];
            a.sh[j] = adam_update(a.sh[j], grad, m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            a.mo.m_sh[j] = m;
            a.mo.v_sh[j] = v;
        }
        for (uint32_t f = n_active; f < n_floats; ++f) {
            uint32_t j = sh_base + f;
            float m = a.mo.m_sh[j], v = a.mo.v_sh[j];
            a.sh[j] = adam_update(a.sh[j], 0.0f, m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            a.mo.m_sh[j] = m;
            a.mo.v_sh[j] = v;
        }
    }

    if (sp.mcmc_noise && params->noise_scale > 0.0f) {
        // gsplat's MCMC: noise ~ Sigma n, gated to nearly transparent splats
        float o = 1.0f / (1.0f + expf(-logit));
        float gate = 1.0f / (1.0f + expf(-100.0f * ((1.0f - o) - 0.995f)));
        vec3 s = make3(expf(log_scale.x), expf(log_scale.y), expf(log_scale.z));
        mat3 R = quat_to_rotmat(quat * inversesqrt(dot(quat, quat)));
        mat3 M = mat3_cols(R.c[0] * s.x, R.c[1] * s.y, R.c[2] * s.z);
        vec2 n01 = random_normal2(params->seed, g, 0u);
        vec2 n23 = random_normal2(params->seed, g, 2u);
        vec3 noise = (M * transpose(M)) * make3(n01.x, n01.y, n23.x);
        mean += noise * gate * params->noise_scale;
    }
    a.means[3u * g] = mean.x;
    a.means[3u * g + 1u] = mean.y;
    a.means[3u * g + 2u] = mean.z;
    store4(a.quats, g, quat);
    a.scales[3u * g] = log_scale.x;
    a.scales[3u * g + 1u] = log_scale.y;
    a.scales[3u * g + 2u] = log_scale.z;
    a.opacities[g] = logit;
    if (sp.adc_stats && seen > 0u) {
        a.grad2d_sum[g] += grad2d;
        a.vis_count[g] += seen;
    }
}

template <int SH_DEGREE>
int launch_degree(const SpirulaLaunch* L, const Args& a, const Push& pc, const Spec& sp) {
    if (sp.n_views == 1u) {
        return launch(L, dim3(128), fpbo_kernel<SH_DEGREE, true>, a, pc, sp);
    }
    return launch(L, dim3(128), fpbo_kernel<SH_DEGREE, false>, a, pc, sp);
}

}  // namespace

SPIRULA_EXPORT int fpbo(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 26, 7, 6);
    Args a{buffer<float>(L, 0),        buffer<float4>(L, 1),         buffer<float>(L, 2),
           buffer<float>(L, 3),        buffer<float>(L, 4),          spirula::moments_at(L, 5),
           buffer<const float>(L, 15), buffer<const int2>(L, 16),    buffer<const float>(L, 17),
           buffer<const float>(L, 18), buffer<const float>(L, 19),   buffer<const float>(L, 20),
           buffer<const StepParams>(L, 21), buffer<const uint32_t>(L, 22), buffer<float>(L, 23),
           buffer<uint32_t>(L, 24),        buffer<const float>(L, 25)};
    Push pc = push_block<Push>(L);
    Spec sp{L->spec[1], L->spec[2] != 0u, L->spec[3] != 0u, L->spec[4], L->spec[5] != 0u,
            (L->flags & SPIRULA_FLAG_SH_VEC4) != 0u};
    if (sp.sh_vec4 && (sp.sh_coeffs * 3u) % 4u != 0u) {
        return static_cast<int>(cudaErrorInvalidValue);     // the shader's SH_VEC4 needs 3K % 4 == 0
    }
    switch (L->spec[0]) {
        case 0: return launch_degree<0>(L, a, pc, sp);
        case 1: return launch_degree<1>(L, a, pc, sp);
        case 2: return launch_degree<2>(L, a, pc, sp);
        case 3: return launch_degree<3>(L, a, pc, sp);
        default: return static_cast<int>(cudaErrorInvalidValue);   // sh.glsl stops at degree 3
    }
}
