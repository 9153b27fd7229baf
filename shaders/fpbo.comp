#version 450
// fpbo: fused projection backward + optimizer. One thread per splat: sums the
// gradients of its projections in every view (the maths of projection_bwd),
// adds the regularizers, applies Adam to every attribute in place, then (MCMC)
// perturbs the position with opacity-gated noise shaped by its covariance and
// (ADC) accumulates its screen-space gradient norm for density control.
// Stored attributes are raw: log-scales and opacity logits. Workgroup 128, folded.
// One view (N_VIEWS = 1, training): the SH rows' Adam (80% of the bytes) runs
// after a barrier over the workgroup's 128 rows as one contiguous block,
// neighbouring threads on neighbouring words, from each splat's SH basis and
// masked colour gradient left in shared memory (a thread walking its own row
// strides 192 bytes across the warp: a memory transaction per thread and load).
// Compact rows too: their moment words line up with the parameter words
// (storage.glsl), so a thread updates one parameter word and its two moment
// words, and each splat's own thread the three DC floats.
// A step whose intersections overflowed the buffers (count > capacity) changes
// nothing: the trainer grows them and runs the step again; so does a step right
// after one that overflowed (params.prev_isects > params.prev_capacity: the
// pipelined trainer submitted it before it could know). N_VIEWS (spec) = V.
//   binding 0-4   means [N,3], quats [N,4], scales [N,3] (log), opacities [N] (logit),
//                 sh [N,K,3]                            f32  read/write
//   binding 5-14  Adam first/second moments of each     f32  read/write
//                 COMPACT: sh, m_sh, v_sh are [N,W] u32 rows, the moments of means,
//                 quats, scales [N,2] u32 rows (include/storage.glsl: fp16 SH past
//                 the DC, bf16 moments, stochastic rounding)
//   binding 15    cameras      [V,32]   f32  read   camera records (include/projection.glsl)
//   binding 16    radii        [V*N,2]  i32  read
//   binding 17-20 grad_xy [V*N,2], grad_conics [V*N,3], grad_rgb [V*N,3],
//                 grad_opacity [V*N]    f32  read   (from rasterize_bwd)
//   binding 21    params       StepParams    read   learning rates, Adam step, regularizers
//   binding 22    num_isects   [..]     u32  read   count at count_offset
//   binding 23    grad2d_sum   [N]      f32  read/write  (ADC_STATS) sum of |dL/dmean2d| (normalized)
//   binding 24    vis_count    [N]      u32  read/write  (ADC_STATS) views the splat was visible in
//   binding 25    grad_xy_abs  [V*N,2]  f32  read   (ADC_STATS and ABSGRAD) per-pixel |dL/dmean2d| sums:
//                                                   the statistic then uses them (AbsGS, gsplat's absgrad)
//   binding 26    grad_depth   [V*N]    f32  read   (DEPTH_GRAD) dL/d camera z (the depth distortion,
//                                                   --geometry): adds R^T (0, 0, dL/dz) to dL/d mean
//   binding 27    grad_normals [V*N,3]  f32  read   (NORMALS) dL/d camera-space splat normal (the normal
//                                                   consistency, --geometry): to the quaternion
//                                                   (splat_normal_vjp, include/projection.glsl)
// FLATTEN (spec): the flattening regularizer flatten_reg * mean over splats of min_k scale_k
// (StepParams, --geometry): each splat's thinnest axis pushed towards 0, a disc on the surface.
// d/d log_scale_k = flatten_reg / n * scale_k at the smallest k (the first of equal ones), else 0.
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#define SPIRULA_PROJECTION_VJP
#include "sh.glsl"
#include "projection.glsl"
#include "adam.glsl"
#include "random.glsl"
#include "step_params.glsl"
#include "storage.glsl"

// SH_VEC4=1 (3K a multiple of 4, e.g. degree 1 or 3): the SH coefficients and
// their moments move as vec4s, the widest loads.
#ifndef SH_VEC4
#define SH_VEC4 0
#endif
#ifndef COMPACT
#define COMPACT 0
#endif
// words of the compact SH block a thread loads before it computes any (sh_adam_block):
// fpbo_bench's compact rows on an H100, 1: 3.077 ms, 2: 2.786, 4: 2.631, 8: 2.703
#ifndef BLOCK_WORDS
#define BLOCK_WORDS 4
#endif
#if COMPACT
#define SH_T uint
#define MOM3_T uint
#define MOM4_T uint
#elif SH_VEC4
#define SH_T vec4
#define SH_GET(buf, f) buf[(f) >> 2u][(f) & 3u]
#else
#define SH_T float
#define SH_GET(buf, f) buf[f]
#endif
#ifndef MOM3_T
#define MOM3_T float
#define MOM4_T vec4
#endif

