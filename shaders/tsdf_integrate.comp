#version 450
// tsdf_integrate: fuse one rendered view into a truncated signed distance volume.
// One thread per voxel v < dim_x * dim_y * dim_z (workgroup 256, folded); voxel
// v = (i * dim_y + j) * dim_z + k has its centre at
// origin + ((x_offset + i, j, k) + 0.5) * voxel_size (world units; x_offset: this
// volume is a slab of a larger one, rounded as the whole volume would be). The
// centre is moved into the camera (OpenCV world->camera [R | t], z forward) and
// projected with fx, fy, cx, cy; the pixel holding it (pixel centres at +0.5, so
// pixel floor(u), floor(v)) gives depth d, alpha a and colour (premultiplied:
// rendered on black). Then, with z the centre's camera-space depth:
//   a > alpha_surface and d > 0: sdf = d - z; skipped when sdf < -truncation
//     (behind the surface, unseen); else tsdf, weight += min(sdf, truncation), 1
//     (running average); within the band (|sdf| < truncation) also
//     rgbw += colour / a, 1 (its own running average).
//   a < alpha_empty (the ray sees nothing): free space, tsdf, weight +=
//     truncation, carve_weight.
//   else (a half-transparent pixel): nothing.
//   binding 0  depth   [>= off + H*W]      f32   read   median depth (camera z, 0: none)
//   binding 1  alpha   [>= off + H*W]      f32   read   1 - T
//   binding 2  color   [>= 3(off + H*W)]   f32   read   rgb, premultiplied by alpha
//   binding 3  tsdf    [V]                 f32   rw     signed distance (world units), + outside
//   binding 4  weight  [V]                 f32   rw     0: never observed
//   binding 5  rgbw    [V,4]               f32   rw     mean colour, its weight
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer DepthBuf { float depth[]; };
layout(std430, binding = 1) restrict readonly buffer AlphaBuf { float alpha[]; };
layout(std430, binding = 2) restrict readonly buffer ColorBuf { float color[]; };
layout(std430, binding = 3) restrict buffer TsdfBuf { float tsdf[]; };
layout(std430, binding = 4) restrict buffer WeightBuf { float weight[]; };
layout(std430, binding = 5) restrict buffer RgbwBuf { vec4 rgbw[]; };

layout(push_constant) uniform Push {
    uint dim_x;
    uint dim_y;
    uint dim_z;
    uint x_offset;  // this volume is the slab [x_offset, x_offset + dim_x) of the volume at origin
    float origin_x;
    float origin_y;
    float origin_z;
    float voxel_size;
    float truncation;
    float r00;
    float r01;
    float r02;
    float r10;
    float r11;
    float r12;
    float r20;
    float r21;
    float r22;
    float t0;
    float t1;
    float t2;
    float fx;
    float fy;
    float cx;
    float cy;
    uint width;
    uint height;
    uint image_offset;  // pixel index of this view's (0, 0) in depth/alpha (camera * H * W)
    float alpha_surface;
    float alpha_empty;
    float carve_weight;
} pc;

// a voxel centre closer to the camera plane than this is not projected
const float TSDF_NEAR = 1e-4f;

FN void tsdf_integrate_body(uint v) {
    uint yz = pc.dim_y * pc.dim_z;
    if (v >= pc.dim_x * yz) {
        return;
    }
    uint i = v / yz;
    uint j = (v - i * yz) / pc.dim_z;
    uint k = v - i * yz - j * pc.dim_z;
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
    uint pix = pc.image_offset + min(uint(w), pc.height - 1u) * pc.width + min(uint(u), pc.width - 1u);
    float a = alpha[pix];
    float d = depth[pix];
    if (a > pc.alpha_surface && d > 0.0f) {
        float sdf = d - z;
        if (sdf < -pc.truncation) {
            return;
        }
        float w_old = weight[v];
        tsdf[v] = (tsdf[v] * w_old + min(sdf, pc.truncation)) / (w_old + 1.0f);
        weight[v] = w_old + 1.0f;
        if (sdf < pc.truncation) {
            vec4 c = rgbw[v];
            vec3 col = vec3(color[3u * pix], color[3u * pix + 1u], color[3u * pix + 2u]) / a;
            rgbw[v] = vec4((vec3(c.x, c.y, c.z) * c.w + col) / (c.w + 1.0f), c.w + 1.0f);
        }
    } else if (a < pc.alpha_empty) {
        float w_old = weight[v];
        tsdf[v] = (tsdf[v] * w_old + pc.truncation * pc.carve_weight) / (w_old + pc.carve_weight);
        weight[v] = w_old + pc.carve_weight;
    }
}

void main() { tsdf_integrate_body(global_index()); }
