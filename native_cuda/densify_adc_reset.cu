// densify_adc_reset: the periodic opacity reset of adaptive density control:
// every opacity above `ceiling` drops to it, and the opacity's Adam moments
// restart at 0. Twin of shaders/densify_adc_reset.comp. One thread per splat
// i < n (workgroup 256, folded).
//   binding 0  opacities    [N]  f32  read/write  logit
//   binding 1  m_opacities  [N]  f32  write
//   binding 2  v_opacities  [N]  f32  write
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t n;
    float ceiling_logit;
};

__global__ void __launch_bounds__(256)
densify_adc_reset_kernel(float* opacities, float* m_opacities, float* v_opacities, Push pc) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n) {
        return;
    }
    opacities[i] = fminf(opacities[i], pc.ceiling_logit);
    m_opacities[i] = 0.0f;
    v_opacities[i] = 0.0f;
}

}  // namespace

SPIRULA_EXPORT int densify_adc_reset(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 3, 2, 0);
    return spirula::launch(L, dim3(256), densify_adc_reset_kernel, spirula::buffer<float>(L, 0),
                           spirula::buffer<float>(L, 1), spirula::buffer<float>(L, 2), spirula::push_block<Push>(L));
}
