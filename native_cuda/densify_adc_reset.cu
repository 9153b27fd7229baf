// densify_adc_reset: the periodic opacity reset of adaptive density control:
// every opacity above `ceiling` drops to it, and the opacity's Adam moments
// restart at 0. Twin of shaders/densify_adc_reset.comp. One thread per splat
// i < n (folded).
// Contract: build/contracts/densify_adc_reset.h, generated from shaders/densify_adc_reset.comp.
#include "common/launch.cuh"
#include "densify_adc_reset.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
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
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_adc_reset_kernel, a.opacities, a.m_opacities, a.v_opacities, pc);
}
