#version 450
// loss_fwd: the per-pixel terms of the training loss
//     loss = l1_weight * mean|x - y| + ssim_weight * (1 - mean SSIM(x, y))
// for each rendered view x against its ground-truth image y. SSIM is "valid"
// (pixels whose 11x11 window fits in the image), with the window's Gaussian
// applied as two separable passes through shared memory, one channel at a time.
// For loss_bwd it stores, per valid pixel and channel, the derivatives of SSIM
// with respect to the window moments mu_x, E[x^2], E[xy]; and per workgroup the
// sums of |x - y|, (x - y)^2 and SSIM.
// Masks (the alpha byte of the ground truth, loss_keep): a dropped pixel is 0
// in x and y for every window, adds nothing to the sums, and its own SSIM
// term (and so its window's derivatives) is not counted; loss_bwd divides by
// the kept counts (StepParams masked_pixels, masked_valid). Without a mask
// (alpha 255 everywhere) every value is as without this rule.
// One workgroup per 16x16 tile (x, y) of view z; one thread per pixel.
//   binding 0  colors     [V,H,W,3]     f32  read   rendered views
//   binding 1  gt_images  [I,H,W]       u32  read   dataset images, RGBA8 (A: mask)
//   binding 2  params     StepParams         read   image_index of each view
//   binding 3  ssim_grads [V,H,W,9]     f32  write  per channel dS/dmu, dS/dE[x^2], dS/dE[xy]
//   binding 4  partials   [V*groups,4]  f32  write  sum |d|, sum d^2, sum SSIM, 0
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
layout(std430, binding = 3) restrict writeonly buffer SsimGradsBuf { float ssim_grads[]; };
layout(std430, binding = 4) restrict writeonly buffer PartialsBuf { vec4 partials[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
} pc;

shared vec2 s_xy[SSIM_HALO][SSIM_HALO];     // x and y of one channel, tile + margins
shared float s_h[5][SSIM_HALO][SSIM_TILE];  // horizontal pass of the 5 moments
shared vec4 s_sum[64];                      // one per subgroup

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
    uint image_base = image * uint(W * H);
    bool keep = inside && loss_keep(gt_images[image_base + uint(p.y * W + p.x)]);
    bool valid = keep && ssim_valid(p.x, p.y, W, H);

    vec4 sums = vec4(0.0);
    // unrolled, as the CUDA twin: constant channel indices and SSIM weights
    [[unroll]]
    for (int ch = 0; ch < 3; ++ch) {
        barrier();
        for (uint i = tid; i < uint(SSIM_HALO * SSIM_HALO); i += 256u) {
            ivec2 q = origin - SSIM_RADIUS + ivec2(int(i) % SSIM_HALO, int(i) / SSIM_HALO);
            vec2 v = vec2(0.0);
            if (q.x >= 0 && q.y >= 0 && q.x < W && q.y < H) {
                uint pix = uint(q.y * W + q.x);
                uint packed = gt_images[image_base + pix];
                if (loss_keep(packed)) {
                    v = vec2(colors[3u * (view_base + pix) + uint(ch)], unpackUnorm4x8(packed)[ch]);
                }
            }
            s_xy[int(i) / SSIM_HALO][int(i) % SSIM_HALO] = v;
        }
        barrier();
        for (uint i = tid; i < uint(SSIM_HALO * SSIM_TILE); i += 256u) {
            int row = int(i) / SSIM_TILE, col = int(i) % SSIM_TILE;
            float mx = 0.0, my = 0.0, sxx = 0.0, syy = 0.0, sxy = 0.0;
            [[unroll]]
            for (int k = 0; k < 11; ++k) {
                vec2 v = s_xy[row][col + k];
                float w = ssim_w(k);
                mx += w * v.x;
                my += w * v.y;
                sxx += w * v.x * v.x;
                syy += w * v.y * v.y;
                sxy += w * v.x * v.y;
            }
            s_h[0][row][col] = mx;
            s_h[1][row][col] = my;
            s_h[2][row][col] = sxx;
            s_h[3][row][col] = syy;
            s_h[4][row][col] = sxy;
        }
        barrier();
        vec2 c = s_xy[lp.y + SSIM_RADIUS][lp.x + SSIM_RADIUS];
        if (keep) {
            float d = c.x - c.y;
            sums.x += abs(d);
            sums.y += d * d;
        }
        float g_m = 0.0, g_sxx = 0.0, g_sxy = 0.0;
        if (valid) {
            float mx = 0.0, my = 0.0, sxx = 0.0, syy = 0.0, sxy = 0.0;
            [[unroll]]
            for (int k = 0; k < 11; ++k) {
                float w = ssim_w(k);
                mx += w * s_h[0][lp.y + k][lp.x];
                my += w * s_h[1][lp.y + k][lp.x];
                sxx += w * s_h[2][lp.y + k][lp.x];
                syy += w * s_h[3][lp.y + k][lp.x];
                sxy += w * s_h[4][lp.y + k][lp.x];
            }
            vec3 g;
            sums.z += ssim_and_grads(mx, my, sxx, syy, sxy, g);
            g_m = g.x;
            g_sxx = g.y;
            g_sxy = g.z;
        }
        // written per channel, not kept to the end: 9 fewer live registers across the channels
        if (inside) {
            uint o = 9u * (view_base + uint(p.y * W + p.x)) + 3u * uint(ch);
            ssim_grads[o] = g_m;
            ssim_grads[o + 1u] = g_sxx;
            ssim_grads[o + 2u] = g_sxy;
        }
    }
    // workgroup sums: subgroups first, then one thread over the subgroup sums
    vec4 sg = subgroupAdd(sums);
    if (subgroupElect()) {
        s_sum[gl_SubgroupID] = sg;
    }
    barrier();
    if (tid == 0u) {
        vec4 total = vec4(0.0);
        for (uint s = 0u; s < gl_NumSubgroups; ++s) {
            total += s_sum[s];
        }
        uint group = (view * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
        partials[group] = total;
    }
}
