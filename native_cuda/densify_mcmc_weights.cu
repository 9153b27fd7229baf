// densify_mcmc_weights: MCMC densification, step 1: each splat's sampling
// weight (its opacity) and whether it is dead (opacity <= min_opacity, or any
// of its opacity, mean, scale or rotation not finite). With ALIVE_ONLY, dead
// splats weigh 0. Twin of shaders/densify_mcmc_weights.comp.
// One thread per splat i < n (workgroup 256, folded).
//   binding 0  opacities  [N]  f32  read   logits
//   binding 1  weights    [N]  f32  write  opacity (0 for dead when ALIVE_ONLY)
//   binding 2  dead       [N]  u32  write  1 if dead (scanned in place afterwards)
//   binding 3  means      [N,3] f32  read
//   binding 4  scales     [N,3] f32  read   log
//   binding 5  quats      [N,4] f32  read
//   constant_id 0 ALIVE_ONLY
#include "common/finite.cuh"
#include "common/launch.cuh"

namespace {

struct Push {
    uint32_t n;
    float min_opacity;
};

__global__ void __launch_bounds__(256)
densify_mcmc_weights_kernel(const float* opacities, float* weights, uint32_t* dead, const float* means,
                            const float* scales, const float4* quats, Push pc, bool alive_only) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n) {
        return;
    }
    float logit = opacities[i];
    float o = 1.0f / (1.0f + expf(-logit));
    // a non-finite splat counts as dead (relocated, so repaired) and weighs 0:
    // one NaN weight would poison the whole prefix sum and stop all sampling
    bool bad = !spirula::splat_finite(logit, means, scales, quats, i);
    bool is_dead = bad || o <= pc.min_opacity;
    weights[i] = ((alive_only && is_dead) || bad) ? 0.0f : o;
    dead[i] = is_dead ? 1u : 0u;
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_weights(const SpirulaLaunch* L) {
    SPIRULA_CONTRACT(L, 6, 2, 1);
    return spirula::launch(L, dim3(256), densify_mcmc_weights_kernel, spirula::buffer<const float>(L, 0),
                           spirula::buffer<float>(L, 1), spirula::buffer<uint32_t>(L, 2),
                           spirula::buffer<const float>(L, 3), spirula::buffer<const float>(L, 4),
                           spirula::buffer<const float4>(L, 5), spirula::push_block<Push>(L), L->spec[0] != 0u);
}
