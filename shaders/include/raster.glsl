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

// Tile culling (docs/design.md §2.4, "Which tiles a Gaussian touches"). A pixel
// draws a Gaussian only where sigma(d) <= ln(o / MIN_ALPHA) (alpha >= 1/255).
// Inside its box (tile_rect), a tile row gets the tiles whose pixel-centre
// rectangle [16 t + 0.5, 16 t + 15.5] meets that ellipse, from the ellipse's
// exact x-range over the row's pixel-centre strip. Two margins absorb float32
// rounding in the rasterizer and here (proof in the design doc):
// CULL_FORM_MARGIN shrinks the conic's diagonal by 2 eta (the ellipse grows),
// CULL_SIGMA_MARGIN raises the threshold. Used alike by projection_fwd (count)
// and intersect_tile_write (write), so the two agree exactly.
const float CULL_FORM_MARGIN = 1.0f / 4096.0f;
const float CULL_SIGMA_MARGIN = 1.0f / 1024.0f;

// The tested ellipse 0.5 a x^2 + b x y + 0.5 c y^2 <= t of a Gaussian of conic
// (a, b, c) and opacity o, as (a, b, c, t), margins included
FN vec4 cull_ellipse(vec3 conic, float opacity) {
    PRECISE float t = log(opacity / MIN_ALPHA) + CULL_SIGMA_MARGIN;
    return vec4(conic.x * (1.0f - 2.0f * CULL_FORM_MARGIN), conic.y, conic.z * (1.0f - 2.0f * CULL_FORM_MARGIN), t);
}

// The tiles [x0, x1) of tile row ty (inside [box_x0, box_x1), integers held in
// floats) whose pixel-centre rectangles the ellipse e (cull_ellipse) centred
// at mean2d meets. x0 == x1 when none does; the whole box row when e is not
// positive definite (its region is then unbounded). PRECISE: projection_fwd
// and intersect_tile_write get the same bits from the same inputs.
FN void cull_row(vec2 mean2d, vec4 e, float ty, float box_x0, float box_x1, OUT(float) x0, OUT(float) x1) {
    float a = e.x, b = e.y, c = e.z, t = e.w;
    PRECISE float det = a * c - b * b;
    x0 = box_x0;
    x1 = box_x1;
    if (!(det > 0.0f && a > 0.0f && t > 0.0f)) {
        return;
    }
    // the ellipse spans |y| <= sqrt(2 t a / det); its rightmost point is at
    // (x_r, -b x_r / c), x_r = sqrt(2 t c / det), its leftmost at minus that
    PRECISE float y_ext = sqrt(2.0f * t * a / det);
    PRECISE float lo = max(ty * 16.0f + 0.5f - mean2d.y, -y_ext);
    PRECISE float hi = min(ty * 16.0f + 15.5f - mean2d.y, y_ext);
    if (!(lo <= hi)) {
        x1 = x0;
        return;
    }
    // right boundary (-b y + sqrt(2 a t - det y^2)) / a is concave in y, so its
    // maximum over [lo, hi] is at the clamped tangent point; the left one mirrors it
    PRECISE float y_tan = -b * sqrt(2.0f * t * c / det) / c;
    PRECISE float yr = clamp(y_tan, lo, hi);
    PRECISE float yl = clamp(-y_tan, lo, hi);
    PRECISE float xr = (-b * yr + sqrt(max(2.0f * a * t - det * yr * yr, 0.0f))) / a + mean2d.x;
    PRECISE float xl = (-b * yl - sqrt(max(2.0f * a * t - det * yl * yl, 0.0f))) / a + mean2d.x;
    // tile tx's pixel centres span [16 tx + 0.5, 16 tx + 15.5]
    x0 = clamp(ceil((xl - 15.5f) / 16.0f), box_x0, box_x1);
    x1 = clamp(floor((xr - 0.5f) / 16.0f) + 1.0f, x0, box_x1);
}

// The number of tiles of the box [tile_min, tile_max) that cull_row keeps
FN float cull_count(vec2 mean2d, vec4 e, vec2 tile_min, vec2 tile_max) {
    float count = 0.0f;
    for (float ty = tile_min.y; ty < tile_max.y; ty += 1.0f) {
        float x0, x1;
        cull_row(mean2d, e, ty, tile_min.x, tile_max.x, x0, x1);
        count += x1 - x0;
    }
    return count;
}

// The k-th tile (row by row, k < cull_count) that cull_row keeps, as (tx, ty)
FN vec2 cull_nth(vec2 mean2d, vec4 e, vec2 tile_min, vec2 tile_max, float k) {
    float ty = tile_min.y, x0 = tile_min.x, x1 = tile_min.x;
    for (; ty < tile_max.y; ty += 1.0f) {
        cull_row(mean2d, e, ty, tile_min.x, tile_max.x, x0, x1);
        if (k < x1 - x0) {
            break;
        }
        k -= x1 - x0;
    }
    // clamped into the box: a valid tile key even if k >= cull_count
    return vec2(min(x0 + k, max(x1, tile_min.x + 1.0f) - 1.0f), min(ty, tile_max.y - 1.0f));
}
// Tile-list splitting (docs/design.md §2.4, "Chunks of a tile list"). rasterize_bwd walks a
// tile's list in chunks of `chunk` entries (a multiple of TILE_PIXELS), one workgroup each; a
// chunk that ends before the tile's last blended entry starts from the state rasterize_fwd left
// at that boundary b = start + k chunk (k >= 1): per pixel, T before entry b and the sums of
// the entries blended behind it. Slot b / chunk (injective: boundaries are >= chunk apart),
// channel-major: word (slot * channels + ch) * TILE_PIXELS + pixel. The channels: T, the colour
// behind (3), the depth behind (sum w z), with the rasterizer's normals the normal behind (3),
// and with its geometry (last channel) the distortion's G behind (chunk_distortion_behind).
const uint CHUNK_T = 0u;
const uint CHUNK_COLOR = 1u;
const uint CHUNK_DEPTH = 4u;
const uint CHUNK_NORMAL = 5u;
const uint CHUNK_BASE_CHANNELS = 5u;
const uint CHUNK_NONE = 0xFFFFFFFFu;  // a chunk_table entry no chunk has (rasterize_chunks)

FN uint chunk_word(uint slot, uint channels, uint ch, uint pixel) {
    return (slot * channels + ch) * TILE_PIXELS + pixel;
}

// G behind a boundary: sum over the entries i behind it (the suffix S) of w_i dL_d/dw_i,
// dL_d/dw_i = 2 sum_j w_j |z_i - z_j|, from the prefix P's and the whole list's sums.
// L = sum_ij w_i w_j |z_i - z_j| = L_P + L_S + 2 X with X = D_S A_P - A_S D_P (sorted z), so
// G = 2 (L_S + X) = 2 (L - L_P - X); A_P = 1 - T_b, A_S = T_b - T_final, D the sums of w z.
FN float chunk_distortion_behind(float T_b, float T_final, float D_P, float D_final, float L_P, float L_final) {
    float X = (D_final - D_P) * (1.0f - T_b) - (T_b - T_final) * D_P;
    return 2.0f * (L_final - L_P - X);
}
#endif
