// Hand-written for speed: SH degree, one view, LENSES as templates, 2-word SH Adam blocks (docs/performance.md, fpbo).
// fpbo: fused projection backward + optimizer. Twin of shaders/fpbo.comp.
// One thread per splat: sums the gradients of its projections in every view
// (the maths of projection_bwd), adds the regularizers, applies Adam to every
// attribute in place (FLATTEN: plus the flattening regularizer's), then (MCMC_NOISE) perturbs the position with
// opacity-gated noise shaped by its covariance and (ADC_STATS) accumulates
// its screen-space gradient norm for density control (with ABSGRAD, the norm
// of the per-pixel absolute gradient sums). Stored attributes are
// raw: log-scales and opacity logits. Folded. A step whose intersections
// overflowed the buffers (count > capacity) changes nothing, nor does the step
// after one that overflowed (prev_isects > prev_capacity). SH_DEGREE is a
// template parameter. With the SH_VEC4 flag the SH coefficients and their
// moments move as float4s: one kernel serves both, viewing the float
// pointers as float4s in a uniform branch; the launch checks the buffers
// against the SH_VEC4 variant of the contract.
//
// The SH coefficients' gradient: the shader keeps, per view, the SH basis
// and the clamp-masked colour gradient and forms grad(f) = sum over views of
// basis_c[f / 3] * v_raw_c[f % 3] in the Adam loop, views in order from 0.0.
// Here N_VIEWS = 1 does exactly that (ONE_VIEW); other N_VIEWS accumulate the
// same products, in the same view order, into a register array while
// walking the views (a view a splat is invisible in adds 0 * 0 = +0 in the
// shader, which changes no sum: the result is the same float).
// N_VIEWS = 1 (training): as the shader, the SH rows' Adam runs after a barrier
// over the block's rows as one contiguous block (sh_adam_block), from each
// splat's basis and masked colour gradient left in shared memory; as in the
// shader, compact rows too: their moment words line up with the parameter
// words (storage.glsl), so a thread updates one parameter word and its two
// moment words, and each splat's own thread the three DC floats.
// Contract: build/contracts/fpbo.h, generated from shaders/fpbo.comp.
#include "common/adam.cuh"
#include "common/launch.cuh"
#include "common/projection.cuh"
#include "common/random.cuh"
#include "common/step_params.cuh"
#include "common/storage.cuh"
#include "fpbo.h"

