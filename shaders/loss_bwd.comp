#version 450
// loss_bwd: the gradient of the training loss (see loss_fwd) with respect to
// each rendered pixel, into rasterize_bwd's input, and the loss value itself.
// The SSIM part is the transpose of loss_fwd's window: each pixel gathers the
// window-weighted derivatives of the valid pixels around it,
//     dSSIM/dx(q) = sum_p w(p - q) [dS/dmu(p) + 2 x(q) dS/dE[x^2](p) + y(q) dS/dE[xy](p)],
// two separable passes through shared memory per channel.
// One workgroup per 16x16 tile (x, y) of view z; one thread per pixel.
// Workgroup (0, 0, 0) also reduces loss_fwd's partial sums into loss_out.
// Masks (see loss_fwd): the means are over the kept pixels (StepParams
// masked_pixels, masked_valid are the dropped counts), and a dropped pixel's
// gradient is exactly 0 (its colour entered loss_fwd's windows as 0).
//   binding 0  colors      [V,H,W,3]    f32  read
//   binding 1  gt_images   [I,H,W]      u32  read   RGBA8 (A: mask)
//   binding 2  params      StepParams        read
//   binding 3  ssim_grads  [V,H,W,9]    f32  read   from loss_fwd
//   binding 4  partials    [groups,4]   f32  read   from loss_fwd
//   binding 5  grad_colors [V,H,W,3]    f32  write  dloss/dcolors
//   binding 6  loss_out    [4]          f32  write  loss, mean L1, mean SSIM, MSE
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "ssim.glsl"
#include "step_params.glsl"

layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, binding = 0) restrict readonly buffer ColorsBuf { float colors[]; };
layout(std430, binding = 1) restrict readonly buffer GtBuf { uint gt_images[]; };
layout(std430, binding = 2) restrict readonly buffer ParamsBuf { StepParams params; };
layout(std430, binding = 3) restrict readonly buffer SsimGradsBuf { float ssim_grads[]; };
layout(std430, binding = 4) restrict readonly buffer PartialsBuf { vec4 partials[]; };
layout(std430, binding = 5) restrict writeonly buffer GradColorsBuf { float grad_colors[]; };
layout(std430, binding = 6) restrict writeonly buffer LossOutBuf { float loss_out[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint n_views;
    uint n_partials;
} pc;

shared vec3 s_g[SSIM_HALO][SSIM_HALO];
shared vec3 s_h[SSIM_HALO][SSIM_TILE];
shared vec4 s_sum[64];  // one per subgroup

void main() {
    int W = int(pc.width), H = int(pc.height);
    uint view = gl_WorkGroupID.z;
    uint image = view_image(params, view);
    ivec2 origin = ivec2(gl_WorkGroupID.xy) * SSIM_TILE;
    ivec2 lp = ivec2(gl_LocalInvocationID.xy);
    ivec2 p = origin + lp;
    bool inside = p.x < W && p.y < H;
    uint tid = gl_LocalInvocationIndex;
    uint view_base = view * uint(W * H);
    float n_pixels = float(pc.n_views) * 3.0 * float(W * H) - 3.0 * float(params.masked_pixels);
    float n_valid = float(pc.n_views) * 3.0 * float(max(W - 2 * SSIM_RADIUS, 0) * max(H - 2 * SSIM_RADIUS, 0)) -
                    3.0 * float(params.masked_valid);

    uint pix = uint(min(p.y, H - 1) * W + min(p.x, W - 1));
    vec3 x =
        vec3(colors[3u * (view_base + pix)], colors[3u * (view_base + pix) + 1u], colors[3u * (view_base + pix) + 2u]);
    uint packed = gt_images[image * uint(W * H) + pix];
    bool keep = loss_keep(packed);
    vec3 y = unpackUnorm4x8(packed).rgb;
    vec3 grad = params.l1_weight * sign(x - y) / n_pixels;
    // unrolled, as the CUDA twin: constant channel indices and SSIM weights
    [[unroll]]
    for (int ch = 0; ch < 3; ++ch) {
        barrier();
        for (uint i = tid; i < uint(SSIM_HALO * SSIM_HALO); i += 256u) {
            ivec2 q = origin - SSIM_RADIUS + ivec2(int(i) % SSIM_HALO, int(i) / SSIM_HALO);
            vec3 g = vec3(0.0);
            if (q.x >= 0 && q.y >= 0 && q.x < W && q.y < H) {
                uint b = 9u * (view_base + uint(q.y * W + q.x)) + 3u * uint(ch);
                g = vec3(ssim_grads[b], ssim_grads[b + 1u], ssim_grads[b + 2u]);
            }
            s_g[int(i) / SSIM_HALO][int(i) % SSIM_HALO] = g;
        }
        barrier();
        for (uint i = tid; i < uint(SSIM_HALO * SSIM_TILE); i += 256u) {
            int row = int(i) / SSIM_TILE, col = int(i) % SSIM_TILE;
            vec3 acc = vec3(0.0);
            [[unroll]]
            for (int k = 0; k < 11; ++k) {
                acc += ssim_w(k) * s_g[row][col + k];
            }
            s_h[row][col] = acc;
        }
        barrier();
        vec3 b = vec3(0.0);
        [[unroll]]
        for (int k = 0; k < 11; ++k) {
            b += ssim_w(k) * s_h[lp.y + k][lp.x];
        }
        float dssim = b.x + 2.0 * x[ch] * b.y + y[ch] * b.z;
        if (n_valid > 0.0) {
            grad[ch] -= params.ssim_weight * dssim / n_valid;
        }
    }
    if (!keep) {
        grad = vec3(0.0);
    }
    if (inside) {
        uint o = 3u * (view_base + uint(p.y * W + p.x));
        grad_colors[o] = grad.x;
        grad_colors[o + 1u] = grad.y;
        grad_colors[o + 2u] = grad.z;
    }
    if (gl_WorkGroupID.x == 0u && gl_WorkGroupID.y == 0u && gl_WorkGroupID.z == 0u) {
        vec4 part = vec4(0.0);
        for (uint i = tid; i < pc.n_partials; i += 256u) {
            part += partials[i];
        }
        vec4 sg = subgroupAdd(part);
        if (subgroupElect()) {
            s_sum[gl_SubgroupID] = sg;
        }
        barrier();
        if (tid == 0u) {
            vec4 total = vec4(0.0);
            for (uint s = 0u; s < gl_NumSubgroups; ++s) {
                total += s_sum[s];
            }
            float l1 = n_pixels > 0.0 ? total.x / n_pixels : 0.0;
            float ssim = n_valid > 0.0 ? total.z / n_valid : 1.0;
            loss_out[0] = params.l1_weight * l1 + params.ssim_weight * (1.0 - ssim);
            loss_out[1] = l1;
            loss_out[2] = ssim;
            loss_out[3] = n_pixels > 0.0 ? total.y / n_pixels : 0.0;
        }
    }
}
