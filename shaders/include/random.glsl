// Counter-based random numbers: a pure function of (seed, index, stream), so
// a training run is reproducible and --resume continues the same streams.
#ifndef SPIRULA_RANDOM_GLSL
#define SPIRULA_RANDOM_GLSL
uint pcg_hash(uint v) {          // PCG-RXS-M-XS (Jarzynski & Olano 2020)
    uint state = v * 747796405u + 2891336453u;
    uint word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

// uniform in (0, 1]
float random_uniform(uint seed, uint index, uint stream) {
    uint h = pcg_hash(seed ^ pcg_hash(index * 8u + stream));
    return (float(h >> 8u) + 1.0) * (1.0 / 16777216.0);
}

// two independent standard normals (Box-Muller)
vec2 random_normal2(uint seed, uint index, uint stream) {
    float u1 = random_uniform(seed, index, stream);
    float u2 = random_uniform(seed, index, stream + 1u);
    float r = sqrt(-2.0 * log(u1));
    float t = 6.283185307179586 * u2;
    return r * vec2(cos(t), sin(t));
}
#endif
