#version 450
// projection_bwd: gradients of every Gaussian's parameters from the gradients
// of its projections (rasterize_bwd's outputs), summed over the cameras.
// One thread per Gaussian g (workgroup 128, folded), looping over cameras:
// no atomics. fpbo fuses the same maths with the Adam update.
//   binding 0  means          [N,3]   f32  read
//   binding 1  quats          [N,4]   f32  read
//   binding 2  scales         [N,3]   f32  read   activated, or log (ACTIVATED = false)
//   binding 3  opacities      [N]     f32  read   activated, or logit
//   binding 4  sh             [N,K,3] f32  read
//   binding 5  cameras        [C,32]  f32  read   camera records (include/projection.glsl)
//   binding 6  radii          [C*N,2] i32  read   0: not visible in that camera
//   binding 7  grad_xy        [C*N,2] f32  read   from rasterize_bwd
//   binding 8  grad_conics    [C*N,3] f32  read
//   binding 9  grad_rgb       [C*N,3] f32  read
//   binding 10 grad_opacity   [C*N]   f32  read
//   binding 11 grad_means     [N,3]   f32  write
//   binding 12 grad_quats     [N,4]   f32  write  w.r.t. the stored quaternion
//   binding 13 grad_scales    [N,3]   f32  write  w.r.t. the stored (activated or log) scale
//   binding 14 grad_opacities [N]     f32  write  w.r.t. the stored (activated or logit) opacity
//   binding 15 grad_sh        [N,K,3] f32  write  zero past the active degree
//   binding 16 grad_normals   [C*N,3] f32  read   (NORMALS) dL/d camera-space splat normal, from
//                                                 rasterize_bwd: to the quaternion (splat_normal_vjp)
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"
#define SPIRULA_PROJECTION_VJP
#include "sh.glsl"
#include "projection.glsl"

// CUDA: one kernel per SH degree (its loops unrolled over register arrays)
#pragma spirula_cuda_template SH_DEGREE 0 1 2 3

layout(local_size_x = 128) in;
layout(constant_id = 0) const uint SH_DEGREE = 0;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool ACTIVATED = true;
layout(constant_id = 3) const bool NORMALS = false;

layout(std430, binding = 0) readonly buffer MeansBuf { float means[]; };
layout(std430, binding = 1) readonly buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 2) readonly buffer ScalesBuf { float scales[]; };
layout(std430, binding = 3) readonly buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 4) readonly buffer ShBuf { float sh[]; };
layout(std430, binding = 5) readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 6) readonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 7) readonly buffer GradXyBuf { GRAD_T grad_xy[]; };
layout(std430, binding = 8) readonly buffer GradConicsBuf { GRAD_T grad_conics[]; };
layout(std430, binding = 9) readonly buffer GradRgbBuf { GRAD_T grad_rgb[]; };
layout(std430, binding = 10) readonly buffer GradOpacityBuf { GRAD_T grad_opacity[]; };
layout(std430, binding = 11) writeonly buffer GradMeansBuf { float grad_means[]; };
layout(std430, binding = 12) writeonly buffer GradQuatsBuf { vec4 grad_quats[]; };
layout(std430, binding = 13) writeonly buffer GradScalesBuf { float grad_scales[]; };
layout(std430, binding = 14) writeonly buffer GradOpacitiesBuf { float grad_opacities[]; };
layout(std430, binding = 15) writeonly buffer GradShBuf { float grad_sh[]; };
layout(std430, binding = 16) readonly buffer GradNormalsBuf { GRAD_T grad_normals[]; };

layout(push_constant) uniform Push {
    uint n;
    uint n_cameras;
    uint width;
    uint height;
    float eps2d;
} pc;

