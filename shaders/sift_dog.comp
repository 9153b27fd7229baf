#version 450
// sift_dog: an octave's differences of Gaussians, level j + 1 minus level j for
// j < levels (reference spirula/reference/sift.py dog). One thread per value
// (levels x width x height), workgroup 256, folded.
//   binding 0  gauss  [...]  f32  read   levels + 1 planes at gauss_offset
//   binding 1  dog    [...]  f32  write  levels planes at dog_offset
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer GaussBuf { float gauss[]; };
layout(std430, binding = 1) restrict writeonly buffer DogBuf { float dog[]; };

layout(push_constant) uniform Push {
    uint plane;  // width * height
    uint levels;
    uint gauss_offset;
    uint dog_offset;
} pc;

FN void sift_dog_body(uint i) {
    if (i >= pc.levels * pc.plane) {
        return;
    }
    dog[pc.dog_offset + i] = gauss[pc.gauss_offset + i + pc.plane] - gauss[pc.gauss_offset + i];
}

void main() { sift_dog_body(global_index()); }
