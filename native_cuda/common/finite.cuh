// Whether a splat is finite: shaders/include/finite.glsl, compiled for CUDA
// (dialect.glsl), and the CUDA way of loading the values it checks.
#ifndef SPIRULA_FINITE_CUH
#define SPIRULA_FINITE_CUH

#include "glsl.cuh"
#include "random.cuh"

namespace spirula {
#include "finite.glsl"

// splat i of means [N,3], log-scales [N,3], quats [N] and sh [N,K,3] (compact:
// the rows of storage.glsl) (GLSL: splat_finite in finite.glsl)
__device__ __forceinline__ bool splat_finite(float logit, const float* means, const float* scales, const float4* quats,
                                             const float* sh, uint32_t sh_coeffs, uint32_t i, bool compact) {
    float4 q = quats[i];
    bool ok = splat_values_finite(logit, vec4(q.x, q.y, q.z, q.w),
                                  vec3(means[3u * i], means[3u * i + 1u], means[3u * i + 2u]),
                                  vec3(scales[3u * i], scales[3u * i + 1u], scales[3u * i + 2u]));
    uint32_t base = i * sh_row_words(compact, sh_coeffs);
    for (uint32_t k = 0u; k < 3u * sh_coeffs; ++k) {
        ok = ok &&
             (compact ? sh_compact_finite(floatBitsToUint(sh[base + sh_compact_word(k)]), k) : finite1(sh[base + k]));
    }
    return ok;
}
}  // namespace spirula

#endif
