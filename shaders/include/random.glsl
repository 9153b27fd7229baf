// Counter-based random numbers: a pure function of (seed, index, stream), so
// a training run is reproducible and --resume continues the same streams.
// Shared by the shaders and the CUDA kernels (dialect.glsl): pcg_hash and
// random_uniform are integer hashing plus exact float steps, so both backends
// draw bit-identical uniforms (and make the same sampling decisions);
// random_normal2's log/cos/sin may differ in the last ulp.
#ifndef SPIRULA_RANDOM_GLSL
#define SPIRULA_RANDOM_GLSL
#include "dialect.glsl"

FN uint pcg_hash(uint v) {  // PCG-RXS-M-XS (Jarzynski & Olano 2020)
    uint state = v * 747796405u + 2891336453u;
    uint word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// uniform in (0, 1]: (h >> 8) + 1 is an integer below 2^24 + 1, exact in
// float, and the scale is a power of two, so the value is exact
FN float random_uniform(uint seed, uint index, uint stream) {
    uint h = pcg_hash(seed ^ pcg_hash(index * 8u + stream));
    return (float(h >> 8u) + 1.0f) * (1.0f / 16777216.0f);
}

// two independent standard normals (Box-Muller)
FN vec2 random_normal2(uint seed, uint index, uint stream) {
    float u1 = random_uniform(seed, index, stream);
    float u2 = random_uniform(seed, index, stream + 1u);
    float r = sqrt(-2.0f * log(u1));
    float t = 6.283185307179586f * u2;
    return r * vec2(cos(t), sin(t));
}
#endif
