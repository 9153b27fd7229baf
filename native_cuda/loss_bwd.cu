// loss_bwd: the gradient of the training loss (see loss_fwd) with respect to
// each rendered pixel, into rasterize_bwd's input, and the loss value itself.
// Twin of shaders/loss_bwd.comp. The SSIM part is the transpose of
// loss_fwd's window: each pixel gathers the window-weighted derivatives of the
// valid pixels around it,
//     dSSIM/dx(q) = sum_p w(p - q) [dS/dmu(p) + 2 x(q) dS/dE[x^2](p) + y(q) dS/dE[xy](p)],
// two separable passes through shared memory per channel.
// One workgroup per 16x16 tile (x, y) of view z; one thread per pixel.
// Workgroup (0, 0, 0) also reduces loss_fwd's partial sums into loss_out.
//   binding 0  colors      [V,H,W,3]    f32  read
//   binding 1  gt_images   [I,H,W]      u32  read   RGBA8
//   binding 2  params      StepParams        read
//   binding 3  ssim_grads  [V,H,W,9]    f32  read   from loss_fwd
//   binding 4  partials    [groups,4]   f32  read   from loss_fwd
//   binding 5  grad_colors [V,H,W,3]    f32  write  dloss/dcolors
//   binding 6  loss_out    [4]          f32  write  loss, mean L1, mean SSIM, MSE
#include "common/launch.cuh"
#include "common/ssim.cuh"
#include "common/step_params.cuh"
#include "common/warp.cuh"

namespace {

using namespace spirula;

struct Push {
    uint32_t width;
    uint32_t height;
    uint32_t n_views;
    uint32_t n_partials;
};

struct Args {
    const float* colors;
    const uint32_t* gt_images;
    const StepParams* params;
    const float* ssim_grads;
    const float4* partials;
    float* grad_colors;
    float* loss_out;
};

__device__ __forceinline__ float glsl_sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }

__global__ void __launch_bounds__(256) loss_bwd_kernel(Args a, Push pc) {
    __shared__ vec3 s_g[SSIM_HALO][SSIM_HALO];
    __shared__ vec3 s_h[SSIM_HALO][SSIM_TILE];
    __shared__ float4 s_sum[64];                   // one per subgroup (warp)

    int W = int(pc.width), H = int(pc.height);
    uint32_t view = blockIdx.z;
    uint32_t image = view_image(*a.params, view);
    int ox = int(blockIdx.x) * SSIM_TILE, oy = int(blockIdx.y) * SSIM_TILE;
    int lx = int(threadIdx.x), ly = int(threadIdx.y);
    int px = ox + lx, py = oy + ly;
    bool inside = px < W && py < H;
    uint32_t tid = local_index();
    uint32_t view_base = view * uint32_t(W * H);
    float n_pixels = float(pc.n_views) * 3.0f * float(W * H);
    float n_valid = float(pc.n_views) * 3.0f *
                    float(max(W - 2 * SSIM_RADIUS, 0) * max(H - 2 * SSIM_RADIUS, 0));
    float l1_weight = a.params->l1_weight, ssim_weight = a.params->ssim_weight;

    uint32_t pix = uint32_t(min(py, H - 1) * W + min(px, W - 1));
    vec3 x = make3(a.colors[3u * (view_base + pix)], a.colors[3u * (view_base + pix) + 1u],
                   a.colors[3u * (view_base + pix) + 2u]);
    uint32_t packed = a.gt_images[image * uint32_t(W * H) + pix];
    vec3 y = make3(unpack_unorm8(packed, 0), unpack_unorm8(packed, 1), unpack_unorm8(packed, 2));
    vec3 grad = make3(l1_weight * glsl_sign(x.x - y.x) / n_pixels, l1_weight * glsl_sign(x.y - y.y) / n_pixels,
                      l1_weight * glsl_sign(x.z - y.z) / n_pixels);
#pragma unroll
    for (int ch = 0; ch < 3; ++ch) {
        __syncthreads();
        for (uint32_t i = tid; i < uint32_t(SSIM_HALO * SSIM_HALO); i += 256u) {
            int qx = ox - SSIM_RADIUS + int(i) % SSIM_HALO, qy = oy - SSIM_RADIUS + int(i) / SSIM_HALO;
            vec3 g = make3(0.0f, 0.0f, 0.0f);
            if (qx >= 0 && qy >= 0 && qx < W && qy < H) {
                uint32_t b = 9u * (view_base + uint32_t(qy * W + qx)) + 3u * uint32_t(ch);
                g = make3(a.ssim_grads[b], a.ssim_grads[b + 1u], a.ssim_grads[b + 2u]);
            }
            s_g[int(i) / SSIM_HALO][int(i) % SSIM_HALO] = g;
        }
        __syncthreads();
        for (uint32_t i = tid; i < uint32_t(SSIM_HALO * SSIM_TILE); i += 256u) {
            int row = int(i) / SSIM_TILE, col = int(i) % SSIM_TILE;
            vec3 acc = make3(0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int k = 0; k < 11; ++k) {
                acc += ssim_w(k) * s_g[row][col + k];
            }
            s_h[row][col] = acc;
        }
        __syncthreads();
        vec3 b = make3(0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < 11; ++k) {
            b += ssim_w(k) * s_h[ly + k][lx];
        }
        float dssim = b.x + 2.0f * x[ch] * b.y + y[ch] * b.z;
        if (n_valid > 0.0f) {
            grad[ch] -= ssim_weight * dssim / n_valid;
        }
    }
    if (inside) {
        uint32_t o = 3u * (view_base + uint32_t(py * W + px));
        a.grad_colors[o] = grad.x;
        a.grad_colors[o + 1u] = grad.y;
        a.grad_colors[o + 2u] = grad.z;
    }
    if (blockIdx.x == 0u && blockIdx.y == 0u && blockIdx.z == 0u) {
        float4 part = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (uint32_t i = tid; i < pc.n_partials; i += 256u) {
            float4 v = a.partials[i];
            part.x += v.x;
            part.y += v.y;
            part.z += v.z;
            part.w += v.w;
        }
        float4 sg = make_float4(warp_add(part.x), warp_add(part.y), warp_add(part.z), warp_add(part.w));
        if (lane_id() == 0u) {
            s_sum[warp_id()] = sg;
        }
        __syncthreads();
        if (tid == 0u) {
            float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (uint32_t s = 0u; s < num_warps(); ++s) {
                float4 v = s_sum[s];
                total.x += v.x;
                total.y += v.y;
                total.z += v.z;
                total.w += v.w;
            }
            float l1 = total.x / n_pixels;
            float ssim = n_valid > 0.0f ? total.z / n_valid : 1.0f;
            a.loss_out[0] = l1_weight * l1 + ssim_weight * (1.0f - ssim);
            a.loss_out[1] = l1;
            a.loss_out[2] = ssim;
            a.loss_out[3] = total.y / n_pixels;
        }
    }
}

}  // namespace

SPIRULA_EXPORT int loss_bwd(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 7, 4, 0);
    Args a{buffer<const float>(L, 0), buffer<const uint32_t>(L, 1), buffer<const StepParams>(L, 2),
           buffer<const float>(L, 3), buffer<const float4>(L, 4), buffer<float>(L, 5), buffer<float>(L, 6)};
    return launch(L, dim3(16, 16), loss_bwd_kernel, a, push_block<Push>(L));
}
