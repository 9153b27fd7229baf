// densify_adc_classify: adaptive density control (Kerbl et al. 2023, as
// gsplat's DefaultStrategy), step 1: what becomes of each splat and how many
// splats it leaves. A splat whose mean screen-space gradient exceeds
// grow_grad2d is cloned when small (largest scale <= grow_scale3d) and split
// in two when large; then every resulting splat with opacity < min_opacity,
// or (prune_big) larger than prune_scale3d, is pruned, and so is a diverged
// splat (any parameter not finite, finite.glsl), whatever its gradient.
// Twin of shaders/densify_adc_classify.comp. One thread per splat i < n
// (folded).
// Contract: build/contracts/densify_adc_classify.h, generated from shaders/densify_adc_classify.comp.
#include "common/finite.cuh"
#include "common/launch.cuh"
#include "densify_adc_classify.h"

namespace {

using namespace contract;

constexpr float SPLIT_SHRINK = 1.6f;

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_adc_classify_kernel(const float* scales, const float* opacities, const float* grad2d_sum,
                                const uint32_t* vis_count, uint32_t* actions, uint32_t* out_counts, const float* means,
                                const float4* quats, const float* sh, Push pc, uint32_t sh_coeffs, bool compact) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n) {
        return;
    }
    float largest = expf(fmaxf(scales[3u * i], fmaxf(scales[3u * i + 1u], scales[3u * i + 2u])));
    float o = 1.0f / (1.0f + expf(-opacities[i]));
    float grad = grad2d_sum[i] / float(max(vis_count[i], 1u));
    bool high = pc.grow != 0u && grad > pc.grow_grad2d;
    bool small = largest <= pc.grow_scale3d;
    uint32_t action = high ? (small ? 1u : 2u) : 0u;
    float child = action == 2u ? largest / SPLIT_SHRINK : largest;
    bool prune = o < pc.min_opacity || (pc.prune_big != 0u && child > pc.prune_scale3d) ||
                 !spirula::splat_finite(opacities[i], means, scales, quats, sh, sh_coeffs, i, compact);
    actions[i] = action;
    out_counts[i] = prune ? 0u : (action == 0u ? 1u : 2u);
}

}  // namespace

SPIRULA_EXPORT int densify_adc_classify(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_adc_classify_kernel, a.scales, a.opacities, a.grad2d_sum, a.vis_count,
                           a.actions, a.out_counts, a.means, a.quats, a.sh, pc, sp.SH_COEFFS, sp.COMPACT_ROWS);
}
