// Real spherical harmonics up to degree 3 (Sloan, "Efficient Spherical
// Harmonic Evaluation", JCGT 2013), in gsplat's basis order and signs.
// dir is a unit vector; basis k multiplies coefficient sh[k] (an RGB triple).
#ifndef SPIRULA_SH_GLSL
#define SPIRULA_SH_GLSL

const float SH_C0 = 0.2820947917738781;
const float SH_C1 = 0.48860251190292;

// basis[0..15]; entries past (degree+1)^2 are left unset.
void sh_basis(int degree, vec3 dir, out float basis[16]) {
    basis[0] = SH_C0;
    if (degree < 1) return;
    float x = dir.x, y = dir.y, z = dir.z;
    basis[1] = -SH_C1 * y;
    basis[2] = SH_C1 * z;
    basis[3] = -SH_C1 * x;
    if (degree < 2) return;
    float z2 = z * z;
    float tB = -1.092548430592079 * z;
    float tA = 0.5462742152960395;
    float c1 = x * x - y * y;
    float s1 = 2.0 * x * y;
    basis[4] = tA * s1;
    basis[5] = tB * y;
    basis[6] = 0.9461746957575601 * z2 - 0.3153915652525201;
    basis[7] = tB * x;
    basis[8] = tA * c1;
    if (degree < 3) return;
    float tC = -2.285228997322329 * z2 + 0.4570457994644658;
    float tB3 = 1.445305721320277 * z;
    float tA3 = -0.5900435899266435;
    float c2 = x * c1 - y * s1;
    float s2 = x * s1 + y * c1;
    basis[9] = tA3 * s2;
    basis[10] = tB3 * s1;
    basis[11] = tC * y;
    basis[12] = z * (1.865881662950577 * z2 - 1.119528997770346);
    basis[13] = tC * x;
    basis[14] = tB3 * c1;
    basis[15] = tA3 * c2;
}

// Gradient of sum_k basis_k(dir) * w[k] with respect to the components of
// dir (treated as independent; the caller applies the normalization).
// w[k] = dot(sh[k], v_rgb).
vec3 sh_basis_vjp(int degree, vec3 dir, float w[16]) {
    vec3 g = vec3(0.0);
    if (degree < 1) return g;
    float x = dir.x, y = dir.y, z = dir.z;
    g.x += -SH_C1 * w[3];
    g.y += -SH_C1 * w[1];
    g.z += SH_C1 * w[2];
    if (degree < 2) return g;
    const float A = 0.5462742152960395, B = 1.092548430592079, Z6 = 0.9461746957575601;
    g.x += 2.0 * A * y * w[4] - B * z * w[7] + 2.0 * A * x * w[8];
    g.y += 2.0 * A * x * w[4] - B * z * w[5] - 2.0 * A * y * w[8];
    g.z += -B * y * w[5] + 2.0 * Z6 * z * w[6] - B * x * w[7];
    if (degree < 3) return g;
    const float D = 2.285228997322329, E = 0.4570457994644658, F = 1.445305721320277;
    const float G = -0.5900435899266435, H = 1.865881662950577, I = 1.119528997770346;
    float tC = -D * z * z + E;
    float x2 = x * x, y2 = y * y;
    g.x += G * 6.0 * x * y * w[9] + 2.0 * F * z * y * w[10] + tC * w[13] + 2.0 * F * z * x * w[14]
         + G * (3.0 * x2 - 3.0 * y2) * w[15];
    g.y += G * (3.0 * x2 - 3.0 * y2) * w[9] + 2.0 * F * z * x * w[10] + tC * w[11] - 2.0 * F * z * y * w[14]
         - G * 6.0 * x * y * w[15];
    g.z += 2.0 * F * x * y * w[10] - 2.0 * D * z * y * w[11] + (3.0 * H * z * z - I) * w[12]
         - 2.0 * D * z * x * w[13] + F * (x2 - y2) * w[14];
    return g;
}
#endif
