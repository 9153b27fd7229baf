// Whether a splat's opacity logit, mean, log-scale and rotation are all
// finite (a diverged splat is not): the MCMC kernels relocate such a splat
// and restart its optimizer state. GLSL: shaders/include/finite.glsl.
#ifndef SPIRULA_FINITE_CUH
#define SPIRULA_FINITE_CUH

#include <cstdint>

namespace spirula {

__device__ __forceinline__ bool splat_finite(float logit, const float* means, const float* scales,
                                             const float4* quats, uint32_t i) {
    float4 q = quats[i];
    bool ok = isfinite(logit) && isfinite(q.x) && isfinite(q.y) && isfinite(q.z) && isfinite(q.w);
    for (uint32_t k = 0u; k < 3u; ++k) {
        ok = ok && isfinite(means[3u * i + k]) && isfinite(scales[3u * i + k]);
    }
    return ok;
}

}  // namespace spirula

#endif