FN void projection_bwd_body(uint g) {
    if (g >= pc.n) {
        return;
    }
    const int degree = int(SH_DEGREE);
    const int n_coeffs = (degree + 1) * (degree + 1);
    vec3 mean = vec3(means[3u * g], means[3u * g + 1u], means[3u * g + 2u]);
    vec4 quat = quats[g];
    vec3 stored_scale = vec3(scales[3u * g], scales[3u * g + 1u], scales[3u * g + 2u]);
    vec3 scale = ACTIVATED ? stored_scale : exp(stored_scale);
    float coeffs[48];
    UNROLL for (int k = 0; k < 3 * n_coeffs; ++k) { coeffs[k] = sh[g * SH_COEFFS * 3u + uint(k)]; }
    vec3 v_mean = vec3(0.0f);
    vec4 v_quat = vec4(0.0f);
    vec3 v_scale = vec3(0.0f);
    float v_opacity = 0.0f;
    float v_sh[48];
    UNROLL for (int k = 0; k < 48; ++k) { v_sh[k] = 0.0f; }
    for (uint c = 0u; c < pc.n_cameras; ++c) {
        uint i = c * pc.n + g;
        ivec2 r = radii[i];
        if (r.x == 0 && r.y == 0) {
            continue;
        }
        Camera cam = LOAD_CAMERA(cameras, c);
        vec2 v_xy = vec2(GRAD_LOAD(grad_xy, 2u * i), GRAD_LOAD(grad_xy, 2u * i + 1u));
        vec3 v_con = vec3(GRAD_LOAD(grad_conics, 3u * i), GRAD_LOAD(grad_conics, 3u * i + 1u),
                          GRAD_LOAD(grad_conics, 3u * i + 2u));
        vec3 v_rgb =
            vec3(GRAD_LOAD(grad_rgb, 3u * i), GRAD_LOAD(grad_rgb, 3u * i + 1u), GRAD_LOAD(grad_rgb, 3u * i + 2u));
        v_opacity += GRAD_LOAD(grad_opacity, i);
        uint model = CAMERA_MODEL(cameras, c);
        if (model == CAMERA_PINHOLE) {
            projection_vjp(cam, mean, quat, scale, degree, coeffs, float(pc.width), float(pc.height), pc.eps2d, v_xy,
                           v_con, v_rgb, v_mean, v_quat, v_scale, v_sh);
        } else {
            projection_geometry_vjp_ut(cam, LOAD_LENS(cameras, c), mean, quat, scale, pc.eps2d, v_xy, v_con, v_mean,
                                       v_quat, v_scale);
            projection_colour_vjp(cam, mean, degree, coeffs, v_rgb, v_mean, v_sh);
        }
        if (NORMALS) {
            vec3 v_n = vec3(GRAD_LOAD(grad_normals, 3u * i), GRAD_LOAD(grad_normals, 3u * i + 1u),
                            GRAD_LOAD(grad_normals, 3u * i + 2u));
            splat_normal_vjp(cam, mean, quat, scale, v_n, v_quat);
        }
    }
    if (!ACTIVATED) {
        v_scale *= scale;  // d exp(l) / dl
        float o = 1.0f / (1.0f + exp(-opacities[g]));
        v_opacity *= o * (1.0f - o);  // d sigmoid(x) / dx
    }
    grad_means[3u * g] = v_mean.x;
    grad_means[3u * g + 1u] = v_mean.y;
    grad_means[3u * g + 2u] = v_mean.z;
    grad_quats[g] = v_quat;
    grad_scales[3u * g] = v_scale.x;
    grad_scales[3u * g + 1u] = v_scale.y;
    grad_scales[3u * g + 2u] = v_scale.z;
    grad_opacities[g] = v_opacity;
    uint row = g * SH_COEFFS * 3u;
    UNROLL for (int k = 0; k < 3 * n_coeffs; ++k) { grad_sh[row + uint(k)] = v_sh[k]; }
    for (uint k = uint(3 * n_coeffs); k < SH_COEFFS * 3u; ++k) {
        grad_sh[row + k] = 0.0f;  // past the active degree
    }
}

void main() { projection_bwd_body(global_index()); }
