// Adam (Kingma & Ba), as torch.optim.Adam computes it: the twin of
// shaders/include/adam.glsl (same order of operations).
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / bias1 * m / (sqrt(v) / sqrt(bias2) + eps),  bias_k = 1 - b_k^step
#ifndef SPIRULA_ADAM_CUH
#define SPIRULA_ADAM_CUH

#include "glsl.cuh"

namespace spirula {

// Updates (p, m, v) in place for one value; returns the new parameter.
SPIRULA_FN float adam_update(float p, float g, float& m, float& v, float lr, float b1, float b2, float bias1,
                             float bias2, float eps) {
    m = b1 * m + (1.0f - b1) * g;
    v = b2 * v + (1.0f - b2) * g * g;
    return p - lr / bias1 * m / (sqrtf(v) / sqrtf(bias2) + eps);
}

}  // namespace spirula

#endif
