#version 450
// projection_fwd: project every Gaussian into every camera (EWA splatting).
// One thread per (camera c, Gaussian g), i = c * n + g; workgroup 256, folded.
// Writes what rasterization needs, and each Gaussian's tile count and depth
// sort key (the sort runs front to back, then by tile; render/intersect.py).
//   binding 0  means       [N,3]   f32  read
//   binding 1  quats       [N,4]   f32  read   wxyz, normalized here
//   binding 2  scales      [N,3]   f32  read   activated, or log when ACTIVATED = false
//   binding 3  opacities   [N]     f32  read   activated, or logit when ACTIVATED = false
//   binding 4  sh          [N,K,3] f32  read   K = SH_COEFFS >= (SH_DEGREE+1)^2
//                                              (COMPACT: [N,W] u32 rows, include/storage.glsl)
//   binding 5  cameras     [C,32]  f32  read   the camera records (CAMERA_FLOATS, include/projection.glsl):
//                                              viewmat, model, fx, fy, cx, cy, distortion
//   binding 6  xyop        [C*N,4] f32  write  mean2d.x, mean2d.y, opacity, depth (camera z; the
//                                              distance through a fisheye or equirectangular lens)
//   binding 7  conics      [C*N,4] f32  write  a, b, c (inverse 2D covariance), 0
//   binding 8  rgb         [C*N,4] f32  write  view-dependent colour, 0
//   binding 9  radii       [C*N,2] i32  write  0 when culled
//   binding 10 tile_counts [C*N]   u32  write  tiles the alpha >= 1/255 ellipse may reach
//                                              (cull_count, include/raster.glsl)
//   binding 11 depth_keys  [C*N]   u32  write  depth bits (0xffffffff when culled)
//   binding 12 depth_ids   [C*N]   u32  write  i
//   binding 13 normals     [C*N,4] f32  write  (NORMALS) camera-space normal, 0: the rotation's
//                                              axis of the smallest scale, turned to the camera
//                                              (splat_normal, include/projection.glsl)
// Culled (radii 0) entries of xyop/conics/rgb/normals are left unwritten.
// NORMALS (specialization constant, --geometry's normal consistency): also the splat normals
// rasterize_fwd blends into a normal image; off, the compiler removes them.
#extension GL_GOOGLE_include_directive : require
// culls or flags splats by whether their values are finite: IEEE Inf and NaN kept
#define SPIRULA_PRESERVE_INF_NAN
#include "common.glsl"
#include "projection.glsl"
#include "raster.glsl"
#include "sh.glsl"
#include "storage.glsl"

#ifndef COMPACT
#define COMPACT 0
#endif

// CUDA: one kernel per SH degree (its loops unrolled over register arrays)
#pragma spirula_cuda_template SH_DEGREE 0 1 2 3

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint SH_DEGREE = 0;
layout(constant_id = 1) const uint SH_COEFFS = 1;
layout(constant_id = 2) const bool ACTIVATED = true;
layout(constant_id = 3) const bool NORMALS = false;

layout(std430, binding = 0) restrict readonly buffer MeansBuf { float means[]; };
layout(std430, binding = 1) restrict readonly buffer QuatsBuf { vec4 quats[]; };
layout(std430, binding = 2) restrict readonly buffer ScalesBuf { float scales[]; };
layout(std430, binding = 3) restrict readonly buffer OpacitiesBuf { float opacities[]; };
#if COMPACT
layout(std430, binding = 4) restrict readonly buffer ShBuf { uint sh[]; };
#define SH_AT(f) sh_compact_value(sh[base + sh_compact_word(f)], f)
#else
layout(std430, binding = 4) restrict readonly buffer ShBuf { float sh[]; };
#define SH_AT(f) sh[base + (f)]
#endif
layout(std430, binding = 5) restrict readonly buffer CamerasBuf { float cameras[]; };
layout(std430, binding = 6) restrict writeonly buffer XyopBuf { vec4 xyop[]; };
layout(std430, binding = 7) restrict writeonly buffer ConicsBuf { vec4 conics[]; };
layout(std430, binding = 8) restrict writeonly buffer RgbBuf { vec4 rgb[]; };
layout(std430, binding = 9) restrict writeonly buffer RadiiBuf { ivec2 radii[]; };
layout(std430, binding = 10) restrict writeonly buffer TileCountsBuf { uint tile_counts[]; };
layout(std430, binding = 11) restrict writeonly buffer DepthKeysBuf { uint depth_keys[]; };
layout(std430, binding = 12) restrict writeonly buffer DepthIdsBuf { uint depth_ids[]; };
layout(std430, binding = 13) restrict writeonly buffer NormalsBuf { vec4 normals[]; };

