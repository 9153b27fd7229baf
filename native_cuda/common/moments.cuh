// The Adam moments of every splat attribute, as MCMC densification binds them:
// ten consecutive bindings m, v of means, quats, scales, opacities, sh.
#ifndef SPIRULA_MOMENTS_CUH
#define SPIRULA_MOMENTS_CUH

#include "launch.cuh"

namespace spirula {

struct Moments {
    float* m_means;
    float* v_means;
    float4* m_quats;
    float4* v_quats;
    float* m_scales;
    float* v_scales;
    float* m_opacities;
    float* v_opacities;
    float* m_sh;
    float* v_sh;
};

// The moments bound at bindings first .. first + 9.
inline Moments moments_at(const SpirulaLaunch* L, int first) {
    return Moments{buffer<float>(L, first),      buffer<float>(L, first + 1), buffer<float4>(L, first + 2),
                   buffer<float4>(L, first + 3), buffer<float>(L, first + 4), buffer<float>(L, first + 5),
                   buffer<float>(L, first + 6),  buffer<float>(L, first + 7), buffer<float>(L, first + 8),
                   buffer<float>(L, first + 9)};
}

// Splat i's optimizer state restarts at 0 (a moved or new splat).
__device__ __forceinline__ void zero_moments(const Moments& mo, uint32_t i, uint32_t sh_coeffs) {
    for (uint32_t k = 0u; k < 3u; ++k) {
        mo.m_means[3u * i + k] = 0.0f;
        mo.v_means[3u * i + k] = 0.0f;
        mo.m_scales[3u * i + k] = 0.0f;
        mo.v_scales[3u * i + k] = 0.0f;
    }
    mo.m_quats[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    mo.v_quats[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    mo.m_opacities[i] = 0.0f;
    mo.v_opacities[i] = 0.0f;
    for (uint32_t k = 0u; k < 3u * sh_coeffs; ++k) {
        mo.m_sh[3u * sh_coeffs * i + k] = 0.0f;
        mo.v_sh[3u * sh_coeffs * i + k] = 0.0f;
    }
}

}  // namespace spirula

#endif
