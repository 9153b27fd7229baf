// Normal consistency (2DGS; docs/design.md, "Normal consistency"): the maths of
// normal_consistency_fwd/bwd, shared by the shaders and the CUDA kernels (dialect.glsl).
// Reference: spirula/reference/normals.py. A pixel (u, v) of depth d is the camera-space
// point P = d ray(u, v), ray = ((u + 0.5 - cx) / fx, (v + 0.5 - cy) / fy, 1) (OpenCV camera,
// pixel centres at +0.5); through a lens, its ray as lens_ray gives it (depth = camera z
// through OPENCV, the distance through a fisheye or an equirectangular camera: lens_depth),
// and a pixel the lens does not reach has no point. Its depth normal is n = c / |c|,
// c = A x B with the central differences A = P(u, v+1) - P(u, v-1), B = P(u+1, v) -
// P(u-1, v) (towards the camera: -z for a fronto-parallel plane); its loss
// l = a (1 - N . n), N the rendered normal, a the pixel's alpha as a constant weight.
#ifndef SPIRULA_NORMALS_GLSL
#define SPIRULA_NORMALS_GLSL
#include "dialect.glsl"
#include "projection.glsl"

// below this |c|^2 a pixel has no depth normal (a degenerate neighbourhood)
const float NC_MIN_CROSS2 = 1e-30f;

// The ray of pixel (u, v)'s centre; K = (fx, fy, cx, cy)
FN vec3 pixel_ray(uint u, uint v, vec4 K) {
    return vec3((float(u) + 0.5f - K.z) / K.x, (float(v) + 0.5f - K.w) / K.y, 1.0f);
}

// The ray of pixel (u, v)'s centre through camera lens L (L.model CAMERA_PINHOLE: K alone);
// false where the lens does not reach the pixel
FN bool view_ray(Lens L, vec4 K, uint u, uint v, OUT(vec3) ray) {
    if (L.model == CAMERA_PINHOLE) {
        ray = pixel_ray(u, v, K);
        return true;
    }
    return lens_ray(L, K, vec2(float(u) + 0.5f, float(v) + 0.5f), ray);
}

// Camera c's lens from the camera record buffer buf, read only for a lens (a uniform branch)
#define LOAD_VIEW_LENS(buf, c)                                                                               \
    (CAMERA_MODEL(buf, c) == CAMERA_PINHOLE ? LENS(CAMERA_PINHOLE, 0.0f, vec4(0.0f), vec4(0.0f), vec4(0.0f)) \
                                            : LOAD_LENS(buf, c))

// dL/dN, dL/dA, dL/dB of L = ga (1 - N . c / |c|), c = A x B (ga = dL/dl a; c2 = |c|^2):
//   dL/dN = -ga n;  dL/dc = -ga (N - n (n . N)) / |c|;  dL/dA = B x dL/dc;  dL/dB = dL/dc x A
FN void normal_consistency_vjp(vec3 N, vec3 A, vec3 B, float ga, OUT(vec3) gN, OUT(vec3) gA, OUT(vec3) gB) {
    vec3 c = cross(A, B);
    float inv = inversesqrt(dot(c, c));
    vec3 n = c * inv;
    gN = -ga * n;
    vec3 gc = (-ga * inv) * (N - n * dot(n, N));
    gA = cross(B, gc);
    gB = cross(gc, A);
}

#endif
