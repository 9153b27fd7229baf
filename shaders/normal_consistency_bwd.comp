#version 450
// normal_consistency_bwd: the vector-Jacobian product of normal_consistency_fwd with a
// per-pixel cotangent g = dL/dl (include/normals.glsl; reference spirula/reference/normals.py).
// dL/dN of a pixel is its own; dL/d depth of pixel q gathers, from each of its four
// neighbours p whose depth normal uses q, ray(q) . dL/dP(q): + dL/dA_p from the pixel above
// (q = its v+1), - from the one below, + dL/dB_p from the pixel to the left (q = its u+1),
// - from the one to the right. No atomics: every output is written once by its pixel's
// thread. One thread per pixel, grid-stride; workgroup 256.
//   binding 0  normals       [C,H,W,3]  f32  read
//   binding 1  depths        [C,H,W]    f32  read
//   binding 2  alphas        [C,H,W]    f32  read
//   binding 3  cameras       [C,32]     f32  read   camera records: model, lens, fx, fy, cx, cy
//   binding 4  grad_loss     [C,H,W]    f32  read   g
//   binding 5  grad_normals  [C,H,W,3]  f32  write  dL/dN
//   binding 6  grad_depths   [C,H,W]    f32  write  dL/d depth
#extension GL_GOOGLE_include_directive : require
#include "camera.glsl"
#include "common.glsl"
#include "normals.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer NormalsBuf { float normals[]; };
layout(std430, binding = 1) restrict readonly buffer DepthsBuf { float depths[]; };
layout(std430, binding = 2) restrict readonly buffer AlphasBuf { float alphas[]; };
layout(std430, binding = 3) restrict readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 4) restrict readonly buffer GradLossBuf { float grad_loss[]; };
layout(std430, binding = 5) restrict writeonly buffer GradNormalsBuf { float grad_normals[]; };
layout(std430, binding = 6) restrict writeonly buffer GradDepthsBuf { float grad_depths[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint count;  // C * H * W
} pc;

// dL/dN, dL/dA, dL/dB of pixel (u, v) of the image starting at pixel base (any pixel:
// false and zeros where it has no depth normal)
FN bool pixel_vjp(uint base, int u, int v, Lens L, vec4 K, OUT(vec3) gN, OUT(vec3) gA, OUT(vec3) gB) {
    gN = vec3(0.0f);
    gA = vec3(0.0f);
    gB = vec3(0.0f);
    if (u <= 0 || v <= 0 || u + 1 >= int(pc.width) || v + 1 >= int(pc.height)) {
        return false;
    }
    uint x = uint(u), y = uint(v);
    uint p = base + y * pc.width + x;
    float d0 = depths[p], dU = depths[p - pc.width], dD = depths[p + pc.width];
    float dL = depths[p - 1u], dR = depths[p + 1u];
    vec3 rU, rD, rL, rR, r0;
    bool rays = view_ray(L, K, x, y, r0) && view_ray(L, K, x, y - 1u, rU) && view_ray(L, K, x, y + 1u, rD) &&
                view_ray(L, K, x - 1u, y, rL) && view_ray(L, K, x + 1u, y, rR);
    vec3 A = dD * rD - dU * rU;
    vec3 B = dR * rR - dL * rL;
    vec3 c = cross(A, B);
    if (!(rays && d0 > 0.0f && dU > 0.0f && dD > 0.0f && dL > 0.0f && dR > 0.0f && dot(c, c) > NC_MIN_CROSS2)) {
        return false;
    }
    vec3 N = vec3(normals[3u * p], normals[3u * p + 1u], normals[3u * p + 2u]);
    normal_consistency_vjp(N, A, B, grad_loss[p] * alphas[p], gN, gA, gB);
    return true;
}

FN void normal_consistency_bwd_body(uint i) {
    uint hw = pc.width * pc.height;
    uint c = i / hw, base = c * hw;
    int u = int(i % pc.width), v = int((i % hw) / pc.width);
    vec4 K = vec4(cameras[CAMERA_FLOATS * c + 16u], cameras[CAMERA_FLOATS * c + 17u], cameras[CAMERA_FLOATS * c + 18u],
                  cameras[CAMERA_FLOATS * c + 19u]);
    Lens L = LOAD_VIEW_LENS(cameras, c);
    vec3 gN, gA, gB, own;
    pixel_vjp(base, u, v, L, K, own, gA, gB);
    vec3 gP = vec3(0.0f);  // dL/dP of this pixel, from the neighbours that use it
    pixel_vjp(base, u, v - 1, L, K, gN, gA, gB);
    gP += gA;
    pixel_vjp(base, u, v + 1, L, K, gN, gA, gB);
    gP -= gA;
    pixel_vjp(base, u - 1, v, L, K, gN, gA, gB);
    gP += gB;
    pixel_vjp(base, u + 1, v, L, K, gN, gA, gB);
    gP -= gB;
    grad_normals[3u * i] = own.x;
    grad_normals[3u * i + 1u] = own.y;
    grad_normals[3u * i + 2u] = own.z;
    vec3 ray;  // gP is 0 where the lens does not reach this pixel (no neighbour uses it)
    view_ray(L, K, uint(u), uint(v), ray);
    grad_depths[i] = dot(ray, gP);
}

void main() {
    for (uint i = global_index(); i < pc.count; i += grid_stride()) {
        normal_consistency_bwd_body(i);
    }
}
