// tsdf_integrate: fuse one rendered view into a truncated signed distance volume.
// Twin of shaders/tsdf_integrate.comp (the rules are in its header). One thread
// per voxel v < dim_x * dim_y * dim_z (folded).
// Contract: build/contracts/tsdf_integrate.h, generated from shaders/tsdf_integrate.comp.
#include "common/launch.cuh"
#include "tsdf_integrate.h"

namespace {

using namespace contract;

// a voxel centre closer to the camera plane than this is not projected
constexpr float TSDF_NEAR = 1e-4f;

__global__ void __launch_bounds__(LOCAL_THREADS) tsdf_integrate_kernel(Args a, Push pc) {
    uint32_t v = spirula::global_index();
    uint32_t yz = pc.dim_y * pc.dim_z;
    if (v >= pc.dim_x * yz) {
        return;
    }
    uint32_t i = v / yz;
    uint32_t j = (v - i * yz) / pc.dim_z;
    uint32_t k = v - i * yz - j * pc.dim_z;
    float px = pc.origin_x + (float(i + pc.x_offset) + 0.5f) * pc.voxel_size;
    float py = pc.origin_y + (float(j) + 0.5f) * pc.voxel_size;
    float pz = pc.origin_z + (float(k) + 0.5f) * pc.voxel_size;
    float x = pc.r00 * px + pc.r01 * py + pc.r02 * pz + pc.t0;
    float y = pc.r10 * px + pc.r11 * py + pc.r12 * pz + pc.t1;
    float z = pc.r20 * px + pc.r21 * py + pc.r22 * pz + pc.t2;
    if (z <= TSDF_NEAR) {
        return;
    }
    float u = pc.fx * x / z + pc.cx;
    float w = pc.fy * y / z + pc.cy;
    if (!(u >= 0.0f && w >= 0.0f && u < float(pc.width) && w < float(pc.height))) {
        return;  // also NaN
    }
    uint32_t pix = pc.image_offset + min(uint32_t(w), pc.height - 1u) * pc.width + min(uint32_t(u), pc.width - 1u);
    float al = a.alpha[pix];
    float d = a.depth[pix];
    if (al > pc.alpha_surface && d > 0.0f) {
        float sdf = d - z;
        if (sdf < -pc.truncation) {
            return;
        }
        float w_old = a.weight[v];
        a.tsdf[v] = (a.tsdf[v] * w_old + fminf(sdf, pc.truncation)) / (w_old + 1.0f);
        a.weight[v] = w_old + 1.0f;
        if (sdf < pc.truncation) {
            float4 c = a.rgbw[v];
            float r = a.color[3u * pix] / al, g = a.color[3u * pix + 1u] / al, b = a.color[3u * pix + 2u] / al;
            float cw = c.w + 1.0f;
            a.rgbw[v] = make_float4((c.x * c.w + r) / cw, (c.y * c.w + g) / cw, (c.z * c.w + b) / cw, cw);
        }
    } else if (al < pc.alpha_empty) {
        float w_old = a.weight[v];
        a.tsdf[v] = (a.tsdf[v] * w_old + pc.truncation * pc.carve_weight) / (w_old + pc.carve_weight);
        a.weight[v] = w_old + pc.carve_weight;
    }
}

}  // namespace

SPIRULA_EXPORT int tsdf_integrate(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, tsdf_integrate_kernel, a, pc);
}
