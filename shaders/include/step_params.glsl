// Per-step scalars of a training step. The host writes them into host-visible
// memory before each step and the step's first dispatch copies them to the
// GPU, so a recorded step sequence is replayed unchanged from step to step.
// The one definition: the shaders and the CUDA kernels include it
// (dialect.glsl), and spirula/train/step_params.py derives its numpy dtype
// from this struct (std430: 32-bit scalars and arrays of them).
#ifndef SPIRULA_STEP_PARAMS_GLSL
#define SPIRULA_STEP_PARAMS_GLSL
#include "dialect.glsl"

#define MAX_VIEWS 8
struct StepParams {
    uint step;                    // Adam step, 1-based
    uint seed;                    // random stream of this step
    uint n_views;                 // images in this step's batch (cameras of the render)
    uint n_splats;                // splats alive
    uint image_index[MAX_VIEWS];  // dataset image of each view
    float lr_means;
    float lr_quats;
    float lr_scales;
    float lr_opacities;
    float lr_sh0;
    float lr_shN;
    float bias1;  // 1 - beta1^step
    float bias2;  // 1 - beta2^step
    float beta1;
    float beta2;
    float adam_eps;
    float l1_weight;  // loss = l1_weight * L1 + ssim_weight * (1 - SSIM)
    float ssim_weight;
    float opacity_reg;        // + opacity_reg * mean(sigmoid(opacity))
    float scale_reg;          // + scale_reg * mean(exp(log_scale))
    float noise_scale;        // MCMC position noise: lr_means * noise_lr (0: none)
    float grad_norm_scale_x;  // ADC: dL/dmean2d x scale (W / 2 * views)
    float grad_norm_scale_y;
    // the loss's masked pixels (alpha byte 0 in the ground truth), summed over
    // the views: all of them, and those at "valid" SSIM positions (0: no mask)
    uint masked_pixels;
    uint masked_valid;
    float flatten_reg;  // + flatten_reg * mean(min_k exp(log_scale_k)): --geometry's flattening
    // The pipelined step loop (spirula/train/trainer.py) submits a step before the host
    // has read the previous one's intersection count. fpbo changes nothing when that
    // count, written here by the GPU at the end of every step (the host never writes
    // prev_isects: its copy of the struct stops before it), passed prev_capacity, the
    // capacity the previous step ran with; the host writes 0xFFFFFFFF when it already
    // knows the previous step was whole (synchronous steps, a step run again).
    uint prev_capacity;
    uint prev_isects;
};

// The dataset image of view v (a macro: the CUDA kernels pass *params, and no
// copy of the struct is made)
#define view_image(p, v) ((p).image_index[(v)])
#endif