layout(local_size_x = 128) in;
// Every binding is a distinct buffer (restrict): loads may then be scheduled
// ahead of the stores to other attributes.
layout(constant_id = 0) const uint SH_DEGREE = 0;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool MCMC_NOISE = false;
layout(constant_id = 3) const bool ADC_STATS = false;
layout(constant_id = 4) const uint N_VIEWS = 1;
layout(constant_id = 5) const bool ABSGRAD = false;
layout(constant_id = 6) const bool DEPTH_GRAD = false;
layout(constant_id = 7) const bool FLATTEN = false;
layout(constant_id = 8) const bool NORMALS = false;
// LENSES (spec): some view may be a lens (camera.glsl's models past PINHOLE); false keeps the
// unscented-transform backward out of the pipeline (on CUDA its registers cost a pinhole run 2-4%)
layout(constant_id = 9) const bool LENSES = true;

layout(std430, binding = 0) restrict buffer MeansBuf { float means[]; };
layout(std430, binding = 1) restrict buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 2) restrict buffer ScalesBuf { float scales[]; };
layout(std430, binding = 3) restrict buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 4) restrict buffer ShBuf { SH_T sh[]; };
layout(std430, binding = 5) restrict buffer MMeansBuf { MOM3_T m_means[]; };
layout(std430, binding = 6) restrict buffer VMeansBuf { MOM3_T v_means[]; };
layout(std430, binding = 7) restrict buffer MQuatsBuf { MOM4_T m_quats[]; };
layout(std430, binding = 8) restrict buffer VQuatsBuf { MOM4_T v_quats[]; };
layout(std430, binding = 9) restrict buffer MScalesBuf { MOM3_T m_scales[]; };
layout(std430, binding = 10) restrict buffer VScalesBuf { MOM3_T v_scales[]; };
layout(std430, binding = 11) restrict buffer MOpacitiesBuf { float m_opacities[]; };
layout(std430, binding = 12) restrict buffer VOpacitiesBuf { float v_opacities[]; };
layout(std430, binding = 13) restrict buffer MShBuf { SH_T m_sh[]; };
layout(std430, binding = 14) restrict buffer VShBuf { SH_T v_sh[]; };
layout(std430, binding = 15) restrict readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 16) restrict readonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 17) restrict readonly buffer GradXyBuf { GRAD_T grad_xy[]; };
layout(std430, binding = 18) restrict readonly buffer GradConicsBuf { GRAD_T grad_conics[]; };
layout(std430, binding = 19) restrict readonly buffer GradRgbBuf { GRAD_T grad_rgb[]; };
layout(std430, binding = 20) restrict readonly buffer GradOpacityBuf { GRAD_T grad_opacity[]; };
layout(std430, binding = 21) restrict readonly buffer ParamsBuf { StepParams params; };
layout(std430, binding = 22) restrict readonly buffer NumIsectsBuf { uint num_isects[]; };
layout(std430, binding = 23) restrict buffer Grad2dSumBuf { float grad2d_sum[]; };
layout(std430, binding = 24) restrict buffer VisCountBuf { uint vis_count[]; };
layout(std430, binding = 25) restrict readonly buffer GradXyAbsBuf { GRAD_T grad_xy_abs[]; };
layout(std430, binding = 26) restrict readonly buffer GradDepthBuf { GRAD_T grad_depth[]; };
layout(std430, binding = 27) restrict readonly buffer GradNormalsBuf { GRAD_T grad_normals[]; };

layout(push_constant) uniform Push {
    uint n;
    uint n_views;
    uint width;
    uint height;
    float eps2d;
    uint count_offset;
    uint isect_capacity;
} pc;

#define WG gl_WorkGroupSize.x
// per splat of the workgroup: its view's SH basis (rows of 17: no bank conflicts) and masked colour gradient
shared float s_basis[WG * 17u];
shared float s_vraw[WG * 3u];

