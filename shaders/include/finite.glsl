// Whether a splat's opacity logit, mean, log-scale and rotation are all
// finite (a diverged splat is not): the MCMC kernels relocate such a splat
// and restart its optimizer state. CUDA: native_cuda/common/finite.cuh.
#ifndef SPIRULA_FINITE_GLSL
#define SPIRULA_FINITE_GLSL

bool finite1(float v) {
    return !isnan(v) && !isinf(v);
}
bool finite3(vec3 v) {
    return !any(isnan(v)) && !any(isinf(v));
}
bool finite4(vec4 v) {
    return !any(isnan(v)) && !any(isinf(v));
}

// A macro, as GLSL cannot pass buffers: the kernel declares float arrays
// opacities[], means[] ([N,3]), scales[] ([N,3]) and vec4 quats[].
#define splat_finite(i) (finite1(opacities[i]) && finite4(quats[i]) \
    && finite3(vec3(means[3u * (i)], means[3u * (i) + 1u], means[3u * (i) + 2u])) \
    && finite3(vec3(scales[3u * (i)], scales[3u * (i) + 1u], scales[3u * (i) + 2u])))

#endif