namespace {

using namespace spirula;
using namespace contract;

__device__ __forceinline__ float& component(float4& v, uint32_t e) {
    return e == 0u ? v.x : (e == 1u ? v.y : (e == 2u ? v.z : v.w));
}

constexpr uint32_t WG = LOCAL_THREADS;
// words of the compact SH block a thread loads before it computes any (sh_adam_block):
// fpbo_bench's compact rows on an H100, 1: 3.074 ms, 2: 3.020, 4: 3.041 (the shader: 4)
constexpr uint32_t BLOCK_WORDS = 2u;

// Adam on SH float f of splat g (compact rows, include/storage.glsl) from the
// values its words hold: the new parameter's bits (f32 for the DC, else fp16)
// and the new m and v as bf16, each rounded stochastically with its own bits
// (m: the low 16 of r, v: the high). Twin of the shader's sh_compact_step.
struct ShWords {
    uint32_t p, m, v;
};
// The step's SH Adam constants, read from StepParams once: the pointer is not
// restrict, so nvcc would read them again after every store to a row.
struct ShAdam {
    float lr_sh0, lr_shN, b1, b2, c1, c2, eps;
    uint32_t seed;
};
__device__ __forceinline__ ShAdam sh_adam_of(const StepParams* params) {
    return {params->lr_sh0, params->lr_shN, params->beta1,    params->beta2,
            params->bias1,  params->bias2,  params->adam_eps, params->seed};
}
__device__ __forceinline__ ShWords sh_compact_step(const ShAdam& k, uint32_t g, uint32_t f, float p, float m, float v,
                                                   float grad) {
    p = adam_update(p, grad, m, v, f < 3u ? k.lr_sh0 : k.lr_shN, k.b1, k.b2, k.c1, k.c2, k.eps);
    const uint32_t r = storage_bits(k.seed, g, 64u + f);
    const uint32_t pb = f < 3u ? floatBitsToUint(p) : float_to_half_sr(p, storage_bits(k.seed, g, f));
    return {pb, float_to_bf16_sr(m, r), float_to_bf16_sr(v, r >> 16u)};
}

// The DC floats 0-2 of splat g's compact SH row: f32 words 0-2; moments in words 0-1.
// Loaded apart from their update (sh_compact_dc), so a caller can issue these loads
// with its others, ahead of its stores: the pointers are not restrict, so nvcc keeps
// every load after the stores that precede it in the source (a round trip each).
struct DcWords {
    uint32_t p0, p1, p2, m0, m1, v0, v1;
};
__device__ __forceinline__ DcWords sh_compact_dc_load(const Args& a, uint32_t sh_coeffs, uint32_t g) {
    const uint32_t* sh = reinterpret_cast<const uint32_t*>(a.sh);
    const uint32_t* m_sh = reinterpret_cast<const uint32_t*>(a.m_sh);
    const uint32_t* v_sh = reinterpret_cast<const uint32_t*>(a.v_sh);
    const uint32_t sb = g * sh_row_words(true, sh_coeffs), mb = g * moment_row_words(true, sh_coeffs);
    return {sh[sb], sh[sb + 1u], sh[sb + 2u], m_sh[mb], m_sh[mb + 1u], v_sh[mb], v_sh[mb + 1u]};
}
__device__ __forceinline__ void sh_compact_dc(const Args& a, const ShAdam& k, uint32_t sh_coeffs, uint32_t g,
                                              const DcWords& w, float g0, float g1, float g2) {
    uint32_t* sh = reinterpret_cast<uint32_t*>(a.sh);
    uint32_t* m_sh = reinterpret_cast<uint32_t*>(a.m_sh);
    uint32_t* v_sh = reinterpret_cast<uint32_t*>(a.v_sh);
    const uint32_t sb = g * sh_row_words(true, sh_coeffs), mb = g * moment_row_words(true, sh_coeffs);
    const ShWords x = sh_compact_step(k, g, 0u, uintBitsToFloat(w.p0), moment_compact_value(w.m0, 0u),
                                      moment_compact_value(w.v0, 0u), g0);
    const ShWords y = sh_compact_step(k, g, 1u, uintBitsToFloat(w.p1), moment_compact_value(w.m0, 1u),
                                      moment_compact_value(w.v0, 1u), g1);
    const ShWords z = sh_compact_step(k, g, 2u, uintBitsToFloat(w.p2), moment_compact_value(w.m1, 2u),
                                      moment_compact_value(w.v1, 2u), g2);
    sh[sb] = x.p;
    sh[sb + 1u] = y.p;
    sh[sb + 2u] = z.p;
    m_sh[mb] = x.m | (y.m << 16u);
    m_sh[mb + 1u] = z.m;
    v_sh[mb] = x.v | (y.v << 16u);
    v_sh[mb + 1u] = z.v;
}

// Word j of the higher coefficients of splat g's compact SH row: floats 3 + 2j
// and (when there is one) 4 + 2j, in sh word 3 + j and moment word 2 + j. From
// the row's words (pw: sh; mw, vw: the moments), the words to store.
__device__ __forceinline__ ShWords sh_compact_pair_words(const ShAdam& k, uint32_t sh_coeffs, uint32_t g, uint32_t j,
                                                         uint32_t pw, uint32_t mw, uint32_t vw, float grad0,
                                                         float grad1) {
    const uint32_t f = 3u + 2u * j;
    ShWords w = sh_compact_step(k, g, f, sh_compact_value(pw, f), moment_compact_value(mw, f),
                                moment_compact_value(vw, f), grad0);
    if (f + 1u < 3u * sh_coeffs) {  // the word's high half
        const uint32_t h = f + 1u;
        const ShWords hi = sh_compact_step(k, g, h, sh_compact_value(pw, h), moment_compact_value(mw, h),
                                           moment_compact_value(vw, h), grad1);
        w.p |= hi.p << 16u;
        w.m |= hi.m << 16u;
        w.v |= hi.v << 16u;
    }
    return w;
}
__device__ __forceinline__ uint32_t sh_compact_pair_sh_index(uint32_t sh_coeffs, uint32_t g, uint32_t j) {
    return g * sh_row_words(true, sh_coeffs) + sh_compact_word(3u + 2u * j);
}
__device__ __forceinline__ uint32_t sh_compact_pair_moment_index(uint32_t sh_coeffs, uint32_t g, uint32_t j) {
    return g * moment_row_words(true, sh_coeffs) + moment_compact_word(3u + 2u * j);
}
__device__ __forceinline__ void sh_compact_pair(const Args& a, const ShAdam& k, uint32_t sh_coeffs, uint32_t g,
                                                uint32_t j, float grad0, float grad1) {
    uint32_t* sh = reinterpret_cast<uint32_t*>(a.sh);
    uint32_t* m_sh = reinterpret_cast<uint32_t*>(a.m_sh);
    uint32_t* v_sh = reinterpret_cast<uint32_t*>(a.v_sh);
    const uint32_t si = sh_compact_pair_sh_index(sh_coeffs, g, j), mi = sh_compact_pair_moment_index(sh_coeffs, g, j);
    const ShWords w = sh_compact_pair_words(k, sh_coeffs, g, j, sh[si], m_sh[mi], v_sh[mi], grad0, grad1);
    sh[si] = w.p;
    m_sh[mi] = w.m;
    v_sh[mi] = w.v;
}

// Everything of splat g but (ONE_VIEW) the Adam step of its SH row, for which
// it leaves its basis and v_raw in s_basis (rows of 17) and s_vraw.
template <int SH_DEGREE, bool ONE_VIEW, bool COMPACT, bool LENSES>
__device__ void update_splat(const Args& a, const Push& pc, const Spec& sp, bool sh_vec4, uint32_t g, float* s_basis,
                             float* s_vraw) {
    const StepParams* params = a.params;
    constexpr int degree = SH_DEGREE;
    constexpr uint32_t n_active = 3u * (SH_DEGREE + 1u) * (SH_DEGREE + 1u);  // active coefficient floats
    const uint32_t n_floats = 3u * sp.SH_COEFFS;
    const uint32_t sh_base = g * sh_row_words(COMPACT, sp.SH_COEFFS);
    const float* sh = a.sh;
    // COMPACT: the row (include/storage.glsl) decoded where read (f is a
    // compile-time index there): no local array
    uint32_t* sh_words = reinterpret_cast<uint32_t*>(a.sh);
    auto sh_val = [&](uint32_t f) {
        return COMPACT ? sh_compact_value(sh_words[sh_base + sh_compact_word(f)], f) : sh[sh_base + f];
    };
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
    const uint32_t n_views = ONE_VIEW ? 1u : sp.N_VIEWS;
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
        uint32_t model = CAMERA_MODEL(a.cameras, c);  // the same for every thread: a uniform branch
        if (!LENSES || model == CAMERA_PINHOLE) {
            projection_geometry_vjp(cam, mean, quat, scale, float(pc.width), float(pc.height), pc.eps2d, v_xy, v_con,
                                    g_mean, g_quat, g_scale);
        } else {
            projection_geometry_vjp_ut(cam, LOAD_LENS(a.cameras, c), mean, quat, scale, pc.eps2d, v_xy, v_con, g_mean,
                                       g_quat, g_scale);
        }
        if (sp.DEPTH_GRAD) {  // depth = (R mean + t).z, or |R mean + t| (lens_depth)
            vec3 pc_dir = make3(0.0f, 0.0f, 1.0f);
            if (LENSES && model != CAMERA_PINHOLE && model != CAMERA_OPENCV) {
                pc_dir = normalize(cam.R * mean + cam.t);
            }
            g_mean += transpose(cam.R) * (pc_dir * a.grad_depth[i]);
        }
        if (sp.NORMALS) {  // the normal consistency: the splat normal's gradient to the quaternion
            vec3 v_n = make3(a.grad_normals[3u * i], a.grad_normals[3u * i + 1u], a.grad_normals[3u * i + 2u]);
            splat_normal_vjp(cam, mean, quat, scale, v_n, g_quat);
        }
        vec3 delta = mean - camera_position(cam);
        float inv_len = inversesqrt(dot(delta, delta));
        vec3 dir = delta * inv_len;
        float basis[16];
        sh_basis(degree, dir, basis);
        vec3 raw = make3(0.0f, 0.0f, 0.0f);
#pragma unroll
        for (uint32_t k = 0u; k < n_active / 3u; ++k) {
            raw += basis[k] * make3(sh_val(3u * k), sh_val(3u * k + 1u), sh_val(3u * k + 2u));
        }
        vec3 v_raw = v_rgb * vec3(greaterThanEqual(raw + 0.5f, vec3(0.0f)));
        float w[16];
        // COMPACT, ONE_VIEW: the coefficients read again (L1), not kept from the pass above: holding
        // all 48 across the clamp took 200 registers, against 103 (SH degree 3). The row's base goes
        // through an asm move the compiler cannot see through, so it does not merge the two passes'
        // loads. Other variants are better as they are (notes/performance-history.md, "CUDA fpbo's compact pass").
        uint32_t base2 = sh_base;
        if (COMPACT && ONE_VIEW) {
            asm volatile("mov.b32 %0, %1;" : "=r"(base2) : "r"(sh_base));
        }
        auto sh_again = [&](uint32_t f) {
            return COMPACT && ONE_VIEW ? sh_compact_value(sh_words[base2 + sh_compact_word(f)], f) : sh_val(f);
        };
#pragma unroll
        for (uint32_t k = 0u; k < n_active / 3u; ++k) {
            w[k] = dot(make3(sh_again(3u * k), sh_again(3u * k + 1u), sh_again(3u * k + 2u)), v_raw);
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
        vec2 v_stat = sp.ABSGRAD ? make2(a.grad_xy_abs[2u * i], a.grad_xy_abs[2u * i + 1u]) : v_xy;
        vec2 gn = v_stat * make2(params->grad_norm_scale_x, params->grad_norm_scale_y);
        grad2d += sqrtf(gn.x * gn.x + gn.y * gn.y);
        seen += 1u;
    }
    float n_splats = float(max(params->n_splats, 1u));
    // through the activations, plus the regularizers' gradients
    g_scale = g_scale * scale + params->scale_reg / (3.0f * n_splats) * scale;
    if (sp.FLATTEN) {  // flatten_reg * mean(min_k scale_k): at the first smallest axis
        int k_min = scale.y < scale.x ? 1 : 0;
        k_min = scale.z < scale[k_min] ? 2 : k_min;
        g_scale[k_min] += params->flatten_reg / n_splats * scale[k_min];
    }
    g_opacity = (g_opacity + params->opacity_reg / n_splats) * opacity * (1.0f - opacity);

    float b1 = params->beta1, b2 = params->beta2, c1 = params->bias1, c2 = params->bias2, eps = params->adam_eps;
    // The loads of everything left to update, issued together before the first store: the
    // pointers are not restrict, so nvcc keeps each load behind the stores that precede it
    // in the source, a round trip to memory each (the shader's restrict buffers need not).
    const float m_opacity = a.m_opacities[g], v_opacity = a.v_opacities[g];
    const ShAdam sh_k = sh_adam_of(params);
    const DcWords dc = COMPACT ? sh_compact_dc_load(a, sp.SH_COEFFS, g) : DcWords{};
    const float lr_opacities = params->lr_opacities;
    const float noise_scale = sp.MCMC_NOISE ? params->noise_scale : 0.0f;
    if (COMPACT) {
        // bf16 rows of 2 words (storage.glsl): value k in word k / 2, half k % 2
        const uint32_t seed = params->seed;
        uint32_t* m_means = reinterpret_cast<uint32_t*>(a.m_means);
        uint32_t* v_means = reinterpret_cast<uint32_t*>(a.v_means);
        uint32_t* m_scales = reinterpret_cast<uint32_t*>(a.m_scales);
        uint32_t* v_scales = reinterpret_cast<uint32_t*>(a.v_scales);
        uint32_t* m_quats = reinterpret_cast<uint32_t*>(a.m_quats);
        uint32_t* v_quats = reinterpret_cast<uint32_t*>(a.v_quats);
        const uint32_t mw[2] = {m_means[2u * g], m_means[2u * g + 1u]}, vw[2] = {v_means[2u * g], v_means[2u * g + 1u]};
        const uint32_t msw[2] = {m_scales[2u * g], m_scales[2u * g + 1u]};
        const uint32_t vsw[2] = {v_scales[2u * g], v_scales[2u * g + 1u]};
        const uint32_t mqw[2] = {m_quats[2u * g], m_quats[2u * g + 1u]};
        const uint32_t vqw[2] = {v_quats[2u * g], v_quats[2u * g + 1u]};
        float mm[4], vm[4], ms[4], vs[4], mq[4], vq[4];
        uint32_t rm[4], rs[4], rq[4];
#pragma unroll
        for (uint32_t k = 0u; k < 4u; ++k) {
            mm[k] = geom_moment_value(mw[k >> 1u], k);
            vm[k] = geom_moment_value(vw[k >> 1u], k);
            ms[k] = geom_moment_value(msw[k >> 1u], k);
            vs[k] = geom_moment_value(vsw[k >> 1u], k);
            mq[k] = geom_moment_value(mqw[k >> 1u], k);
            vq[k] = geom_moment_value(vqw[k >> 1u], k);
        }
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            mean[k] = adam_update(mean[k], g_mean[k], mm[k], vm[k], params->lr_means, b1, b2, c1, c2, eps);
            rm[k] = storage_bits(seed, g, geom_moment_element(0u, uint32_t(k)));
            log_scale[k] = adam_update(log_scale[k], g_scale[k], ms[k], vs[k], params->lr_scales, b1, b2, c1, c2, eps);
            rs[k] = storage_bits(seed, g, geom_moment_element(1u, uint32_t(k)));
        }
        quat.x = adam_update(quat.x, g_quat.x, mq[0], vq[0], params->lr_quats, b1, b2, c1, c2, eps);
        quat.y = adam_update(quat.y, g_quat.y, mq[1], vq[1], params->lr_quats, b1, b2, c1, c2, eps);
        quat.z = adam_update(quat.z, g_quat.z, mq[2], vq[2], params->lr_quats, b1, b2, c1, c2, eps);
        quat.w = adam_update(quat.w, g_quat.w, mq[3], vq[3], params->lr_quats, b1, b2, c1, c2, eps);
#pragma unroll
        for (uint32_t k = 0u; k < 4u; ++k) {
            rq[k] = storage_bits(seed, g, geom_moment_element(2u, k));
        }
        // m rounds with a value's low 16 random bits, v with its high 16; the pads stay 0
        m_means[2u * g] = pack_bf16_sr(mm[0], mm[1], rm[0], rm[1]);
        m_means[2u * g + 1u] = float_to_bf16_sr(mm[2], rm[2]);
        v_means[2u * g] = pack_bf16_sr(vm[0], vm[1], rm[0] >> 16u, rm[1] >> 16u);
        v_means[2u * g + 1u] = float_to_bf16_sr(vm[2], rm[2] >> 16u);
        m_scales[2u * g] = pack_bf16_sr(ms[0], ms[1], rs[0], rs[1]);
        m_scales[2u * g + 1u] = float_to_bf16_sr(ms[2], rs[2]);
        v_scales[2u * g] = pack_bf16_sr(vs[0], vs[1], rs[0] >> 16u, rs[1] >> 16u);
        v_scales[2u * g + 1u] = float_to_bf16_sr(vs[2], rs[2] >> 16u);
        m_quats[2u * g] = pack_bf16_sr(mq[0], mq[1], rq[0], rq[1]);
        m_quats[2u * g + 1u] = pack_bf16_sr(mq[2], mq[3], rq[2], rq[3]);
        v_quats[2u * g] = pack_bf16_sr(vq[0], vq[1], rq[0] >> 16u, rq[1] >> 16u);
        v_quats[2u * g + 1u] = pack_bf16_sr(vq[2], vq[3], rq[2] >> 16u, rq[3] >> 16u);
    } else {
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            uint32_t j = 3u * g + uint32_t(k);
            float m = a.m_means[j], v = a.v_means[j];
            mean[k] = adam_update(mean[k], g_mean[k], m, v, params->lr_means, b1, b2, c1, c2, eps);
            a.m_means[j] = m;
            a.v_means[j] = v;
            m = a.m_scales[j];
            v = a.v_scales[j];
            log_scale[k] = adam_update(log_scale[k], g_scale[k], m, v, params->lr_scales, b1, b2, c1, c2, eps);
            a.m_scales[j] = m;
            a.v_scales[j] = v;
        }
        {
            float4 mq = a.m_quats[g], vq = a.v_quats[g];
            quat.x = adam_update(quat.x, g_quat.x, mq.x, vq.x, params->lr_quats, b1, b2, c1, c2, eps);
            quat.y = adam_update(quat.y, g_quat.y, mq.y, vq.y, params->lr_quats, b1, b2, c1, c2, eps);
            quat.z = adam_update(quat.z, g_quat.z, mq.z, vq.z, params->lr_quats, b1, b2, c1, c2, eps);
            quat.w = adam_update(quat.w, g_quat.w, mq.w, vq.w, params->lr_quats, b1, b2, c1, c2, eps);
            a.m_quats[g] = mq;
            a.v_quats[g] = vq;
        }
    }
    {
        float m = m_opacity, v = v_opacity;
        logit = adam_update(logit, g_opacity, m, v, lr_opacities, b1, b2, c1, c2, eps);
        a.m_opacities[g] = m;
        a.v_opacities[g] = v;
    }
    // SH: gradient of float f = coefficient f / 3, channel f % 3, for every
    // layout below. The active floats (compile-time f) come first, unrolled;
    // the rest have gradient 0.
    float lr_sh0 = params->lr_sh0, lr_shN = params->lr_shN;
    if (ONE_VIEW) {
        const uint32_t l = threadIdx.x;
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            s_basis[17u * l + k] = view_basis[k];
        }
        s_vraw[3u * l] = view_vraw.x;
        s_vraw[3u * l + 1u] = view_vraw.y;
        s_vraw[3u * l + 2u] = view_vraw.z;
    }
    auto sh_grad = [&](uint32_t f) {
        float grad = 0.0f;
        if (f < n_active) {
            if (ONE_VIEW) {
                grad += view_basis[f / 3u] * view_vraw[int(f % 3u)];
            } else {
                grad = g_sh[ONE_VIEW ? 0u : f];
            }
        }
        return grad;
    };
    if (ONE_VIEW) {
        if (COMPACT) {  // the DC; sh_adam_block does the rest
            sh_compact_dc(a, sh_k, sp.SH_COEFFS, g, dc, sh_grad(0u), sh_grad(1u), sh_grad(2u));
        }
    } else if (COMPACT) {
        sh_compact_dc(a, sh_k, sp.SH_COEFFS, g, dc, sh_grad(0u), sh_grad(1u), sh_grad(2u));
        // the active words (compile-time f) first, unrolled; the rest have gradient 0
        constexpr uint32_t active_words = (n_active - 2u) / 2u;
        const uint32_t n_words = (n_floats - 2u) / 2u;
#pragma unroll
        for (uint32_t j = 0u; j < active_words; ++j) {
            if (j >= n_words) {
                break;
            }
            sh_compact_pair(a, sh_k, sp.SH_COEFFS, g, j, sh_grad(3u + 2u * j), sh_grad(4u + 2u * j));
        }
        for (uint32_t j = active_words; j < n_words; ++j) {
            sh_compact_pair(a, sh_k, sp.SH_COEFFS, g, j, sh_grad(3u + 2u * j), sh_grad(4u + 2u * j));
        }
    } else if (sh_vec4) {
        float4* sh4 = reinterpret_cast<float4*>(a.sh);
        float4* m4 = reinterpret_cast<float4*>(a.m_sh);
        float4* v4 = reinterpret_cast<float4*>(a.v_sh);
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
                float grad = sh_grad(f);
                float& pe = component(p, e);
                pe = adam_update(pe, grad, component(m, e), component(v, e), f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2,
                                 eps);
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
                pe = adam_update(pe, 0.0f, component(m, e), component(v, e), f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2,
                                 eps);
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
            float grad = sh_grad(f);  // f < n_active here
            uint32_t j = sh_base + f;
            float m = a.m_sh[j], v = a.v_sh[j];
            a.sh[j] = adam_update(a.sh[j], grad, m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            a.m_sh[j] = m;
            a.v_sh[j] = v;
        }
        for (uint32_t f = n_active; f < n_floats; ++f) {
            uint32_t j = sh_base + f;
            float m = a.m_sh[j], v = a.v_sh[j];
            a.sh[j] = adam_update(a.sh[j], 0.0f, m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            a.m_sh[j] = m;
            a.v_sh[j] = v;
        }
    }

    if (sp.MCMC_NOISE && noise_scale > 0.0f) {
        // gsplat's MCMC: noise ~ Sigma n, gated to nearly transparent splats
        float o = 1.0f / (1.0f + expf(-logit));
        float gate = 1.0f / (1.0f + expf(-100.0f * ((1.0f - o) - 0.995f)));
        vec3 s = make3(expf(log_scale.x), expf(log_scale.y), expf(log_scale.z));
        mat3 R = quat_to_rotmat(quat * inversesqrt(dot(quat, quat)));
        mat3 M = mat3_cols(R.c[0] * s.x, R.c[1] * s.y, R.c[2] * s.z);
        vec2 n01 = random_normal2(sh_k.seed, g, 0u);
        vec2 n23 = random_normal2(sh_k.seed, g, 2u);
        vec3 noise = (M * transpose(M)) * make3(n01.x, n01.y, n23.x);
        mean += noise * gate * noise_scale;
    }
    a.means[3u * g] = mean.x;
    a.means[3u * g + 1u] = mean.y;
    a.means[3u * g + 2u] = mean.z;
    store4(a.quats, g, quat);
    a.scales[3u * g] = log_scale.x;
    a.scales[3u * g + 1u] = log_scale.y;
    a.scales[3u * g + 2u] = log_scale.z;
    a.opacities[g] = logit;
    if (sp.ADC_STATS && seen > 0u) {
        a.grad2d_sum[g] += grad2d;
        a.vis_count[g] += seen;
    }
}