#if COMPACT
// Adam on SH float f of splat g (compact rows, include/storage.glsl) from the values its
// words hold: the new parameter's bits (f32 for the DC, else fp16) and the new m and v
// as bf16, each rounded stochastically with its own bits (m: the low 16 of r, v: the high).
uvec3 sh_compact_step(uint g, uint f, float p, float m, float v, float grad) {
    p = adam_update(p, grad, m, v, f < 3u ? params.lr_sh0 : params.lr_shN, params.beta1, params.beta2, params.bias1,
                    params.bias2, params.adam_eps);
    uint r = storage_bits(params.seed, g, 64u + f);
    uint pb = f < 3u ? floatBitsToUint(p) : float_to_half_sr(p, storage_bits(params.seed, g, f));
    return uvec3(pb, float_to_bf16_sr(m, r), float_to_bf16_sr(v, r >> 16u));
}

// The DC floats 0-2 of splat g's compact SH row: f32 words 0-2; moments in words 0-1.
void sh_compact_dc(uint g, vec3 grad) {
    uint sb = g * sh_row_words(true, SH_COEFFS), mb = g * moment_row_words(true, SH_COEFFS);
    uvec2 mw = uvec2(m_sh[mb], m_sh[mb + 1u]), vw = uvec2(v_sh[mb], v_sh[mb + 1u]);
    uvec3 a = sh_compact_step(g, 0u, uintBitsToFloat(sh[sb]), moment_compact_value(mw.x, 0u),
                              moment_compact_value(vw.x, 0u), grad.x);
    uvec3 b = sh_compact_step(g, 1u, uintBitsToFloat(sh[sb + 1u]), moment_compact_value(mw.x, 1u),
                              moment_compact_value(vw.x, 1u), grad.y);
    uvec3 c = sh_compact_step(g, 2u, uintBitsToFloat(sh[sb + 2u]), moment_compact_value(mw.y, 2u),
                              moment_compact_value(vw.y, 2u), grad.z);
    sh[sb] = a.x;
    sh[sb + 1u] = b.x;
    sh[sb + 2u] = c.x;
    m_sh[mb] = a.y | (b.y << 16u);
    m_sh[mb + 1u] = c.y;
    v_sh[mb] = a.z | (b.z << 16u);
    v_sh[mb + 1u] = c.z;
}

// Word j of the higher coefficients of splat g's compact SH row: floats 3 + 2j and (when
// there is one) 4 + 2j, in sh word 3 + j and moment words 2 + j, halves alike. Given the
// row's words (pw: sh, mw, vw: the moments), the words to store.
uvec3 sh_compact_pair_words(uint g, uint j, uint pw, uint mw, uint vw, float grad0, float grad1) {
    uint f = 3u + 2u * j;
    uvec3 w =
        sh_compact_step(g, f, sh_compact_value(pw, f), moment_compact_value(mw, f), moment_compact_value(vw, f), grad0);
    if (f + 1u < 3u * SH_COEFFS) {  // the word's high half
        uint h = f + 1u;
        w |= sh_compact_step(g, h, sh_compact_value(pw, h), moment_compact_value(mw, h), moment_compact_value(vw, h),
                             grad1)
             << 16u;
    }
    return w;
}

uint sh_compact_pair_sh_index(uint g, uint j) {
    return g * sh_row_words(true, SH_COEFFS) + sh_compact_word(3u + 2u * j);
}
uint sh_compact_pair_moment_index(uint g, uint j) {
    return g * moment_row_words(true, SH_COEFFS) + moment_compact_word(3u + 2u * j);
}

void sh_compact_pair(uint g, uint j, float grad0, float grad1) {
    uint si = sh_compact_pair_sh_index(g, j), mi = sh_compact_pair_moment_index(g, j);
    uvec3 w = sh_compact_pair_words(g, j, sh[si], m_sh[mi], v_sh[mi], grad0, grad1);
    sh[si] = w.x;
    m_sh[mi] = w.y;
    v_sh[mi] = w.z;
}
#endif

