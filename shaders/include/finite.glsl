// Whether a splat's opacity logit, mean, log-scale, rotation and SH
// coefficients are all finite (a diverged splat is not): the MCMC kernels
// relocate such a splat and restart its optimizer state; ADC prunes it.
// Shared by the shaders and the CUDA kernels (dialect.glsl); each backend
// loads the values its own way (splat_finite).
//
// Tested on the bits, not with isnan/isinf: without float controls
// (SignedZeroInfNanPreserve) Vulkan lets a compiler assume that no value is
// NaN or Inf and fold isnan(v) to false. A float is finite iff its exponent
// bits are not all ones; integer maths on them means the same on every driver.
#ifndef SPIRULA_FINITE_GLSL
#define SPIRULA_FINITE_GLSL
#include "dialect.glsl"
#include "storage.glsl"

FN bool finite1(float v) { return (floatBitsToUint(v) & 0x7f800000u) != 0x7f800000u; }
FN bool finite2(vec2 v) { return finite1(v.x) && finite1(v.y); }
FN bool finite3(vec3 v) { return finite1(v.x) && finite1(v.y) && finite1(v.z); }
FN bool finite4(vec4 v) { return finite1(v.x) && finite1(v.y) && finite1(v.z) && finite1(v.w); }
FN bool splat_values_finite(float logit, vec4 quat, vec3 mean, vec3 log_scale) {
    return finite1(logit) && finite4(quat) && finite3(mean) && finite3(log_scale);
}

#if !defined(__CUDACC__) && defined(SPIRULA_SPLAT_BUFFERS)
// GLSL cannot pass buffers: a kernel defines SPIRULA_SPLAT_BUFFERS and
// includes this file after declaring the float arrays opacities[], means[]
// ([N,3]), scales[] ([N,3]), sh[] ([N,SH_COEFFS,3], or COMPACT rows of
// storage.glsl), vec4 quats[] and the constants SH_COEFFS and COMPACT_ROWS.
// (CUDA: finite.cuh.)
FN bool splat_finite(uint i) {
    bool ok = splat_values_finite(opacities[i], quats[i], vec3(means[3u * i], means[3u * i + 1u], means[3u * i + 2u]),
                                  vec3(scales[3u * i], scales[3u * i + 1u], scales[3u * i + 2u]));
    uint base = i * sh_row_words(COMPACT_ROWS, SH_COEFFS);
    for (uint k = 0u; k < 3u * SH_COEFFS; ++k) {
        ok = ok && (COMPACT_ROWS ? sh_compact_finite(floatBitsToUint(sh[base + sh_compact_word(k)]), k)
                                 : finite1(sh[base + k]));
    }
    return ok;
}
#endif

#endif