// The Adam step of the block's SH rows (first .. first + count - 1, contiguous):
// thread l takes words l, l + WG, ...; the same arithmetic and rounding bits as
// the per-splat loops, so the results are bit-identical.
template <int SH_DEGREE, bool COMPACT>
__device__ void sh_adam_block(const Args& a, const Spec& sp, bool sh_vec4, uint32_t first, uint32_t count,
                              const float* s_basis, const float* s_vraw) {
    const StepParams* params = a.params;
    constexpr uint32_t n_active = 3u * (SH_DEGREE + 1u) * (SH_DEGREE + 1u);
    const uint32_t n_floats = 3u * sp.SH_COEFFS;
    const float b1 = params->beta1, b2 = params->beta2, c1 = params->bias1, c2 = params->bias2, eps = params->adam_eps;
    const float lr_sh0 = params->lr_sh0, lr_shN = params->lr_shN;
    const uint32_t l = threadIdx.x;
    auto grad = [&](uint32_t s, uint32_t f) {
        return f < n_active ? s_basis[17u * s + f / 3u] * s_vraw[3u * s + f % 3u] : 0.0f;
    };
    if (COMPACT) {
        // the higher coefficients' words (update_splat did the DC): sh word 3 + j, moment word 2 + j of each row
        // BLOCK_WORDS words a thread at a time, their loads issued before any of their arithmetic
        // (nvcc would not hoist a load above the stores of the word before: no restrict here)
        const ShAdam k = sh_adam_of(params);
        const uint32_t R = sh_row_words(true, sp.SH_COEFFS) - 3u, total = count * R;
        uint32_t* sh = reinterpret_cast<uint32_t*>(a.sh);
        uint32_t* m_sh = reinterpret_cast<uint32_t*>(a.m_sh);
        uint32_t* v_sh = reinterpret_cast<uint32_t*>(a.v_sh);
        for (uint32_t q0 = l; q0 < total; q0 += BLOCK_WORDS * WG) {
            uint32_t pw[BLOCK_WORDS], mw[BLOCK_WORDS], vw[BLOCK_WORDS];
#pragma unroll
            for (uint32_t u = 0u; u < BLOCK_WORDS; ++u) {
                const uint32_t q = q0 + u * WG;
                if (q < total) {
                    const uint32_t s = q / R, j = q - s * R;
                    const uint32_t si = sh_compact_pair_sh_index(sp.SH_COEFFS, first + s, j);
                    const uint32_t mi = sh_compact_pair_moment_index(sp.SH_COEFFS, first + s, j);
                    pw[u] = sh[si];
                    mw[u] = m_sh[mi];
                    vw[u] = v_sh[mi];
                }
            }
#pragma unroll
            for (uint32_t u = 0u; u < BLOCK_WORDS; ++u) {
                const uint32_t q = q0 + u * WG;
                if (q < total) {
                    const uint32_t s = q / R, j = q - s * R, f = 3u + 2u * j;
                    const ShWords w = sh_compact_pair_words(k, sp.SH_COEFFS, first + s, j, pw[u], mw[u], vw[u],
                                                            grad(s, f), grad(s, f + 1u));
                    sh[sh_compact_pair_sh_index(sp.SH_COEFFS, first + s, j)] = w.p;
                    m_sh[sh_compact_pair_moment_index(sp.SH_COEFFS, first + s, j)] = w.m;
                    v_sh[sh_compact_pair_moment_index(sp.SH_COEFFS, first + s, j)] = w.v;
                }
            }
        }
    } else if (sh_vec4) {
        float4* sh4 = reinterpret_cast<float4*>(a.sh);
        float4* m4 = reinterpret_cast<float4*>(a.m_sh);
        float4* v4 = reinterpret_cast<float4*>(a.v_sh);
        const uint32_t row = n_floats / 4u;
        for (uint32_t q = l; q < count * row; q += WG) {
            const uint32_t s = q / row, f0 = 4u * (q - s * row), j = first * row + q;
            float4 p = sh4[j], m = m4[j], v = v4[j];
#pragma unroll
            for (uint32_t e = 0u; e < 4u; ++e) {
                const uint32_t f = f0 + e;
                float& pe = component(p, e);
                pe = adam_update(pe, grad(s, f), component(m, e), component(v, e), f < 3u ? lr_sh0 : lr_shN, b1, b2, c1,
                                 c2, eps);
            }
            sh4[j] = p;
            m4[j] = m;
            v4[j] = v;
        }
    } else {
        for (uint32_t q = l; q < count * n_floats; q += WG) {
            const uint32_t s = q / n_floats, f = q - s * n_floats, j = first * n_floats + q;
            float m = a.m_sh[j], v = a.v_sh[j];
            a.sh[j] = adam_update(a.sh[j], grad(s, f), m, v, f < 3u ? lr_sh0 : lr_shN, b1, b2, c1, c2, eps);
            a.m_sh[j] = m;
            a.v_sh[j] = v;
        }
    }
}

