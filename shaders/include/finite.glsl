// Whether a splat's opacity logit, mean, log-scale and rotation are all
// finite (a diverged splat is not): the MCMC kernels relocate such a splat
// and restart its optimizer state. Shared by the shaders and the CUDA kernels
// (dialect.glsl); each backend loads the values its own way (splat_finite).
#ifndef SPIRULA_FINITE_GLSL
#define SPIRULA_FINITE_GLSL
#include "dialect.glsl"

FN bool finite1(float v) { return !isnan(v) && !isinf(v); }
FN bool finite3(vec3 v) { return finite1(v.x) && finite1(v.y) && finite1(v.z); }
FN bool finite4(vec4 v) { return finite1(v.x) && finite1(v.y) && finite1(v.z) && finite1(v.w); }
FN bool splat_values_finite(float logit, vec4 quat, vec3 mean, vec3 log_scale) {
    return finite1(logit) && finite4(quat) && finite3(mean) && finite3(log_scale);
}

#ifndef __CUDACC__
// A macro, as GLSL cannot pass buffers: the kernel declares float arrays
// opacities[], means[] ([N,3]), scales[] ([N,3]) and vec4 quats[].
#define splat_finite(i)                                                                                            \
    splat_values_finite(opacities[i], quats[i], vec3(means[3u * (i)], means[3u * (i) + 1u], means[3u * (i) + 2u]), \
                        vec3(scales[3u * (i)], scales[3u * (i) + 1u], scales[3u * (i) + 2u]))
#endif

#endif
