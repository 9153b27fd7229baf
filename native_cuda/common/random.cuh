// Counter-based random numbers: the twin of shaders/include/random.glsl.
// pcg_hash and random_uniform are integer hashing plus exact float steps, so
// both backends draw bit-identical uniforms (and make the same sampling
// decisions); random_normal2's log/cos/sin may differ in the last ulp.
#ifndef SPIRULA_RANDOM_CUH
#define SPIRULA_RANDOM_CUH

#include "glsl.cuh"

namespace spirula {

SPIRULA_FN uint32_t pcg_hash(uint32_t v) {          // PCG-RXS-M-XS (Jarzynski & Olano 2020)
    uint32_t state = v * 747796405u + 2891336453u;
    uint32_t word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// uniform in (0, 1]: (h >> 8) + 1 is an integer below 2^24 + 1, exact in
// float, and the scale is a power of two, so the value is exact
SPIRULA_FN float random_uniform(uint32_t seed, uint32_t index, uint32_t stream) {
    uint32_t h = pcg_hash(seed ^ pcg_hash(index * 8u + stream));
    return (float(h >> 8u) + 1.0f) * (1.0f / 16777216.0f);
}

// two independent standard normals (Box-Muller)
SPIRULA_FN vec2 random_normal2(uint32_t seed, uint32_t index, uint32_t stream) {
    float u1 = random_uniform(seed, index, stream);
    float u2 = random_uniform(seed, index, stream + 1u);
    float r = sqrtf(-2.0f * logf(u1));
    float t = 6.283185307179586f * u2;
    return r * make2(cosf(t), sinf(t));
}

}  // namespace spirula

#endif