template <int SH_DEGREE, bool ONE_VIEW, bool COMPACT, bool LENSES>
__global__ void __launch_bounds__(LOCAL_THREADS) fpbo_kernel(Args a, Push pc, Spec sp, bool sh_vec4) {
    __shared__ float s_basis[ONE_VIEW ? WG * 17u : 1u];
    __shared__ float s_vraw[ONE_VIEW ? WG * 3u : 1u];
    // uniform over the grid: every thread returns, or none (the barriers below)
    if (a.num_isects[pc.count_offset] > pc.isect_capacity || a.params->prev_isects > a.params->prev_capacity) {
        return;
    }
    const uint32_t g = global_index();
    const uint32_t first = g - threadIdx.x;
    if (g < pc.n) {
        update_splat<SH_DEGREE, ONE_VIEW, COMPACT, LENSES>(a, pc, sp, sh_vec4, g, s_basis, s_vraw);
    }
    if (ONE_VIEW && first < pc.n) {
        __syncthreads();
        sh_adam_block<SH_DEGREE, COMPACT>(a, sp, sh_vec4, first, min(WG, pc.n - first), s_basis, s_vraw);
    }
}

template <int SH_DEGREE, bool COMPACT, bool LENSES>
int launch_views(const SpirulaLaunch* L, const Args& a, const Push& pc, const Spec& sp, bool sh_vec4) {
    if (sp.N_VIEWS == 1u) {
        return launch(L, LOCAL_SIZE, fpbo_kernel<SH_DEGREE, true, COMPACT, LENSES>, a, pc, sp, sh_vec4);
    }
    return launch(L, LOCAL_SIZE, fpbo_kernel<SH_DEGREE, false, COMPACT, LENSES>, a, pc, sp, sh_vec4);
}

