// normal_consistency_fwd: 2DGS's normal consistency per pixel, l = a (1 - N . n_d), n_d the
// normal of the rendered depth (common/normals.cuh). Twin of
// shaders/normal_consistency_fwd.comp: 0 on the border, next to a depth <= 0 and where the
// depth normal is degenerate. One thread per pixel, grid-stride loop.
// Contract: build/contracts/normal_consistency_fwd.h, generated from the shader.
#include "common/launch.cuh"
#include "common/normals.cuh"
#include "normal_consistency_fwd.h"

namespace {

using namespace spirula;
using namespace contract;

// A and B of interior pixel (u, v) of the image starting at pixel base; false: no depth normal
__device__ __forceinline__ bool depth_differences(const float* depths, uint32_t width, uint32_t base, uint32_t u,
                                                  uint32_t v, vec4 K, vec3& A, vec3& B) {
    uint32_t p = base + v * width + u;
    float d0 = depths[p], dU = depths[p - width], dD = depths[p + width];
    float dL = depths[p - 1u], dR = depths[p + 1u];
    A = dD * pixel_ray(u, v + 1u, K) - dU * pixel_ray(u, v - 1u, K);
    B = dR * pixel_ray(u + 1u, v, K) - dL * pixel_ray(u - 1u, v, K);
    vec3 c = cross(A, B);
    return d0 > 0.0f && dU > 0.0f && dD > 0.0f && dL > 0.0f && dR > 0.0f && dot(c, c) > NC_MIN_CROSS2;
}

__global__ void __launch_bounds__(LOCAL_THREADS) normal_consistency_fwd_kernel(Args a, Push pc) {
    uint32_t hw = pc.width * pc.height;
    for (uint32_t i = global_index(); i < pc.count; i += grid_stride()) {
        uint32_t c = i / hw, u = i % pc.width, v = (i % hw) / pc.width;
        float loss = 0.0f;
        if (u > 0u && v > 0u && u + 1u < pc.width && v + 1u < pc.height) {
            const float* cam = a.cameras + 20u * c;
            vec4 K = vec4(cam[16], cam[17], cam[18], cam[19]);
            vec3 A, B;
            if (depth_differences(a.depths, pc.width, c * hw, u, v, K, A, B)) {
                vec3 N = make3(a.normals[3u * i], a.normals[3u * i + 1u], a.normals[3u * i + 2u]);
                loss = a.alphas[i] * (1.0f - dot(N, normalize(cross(A, B))));
            }
        }
        a.out_loss[i] = loss;
    }
}

}  // namespace

SPIRULA_EXPORT int normal_consistency_fwd(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return launch(L, LOCAL_SIZE, normal_consistency_fwd_kernel, a, pc);
}
