// SSIM constants (Wang et al. 2004; the 11x11 Gaussian window of sigma 1.5
// that 3DGS and gsplat use) and the tile geometry of loss_fwd / loss_bwd.
// Shared by the shaders and the CUDA kernels (dialect.glsl).
#ifndef SPIRULA_SSIM_GLSL
#define SPIRULA_SSIM_GLSL
#include "dialect.glsl"

const int SSIM_RADIUS = 5;
const int SSIM_TILE = 16;
const int SSIM_HALO = SSIM_TILE + 2 * SSIM_RADIUS;  // 26: a tile and its window margins
const float SSIM_C1 = 0.0001f;                      // (0.01 * 1)^2
const float SSIM_C2 = 0.0009f;                      // (0.03 * 1)^2

// exp(-(k - 5)^2 / (2 * 1.5^2)), normalized to sum 1: the window's weight k
// of 0..10, as ssim_w(k)
#define SSIM_WEIGHTS                                                                                         \
    0.0010283801f, 0.0075987581f, 0.0360007721f, 0.1093606895f, 0.2130055377f, 0.2660117249f, 0.2130055377f, \
        0.1093606895f, 0.0360007721f, 0.0075987581f, 0.0010283801f
#ifdef __CUDACC__
FN float ssim_w(int k) {
    constexpr float w[11] = {SSIM_WEIGHTS};
    return w[k];
}
#else
const float SSIM_W[11] = float[11](SSIM_WEIGHTS);
#define ssim_w(k) SSIM_W[k]
#endif

// SSIM of one window from its weighted moments (means mx, my; second moments
// sxx = E[x^2], syy, sxy = E[xy]), and in grads its partial derivatives with
// respect to mx, sxx and sxy (what loss_bwd carries back to the pixels of x).
FN float ssim_and_grads(float mx, float my, float sxx, float syy, float sxy, OUT(vec3) grads) {
    float a1 = 2.0f * mx * my + SSIM_C1;
    float a2 = 2.0f * (sxy - mx * my) + SSIM_C2;
    float b1 = mx * mx + my * my + SSIM_C1;
    float b2 = (sxx - mx * mx) + (syy - my * my) + SSIM_C2;
    float inv_b = 1.0f / (b1 * b2);
    float s = a1 * a2 * inv_b;
    // dS/dmu = s (2 my / a1 - 2 my / a2 - 2 mx / b1 + 2 mx / b2) with s / a1 and
    // s / a2 written out: a2 = 2 cov + C2 can round to exactly 0 (then 0 / 0)
    grads = vec3(2.0f * my * (a2 - a1) * inv_b + 2.0f * mx * s * (1.0f / b2 - 1.0f / b1), -s / b2, 2.0f * a1 * inv_b);
    return s;
}

// "valid" SSIM: only pixels whose whole window lies inside the image count
FN bool ssim_valid(int x, int y, int W, int H) {
    return x >= SSIM_RADIUS && x < W - SSIM_RADIUS && y >= SSIM_RADIUS && y < H - SSIM_RADIUS;
}

// The loss mask rides in the ground truth's alpha byte (RGBA8; the alpha of the
// image itself was composited away on the host): 255 keep, 0 drop. A dropped
// pixel counts in no term of the loss: its x and y enter the SSIM windows of
// its neighbours as 0 (as the zero padding outside the image), its own L1 and
// SSIM terms are not summed, and its colour gets gradient 0.
FN bool loss_keep(uint packed) { return (packed >> 24u) != 0u; }
#endif