layout(push_constant) uniform Push {
    uint n;
    uint n_cameras;
    uint width;
    uint height;
    uint tile_width;
    uint tile_height;
    float eps2d;
    float near_plane;
    float far_plane;
} pc;

FN void cull(uint i) {
    radii[i] = ivec2(0);
    tile_counts[i] = 0u;
    depth_keys[i] = 0xffffffffu;
    depth_ids[i] = i;
}

// i = c * n + g: camera c, Gaussian g
FN void projection_fwd_body(uint i) {
    if (i >= pc.n * pc.n_cameras) {
        return;
    }
    uint c = i / pc.n, g = i - c * pc.n;
    Camera cam = LOAD_CAMERA(cameras, c);
    uint model = CAMERA_MODEL(cameras, c);  // the same for every thread of camera c
    vec3 mean = vec3(means[3u * g], means[3u * g + 1u], means[3u * g + 2u]);
    vec3 pcam = cam.R * mean + cam.t;
    float opacity = opacities[g];
    if (!ACTIVATED) {
        opacity = 1.0f / (1.0f + exp(-opacity));
    }
    // NaN and Inf are culled (in_view, on_screen: projection.glsl). depth: camera z, or the
    // distance through a fisheye or equirectangular lens (lens_depth)
    float depth = model == CAMERA_PINHOLE ? pcam.z : lens_depth(model, pcam);
    if (!in_view(vec3(pcam.x, pcam.y, depth), opacity, pc.near_plane, pc.far_plane)) {
        cull(i);
        return;
    }
    vec3 s = vec3(scales[3u * g], scales[3u * g + 1u], scales[3u * g + 2u]);
    if (!ACTIVATED) {
        s = exp(s);
    }
    vec2 mean2d;
    float det;
    vec3 cov2d;
    bool valid = true;
    if (model == CAMERA_PINHOLE) {
        cov2d = project_gaussian(cam, pcam, quats[g], s, float(pc.width), float(pc.height), pc.eps2d, mean2d, det);
    } else {
        cov2d = project_gaussian_ut(cam, LOAD_LENS(cameras, c), pcam, quats[g], s, pc.eps2d, mean2d, det, valid);
    }
    vec2 radius = screen_radius(cov2d, opacity);
    if (!valid || !on_screen(det, mean2d, radius, float(pc.width), float(pc.height))) {
        cull(i);
        return;
    }
    float inv_det = 1.0f / det;
    vec3 conic = vec3(cov2d.z, -cov2d.y, cov2d.x) * inv_det;

    // colour: SH evaluated in the direction from the camera centre to the mean
    vec3 dir = normalize(mean - camera_position(cam));
    float basis[16];
    sh_basis(int(SH_DEGREE), dir, basis);
    vec3 color = vec3(0.0f);
    uint base = g * sh_row_words(COMPACT != 0, SH_COEFFS);
    UNROLL for (uint k = 0u; k < (SH_DEGREE + 1u) * (SH_DEGREE + 1u); ++k) {
        color += basis[k] * vec3(SH_AT(3u * k), SH_AT(3u * k + 1u), SH_AT(3u * k + 2u));
    }
    color = max(color + 0.5f, vec3(0.0f));

    vec2 tile_min, tile_max;
    tile_rect(mean2d, radius, vec2(pc.tile_width, pc.tile_height), tile_min, tile_max);
    uint count = uint(cull_count(mean2d, cull_ellipse(conic, opacity), tile_min, tile_max));

    xyop[i] = vec4(mean2d, opacity, depth);
    conics[i] = vec4(conic, 0.0f);
    rgb[i] = vec4(color, 0.0f);
    radii[i] = ivec2(radius);
    tile_counts[i] = count;
    depth_keys[i] = count > 0u ? floatBitsToUint(depth) : 0xffffffffu;
    depth_ids[i] = i;
    if (NORMALS) {
        vec4 q = quats[g];
        normals[i] = vec4(splat_normal(quat_to_rotmat(q * inversesqrt(dot(q, q))), s, cam.R, pcam), 0.0f);
    }
}

void main() { projection_fwd_body(global_index()); }
