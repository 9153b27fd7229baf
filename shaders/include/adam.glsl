// Adam (Kingma & Ba), as torch.optim.Adam computes it:
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps),  bias_k = 1 - b_k^step
// Shared by the shaders and the CUDA kernels (dialect.glsl).
#ifndef SPIRULA_ADAM_GLSL
#define SPIRULA_ADAM_GLSL
#include "dialect.glsl"

// Updates (p, m, v) in place for one value; returns the new parameter.
FN float adam_update(float p, float g, INOUT(float) m, INOUT(float) v, float lr, float b1, float b2, float bias1,
                     float bias2, float eps) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    return p - lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps);
}
#endif
