#version 450
// adam_small: Adam (include/adam.glsl, as torch.optim.Adam) over a small flat parameter
// buffer: the appearance models' parameters (PPISP's, the bilateral grids; docs/design.md
// §2.8), whose references optimise them with Adam. Every element is updated every step, as
// torch's Adam does for a dense gradient (frames not in the step have a zero gradient and
// their moments decay), and its gradient is zeroed after use, so the next step's kernels
// add into zeros. The per-step scalars come from a buffer, so a recorded step replays
// unchanged: hyper[at .. at + 5] = lr, beta1, beta2, bias1 = 1 - beta1^step,
// bias2 = 1 - beta2^step, eps. One thread per element (workgroup 256, folded).
// A training step that fpbo skips (its intersections overflowed, or the step before it
// did: shaders/fpbo.comp) is skipped here too, its gradient zeroed: the trainer runs the
// step again, and its render of the overflowed step was cut short.
//   binding 0  params      [n]     f32  read/write
//   binding 1  grads       [n]     f32  read, then zeroed (GRAD_T: include/atomics.glsl)
//   binding 2  m           [n]     f32  read/write  first moments
//   binding 3  v           [n]     f32  read/write  second moments
//   binding 4  hyper       [>= 6]  f32  read
//   binding 5  num_isects  [...]   u32  read   the step's intersection count at count_offset
//   binding 6  step        [StepParams words]  u32  read   prev_capacity, prev_isects (fpbo's guard)
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"
#include "adam.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict buffer ParamsBuf { float params[]; };
layout(std430, binding = 1) restrict buffer GradsBuf { GRAD_T grads[]; };
layout(std430, binding = 2) restrict buffer MBuf { float m[]; };
layout(std430, binding = 3) restrict buffer VBuf { float v[]; };
layout(std430, binding = 4) restrict readonly buffer HyperBuf { float hyper[]; };
layout(std430, binding = 5) restrict readonly buffer CountBuf { uint num_isects[]; };
layout(std430, binding = 6) restrict readonly buffer StepBuf { uint step[]; };

layout(push_constant) uniform Push {
    uint count;
    uint at;  // the first of the six scalars in hyper
    uint count_offset;
    uint isect_capacity;
} pc;

FN void adam_small_body(uint i) {
    if (i >= pc.count) {
        return;
    }
    bool overflowed = num_isects[pc.count_offset] > pc.isect_capacity;
    if (overflowed || step[STEP_PREV_ISECTS_WORD] > step[STEP_PREV_CAPACITY_WORD]) {
        grads[i] = GRAD_T(0u);
        return;
    }
    float mi = m[i], vi = v[i];
    float g = GRAD_LOAD(grads, i);
    params[i] = adam_update(params[i], g, mi, vi, hyper[pc.at], hyper[pc.at + 1u], hyper[pc.at + 2u], hyper[pc.at + 3u],
                            hyper[pc.at + 4u], hyper[pc.at + 5u]);
    m[i] = mi;
    v[i] = vi;
    grads[i] = GRAD_T(0u);
}

void main() { adam_small_body(global_index()); }
