// The small part of GLSL's vector and matrix algebra the kernels use, with
// GLSL's meaning and evaluation order, so that a kernel reads like its
// shader: vec2/vec3/vec4, mat3 stored column-major (m.c[j] is column j, the
// maths entry (i, j) is m.c[j][i], as M[j][i] in GLSL), M * v summed over
// columns in order, inversesqrt = rsqrtf, normalize = v * inversesqrt(|v|^2).
#ifndef SPIRULA_GLSL_CUH
#define SPIRULA_GLSL_CUH

#include <cstdint>

namespace spirula {

#define SPIRULA_FN __device__ __forceinline__

struct vec2 {
    float x, y;
};
struct vec3 {
    float x, y, z;
    SPIRULA_FN float& operator[](int i) { return i == 0 ? x : (i == 1 ? y : z); }
    SPIRULA_FN float operator[](int i) const { return i == 0 ? x : (i == 1 ? y : z); }
};
struct vec4 {
    float x, y, z, w;
};

SPIRULA_FN vec2 make2(float x, float y) { return {x, y}; }
SPIRULA_FN vec3 make3(float x, float y, float z) { return {x, y, z}; }
SPIRULA_FN vec4 make4(float x, float y, float z, float w) { return {x, y, z, w}; }
SPIRULA_FN vec4 load4(const float4* p, uint32_t i) {
    float4 v = p[i];
    return {v.x, v.y, v.z, v.w};
}
SPIRULA_FN void store4(float4* p, uint32_t i, vec4 v) { p[i] = make_float4(v.x, v.y, v.z, v.w); }

// vec2
SPIRULA_FN vec2 operator+(vec2 a, vec2 b) { return {a.x + b.x, a.y + b.y}; }
SPIRULA_FN vec2 operator-(vec2 a, vec2 b) { return {a.x - b.x, a.y - b.y}; }
SPIRULA_FN vec2 operator*(vec2 a, vec2 b) { return {a.x * b.x, a.y * b.y}; }
SPIRULA_FN vec2 operator/(vec2 a, vec2 b) { return {a.x / b.x, a.y / b.y}; }
SPIRULA_FN vec2 operator*(vec2 a, float s) { return {a.x * s, a.y * s}; }
SPIRULA_FN vec2 operator*(float s, vec2 a) { return {s * a.x, s * a.y}; }
SPIRULA_FN vec2 operator/(vec2 a, float s) { return {a.x / s, a.y / s}; }
SPIRULA_FN vec2 operator-(vec2 a, float s) { return {a.x - s, a.y - s}; }
SPIRULA_FN vec2 operator+(vec2 a, float s) { return {a.x + s, a.y + s}; }

// vec3
SPIRULA_FN vec3 operator+(vec3 a, vec3 b) { return {a.x + b.x, a.y + b.y, a.z + b.z}; }
SPIRULA_FN vec3 operator-(vec3 a, vec3 b) { return {a.x - b.x, a.y - b.y, a.z - b.z}; }
SPIRULA_FN vec3 operator-(vec3 a) { return {-a.x, -a.y, -a.z}; }
SPIRULA_FN vec3 operator*(vec3 a, vec3 b) { return {a.x * b.x, a.y * b.y, a.z * b.z}; }
SPIRULA_FN vec3 operator*(vec3 a, float s) { return {a.x * s, a.y * s, a.z * s}; }
SPIRULA_FN vec3 operator*(float s, vec3 a) { return {s * a.x, s * a.y, s * a.z}; }
SPIRULA_FN vec3 operator+(vec3 a, float s) { return {a.x + s, a.y + s, a.z + s}; }
SPIRULA_FN vec3& operator+=(vec3& a, vec3 b) { a = a + b; return a; }
SPIRULA_FN vec3& operator*=(vec3& a, float s) { a = a * s; return a; }
SPIRULA_FN float dot(vec3 a, vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }

// vec4
SPIRULA_FN vec4 operator+(vec4 a, vec4 b) { return {a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w}; }
SPIRULA_FN vec4 operator-(vec4 a, vec4 b) { return {a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w}; }
SPIRULA_FN vec4 operator*(vec4 a, float s) { return {a.x * s, a.y * s, a.z * s, a.w * s}; }
SPIRULA_FN vec4 operator*(float s, vec4 a) { return {s * a.x, s * a.y, s * a.z, s * a.w}; }
SPIRULA_FN vec4& operator+=(vec4& a, vec4 b) { a = a + b; return a; }
SPIRULA_FN float dot(vec4 a, vec4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// mat3, column-major
struct mat3 {
    vec3 c[3];
};
// mat3(a0, ..., a8): column by column, as GLSL's constructor
SPIRULA_FN mat3 mat3_cols(vec3 c0, vec3 c1, vec3 c2) { return {{c0, c1, c2}}; }
SPIRULA_FN mat3 mat3_scalars(float a0, float a1, float a2, float a3, float a4, float a5, float a6, float a7,
                             float a8) {
    return {{{a0, a1, a2}, {a3, a4, a5}, {a6, a7, a8}}};
}
SPIRULA_FN vec3 operator*(const mat3& m, vec3 v) { return m.c[0] * v.x + m.c[1] * v.y + m.c[2] * v.z; }
SPIRULA_FN mat3 operator*(const mat3& a, const mat3& b) { return {{a * b.c[0], a * b.c[1], a * b.c[2]}}; }
SPIRULA_FN mat3 operator*(float s, const mat3& m) { return {{s * m.c[0], s * m.c[1], s * m.c[2]}}; }
SPIRULA_FN mat3 operator*(const mat3& m, float s) { return {{m.c[0] * s, m.c[1] * s, m.c[2] * s}}; }
SPIRULA_FN mat3 operator+(const mat3& a, const mat3& b) {
    return {{a.c[0] + b.c[0], a.c[1] + b.c[1], a.c[2] + b.c[2]}};
}
SPIRULA_FN mat3 transpose(const mat3& m) {
    return {{{m.c[0].x, m.c[1].x, m.c[2].x}, {m.c[0].y, m.c[1].y, m.c[2].y}, {m.c[0].z, m.c[1].z, m.c[2].z}}};
}
// outerProduct(c, r): column j is c * r[j]
SPIRULA_FN mat3 outerProduct(vec3 c, vec3 r) { return {{c * r.x, c * r.y, c * r.z}}; }

SPIRULA_FN float inversesqrt(float x) { return rsqrtf(x); }
SPIRULA_FN vec3 normalize(vec3 v) { return v * rsqrtf(dot(v, v)); }
SPIRULA_FN float glsl_clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }

}  // namespace spirula

#endif
