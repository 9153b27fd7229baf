// densify_mcmc_copy: give drawn sources' attributes to their new copies. New
// splats (APPEND) start with Adam moments at 0; relocated ones too with
// RESET_MOMENTS, else they keep their slot's moments (gsplat 1.5.3's relocate),
// except a slot whose splat had diverged (a non-finite opacity, mean, scale,
// rotation or SH coefficient): its moments may be NaN too and would turn the copy NaN again.
// Twin of shaders/densify_mcmc_copy.comp.
//   APPEND = false (relocation): one thread per splat i < n; dead splat i
//     (dead_offsets[i + 1] > dead_offsets[i]) becomes a copy of draw
//     j = dead_offsets[i]'s source.
//   APPEND = true (growth): one thread per draw j < count; splat n + j
//     becomes a copy of draw j's source.
// Folded.
// Contract: build/contracts/densify_mcmc_copy.h, generated from shaders/densify_mcmc_copy.comp.
#include "common/finite.cuh"
#include "common/launch.cuh"
#include "common/moments.cuh"
#include "densify_mcmc_copy.h"

namespace {

using namespace contract;

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_mcmc_copy_kernel(Args a, Push pc, bool append, uint32_t sh_coeffs, bool reset_moments, bool compact) {
    uint32_t t = spirula::global_index();
    uint32_t dst, src;
    if (append) {
        if (t >= pc.count) {
            return;
        }
        dst = pc.n + t;
        src = a.sample_src[t];
    } else {
        if (t >= pc.n) {
            return;
        }
        uint32_t next = t + 1u < pc.n ? a.dead_offsets[t + 1u] : a.totals[pc.dead_total_offset];
        if (next == a.dead_offsets[t]) {
            return;  // alive
        }
        dst = t;
        src = a.sample_src[a.dead_offsets[t]];
    }
    if (!(a.weight_totals[pc.weight_total_offset] > 0.0f)) {
        return;
    }
    bool reset = append || reset_moments ||
                 !spirula::splat_finite(a.opacities[dst], a.means, a.scales, a.quats, a.sh, sh_coeffs, dst, compact);
    for (uint32_t k = 0u; k < 3u; ++k) {
        a.means[3u * dst + k] = a.means[3u * src + k];
        a.scales[3u * dst + k] = a.scales[3u * src + k];
    }
    a.quats[dst] = a.quats[src];
    a.opacities[dst] = a.opacities[src];
    const uint32_t sh_words = spirula::sh_row_words(compact, sh_coeffs);  // whole words: a copy is a copy
    for (uint32_t k = 0u; k < sh_words; ++k) {
        a.sh[sh_words * dst + k] = a.sh[sh_words * src + k];
    }
    if (reset) {
        spirula::zero_moments(a, dst, sh_coeffs, compact);
    }
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_copy(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_mcmc_copy_kernel, a, pc, sp.APPEND, sp.SH_COEFFS, sp.RESET_MOMENTS,
                           sp.COMPACT_ROWS);
}
