// projection_bwd: gradients of every Gaussian's parameters from the gradients
// of its projections (rasterize_bwd's outputs), summed over the cameras.
// Twin of shaders/projection_bwd.comp. One thread per Gaussian g (workgroup
// 128, folded), looping over cameras: no atomics. SH_DEGREE is a template
// parameter.
//   binding 0  means          [N,3]   f32  read
//   binding 1  quats          [N,4]   f32  read
//   binding 2  scales         [N,3]   f32  read   activated, or log (ACTIVATED = false)
//   binding 3  opacities      [N]     f32  read   activated, or logit
//   binding 4  sh             [N,K,3] f32  read
//   binding 5  cameras        [C,20]  f32  read
//   binding 6  radii          [C*N,2] i32  read   0: not visible in that camera
//   binding 7  grad_xy        [C*N,2] f32  read   from rasterize_bwd
//   binding 8  grad_conics    [C*N,3] f32  read
//   binding 9  grad_rgb       [C*N,3] f32  read
//   binding 10 grad_opacity   [C*N]   f32  read
//   binding 11 grad_means     [N,3]   f32  write
//   binding 12 grad_quats     [N,4]   f32  write  w.r.t. the stored quaternion
//   binding 13 grad_scales    [N,3]   f32  write  w.r.t. the stored (activated or log) scale
//   binding 14 grad_opacities [N]     f32  write  w.r.t. the stored (activated or logit) opacity
//   binding 15 grad_sh        [N,K,3] f32  write  zero past the active degree
//   constant_id 0 SH_DEGREE, 1 SH_COEFFS, 2 ACTIVATED
#include "common/launch.cuh"
#include "common/projection.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t n;
    uint32_t n_cameras;
    uint32_t width;
    uint32_t height;
    float eps2d;
};

struct Args {
    const float* means;
    const float4* quats;
    const float* scales;
    const float* opacities;
    const float* sh;
    const float* cameras;
    const int2* radii;
    const float* grad_xy;
    const float* grad_conics;
    const float* grad_rgb;
    const float* grad_opacity;
    float* grad_means;
    float4* grad_quats;
    float* grad_scales;
    float* grad_opacities;
    float* grad_sh;
};

template <int SH_DEGREE>
__global__ void __launch_bounds__(128) projection_bwd_kernel(Args a, Push pc, uint32_t SH_COEFFS, bool ACTIVATED) {
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
    }
    if (!ACTIVATED) {
        v_scale = v_scale * scale;                     // d exp(l) / dl
        float o = 1.0f / (1.0f + expf(-a.opacities[g]));
        v_opacity *= o * (1.0f - o);                   // d sigmoid(x) / dx
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
        for (int j = 0; j < 3 * n_coeffs; ++j) {       // v_sh[k], with k a register index
            if (uint32_t(j) == k) v = v_sh[j];
        }
        a.grad_sh[g * SH_COEFFS * 3u + k] = v;
    }
}

}  // namespace

SPIRULA_EXPORT int projection_bwd(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 16, 5, 3);
    Args a{buffer<const float>(L, 0), buffer<const float4>(L, 1), buffer<const float>(L, 2),
           buffer<const float>(L, 3), buffer<const float>(L, 4), buffer<const float>(L, 5),
           buffer<const int2>(L, 6), buffer<const float>(L, 7), buffer<const float>(L, 8),
           buffer<const float>(L, 9), buffer<const float>(L, 10), buffer<float>(L, 11),
           buffer<float4>(L, 12), buffer<float>(L, 13), buffer<float>(L, 14), buffer<float>(L, 15)};
    Push pc = push_block<Push>(L);
    uint32_t sh_coeffs = L->spec[1];
    bool activated = L->spec[2] != 0u;
    switch (L->spec[0]) {
        case 0: return launch(L, dim3(128), projection_bwd_kernel<0>, a, pc, sh_coeffs, activated);
        case 1: return launch(L, dim3(128), projection_bwd_kernel<1>, a, pc, sh_coeffs, activated);
        case 2: return launch(L, dim3(128), projection_bwd_kernel<2>, a, pc, sh_coeffs, activated);
        case 3: return launch(L, dim3(128), projection_bwd_kernel<3>, a, pc, sh_coeffs, activated);
        default: return static_cast<int>(cudaErrorInvalidValue);   // sh.glsl stops at degree 3
    }
}
