// densify_mcmc_copy: give drawn sources' attributes to their new copies. New
// splats (APPEND) start with Adam moments at 0; relocated ones too with
// RESET_MOMENTS, else they keep their slot's moments (gsplat 1.5.3's relocate),
// except a slot whose splat had diverged (a non-finite opacity, mean, scale
// or rotation): its moments may be NaN too and would turn the copy NaN again.
// Twin of shaders/densify_mcmc_copy.comp.
//   APPEND = false (relocation): one thread per splat i < n; dead splat i
//     (dead_offsets[i + 1] > dead_offsets[i]) becomes a copy of draw
//     j = dead_offsets[i]'s source.
//   APPEND = true (growth): one thread per draw j < count; splat n + j
//     becomes a copy of draw j's source.
// Workgroup 256, folded.
//   binding 0-4   means [N,3], quats [N,4], scales [N,3], opacities [N], sh [N,K,3]  f32  read/write
//   binding 5-14  Adam moments m, v of the same                              f32  write
//   binding 15    dead_offsets [N]   u32  read   exclusive prefix sum of the dead flags
//   binding 16    totals       [..]  u32  read   dead count at dead_total_offset
//   binding 17    sample_src   [..]  u32  read
//   binding 18    weight_totals [..] f32  read   total sampling weight at weight_total_offset
//                                                 (0: nothing was drawn)
//   constant_id 0 APPEND, 1 SH_COEFFS, 2 RESET_MOMENTS
#include "common/finite.cuh"
#include "common/launch.cuh"
#include "common/moments.cuh"

namespace {

struct Push {
    uint32_t n;                  // splats before this step
    uint32_t count;              // APPEND: draws
    uint32_t dead_total_offset;  // relocation: where the dead count is in totals
    uint32_t weight_total_offset;
};

struct Args {
    float* means;
    float4* quats;
    float* scales;
    float* opacities;
    float* sh;
    spirula::Moments mo;
    const uint32_t* dead_offsets;
    const uint32_t* totals;
    const uint32_t* sample_src;
    const float* weight_totals;
};

__global__ void __launch_bounds__(256) densify_mcmc_copy_kernel(Args a, Push pc, bool append, uint32_t sh_coeffs,
                                                                     bool reset_moments) {
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
            return;                                   // alive
        }
        dst = t;
        src = a.sample_src[a.dead_offsets[t]];
    }
    if (!(a.weight_totals[pc.weight_total_offset] > 0.0f)) {
        return;
    }
    bool reset = append || reset_moments ||
                 !spirula::splat_finite(a.opacities[dst], a.means, a.scales, a.quats, dst);
    for (uint32_t k = 0u; k < 3u; ++k) {
        a.means[3u * dst + k] = a.means[3u * src + k];
        a.scales[3u * dst + k] = a.scales[3u * src + k];
    }
    a.quats[dst] = a.quats[src];
    a.opacities[dst] = a.opacities[src];
    for (uint32_t k = 0u; k < 3u * sh_coeffs; ++k) {
        a.sh[3u * sh_coeffs * dst + k] = a.sh[3u * sh_coeffs * src + k];
    }
    if (reset) {
        spirula::zero_moments(a.mo, dst, sh_coeffs);
    }
}

}  // namespace

SPIRULA_EXPORT int densify_mcmc_copy(const SpirulaLaunch* L) {
    using spirula::buffer;
    SPIRULA_CONTRACT(L, 19, 4, 3);
    Args a{buffer<float>(L, 0), buffer<float4>(L, 1), buffer<float>(L, 2), buffer<float>(L, 3),
           buffer<float>(L, 4), spirula::moments_at(L, 5), buffer<const uint32_t>(L, 15),
           buffer<const uint32_t>(L, 16), buffer<const uint32_t>(L, 17), buffer<const float>(L, 18)};
    return spirula::launch(L, dim3(256), densify_mcmc_copy_kernel, a, spirula::push_block<Push>(L),
                           L->spec[0] != 0u, L->spec[1], L->spec[2] != 0u);
}
