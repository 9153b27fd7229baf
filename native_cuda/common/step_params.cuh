// Per-step scalars of a training step, read from a storage buffer: the twin
// of shaders/include/step_params.glsl (std430, 128 bytes; spirula/train/
// step_params.py packs the same layout).
#ifndef SPIRULA_STEP_PARAMS_CUH
#define SPIRULA_STEP_PARAMS_CUH

#include <cstdint>

namespace spirula {

struct StepParams {
    uint32_t step;              // Adam step, 1-based
    uint32_t seed;              // random stream of this step
    uint32_t n_views;           // images in this step's batch (cameras of the render)
    uint32_t n_splats;          // splats alive
    uint32_t image_index[8];    // dataset image of each view (uvec4[2] in GLSL)
    float lr_means;
    float lr_quats;
    float lr_scales;
    float lr_opacities;
    float lr_sh0;
    float lr_shN;
    float bias1;                // 1 - beta1^step
    float bias2;                // 1 - beta2^step
    float beta1;
    float beta2;
    float adam_eps;
    float l1_weight;            // loss = l1_weight * L1 + ssim_weight * (1 - SSIM)
    float ssim_weight;
    float opacity_reg;          // + opacity_reg * mean(sigmoid(opacity))
    float scale_reg;            // + scale_reg * mean(exp(log_scale))
    float noise_scale;          // MCMC position noise: lr_means * noise_lr (0: none)
    float grad_norm_scale_x;    // ADC: dL/dmean2d x scale (W / 2 * views)
    float grad_norm_scale_y;
    float pad0;
    float pad1;
};
static_assert(sizeof(StepParams) == 128, "StepParams is 128 bytes (std430)");

// p.image_index[v >> 2][v & 3] in GLSL
__device__ __forceinline__ uint32_t view_image(const StepParams* p, uint32_t v) {
    return p->image_index[v];
}

}  // namespace spirula

#endif
