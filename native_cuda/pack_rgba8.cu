// pack_rgba8: a float RGB image packed into RGBA8 words (the viewers' frame).
// Twin of shaders/pack_rgba8.comp: each channel clamped to [0, 1] (NaN -> 0),
// times 255 (__fmul_rn: one IEEE multiply, never contracted), rounded to
// nearest even (rintf), alpha 255; word i = r | g << 8 | b << 16 | 255 << 24.
// One thread per pixel, grid-stride loop.
// Contract: build/contracts/pack_rgba8.h, generated from shaders/pack_rgba8.comp.
#include "common/launch.cuh"
#include "pack_rgba8.h"

namespace {

using namespace contract;

__device__ __forceinline__ uint32_t channel8(float x) {
    float c = x > 0.0f ? fminf(x, 1.0f) : 0.0f;
    return static_cast<uint32_t>(rintf(__fmul_rn(c, 255.0f)));
}

__global__ void __launch_bounds__(LOCAL_THREADS) pack_rgba8_kernel(const float* rgb, uint32_t* packed, Push pc) {
    for (uint32_t i = spirula::global_index(); i < pc.count; i += spirula::grid_stride()) {
        const float* p = rgb + 3u * (pc.src_offset + i);
        packed[i] = channel8(p[0]) | (channel8(p[1]) << 8) | (channel8(p[2]) << 16) | 0xFF000000u;
    }
}

}  // namespace

SPIRULA_EXPORT int pack_rgba8(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, pack_rgba8_kernel, a.rgb, a.packed, pc);
}