// LENSES as a template: the unscented-transform backward's registers stay out of pinhole runs
template <int SH_DEGREE, bool COMPACT>
int launch_lenses(const SpirulaLaunch* L, const Args& a, const Push& pc, const Spec& sp, bool sh_vec4) {
    if (sp.LENSES) {
        return launch_views<SH_DEGREE, COMPACT, true>(L, a, pc, sp, sh_vec4);
    }
    return launch_views<SH_DEGREE, COMPACT, false>(L, a, pc, sp, sh_vec4);
}

template <int SH_DEGREE>
int launch_degree(const SpirulaLaunch* L, const Args& a, const Push& pc, const Spec& sp, bool sh_vec4, bool compact) {
    if (compact) {
        return launch_lenses<SH_DEGREE, true>(L, a, pc, sp, false);
    }
    return launch_lenses<SH_DEGREE, false>(L, a, pc, sp, sh_vec4);
}

}  // namespace

SPIRULA_EXPORT int fpbo(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    const bool sh_vec4 = (L->flags & SH_VEC4::FLAG) != 0u;
    if (sh_vec4) {
        SH_VEC4::Args a4;  // the SH buffers as float4s: their sizes must be whole float4s
        if (int err = unpack(L, a4, pc, sp)) {
            return err;
        }
        if ((sp.SH_COEFFS * 3u) % 4u != 0u) {
            return INVALID_LAUNCH;  // the shader's SH_VEC4 needs 3K % 4 == 0
        }
    }
    const bool compact = (L->flags & COMPACT::FLAG) != 0u;
    if (compact) {
        COMPACT::Args ac;  // sh, m_sh, v_sh as words (include/storage.glsl)
        if (sh_vec4 || unpack(L, ac, pc, sp) != 0) {
            return INVALID_LAUNCH;
        }
    }
    switch (sp.SH_DEGREE) {
        case 0: return launch_degree<0>(L, a, pc, sp, sh_vec4, compact);
        case 1: return launch_degree<1>(L, a, pc, sp, sh_vec4, compact);
        case 2: return launch_degree<2>(L, a, pc, sp, sh_vec4, compact);
        case 3: return launch_degree<3>(L, a, pc, sp, sh_vec4, compact);
        default: return INVALID_LAUNCH;  // sh.glsl stops at degree 3
    }
}
