#version 450
// normal_consistency_fwd: 2DGS's normal consistency per pixel (--geometry): the rendered
// normal N against the normal of the rendered depth, l = a (1 - N . n_d) (include/normals.glsl;
// reference spirula/reference/normals.py). 0 on the image border, where the pixel or one of
// its four neighbours has depth <= 0 or lies where the camera's lens does not reach, and
// where the depth normal is degenerate. One thread per pixel, grid-stride; workgroup 256.
//   binding 0  normals   [C,H,W,3]  f32  read   rendered camera-space normals (alpha-blended)
//   binding 1  depths    [C,H,W]    f32  read   rendered depths (camera z; through a lens lens_depth)
//   binding 2  alphas    [C,H,W]    f32  read   the weight a of each pixel
//   binding 3  cameras   [C,32]     f32  read   camera records: model, lens, fx, fy, cx, cy (not the viewmat)
//   binding 4  out_loss  [C,H,W]    f32  write  l
#extension GL_GOOGLE_include_directive : require
#include "camera.glsl"
#include "common.glsl"
#include "normals.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer NormalsBuf { float normals[]; };
layout(std430, binding = 1) restrict readonly buffer DepthsBuf { float depths[]; };
layout(std430, binding = 2) restrict readonly buffer AlphasBuf { float alphas[]; };
layout(std430, binding = 3) restrict readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 4) restrict writeonly buffer OutLossBuf { float out_loss[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint count;  // C * H * W
} pc;

// A and B of interior pixel (u, v) of the image starting at pixel base; false: no depth normal
FN bool depth_differences(uint base, uint u, uint v, Lens L, vec4 K, OUT(vec3) A, OUT(vec3) B) {
    uint p = base + v * pc.width + u;
    float d0 = depths[p], dU = depths[p - pc.width], dD = depths[p + pc.width];
    float dL = depths[p - 1u], dR = depths[p + 1u];
    vec3 rU, rD, rL, rR, r0;
    bool rays = view_ray(L, K, u, v, r0) && view_ray(L, K, u, v - 1u, rU) && view_ray(L, K, u, v + 1u, rD) &&
                view_ray(L, K, u - 1u, v, rL) && view_ray(L, K, u + 1u, v, rR);
    A = dD * rD - dU * rU;
    B = dR * rR - dL * rL;
    vec3 c = cross(A, B);
    return rays && d0 > 0.0f && dU > 0.0f && dD > 0.0f && dL > 0.0f && dR > 0.0f && dot(c, c) > NC_MIN_CROSS2;
}

FN void normal_consistency_fwd_body(uint i) {
    uint hw = pc.width * pc.height;
    uint c = i / hw, u = i % pc.width, v = (i % hw) / pc.width;
    float loss = 0.0f;
    if (u > 0u && v > 0u && u + 1u < pc.width && v + 1u < pc.height) {
        vec4 K = vec4(cameras[CAMERA_FLOATS * c + 16u], cameras[CAMERA_FLOATS * c + 17u],
                      cameras[CAMERA_FLOATS * c + 18u], cameras[CAMERA_FLOATS * c + 19u]);
        Lens L = LOAD_VIEW_LENS(cameras, c);
        vec3 A, B;
        if (depth_differences(c * hw, u, v, L, K, A, B)) {
            vec3 N = vec3(normals[3u * i], normals[3u * i + 1u], normals[3u * i + 2u]);
            loss = alphas[i] * (1.0f - dot(N, normalize(cross(A, B))));
        }
    }
    out_loss[i] = loss;
}

void main() {
    for (uint i = global_index(); i < pc.count; i += grid_stride()) {
        normal_consistency_fwd_body(i);
    }
}
