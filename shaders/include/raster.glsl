// Per-pixel compositing rules shared by rasterize_fwd and rasterize_bwd
// (docs/design.md §2.4): front to back, alpha = min(max_alpha, o * exp(-sigma)),
// skip sigma < 0 or alpha < 1/255, stop before blending when T(1 - alpha) <= 1e-4.
// max_alpha is a push constant: 0.99 (Inria, gsplat main) by default,
// 0.999 in gsplat 1.5.3.
#ifndef SPIRULA_RASTER_GLSL
#define SPIRULA_RASTER_GLSL
const uint TILE = 16u;
const uint TILE_PIXELS = TILE * TILE;
const float MIN_ALPHA = 1.0 / 255.0;
const float MIN_TRANSMITTANCE = 1e-4;

// sigma of a Gaussian at a pixel: d = mean2d - pixel centre, conic = (a, b, c)
float gaussian_sigma(vec2 d, vec3 conic) {
    return 0.5 * (conic.x * d.x * d.x + conic.z * d.y * d.y) + conic.y * d.x * d.y;
}
#endif
