// SSIM constants (Wang et al. 2004; the 11x11 Gaussian window of sigma 1.5
// that 3DGS and gsplat use) and the tile geometry of loss_fwd / loss_bwd:
// the twin of shaders/include/ssim.glsl.
#ifndef SPIRULA_SSIM_CUH
#define SPIRULA_SSIM_CUH

#include "glsl.cuh"

namespace spirula {

constexpr int SSIM_RADIUS = 5;
constexpr int SSIM_TILE = 16;
constexpr int SSIM_HALO = SSIM_TILE + 2 * SSIM_RADIUS;     // 26: a tile and its window margins
constexpr float SSIM_C1 = 0.0001f;                        // (0.01 * 1)^2
constexpr float SSIM_C2 = 0.0009f;                        // (0.03 * 1)^2

// exp(-(k - 5)^2 / (2 * 1.5^2)), normalized to sum 1
__device__ __forceinline__ float ssim_w(int k) {
    switch (k) {
        case 0: case 10: return 0.0010283801f;
        case 1: case 9: return 0.0075987581f;
        case 2: case 8: return 0.0360007721f;
        case 3: case 7: return 0.1093606895f;
        case 4: case 6: return 0.2130055377f;
        default: return 0.2660117249f;
    }
}

// "valid" SSIM: only pixels whose whole window lies inside the image count
SPIRULA_FN bool ssim_valid(int px, int py, int W, int H) {
    return px >= SSIM_RADIUS && px < W - SSIM_RADIUS && py >= SSIM_RADIUS && py < H - SSIM_RADIUS;
}

// GLSL's unpackUnorm4x8(v)[ch]: byte ch of v over 255
SPIRULA_FN float unpack_unorm8(uint32_t v, int ch) {
    return float((v >> (8u * uint32_t(ch))) & 0xffu) / 255.0f;
}

}  // namespace spirula

#endif
