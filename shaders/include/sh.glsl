// Real spherical harmonics up to degree 3 (Sloan, "Efficient Spherical
// Harmonic Evaluation", JCGT 2013), in gsplat's basis order and signs.
// dir is a unit vector; basis k multiplies coefficient sh[k] (an RGB triple).
// Shared by the shaders and the CUDA kernels (dialect.glsl).
#ifndef SPIRULA_SH_GLSL
#define SPIRULA_SH_GLSL
#include "dialect.glsl"

const float SH_C0 = 0.2820947917738781f;
const float SH_C1 = 0.48860251190292f;

// basis[0..15]; entries past (degree+1)^2 are left unset.
FN void sh_basis(int degree, vec3 dir, OUT_ARRAY(float) basis[16]) {
    basis[0] = SH_C0;
    if (degree < 1) return;
    float x = dir.x, y = dir.y, z = dir.z;
    basis[1] = -SH_C1 * y;
    basis[2] = SH_C1 * z;
    basis[3] = -SH_C1 * x;
    if (degree < 2) return;
    float z2 = z * z;
    float tB = -1.092548430592079f * z;
    float tA = 0.5462742152960395f;
    float c1 = x * x - y * y;
    float s1 = 2.0f * x * y;
    basis[4] = tA * s1;
    basis[5] = tB * y;
    basis[6] = 0.9461746957575601f * z2 - 0.3153915652525201f;
    basis[7] = tB * x;
    basis[8] = tA * c1;
    if (degree < 3) return;
    float tC = -2.285228997322329f * z2 + 0.4570457994644658f;
    float tB3 = 1.445305721320277f * z;
    float tA3 = -0.5900435899266435f;
    float c2 = x * c1 - y * s1;
    float s2 = x * s1 + y * c1;
    basis[9] = tA3 * s2;
    basis[10] = tB3 * s1;
    basis[11] = tC * y;
    basis[12] = z * (1.865881662950577f * z2 - 1.119528997770346f);
    basis[13] = tC * x;
    basis[14] = tB3 * c1;
    basis[15] = tA3 * c2;
}

// Gradient of sum_k basis_k(dir) * w[k] with respect to the components of
// dir (treated as independent; the caller applies the normalization).
// w[k] = dot(sh[k], v_rgb).
FN vec3 sh_basis_vjp(int degree, vec3 dir, float w[16]) {
    vec3 g = vec3(0.0f);
    if (degree < 1) return g;
    float x = dir.x, y = dir.y, z = dir.z;
    g.x += -SH_C1 * w[3];
    g.y += -SH_C1 * w[1];
    g.z += SH_C1 * w[2];
    if (degree < 2) return g;
    const float A = 0.5462742152960395f, B = 1.092548430592079f, Z6 = 0.9461746957575601f;
    g.x += 2.0f * A * y * w[4] - B * z * w[7] + 2.0f * A * x * w[8];
    g.y += 2.0f * A * x * w[4] - B * z * w[5] - 2.0f * A * y * w[8];
    g.z += -B * y * w[5] + 2.0f * Z6 * z * w[6] - B * x * w[7];
    if (degree < 3) return g;
    const float D = 2.285228997322329f, E = 0.4570457994644658f, F = 1.445305721320277f;
    const float G = -0.5900435899266435f, H = 1.865881662950577f, I = 1.119528997770346f;
    float tC = -D * z * z + E;
    float x2 = x * x, y2 = y * y;
    g.x += G * 6.0f * x * y * w[9] + 2.0f * F * z * y * w[10] + tC * w[13] + 2.0f * F * z * x * w[14] +
           G * (3.0f * x2 - 3.0f * y2) * w[15];
    g.y += G * (3.0f * x2 - 3.0f * y2) * w[9] + 2.0f * F * z * x * w[10] + tC * w[11] - 2.0f * F * z * y * w[14] -
           G * 6.0f * x * y * w[15];
    g.z += 2.0f * F * x * y * w[10] - 2.0f * D * z * y * w[11] + (3.0f * H * z * z - I) * w[12] -
           2.0f * D * z * x * w[13] + F * (x2 - y2) * w[14];
    return g;
}
#endif
