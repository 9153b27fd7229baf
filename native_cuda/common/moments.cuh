// The Adam moments of every splat attribute, as MCMC densification binds them:
// bindings m_means, v_means, ..., m_sh, v_sh (named as in the shaders).
#ifndef SPIRULA_MOMENTS_CUH
#define SPIRULA_MOMENTS_CUH

#include "launch.cuh"
#include "storage.cuh"

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

// The moments of a generated Args struct (its fields m_means .. v_sh).
template <class Args>
inline Moments moments_of(const Args& a) {
    return Moments{a.m_means,  a.v_means,     a.m_quats,     a.v_quats, a.m_scales,
                   a.v_scales, a.m_opacities, a.v_opacities, a.m_sh,    a.v_sh};
}

// Splat i's optimizer state restarts at 0 (a moved or new splat); `mo` is a
// Moments or an Args struct with the same fields; `compact`: m_sh, v_sh and
// the moments of means, quats and scales hold the rows of storage.glsl.
template <class M>
__device__ __forceinline__ void zero_moments(const M& mo, uint32_t i, uint32_t sh_coeffs, bool compact) {
    const uint32_t w3 = geom_moment_words(compact, 3u);  // compact: bf16 rows of 2 words
    for (uint32_t k = 0u; k < w3; ++k) {
        mo.m_means[w3 * i + k] = 0.0f;
        mo.v_means[w3 * i + k] = 0.0f;
        mo.m_scales[w3 * i + k] = 0.0f;
        mo.v_scales[w3 * i + k] = 0.0f;
    }
    if (compact) {
        for (uint32_t k = 0u; k < 2u; ++k) {
            reinterpret_cast<float*>(mo.m_quats)[2u * i + k] = 0.0f;
            reinterpret_cast<float*>(mo.v_quats)[2u * i + k] = 0.0f;
        }
    } else {
        mo.m_quats[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        mo.v_quats[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    mo.m_opacities[i] = 0.0f;
    mo.v_opacities[i] = 0.0f;
    const uint32_t words = moment_row_words(compact, sh_coeffs);
    for (uint32_t k = 0u; k < words; ++k) {
        mo.m_sh[words * i + k] = 0.0f;
        mo.v_sh[words * i + k] = 0.0f;
    }
}

}  // namespace spirula

#endif
