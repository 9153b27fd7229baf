// Whether a splat's opacity logit, mean, log-scale, rotation and SH
// coefficients are all finite (a diverged splat is not): the MCMC kernels
// relocate such a splat and restart its optimizer state; ADC prunes it.
// Shared by the shaders and the CUDA kernels (dialect.glsl); splat_finite.glsl
// reads them from a kernel's buffers.
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

#endif
