// Per-pixel compositing rules shared by rasterize_fwd and rasterize_bwd
// (docs/design.md §2.4): front to back, alpha = min(max_alpha, o * exp(-sigma)),
// skip sigma < 0 or alpha < 1/255, stop before blending when T(1 - alpha) <= 1e-4.
// max_alpha is a push constant: 0.99 (Inria, gsplat main) by default,
// 0.999 in gsplat 1.5.3. Shared by the shaders and the CUDA kernels
// (dialect.glsl).
#ifndef SPIRULA_RASTER_GLSL
#define SPIRULA_RASTER_GLSL
#include "dialect.glsl"

const uint TILE = 16u;
const uint TILE_PIXELS = TILE * TILE;
const float MIN_ALPHA = 1.0f / 255.0f;
const float MIN_TRANSMITTANCE = 1e-4f;

// sigma of a Gaussian at a pixel: d = mean2d - pixel centre, conic = (a, b, c)
FN float gaussian_sigma(vec2 d, vec3 conic) {
    return 0.5f * (conic.x * d.x * d.x + conic.z * d.y * d.y) + conic.y * d.x * d.y;
}

// The tiles that a screen rectangle (centre mean2d, half-size radius) covers:
// [tile_min, tile_max) in tile units, clamped to the grid of tiles
FN void tile_rect(vec2 mean2d, vec2 radius, vec2 grid, OUT(vec2) tile_min, OUT(vec2) tile_max) {
    tile_min = clamp(floor(mean2d / 16.0f - radius / 16.0f), vec2(0.0f), grid);
    tile_max = clamp(ceil(mean2d / 16.0f + radius / 16.0f), vec2(0.0f), grid);
}
#endif
