// The small part of GLSL's vector and matrix algebra the kernels use, with
// GLSL's meaning and evaluation order: enough to compile the shared maths of
// shaders/include and the single-source kernels' bodies (dialect.glsl) as CUDA.
// vec2/vec3/vec4 with GLSL's constructors (vec3(s), vec3(x, y, z), vec4(v3, w)),
// the buffer element types (vec2, vec4, uvec2, uvec4, ivec2: the size and
// alignment of float2, float4, uint2, uint4, int2, so a buffer's pointer reads
// them in one vector load),
// mat3 stored column-major (m[j] is column j, the maths entry (i, j) is
// m[j][i], as in GLSL; mat3(c0, c1, c2) and mat3(a0, ..., a8) fill it column
// by column), M * v summed over columns in order, inversesqrt = rsqrtf,
// normalize = v * inversesqrt(|v|^2).
#ifndef SPIRULA_GLSL_CUH
#define SPIRULA_GLSL_CUH

#include <cmath>
#include <cstdint>

namespace spirula {

#define SPIRULA_FN __device__ __forceinline__

// GLSL's float built-ins, next to the vector overloads below (which would
// otherwise hide them inside this namespace)
using ::atomicAdd;
using ::ceil;
using ::cos;
using ::exp;
using ::exp2;
using ::floor;
using ::log;
using ::max;
using ::min;
using ::pow;
using ::sin;
using ::sqrt;

struct ivec2;

struct bvec3 {
    bool x, y, z;
};

struct alignas(8) vec2 {
    float x, y;
    vec2() = default;
    SPIRULA_FN explicit vec2(float s) : x(s), y(s) {}
    SPIRULA_FN vec2(float x_, float y_) : x(x_), y(y_) {}
    SPIRULA_FN explicit vec2(ivec2 v);
};
struct vec3 {
    float x, y, z;
    vec3() = default;
    SPIRULA_FN explicit vec3(float s) : x(s), y(s), z(s) {}
    SPIRULA_FN vec3(float x_, float y_, float z_) : x(x_), y(y_), z(z_) {}
    SPIRULA_FN explicit vec3(bvec3 b) : x(b.x ? 1.0f : 0.0f), y(b.y ? 1.0f : 0.0f), z(b.z ? 1.0f : 0.0f) {}
    SPIRULA_FN float& operator[](int i) { return i == 0 ? x : (i == 1 ? y : z); }
    SPIRULA_FN float operator[](int i) const { return i == 0 ? x : (i == 1 ? y : z); }
};
struct alignas(16) vec4 {
    float x, y, z, w;
    vec4() = default;
    SPIRULA_FN explicit vec4(float s) : x(s), y(s), z(s), w(s) {}
    SPIRULA_FN vec4(float x_, float y_, float z_, float w_) : x(x_), y(y_), z(z_), w(w_) {}
    SPIRULA_FN vec4(vec2 a, float z_, float w_) : x(a.x), y(a.y), z(z_), w(w_) {}
    SPIRULA_FN vec4(vec3 a, float w_) : x(a.x), y(a.y), z(a.z), w(w_) {}
    SPIRULA_FN float& operator[](int i) { return i == 0 ? x : (i == 1 ? y : (i == 2 ? z : w)); }
    SPIRULA_FN float operator[](int i) const { return i == 0 ? x : (i == 1 ? y : (i == 2 ? z : w)); }
};

// integer vectors: the buffer element types of GLSL's uvec2, uvec4, ivec2
struct alignas(8) uvec2 {
    uint32_t x, y;
    uvec2() = default;
    SPIRULA_FN explicit uvec2(uint32_t s) : x(s), y(s) {}
    SPIRULA_FN uvec2(uint32_t x_, uint32_t y_) : x(x_), y(y_) {}
    SPIRULA_FN explicit uvec2(vec2 v) : x(uint32_t(v.x)), y(uint32_t(v.y)) {}
};
struct alignas(16) uvec4 {
    uint32_t x, y, z, w;
    uvec4() = default;
    SPIRULA_FN explicit uvec4(uint32_t s) : x(s), y(s), z(s), w(s) {}
    SPIRULA_FN uvec4(uint32_t x_, uint32_t y_, uint32_t z_, uint32_t w_) : x(x_), y(y_), z(z_), w(w_) {}
};
struct alignas(8) ivec2 {
    int32_t x, y;
    ivec2() = default;
    SPIRULA_FN explicit ivec2(int32_t s) : x(s), y(s) {}
    SPIRULA_FN ivec2(int32_t x_, int32_t y_) : x(x_), y(y_) {}
    SPIRULA_FN explicit ivec2(vec2 v) : x(int32_t(v.x)), y(int32_t(v.y)) {}
};
SPIRULA_FN vec2::vec2(ivec2 v) : x(float(v.x)), y(float(v.y)) {}

// a GLSL buffer element type has its CUDA twin's size and alignment (Args holds the
// CUDA type: spirula/contract/headers.py TYPES)
static_assert(sizeof(vec2) == sizeof(float2) && alignof(vec2) == alignof(float2), "vec2 is a float2");
static_assert(sizeof(vec4) == sizeof(float4) && alignof(vec4) == alignof(float4), "vec4 is a float4");
static_assert(sizeof(uvec2) == sizeof(uint2) && alignof(uvec2) == alignof(uint2), "uvec2 is a uint2");
static_assert(sizeof(uvec4) == sizeof(uint4) && alignof(uvec4) == alignof(uint4), "uvec4 is a uint4");
static_assert(sizeof(ivec2) == sizeof(int2) && alignof(ivec2) == alignof(int2), "ivec2 is an int2");

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
SPIRULA_FN vec2& operator+=(vec2& a, vec2 b) {
    a.x += b.x;
    a.y += b.y;
    return a;
}
SPIRULA_FN vec2& operator-=(vec2& a, vec2 b) {
    a.x -= b.x;
    a.y -= b.y;
    return a;
}
SPIRULA_FN float dot(vec2 a, vec2 b) { return a.x * b.x + a.y * b.y; }
SPIRULA_FN float length(vec2 v) { return sqrtf(dot(v, v)); }
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
SPIRULA_FN vec3 operator/(vec3 a, float s) { return {a.x / s, a.y / s, a.z / s}; }
SPIRULA_FN bvec3 greaterThanEqual(vec3 a, vec3 b) { return {a.x >= b.x, a.y >= b.y, a.z >= b.z}; }
SPIRULA_FN vec3& operator+=(vec3& a, vec3 b) {
    a = a + b;
    return a;
}
SPIRULA_FN vec3& operator-=(vec3& a, vec3 b) {
    a = a - b;
    return a;
}
SPIRULA_FN vec3& operator*=(vec3& a, float s) {
    a = a * s;
    return a;
}
SPIRULA_FN vec3& operator*=(vec3& a, vec3 b) {
    a = a * b;
    return a;
}
SPIRULA_FN vec3 exp(vec3 v) { return {expf(v.x), expf(v.y), expf(v.z)}; }
SPIRULA_FN vec3 max(vec3 a, vec3 b) { return {fmaxf(a.x, b.x), fmaxf(a.y, b.y), fmaxf(a.z, b.z)}; }
SPIRULA_FN float dot(vec3 a, vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }

// vec4
SPIRULA_FN vec4 operator+(vec4 a, vec4 b) { return {a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w}; }
SPIRULA_FN vec4 operator-(vec4 a, vec4 b) { return {a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w}; }
SPIRULA_FN vec4 operator*(vec4 a, float s) { return {a.x * s, a.y * s, a.z * s, a.w * s}; }
SPIRULA_FN vec4 operator*(float s, vec4 a) { return {s * a.x, s * a.y, s * a.z, s * a.w}; }
SPIRULA_FN vec4 operator-(vec4 a) { return {-a.x, -a.y, -a.z, -a.w}; }
SPIRULA_FN vec4& operator+=(vec4& a, vec4 b) {
    a = a + b;
    return a;
}
SPIRULA_FN float dot(vec4 a, vec4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// mat3, column-major
struct mat3 {
    vec3 c[3];
    mat3() = default;
    // mat3(c0, c1, c2) and mat3(a0, ..., a8): column by column, as GLSL's constructors
    SPIRULA_FN mat3(vec3 c0, vec3 c1, vec3 c2) : c{c0, c1, c2} {}
    SPIRULA_FN mat3(float a0, float a1, float a2, float a3, float a4, float a5, float a6, float a7, float a8)
        : c{{a0, a1, a2}, {a3, a4, a5}, {a6, a7, a8}} {}
    SPIRULA_FN vec3& operator[](int j) { return c[j]; }
    SPIRULA_FN const vec3& operator[](int j) const { return c[j]; }
};
SPIRULA_FN mat3 mat3_cols(vec3 c0, vec3 c1, vec3 c2) { return mat3(c0, c1, c2); }
SPIRULA_FN mat3 mat3_scalars(float a0, float a1, float a2, float a3, float a4, float a5, float a6, float a7, float a8) {
    return mat3(a0, a1, a2, a3, a4, a5, a6, a7, a8);
}
SPIRULA_FN vec3 operator*(const mat3& m, vec3 v) { return m.c[0] * v.x + m.c[1] * v.y + m.c[2] * v.z; }
SPIRULA_FN mat3 operator*(const mat3& a, const mat3& b) { return mat3(a * b.c[0], a * b.c[1], a * b.c[2]); }
SPIRULA_FN mat3 operator*(float s, const mat3& m) { return mat3(s * m.c[0], s * m.c[1], s * m.c[2]); }
SPIRULA_FN mat3 operator*(const mat3& m, float s) { return mat3(m.c[0] * s, m.c[1] * s, m.c[2] * s); }
SPIRULA_FN mat3 operator+(const mat3& a, const mat3& b) {
    return mat3(a.c[0] + b.c[0], a.c[1] + b.c[1], a.c[2] + b.c[2]);
}
SPIRULA_FN mat3 transpose(const mat3& m) {
    return mat3(m.c[0].x, m.c[1].x, m.c[2].x, m.c[0].y, m.c[1].y, m.c[2].y, m.c[0].z, m.c[1].z, m.c[2].z);
}
// outerProduct(c, r): column j is c * r[j]
SPIRULA_FN mat3 outerProduct(vec3 c, vec3 r) { return mat3(c * r.x, c * r.y, c * r.z); }

SPIRULA_FN float inversesqrt(float x) { return rsqrtf(x); }
SPIRULA_FN float length(vec3 v) { return sqrtf(dot(v, v)); }
// GLSL's two-argument atan(y, x)
SPIRULA_FN float atan(float y, float x) { return atan2f(y, x); }
SPIRULA_FN vec3 normalize(vec3 v) { return v * rsqrtf(dot(v, v)); }
SPIRULA_FN vec3 cross(vec3 a, vec3 b) {
    return vec3(a.y * b.z - a.z * b.y, a.z * b.x - a.x * b.z, a.x * b.y - a.y * b.x);
}
SPIRULA_FN float clamp(float x, float lo, float hi) { return fminf(fmaxf(x, lo), hi); }
SPIRULA_FN float glsl_clamp(float x, float lo, float hi) { return clamp(x, lo, hi); }
SPIRULA_FN vec2 clamp(vec2 x, vec2 lo, vec2 hi) { return {clamp(x.x, lo.x, hi.x), clamp(x.y, lo.y, hi.y)}; }
SPIRULA_FN vec2 sqrt(vec2 v) { return {sqrtf(v.x), sqrtf(v.y)}; }
SPIRULA_FN vec2 floor(vec2 v) { return {floorf(v.x), floorf(v.y)}; }
SPIRULA_FN vec2 ceil(vec2 v) { return {ceilf(v.x), ceilf(v.y)}; }

// GLSL's floatBitsToUint: the IEEE 754 bits of v
SPIRULA_FN uint32_t floatBitsToUint(float v) { return __float_as_uint(v); }
// GLSL's uintBitsToFloat: the float with IEEE 754 bits v
SPIRULA_FN float uintBitsToFloat(uint32_t v) { return __uint_as_float(v); }

// GLSL's roundEven: to nearest, ties to even
SPIRULA_FN float roundEven(float x) { return rintf(x); }

// GLSL's atomicAdd(buf[i], v) on a uint buffer element (CUDA's takes its address)
SPIRULA_FN uint32_t atomicAdd(uint32_t& x, uint32_t v) { return ::atomicAdd(&x, v); }

// GLSL's unpackUnorm4x8(v)[ch]: byte ch of v over 255, correctly rounded (the build's
// -prec-div=false would otherwise make it a multiply by 1 / 255)
SPIRULA_FN float unpack_unorm8(uint32_t v, int ch) {
    return __fdiv_rn(float((v >> (8u * uint32_t(ch))) & 0xffu), 255.0f);
}

}  // namespace spirula

#endif
