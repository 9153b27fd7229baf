// densify_mcmc_weights: MCMC densification, step 1: each splat's sampling
// weight (its opacity) and whether it is dead (opacity <= min_opacity, or any
// of its opacity, mean, scale, rotation or SH coefficients not finite). With
// ALIVE_ONLY, dead splats weigh 0. Twin of shaders/densify_mcmc_weights.comp.
// One thread per splat i < n (folded).
// Contract: build/contracts/densify_mcmc_weights.h, generated from shaders/densify_mcmc_weights.comp.
#include "common/finite.cuh"
#include "common/launch.cuh"
#include "densify_mcmc_weights.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_mcmc_weights_kernel(const float* opacities, float* weights, uint32_t* dead, const float* means,
                                const float* scales, const float4* quats, const float* sh, Push pc, bool alive_only,
                                uint32_t sh_coeffs, bool compact) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n) {
        return;
    }
    float logit = opacities[i];
    float o = 1.0f / (1.0f + expf(-logit));
    // a non-finite splat counts as dead (relocated, so repaired) and weighs 0:
    // one NaN weight would poison the whole prefix sum and stop all sampling
    bool bad = !spirula::splat_finite(logit, means, scales, quats, sh, sh_coeffs, i, compact);
    bool is_dead = bad || o <= pc.min_opacity;
    weights[i] = ((alive_only && is_dead) || bad) ? 0.0f : o;
    dead[i] = is_dead ? 1u : 0u;
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_weights(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_mcmc_weights_kernel, a.opacities, a.weights, a.dead, a.means,
                           a.scales, a.quats, a.sh, pc, sp.ALIVE_ONLY, sp.SH_COEFFS, sp.COMPACT_ROWS);
}
