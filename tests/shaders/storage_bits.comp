#version 450
// storage_bits (test kernel): the 16-bit conversions of include/storage.glsl
// on n values, for a bit-exact comparison with spirula/train/storage.py.
//   binding 0  x      [n] f32  read   values to round
//   binding 1  r      [n] u32  read   random bits
//   binding 2  half   [n] u32  write  float_to_half_sr(x, r)
//   binding 3  bf16   [n] u32  write  float_to_bf16_sr(x, r)
//   binding 4  back   [n] f32  write  half_to_float(x's bits, low 16)
//   binding 5  bits   [n] u32  write  storage_bits(seed, i, r)
#extension GL_GOOGLE_include_directive : require
#define SPIRULA_PRESERVE_INF_NAN
#include "common.glsl"
#include "storage.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer XBuf { float x[]; };
layout(std430, binding = 1) readonly buffer RBuf { uint r[]; };
layout(std430, binding = 2) writeonly buffer HalfBuf { uint half_out[]; };
layout(std430, binding = 3) writeonly buffer Bf16Buf { uint bf16_out[]; };
layout(std430, binding = 4) writeonly buffer BackBuf { float back[]; };
layout(std430, binding = 5) writeonly buffer BitsBuf { uint bits[]; };

layout(push_constant) uniform Push {
    uint n;
    uint seed;
} pc;

void main() {
    uint i = global_index();
    if (i < pc.n) {
        half_out[i] = float_to_half_sr(x[i], r[i]);
        bf16_out[i] = float_to_bf16_sr(x[i], r[i]);
        back[i] = half_to_float(floatBitsToUint(x[i]) & 65535u);
        bits[i] = storage_bits(pc.seed, i, r[i]);
    }
}
