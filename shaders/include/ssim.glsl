// SSIM constants (Wang et al. 2004; the 11x11 Gaussian window of sigma 1.5
// that 3DGS and gsplat use) and the tile geometry of loss_fwd / loss_bwd.
#ifndef SPIRULA_SSIM_GLSL
#define SPIRULA_SSIM_GLSL
const int SSIM_RADIUS = 5;
const int SSIM_TILE = 16;
const int SSIM_HALO = SSIM_TILE + 2 * SSIM_RADIUS;     // 26: a tile and its window margins
const float SSIM_C1 = 0.0001;                         // (0.01 * 1)^2
const float SSIM_C2 = 0.0009;                         // (0.03 * 1)^2
// exp(-(k - 5)^2 / (2 * 1.5^2)), normalized to sum 1
const float SSIM_W[11] = float[11](
    0.0010283801, 0.0075987581, 0.0360007721, 0.1093606895, 0.2130055377, 0.2660117249,
    0.2130055377, 0.1093606895, 0.0360007721, 0.0075987581, 0.0010283801);

// "valid" SSIM: only pixels whose whole window lies inside the image count
bool ssim_valid(ivec2 p, int W, int H) {
    return p.x >= SSIM_RADIUS && p.x < W - SSIM_RADIUS && p.y >= SSIM_RADIUS && p.y < H - SSIM_RADIUS;
}
#endif
