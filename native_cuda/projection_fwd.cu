// projection_fwd: project every Gaussian into every camera (EWA splatting).
// Twin of shaders/projection_fwd.comp. One thread per (camera c, Gaussian g),
// i = c * n + g, folded. SH_DEGREE is a template parameter.
// Culled (radii 0) entries of xyop/conics/rgb/normals are left unwritten.
// NORMALS (a kernel argument from the specialization constant): also the camera-space
// splat normals (splat_normal, include/projection.glsl); a uniform branch per thread.
// Contract: build/contracts/projection_fwd.h, generated from shaders/projection_fwd.comp.
#include "common/launch.cuh"
#include "common/projection.cuh"
#include "common/raster.cuh"
#include "common/storage.cuh"
#include "projection_fwd.h"

namespace {

using namespace spirula;
using namespace contract;

__device__ __forceinline__ void cull(const Args& a, uint32_t i) {
    a.radii[i] = make_int2(0, 0);
    a.tile_counts[i] = 0u;
    a.depth_keys[i] = 0xffffffffu;
    a.depth_ids[i] = i;
}

template <uint32_t SH_DEGREE, bool COMPACT>
__global__ void __launch_bounds__(LOCAL_THREADS)
    projection_fwd_kernel(Args a, Push pc, uint32_t SH_COEFFS, bool ACTIVATED, bool NORMALS) {
    uint32_t i = global_index();
    if (i >= pc.n * pc.n_cameras) {
        return;
    }
    uint32_t c = i / pc.n, g = i - c * pc.n;
    Camera cam = LOAD_CAMERA(a.cameras, c);
    vec3 mean = make3(a.means[3u * g], a.means[3u * g + 1u], a.means[3u * g + 2u]);
    vec3 pcam = cam.R * mean + cam.t;
    float opacity = a.opacities[g];
    if (!ACTIVATED) {
        opacity = 1.0f / (1.0f + expf(-opacity));
    }
    // NaN and Inf are culled (in_view, on_screen: projection.glsl)
    if (!in_view(pcam, opacity, pc.near_plane, pc.far_plane)) {
        cull(a, i);
        return;
    }
    vec3 s = make3(a.scales[3u * g], a.scales[3u * g + 1u], a.scales[3u * g + 2u]);
    if (!ACTIVATED) {
        s = make3(expf(s.x), expf(s.y), expf(s.z));
    }
    vec2 mean2d;
    float det;
    vec3 cov2d =
        project_gaussian(cam, pcam, load4(a.quats, g), s, float(pc.width), float(pc.height), pc.eps2d, mean2d, det);
    vec2 radius = screen_radius(cov2d, opacity);
    if (!on_screen(det, mean2d, radius, float(pc.width), float(pc.height))) {
        cull(a, i);
        return;
    }
    float inv_det = 1.0f / det;
    vec3 conic = make3(cov2d.z, -cov2d.y, cov2d.x) * inv_det;

    // colour: SH evaluated in the direction from the camera centre to the mean
    vec3 dir = normalize(mean - camera_position(cam));
    float basis[16];
    sh_basis(SH_DEGREE, dir, basis);
    vec3 color = make3(0.0f, 0.0f, 0.0f);
    uint32_t base = g * sh_row_words(COMPACT, SH_COEFFS);
    // COMPACT: the rows of include/storage.glsl, read as words
    const uint32_t* words = reinterpret_cast<const uint32_t*>(a.sh);
    auto sh_at = [&](uint32_t f) {
        return COMPACT ? sh_compact_value(words[base + sh_compact_word(f)], f) : a.sh[base + f];
    };
#pragma unroll
    for (uint32_t k = 0u; k < (SH_DEGREE + 1u) * (SH_DEGREE + 1u); ++k) {
        color += basis[k] * make3(sh_at(3u * k), sh_at(3u * k + 1u), sh_at(3u * k + 2u));
    }
    color = make3(fmaxf(color.x + 0.5f, 0.0f), fmaxf(color.y + 0.5f, 0.0f), fmaxf(color.z + 0.5f, 0.0f));

    vec2 tile_min, tile_max;
    tile_rect(mean2d, radius, vec2(float(pc.tile_width), float(pc.tile_height)), tile_min, tile_max);
    uint32_t count = uint32_t(cull_count(mean2d, cull_ellipse(conic, opacity), tile_min, tile_max));

    store4(a.xyop, i, make4(mean2d.x, mean2d.y, opacity, pcam.z));
    store4(a.conics, i, make4(conic.x, conic.y, conic.z, 0.0f));
    store4(a.rgb, i, make4(color.x, color.y, color.z, 0.0f));
    a.radii[i] = make_int2(int(radius.x), int(radius.y));
    a.tile_counts[i] = count;
    a.depth_keys[i] = count > 0u ? __float_as_uint(pcam.z) : 0xffffffffu;
    a.depth_ids[i] = i;
    if (NORMALS) {
        vec4 q = load4(a.quats, g);
        vec3 n = splat_normal(quat_to_rotmat(q * rsqrtf(dot(q, q))), s, cam.R, pcam);
        store4(a.normals, i, make4(n.x, n.y, n.z, 0.0f));
    }
}

template <uint32_t SH_DEGREE>
int launch_degree(const SpirulaLaunch* L, const Args& a, const Push& pc, const Spec& sp, bool compact) {
    if (compact) {
        return launch(L, LOCAL_SIZE, projection_fwd_kernel<SH_DEGREE, true>, a, pc, sp.SH_COEFFS, sp.ACTIVATED,
                      sp.NORMALS);
    }
    return launch(L, LOCAL_SIZE, projection_fwd_kernel<SH_DEGREE, false>, a, pc, sp.SH_COEFFS, sp.ACTIVATED,
                  sp.NORMALS);
}

}  // namespace

SPIRULA_EXPORT int projection_fwd(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    const bool compact = (L->flags & COMPACT::FLAG) != 0u;
    if (compact) {
        COMPACT::Args ac;  // the sh buffer as words
        if (int err = unpack(L, ac, pc, sp)) {
            return err;
        }
    }
    switch (sp.SH_DEGREE) {
        case 0: return launch_degree<0>(L, a, pc, sp, compact);
        case 1: return launch_degree<1>(L, a, pc, sp, compact);
        case 2: return launch_degree<2>(L, a, pc, sp, compact);
        case 3: return launch_degree<3>(L, a, pc, sp, compact);
        default: return static_cast<int>(cudaErrorInvalidValue);  // sh.glsl stops at degree 3
    }
}
