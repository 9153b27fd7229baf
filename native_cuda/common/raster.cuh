// Per-pixel compositing rules shared by rasterize_fwd and rasterize_bwd: the
// twin of shaders/include/raster.glsl (docs/design.md §2.4).
#ifndef SPIRULA_RASTER_CUH
#define SPIRULA_RASTER_CUH

#include "glsl.cuh"

namespace spirula {

constexpr uint32_t TILE = 16u;
constexpr uint32_t TILE_PIXELS = TILE * TILE;
constexpr float MIN_ALPHA = 1.0f / 255.0f;
constexpr float MIN_TRANSMITTANCE = 1e-4f;

// sigma of a Gaussian at a pixel: d = mean2d - pixel centre, conic = (a, b, c)
SPIRULA_FN float gaussian_sigma(vec2 d, vec3 conic) {
    return 0.5f * (conic.x * d.x * d.x + conic.z * d.y * d.y) + conic.y * d.x * d.y;
}

}  // namespace spirula

#endif
