// densify_mcmc_relocate: a splat drawn c times hands part of itself to c new
// copies. With n = min(c + 1, 51) splats sharing it, each gets
//     opacity' = 1 - (1 - opacity)^(1/n)
//     scale'   = scale * opacity / sum_{i=1..n} sum_{k=0..i-1} C(i-1, k) (-1)^k opacity'^(k+1) / sqrt(k+1)
// (MCMC paper, eq. 9; gsplat's compute_relocation), opacity' clamped to
// [min_opacity, 1 - 2^-23]. With RESET_SOURCE its Adam moments restart at 0.
// copies[i] is cleared for reuse. Twin of shaders/densify_mcmc_relocate.comp.
// One thread per splat i < n (folded).
// Contract: build/contracts/densify_mcmc_relocate.h, generated from shaders/densify_mcmc_relocate.comp.
#include "common/launch.cuh"
#include "common/moments.cuh"
#include "densify_mcmc_relocate.h"

namespace {

using namespace contract;
using spirula::Moments;

constexpr uint32_t MAX_SHARE = 51u;

__global__ void __launch_bounds__(LOCAL_THREADS)
    densify_mcmc_relocate_kernel(float* opacities, float* scales, uint32_t* copies, Moments mo, Push pc,
                                 bool reset_source, uint32_t sh_coeffs, bool compact) {
    uint32_t i = spirula::global_index();
    if (i >= pc.n || copies[i] == 0u) {
        return;
    }
    uint32_t n_share = min(copies[i] + 1u, MAX_SHARE);
    copies[i] = 0u;
    float o = 1.0f / (1.0f + expf(-opacities[i]));
    float o_new = 1.0f - powf(1.0f - o, 1.0f / float(n_share));
    float denom = 0.0f;
    for (uint32_t a = 1u; a <= n_share; ++a) {
        float binom = 1.0f;  // C(a - 1, k), updated along k
        for (uint32_t k = 0u; k < a; ++k) {
            float sign = (k & 1u) == 0u ? 1.0f : -1.0f;
            denom += binom * sign / sqrtf(float(k + 1u)) * powf(o_new, float(k + 1u));
            binom = binom * float(a - 1u - k) / float(k + 1u);
        }
    }
    float coeff = o / denom;
    o_new = fminf(fmaxf(o_new, pc.min_opacity), 1.0f - 1.1920929e-07f);
    opacities[i] = logf(o_new / (1.0f - o_new));
    for (uint32_t k = 0u; k < 3u; ++k) {
        scales[3u * i + k] += logf(coeff);
    }
    if (reset_source) {
        spirula::zero_moments(mo, i, sh_coeffs, compact);
    }
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_relocate(const SpirulaLaunch* L) {
    Args a;
    Push pc;
    Spec sp;
    if (int err = unpack(L, a, pc, sp)) {
        return err;
    }
    return spirula::launch(L, LOCAL_SIZE, densify_mcmc_relocate_kernel, a.opacities, a.scales, a.copies,
                           spirula::moments_of(a), pc, sp.RESET_SOURCE, sp.SH_COEFFS, sp.COMPACT_ROWS);
}
