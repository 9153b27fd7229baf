#version 450
// bilagrid_fwd: the bilateral grid (BilaRF; gsplat's lib_bilagrid.py) applied to one
// rendered view (docs/design.md §2.8; reference spirula/reference/appearance.py): the
// view's grid (one per dataset image: StepParams.image_index[view]; an image >= n_grids,
// a novel view, passes through) is sliced trilinearly at (gx, gy, gz) = ((x + 0.5) / W
// (GW - 1), (y + 0.5) / H (GH - 1), luma(rgb) (GL - 1)), each clamped to the grid, and its
// 3x4 affine matrix A gives A [rgb, 1]. One thread per pixel, grid-stride; workgroup 256.
//   binding 0  step     [StepParams words]    u32  read   image_index[view] at word 4 + view
//   binding 1  grids    [F,GL,GH,GW,12]       f32  read   row-major 3x4 per node
//   binding 2  rgb_in   [V,H,W,3]             f32  read
//   binding 3  rgb_out  [V,H,W,3]             f32  write  view `view` only
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer GridsBuf { float grids[]; };
layout(std430, binding = 2) restrict readonly buffer RgbInBuf { float rgb_in[]; };
layout(std430, binding = 3) restrict writeonly buffer RgbOutBuf { float rgb_out[]; };

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

FN void bilagrid_fwd_body(uint first, uint stride) {
    uint frame = step[STEP_IMAGE_INDEX_WORD + pc.view];
    uint hw = pc.width * pc.height, base = pc.view * hw;
    for (uint i = first; i < hw; i += stride) {
        uint q = 3u * (base + i);
        vec3 rgb = vec3(rgb_in[q], rgb_in[q + 1u], rgb_in[q + 2u]);
        vec3 o = rgb;
        if (frame < pc.n_grids) {
            uint x0, y0, z0;
            float fx, fy, fz;
            bilagrid_coords(i, rgb, x0, y0, z0, fx, fy, fz);
            float A[12];
            UNROLL
            for (uint k = 0u; k < 12u; k++) {
                A[k] = 0.0f;
            }
            for (uint corner = 0u; corner < 8u; corner++) {
                float w, dwz;
                uint node = bilagrid_corner(frame, corner, x0, y0, z0, fx, fy, fz, w, dwz);
                UNROLL
                for (uint k = 0u; k < 12u; k++) {
                    A[k] += w * grids[node + k];
                }
            }
            o = vec3(A[0] * rgb.x + A[1] * rgb.y + A[2] * rgb.z + A[3],
                     A[4] * rgb.x + A[5] * rgb.y + A[6] * rgb.z + A[7],
                     A[8] * rgb.x + A[9] * rgb.y + A[10] * rgb.z + A[11]);
        }
        rgb_out[q] = o.x;
        rgb_out[q + 1u] = o.y;
        rgb_out[q + 2u] = o.z;
    }
}

void main() { bilagrid_fwd_body(global_index(), grid_stride()); }
