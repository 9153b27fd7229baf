// normal_consistency_bwd: the vector-Jacobian product of normal_consistency_fwd with the
// per-pixel cotangent grad_loss (common/normals.cuh). Twin of
// shaders/normal_consistency_bwd.comp: dL/dN of a pixel is its own; dL/d depth of pixel q
// gathers ray(q) . dL/dP(q) from the four neighbours whose depth normals use q. No atomics.
// One thread per pixel, grid-stride loop.
// Contract: build/contracts/normal_consistency_bwd.h, generated from the shader.
#include "common/launch.cuh"
#include "common/normals.cuh"
#include "normal_consistency_bwd.h"

namespace {

using namespace spirula;
using namespace contract;

// dL/dN, dL/dA, dL/dB of pixel (u, v) of the image starting at pixel base (any pixel:
// false and zeros where it has no depth normal)
__device__ __forceinline__ bool pixel_vjp(const Args& a, const Push& pc, uint32_t base, int u, int v, vec4 K, vec3& gN,
                                          vec3& gA, vec3& gB) {
    gN = vec3(0.0f);
    gA = vec3(0.0f);
    gB = vec3(0.0f);
    if (u <= 0 || v <= 0 || u + 1 >= int(pc.width) || v + 1 >= int(pc.height)) {
        return false;
    }
    uint32_t x = uint32_t(u), y = uint32_t(v);
    uint32_t p = base + y * pc.width + x;
    const float* depths = a.depths;
    float d0 = depths[p], dU = depths[p - pc.width], dD = depths[p + pc.width];
    float dL = depths[p - 1u], dR = depths[p + 1u];
    vec3 A = dD * pixel_ray(x, y + 1u, K) - dU * pixel_ray(x, y - 1u, K);
    vec3 B = dR * pixel_ray(x + 1u, y, K) - dL * pixel_ray(x - 1u, y, K);
    vec3 c = cross(A, B);
    if (!(d0 > 0.0f && dU > 0.0f && dD > 0.0f && dL > 0.0f && dR > 0.0f && dot(c, c) > NC_MIN_CROSS2)) {
        return false;
    }
    vec3 N = make3(a.normals[3u * p], a.normals[3u * p + 1u], a.normals[3u * p + 2u]);
    normal_consistency_vjp(N, A, B, a.grad_loss[p] * a.alphas[p], gN, gA, gB);
    return true;
}

__global__ void __launch_bounds__(LOCAL_THREADS) normal_consistency_bwd_kernel(Args a, Push pc) {
    uint32_t hw = pc.width * pc.height;
    for (uint32_t i = global_index(); i < pc.count; i += grid_stride()) {
        uint32_t c = i / hw, base = c * hw;
        int u = int(i % pc.width), v = int((i % hw) / pc.width);
        const float* cam = a.cameras + 20u * c;
        vec4 K = vec4(cam[16], cam[17], cam[18], cam[19]);
        vec3 gN, gA, gB, own;
        pixel_vjp(a, pc, base, u, v, K, own, gA, gB);
        vec3 gP = vec3(0.0f);  // dL/dP of this pixel, from the neighbours that use it
        pixel_vjp(a, pc, base, u, v - 1, K, gN, gA, gB);
        gP += gA;
        pixel_vjp(a, pc, base, u, v + 1, K, gN, gA, gB);
        gP = gP - gA;
        pixel_vjp(a, pc, base, u - 1, v, K, gN, gA, gB);
        gP += gB;
        pixel_vjp(a, pc, base, u + 1, v, K, gN, gA, gB);
        gP = gP - gB;
        a.grad_normals[3u * i] = own.x;
        a.grad_normals[3u * i + 1u] = own.y;
        a.grad_normals[3u * i + 2u] = own.z;
        a.grad_depths[i] = dot(pixel_ray(uint32_t(u), uint32_t(v), K), gP);
    }
}

}  // namespace

SPIRULA_EXPORT int normal_consistency_bwd(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return launch(L, LOCAL_SIZE, normal_consistency_bwd_kernel, a, pc);
}
