#version 450
// bilagrid_bwd: the vector-Jacobian product of bilagrid_fwd for one view (docs/design.md
// §2.8; reference spirula/reference/appearance.py): dL/d rgb_in per pixel (through A and
// through the luminance that places the sample, where gz lies strictly inside the grid),
// and dL/d grid added to the 8 corner nodes' 12 coefficients by float atomic add
// (include/atomics.glsl: native where the device has it, else compare-and-swap), as
// fused-bilagrid does. An image >= n_grids passes through (grad_rgb = grad_out). One
// thread per pixel, grid-stride; workgroup 256.
//   binding 0  step        [StepParams words]  u32  read   image_index[view] at word 4 + view
//   binding 1  grids       [F,GL,GH,GW,12]     f32  read
//   binding 2  rgb_in      [V,H,W,3]           f32  read
//   binding 3  grad_out    [V,H,W,3]           f32  read   dL/d rgb_out
//   binding 4  grad_rgb    [V,H,W,3]           f32  write  dL/d rgb_in, view `view` only
//   binding 5  grad_grids  [F,GL,GH,GW,12]     f32  add    (GRAD_T)
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer GridsBuf { float grids[]; };
layout(std430, binding = 2) restrict readonly buffer RgbInBuf { float rgb_in[]; };
layout(std430, binding = 3) restrict readonly buffer GradOutBuf { float grad_out[]; };
layout(std430, binding = 4) restrict writeonly buffer GradRgbBuf { float grad_rgb[]; };
layout(std430, binding = 5) restrict buffer GradGridsBuf { GRAD_T grad_grids[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint view;
    uint n_grids;
    uint grid_w;
    uint grid_h;
    uint grid_l;
} pc;

#include "bilagrid_corner.glsl"

FN void bilagrid_bwd_body(uint first, uint stride) {
    uint frame = step[STEP_IMAGE_INDEX_WORD + pc.view];
    uint hw = pc.width * pc.height, base = pc.view * hw;
    for (uint i = first; i < hw; i += stride) {
        uint q = 3u * (base + i);
        vec3 rgb = vec3(rgb_in[q], rgb_in[q + 1u], rgb_in[q + 2u]);
        vec3 g = vec3(grad_out[q], grad_out[q + 1u], grad_out[q + 2u]);
        vec3 gi = g;
        if (frame < pc.n_grids) {
            uint x0, y0, z0;
            float fx, fy, fz;
            bool inner = bilagrid_coords(i, rgb, x0, y0, z0, fx, fy, fz);
            // dL/dA of the pixel: g_r [rgb, 1]_j at 4 r + j
            float gA[12];
            UNROLL
            for (uint r = 0u; r < 3u; r++) {
                gA[4u * r] = g[r] * rgb.x;
                gA[4u * r + 1u] = g[r] * rgb.y;
                gA[4u * r + 2u] = g[r] * rgb.z;
                gA[4u * r + 3u] = g[r];
            }
            float A[9];  // the sliced matrix's linear part
            UNROLL
            for (uint k = 0u; k < 9u; k++) {
                A[k] = 0.0f;
            }
            float gz = 0.0f;
            for (uint corner = 0u; corner < 8u; corner++) {
                float w, dwz;
                uint node = bilagrid_corner(frame, corner, x0, y0, z0, fx, fy, fz, w, dwz);
                float dot_ = 0.0f;
                UNROLL
                for (uint r = 0u; r < 3u; r++) {
                    UNROLL
                    for (uint j = 0u; j < 4u; j++) {
                        float a = grids[node + 4u * r + j];
                        dot_ += a * gA[4u * r + j];
                        if (j < 3u) {
                            A[3u * r + j] += w * a;
                        }
                    }
                }
                gz += dwz * dot_;
                if (w != 0.0f) {
                    UNROLL
                    for (uint k = 0u; k < 12u; k++) {
                        ATOMIC_ADD(grad_grids, node + k, w * gA[k]);
                    }
                }
            }
            float gl = inner ? gz * float(pc.grid_l - 1u) : 0.0f;
            gi = vec3(A[0] * g.x + A[3] * g.y + A[6] * g.z + LUMA_R * gl,
                      A[1] * g.x + A[4] * g.y + A[7] * g.z + LUMA_G * gl,
                      A[2] * g.x + A[5] * g.y + A[8] * g.z + LUMA_B * gl);
        }
        grad_rgb[q] = gi.x;
        grad_rgb[q + 1u] = gi.y;
        grad_rgb[q + 2u] = gi.z;
    }
}

void main() { bilagrid_bwd_body(global_index(), grid_stride()); }
