#version 450
// bilagrid_tv: the bilateral grids' total-variation regulariser (gsplat's
// total_variation_loss; docs/design.md §2.8; reference bilagrid_tv in
// spirula/reference/appearance.py): TV = sum over the axes GL, GH, GW of
// sum (x_next - x)^2 / (count_axis F), count_axis the differences along it in one grid
// (12 coefficients each). Each element writes its forward differences' terms (the host or a
// later kernel sums them for the value) and adds weight dTV/dx, gathered from its two
// neighbours on each axis, to grad_grids (GRAD_T, one thread per element: no contention).
// One thread per element, grid-stride; workgroup 256.
//   binding 0  grids       [F,GL,GH,GW,12]  f32  read
//   binding 1  grad_grids  [F,GL,GH,GW,12]  f32  add   (GRAD_T: include/atomics.glsl)
//   binding 2  tv_terms    [F,GL,GH,GW,12]  f32  write each element's share of TV
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer GridsBuf { float grids[]; };
layout(std430, binding = 1) restrict buffer GradGridsBuf { GRAD_T grad_grids[]; };
layout(std430, binding = 2) restrict writeonly buffer TvTermsBuf { float tv_terms[]; };

layout(push_constant) uniform Push {
    uint n_grids;
    uint grid_w;
    uint grid_h;
    uint grid_l;
    float weight;  // the regulariser's weight in the loss (gsplat: 10)
} pc;

// The terms of element i along one axis (its index a of n nodes, neighbours stride apart):
// adds (next - x)^2 / denom to term and the axis' dTV/dx to g
FN void tv_axis(uint i, uint a, uint n, uint stride, float denom, INOUT(float) term, INOUT(float) g) {
    if (n < 2u) {
        return;
    }
    float x = grids[i];
    if (a + 1u < n) {
        float d = grids[i + stride] - x;
        term += d * d / denom;
        g -= 2.0f * d / denom;
    }
    if (a > 0u) {
        g += 2.0f * (x - grids[i - stride]) / denom;
    }
}

FN void bilagrid_tv_body(uint i) {
    uint W = pc.grid_w, H = pc.grid_h, L = pc.grid_l;
    uint node = i / 12u;
    uint x = node % W, y = (node / W) % H, z = (node / (W * H)) % L;
    float F = float(pc.n_grids);
    float term = 0.0f, g = 0.0f;
    tv_axis(i, x, W, 12u, float(12u * L * H * (W - 1u)) * F, term, g);
    tv_axis(i, y, H, 12u * W, float(12u * L * (H - 1u) * W) * F, term, g);
    tv_axis(i, z, L, 12u * W * H, float(12u * (L - 1u) * H * W) * F, term, g);
    tv_terms[i] = term;
    ATOMIC_ADD(grad_grids, i, pc.weight * g);
}

void main() {
    for (uint i = global_index(); i < pc.n_grids * pc.grid_l * pc.grid_h * pc.grid_w * 12u; i += grid_stride()) {
        bilagrid_tv_body(i);
    }
}