// Everything of splat g but (coalesce) the Adam step of its SH row, for which it
// leaves its basis and v_raw in s_basis, s_vraw.
void update_splat(uint g, bool coalesce) {
    const int degree = int(SH_DEGREE);
    const uint n_active = 3u * (SH_DEGREE + 1u) * (SH_DEGREE + 1u);  // active coefficient floats
    const uint n_floats = 3u * SH_COEFFS;
    uint sh_base = g * sh_row_words(COMPACT != 0, SH_COEFFS);
#if COMPACT
    // decoded where read (f is a compile-time index there): no local array
#define SH_VAL(f) sh_compact_value(sh[sh_base + sh_compact_word(f)], f)
#else
#define SH_VAL(f) SH_GET(sh, sh_base + (f))
#endif
    vec3 mean = vec3(means[3u * g], means[3u * g + 1u], means[3u * g + 2u]);
    vec4 quat = quats[g];
    vec3 log_scale = vec3(scales[3u * g], scales[3u * g + 1u], scales[3u * g + 2u]);
    vec3 scale = exp(log_scale);
    float logit = opacities[g];
    float opacity = 1.0 / (1.0 + exp(-logit));

    vec3 g_mean = vec3(0.0);
    vec4 g_quat = vec4(0.0);
    vec3 g_scale = vec3(0.0);
    float g_opacity = 0.0;
    float grad2d = 0.0;
    uint seen = 0u;
    // The SH coefficients' gradient is, per view, the outer product of the
    // SH basis at the view direction and the clamp-masked colour gradient.
    // One view (training): kept as the basis and v_raw, formed in the Adam
    // loop below; several views: summed into g_sh. Fixed-size arrays and
    // unrolled loops keep all of it in registers.
    float basis[16];
    vec3 v_raw = vec3(0.0);
    float g_sh[48];
    [[unroll]]
    for (uint k = 0u; k < 16u; ++k) {
        basis[k] = 0.0;
    }
    if (N_VIEWS > 1u) {
        [[unroll]]
        for (uint k = 0u; k < 48u; ++k) {
            g_sh[k] = 0.0;
        }
    }
    for (uint c = 0u; c < N_VIEWS; ++c) {
        uint i = c * pc.n + g;
        if (radii[i].x == 0 && radii[i].y == 0) {
            continue;
        }
        Camera cam = LOAD_CAMERA(cameras, c);
        vec2 v_xy = vec2(GRAD_LOAD(grad_xy, 2u * i), GRAD_LOAD(grad_xy, 2u * i + 1u));
        vec3 v_con = vec3(GRAD_LOAD(grad_conics, 3u * i), GRAD_LOAD(grad_conics, 3u * i + 1u),
                          GRAD_LOAD(grad_conics, 3u * i + 2u));
        vec3 v_rgb =
            vec3(GRAD_LOAD(grad_rgb, 3u * i), GRAD_LOAD(grad_rgb, 3u * i + 1u), GRAD_LOAD(grad_rgb, 3u * i + 2u));
        g_opacity += GRAD_LOAD(grad_opacity, i);
        uint model = CAMERA_MODEL(cameras, c);  // the same for every thread: a uniform branch
        if (!LENSES || model == CAMERA_PINHOLE) {
            projection_geometry_vjp(cam, mean, quat, scale, float(pc.width), float(pc.height), pc.eps2d, v_xy, v_con,
                                    g_mean, g_quat, g_scale);
        } else {
            projection_geometry_vjp_ut(cam, LOAD_LENS(cameras, c), mean, quat, scale, pc.eps2d, v_xy, v_con, g_mean,
                                       g_quat, g_scale);
        }
        if (DEPTH_GRAD) {  // depth = (R mean + t).z, or |R mean + t| (lens_depth)
            vec3 pc_dir = vec3(0.0, 0.0, 1.0);
            if (LENSES && model != CAMERA_PINHOLE && model != CAMERA_OPENCV) {
                pc_dir = normalize(cam.R * mean + cam.t);
            }
            g_mean += transpose(cam.R) * (pc_dir * GRAD_LOAD(grad_depth, i));
        }
        if (NORMALS) {
            vec3 v_n = vec3(GRAD_LOAD(grad_normals, 3u * i), GRAD_LOAD(grad_normals, 3u * i + 1u),
                            GRAD_LOAD(grad_normals, 3u * i + 2u));
            splat_normal_vjp(cam, mean, quat, scale, v_n, g_quat);
        }
        vec3 delta = mean - camera_position(cam);
        float inv_len = inversesqrt(dot(delta, delta));
        vec3 dir = delta * inv_len;
        sh_basis(degree, dir, basis);
        vec3 raw = vec3(0.0);
        [[unroll]]
        for (uint k = 0u; k < n_active / 3u; ++k) {
            raw += basis[k] * vec3(SH_VAL(3u * k), SH_VAL(3u * k + 1u), SH_VAL(3u * k + 2u));
        }
        v_raw = v_rgb * vec3(greaterThanEqual(raw + 0.5, vec3(0.0)));
        float w[16];
        [[unroll]]
        for (uint k = 0u; k < n_active / 3u; ++k) {
            w[k] = dot(vec3(SH_VAL(3u * k), SH_VAL(3u * k + 1u), SH_VAL(3u * k + 2u)), v_raw);
        }
        sh_direction_vjp(degree, dir, inv_len, w, g_mean);
        if (N_VIEWS > 1u) {
            [[unroll]]
            for (uint f = 0u; f < n_active; ++f) {
                g_sh[f] += basis[f / 3u] * v_raw[f % 3u];
            }
        }
        vec2 v_stat = ABSGRAD ? vec2(GRAD_LOAD(grad_xy_abs, 2u * i), GRAD_LOAD(grad_xy_abs, 2u * i + 1u)) : v_xy;
        grad2d += length(v_stat * vec2(params.grad_norm_scale_x, params.grad_norm_scale_y));
        seen += 1u;
    }
    float n_splats = float(max(params.n_splats, 1u));
    // through the activations, plus the regularizers' gradients
    g_scale = g_scale * scale + params.scale_reg / (3.0 * n_splats) * scale;
    if (FLATTEN) {
        uint k_min = scale.y < scale.x ? 1u : 0u;
        k_min = scale.z < scale[k_min] ? 2u : k_min;
        g_scale[k_min] += params.flatten_reg / n_splats * scale[k_min];
    }
    g_opacity = (g_opacity + params.opacity_reg / n_splats) * opacity * (1.0 - opacity);

    float b1 = params.beta1, b2 = params.beta2, c1 = params.bias1, c2 = params.bias2, eps = params.adam_eps;
    float lr_sh0 = params.lr_sh0, lr_shN = params.lr_shN;
#if COMPACT
    {
        // bf16 rows of 2 words: value k in word k / 2, half k % 2
        uvec2 mw = uvec2(m_means[2u * g], m_means[2u * g + 1u]), vw = uvec2(v_means[2u * g], v_means[2u * g + 1u]);
        uvec2 msw = uvec2(m_scales[2u * g], m_scales[2u * g + 1u]);
        uvec2 vsw = uvec2(v_scales[2u * g], v_scales[2u * g + 1u]);
        uvec2 mqw = uvec2(m_quats[2u * g], m_quats[2u * g + 1u]), vqw = uvec2(v_quats[2u * g], v_quats[2u * g + 1u]);
        vec4 mm, vm, ms, vs, mq, vq;
        [[unroll]]
        for (uint k = 0u; k < 4u; ++k) {
            mm[k] = geom_moment_value(mw[k >> 1u], k);
            vm[k] = geom_moment_value(vw[k >> 1u], k);
            ms[k] = geom_moment_value(msw[k >> 1u], k);
            vs[k] = geom_moment_value(vsw[k >> 1u], k);
            mq[k] = geom_moment_value(mqw[k >> 1u], k);
            vq[k] = geom_moment_value(vqw[k >> 1u], k);
        }
        uvec4 rm = uvec4(0u), rs = uvec4(0u), rq;
        [[unroll]]
        for (uint k = 0u; k < 3u; ++k) {
            float m = mm[k], v = vm[k];
            mean[k] = adam_update(mean[k], g_mean[k], m, v, params.lr_means, b1, b2, c1, c2, eps);
            mm[k] = m;
            vm[k] = v;
            rm[k] = storage_bits(params.seed, g, geom_moment_element(0u, k));
            m = ms[k];
            v = vs[k];
            log_scale[k] = adam_update(log_scale[k], g_scale[k], m, v, params.lr_scales, b1, b2, c1, c2, eps);
            ms[k] = m;
            vs[k] = v;
            rs[k] = storage_bits(params.seed, g, geom_moment_element(1u, k));
        }
        [[unroll]]
        for (int k = 0; k < 4; ++k) {
            float m = mq[k], v = vq[k];
            quat[k] = adam_update(quat[k], g_quat[k], m, v, params.lr_quats, b1, b2, c1, c2, eps);
            mq[k] = m;
            vq[k] = v;
            rq[k] = storage_bits(params.seed, g, geom_moment_element(2u, uint(k)));
        }
        // m rounds with a value's low 16 random bits, v with its high 16; the pads stay 0
        m_means[2u * g] = pack_bf16_sr(mm.x, mm.y, rm.x, rm.y);
        m_means[2u * g + 1u] = float_to_bf16_sr(mm.z, rm.z);
        v_means[2u * g] = pack_bf16_sr(vm.x, vm.y, rm.x >> 16u, rm.y >> 16u);
        v_means[2u * g + 1u] = float_to_bf16_sr(vm.z, rm.z >> 16u);
        m_scales[2u * g] = pack_bf16_sr(ms.x, ms.y, rs.x, rs.y);
        m_scales[2u * g + 1u] = float_to_bf16_sr(ms.z, rs.z);
        v_scales[2u * g] = pack_bf16_sr(vs.x, vs.y, rs.x >> 16u, rs.y >> 16u);
        v_scales[2u * g + 1u] = float_to_bf16_sr(vs.z, rs.z >> 16u);
        m_quats[2u * g] = pack_bf16_sr(mq.x, mq.y, rq.x, rq.y);
        m_quats[2u * g + 1u] = pack_bf16_sr(mq.z, mq.w, rq.z, rq.w);
        v_quats[2u * g] = pack_bf16_sr(vq.x, vq.y, rq.x >> 16u, rq.y >> 16u);
        v_quats[2u * g + 1u] = pack_bf16_sr(vq.z, vq.w, rq.z >> 16u, rq.w >> 16u);
    }
#else
    [[unroll]]
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
    [[unroll]]
    for (int k = 0; k < 4; ++k) {
        float m = mq[k], v = vq[k];
        quat[k] = adam_update(quat[k], g_quat[k], m, v, params.lr_quats, b1, b2, c1, c2, eps);
        mq[k] = m;
        vq[k] = v;
    }
    m_quats[g] = mq;
    v_quats[g] = vq;
#endif
    {
        float m = m_opacities[g], v = v_opacities[g];
        logit = adam_update(logit, g_opacity, m, v, params.lr_opacities, b1, b2, c1, c2, eps);
        m_opacities[g] = m;
        v_opacities[g] = v;
    }
    // SH: gradient of float f = coefficient f / 3, channel f % 3 (0 past the active degree)
#define SH_GRAD(f) ((f) < n_active ? (N_VIEWS > 1u ? g_sh[f] : basis[(f) / 3u] * v_raw[(f) % 3u]) : 0.0)
    if (coalesce) {
#if COMPACT
        sh_compact_dc(g, vec3(SH_GRAD(0u), SH_GRAD(1u), SH_GRAD(2u)));
#endif
        uint l = gl_LocalInvocationID.x;
        [[unroll]]
        for (uint k = 0u; k < 16u; ++k) {
            s_basis[17u * l + k] = basis[k];
        }
        s_vraw[3u * l] = v_raw.x;
        s_vraw[3u * l + 1u] = v_raw.y;
        s_vraw[3u * l + 2u] = v_raw.z;
    } else {
#if COMPACT
        sh_compact_dc(g, vec3(SH_GRAD(0u), SH_GRAD(1u), SH_GRAD(2u)));
        [[unroll]]
        for (uint j = 0u; j < (n_floats - 2u) / 2u; ++j) {
            sh_compact_pair(g, j, SH_GRAD(3u + 2u * j), SH_GRAD(4u + 2u * j));
        }
#elif SH_VEC4
        [[unroll]]
        for (uint j = 0u; j < n_floats / 4u; ++j) {
            uint idx = sh_base / 4u + j;
            vec4 p = sh[idx], m = m_sh[idx], v = v_sh[idx];
            [[unroll]]
            for (uint e = 0u; e < 4u; ++e) {
                uint f = 4u * j + e;
                float mm = m[e], vv = v[e];
                p[e] = adam_update(p[e], SH_GRAD(f), mm, vv, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
                m[e] = mm;
                v[e] = vv;
            }
            sh[idx] = p;
            m_sh[idx] = m;
            v_sh[idx] = v;
        }
#else
        [[unroll]]
        for (uint f = 0u; f < n_floats; ++f) {
            uint j = sh_base + f;
            float m = m_sh[j], v = v_sh[j];
            sh[j] = adam_update(sh[j], SH_GRAD(f), m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            m_sh[j] = m;
            v_sh[j] = v;
        }
#endif
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

// The Adam step of the workgroup's float32 SH rows, as one block: rows first .. first + count - 1
// are contiguous, so thread l takes words l, l + WG, ... The same arithmetic, and the same
// rounding bits, as the per-splat loops of update_splat: the results are bit-identical.
void sh_adam_block(uint first, uint count) {
    const uint n_active = 3u * (SH_DEGREE + 1u) * (SH_DEGREE + 1u);
    const uint n_floats = 3u * SH_COEFFS;
    float b1 = params.beta1, b2 = params.beta2, c1 = params.bias1, c2 = params.bias2, eps = params.adam_eps;
    float lr_sh0 = params.lr_sh0, lr_shN = params.lr_shN;
    uint l = gl_LocalInvocationID.x;
#define BLOCK_GRAD(s, f) ((f) < n_active ? s_basis[17u * (s) + (f) / 3u] * s_vraw[3u * (s) + (f) % 3u] : 0.0)
#if COMPACT
    // the higher coefficients' words (update_splat did the DC): sh word 3 + j and moment word 2 + j of each row
    // BLOCK_WORDS words a thread at a time, their loads issued before any of their
    // arithmetic: the loop is bound by the loads' latency, not by bandwidth
    const uint R = sh_row_words(true, SH_COEFFS) - 3u, total = count * R;
    for (uint q0 = l; q0 < total; q0 += BLOCK_WORDS * WG) {
        uint pw[BLOCK_WORDS], mw[BLOCK_WORDS], vw[BLOCK_WORDS];
        [[unroll]]
        for (uint u = 0u; u < BLOCK_WORDS; ++u) {
            uint q = q0 + u * WG;
            if (q < total) {
                uint s = q / R, j = q - s * R;
                uint si = sh_compact_pair_sh_index(first + s, j), mi = sh_compact_pair_moment_index(first + s, j);
                pw[u] = sh[si];
                mw[u] = m_sh[mi];
                vw[u] = v_sh[mi];
            }
        }
        [[unroll]]
        for (uint u = 0u; u < BLOCK_WORDS; ++u) {
            uint q = q0 + u * WG;
            if (q < total) {
                uint s = q / R, j = q - s * R, f = 3u + 2u * j;
                uvec3 w =
                    sh_compact_pair_words(first + s, j, pw[u], mw[u], vw[u], BLOCK_GRAD(s, f), BLOCK_GRAD(s, f + 1u));
                uint si = sh_compact_pair_sh_index(first + s, j), mi = sh_compact_pair_moment_index(first + s, j);
                sh[si] = w.x;
                m_sh[mi] = w.y;
                v_sh[mi] = w.z;
            }
        }
    }
#elif SH_VEC4
    const uint row = n_floats / 4u;
    for (uint q = l; q < count * row; q += WG) {
        uint s = q / row, f0 = 4u * (q - s * row), j = first * row + q;
        vec4 p = sh[j], m = m_sh[j], v = v_sh[j];
        [[unroll]]
        for (uint e = 0u; e < 4u; ++e) {
            uint f = f0 + e;
            float mm = m[e], vv = v[e];
            p[e] = adam_update(p[e], BLOCK_GRAD(s, f), mm, vv, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            m[e] = mm;
            v[e] = vv;
        }
        sh[j] = p;
        m_sh[j] = m;
        v_sh[j] = v;
    }
#else
    for (uint q = l; q < count * n_floats; q += WG) {
        uint s = q / n_floats, f = q - s * n_floats, j = first * n_floats + q;
        float m = m_sh[j], v = v_sh[j];
        sh[j] = adam_update(sh[j], BLOCK_GRAD(s, f), m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
        m_sh[j] = m;
        v_sh[j] = v;
    }
#endif
}

void main() {
    // uniform over the dispatch: every thread returns, or none (the barriers below)
    if (num_isects[pc.count_offset] > pc.isect_capacity || params.prev_isects > params.prev_capacity) {
        return;
    }
    const bool coalesce = N_VIEWS == 1u;
    uint g = global_index();
    uint first = linear_group_id() * WG;
    if (g < pc.n) {
        update_splat(g, coalesce);
    }
    if (coalesce && first < pc.n) {
        barrier();
        sh_adam_block(first, min(WG, pc.n - first));
    }
}
