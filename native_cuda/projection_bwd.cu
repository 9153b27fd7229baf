// projection_bwd: gradients of every Gaussian's parameters from the gradients
// of its projections (rasterize_bwd's outputs), summed over the cameras.
// Twin of shaders/projection_bwd.comp. One thread per Gaussian g (folded),
// looping over cameras: no atomics. SH_DEGREE is a template parameter; NORMALS (the
// splat normals' gradient to the quaternion) a kernel argument: a uniform branch.
// Contract: build/contracts/projection_bwd.h, generated from shaders/projection_bwd.comp.
#include "common/launch.cuh"
#include "common/projection.cuh"
#include "projection_bwd.h"

namespace {

using namespace spirula;
using namespace contract;

template <int SH_DEGREE>
__global__ void __launch_bounds__(LOCAL_THREADS)
    projection_bwd_kernel(Args a, Push pc, uint32_t SH_COEFFS, bool ACTIVATED, bool NORMALS) {
    uint32_t g = global_index();
    if (g >= pc.n) {
        return;
    }
    constexpr int n_coeffs = (SH_DEGREE + 1) * (SH_DEGREE + 1);
    vec3 mean = make3(a.means[3u * g], a.means[3u * g + 1u], a.means[3u * g + 2u]);
    vec4 quat = load4(a.quats, g);
    vec3 stored_scale = make3(a.scales[3u * g], a.scales[3u * g + 1u], a.scales[3u * g + 2u]);
    vec3 scale = ACTIVATED ? stored_scale : make3(expf(stored_scale.x), expf(stored_scale.y), expf(stored_scale.z));
    float coeffs[48];
#pragma unroll
    for (int k = 0; k < 3 * n_coeffs; ++k) {
        coeffs[k] = a.sh[g * SH_COEFFS * 3u + uint32_t(k)];
    }
    vec3 v_mean = make3(0.0f, 0.0f, 0.0f);
    vec4 v_quat = make4(0.0f, 0.0f, 0.0f, 0.0f);
    vec3 v_scale = make3(0.0f, 0.0f, 0.0f);
    float v_opacity = 0.0f;
    float v_sh[48];
#pragma unroll
    for (int k = 0; k < 48; ++k) {
        v_sh[k] = 0.0f;
    }
    for (uint32_t c = 0u; c < pc.n_cameras; ++c) {
        uint32_t i = c * pc.n + g;
        int2 r = a.radii[i];
        if (r.x == 0 && r.y == 0) {
            continue;
        }
        Camera cam = LOAD_CAMERA(a.cameras, c);
        vec2 v_xy = make2(a.grad_xy[2u * i], a.grad_xy[2u * i + 1u]);
        vec3 v_con = make3(a.grad_conics[3u * i], a.grad_conics[3u * i + 1u], a.grad_conics[3u * i + 2u]);
        vec3 v_rgb = make3(a.grad_rgb[3u * i], a.grad_rgb[3u * i + 1u], a.grad_rgb[3u * i + 2u]);
        v_opacity += a.grad_opacity[i];
        projection_vjp(cam, mean, quat, scale, SH_DEGREE, coeffs, float(pc.width), float(pc.height), pc.eps2d, v_xy,
                       v_con, v_rgb, v_mean, v_quat, v_scale, v_sh);
        if (NORMALS) {
            vec3 v_n = make3(a.grad_normals[3u * i], a.grad_normals[3u * i + 1u], a.grad_normals[3u * i + 2u]);
            splat_normal_vjp(cam, mean, quat, scale, v_n, v_quat);
        }
    }
    if (!ACTIVATED) {
        v_scale = v_scale * scale;  // d exp(l) / dl
        float o = 1.0f / (1.0f + expf(-a.opacities[g]));
        v_opacity *= o * (1.0f - o);  // d sigmoid(x) / dx
    }
    a.grad_means[3u * g] = v_mean.x;
    a.grad_means[3u * g + 1u] = v_mean.y;
    a.grad_means[3u * g + 2u] = v_mean.z;
    store4(a.grad_quats, g, v_quat);
    a.grad_scales[3u * g] = v_scale.x;
    a.grad_scales[3u * g + 1u] = v_scale.y;
    a.grad_scales[3u * g + 2u] = v_scale.z;
    a.grad_opacities[g] = v_opacity;
    for (uint32_t k = 0u; k < SH_COEFFS * 3u; ++k) {
        float v = 0.0f;
#pragma unroll
        for (int j = 0; j < 3 * n_coeffs; ++j) {  // v_sh[k], with k a register index
            if (uint32_t(j) == k) v = v_sh[j];
        }
        a.grad_sh[g * SH_COEFFS * 3u + k] = v;
    }
}

}  // namespace

SPIRULA_EXPORT int projection_bwd(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    switch (sp.SH_DEGREE) {
        case 0: return launch(L, LOCAL_SIZE, projection_bwd_kernel<0>, a, pc, sp.SH_COEFFS, sp.ACTIVATED, sp.NORMALS);
        case 1: return launch(L, LOCAL_SIZE, projection_bwd_kernel<1>, a, pc, sp.SH_COEFFS, sp.ACTIVATED, sp.NORMALS);
        case 2: return launch(L, LOCAL_SIZE, projection_bwd_kernel<2>, a, pc, sp.SH_COEFFS, sp.ACTIVATED, sp.NORMALS);
        case 3: return launch(L, LOCAL_SIZE, projection_bwd_kernel<3>, a, pc, sp.SH_COEFFS, sp.ACTIVATED, sp.NORMALS);
        default: return static_cast<int>(cudaErrorInvalidValue);  // sh.glsl stops at degree 3
    }
}
