#version 450
// densify_adc_reset: the periodic opacity reset of adaptive density control:
// every opacity above `ceiling` drops to it, and the opacity's Adam moments
// restart at 0. One thread per splat i < n (workgroup 256, folded).
//   binding 0  opacities    [N]  f32  read/write  logit
//   binding 1  m_opacities  [N]  f32  write
//   binding 2  v_opacities  [N]  f32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer OpacitiesBuf { float opacities[]; };
layout(std430, binding = 1) writeonly buffer MOpacitiesBuf { float m_opacities[]; };
layout(std430, binding = 2) writeonly buffer VOpacitiesBuf { float v_opacities[]; };

layout(push_constant) uniform Push {
    uint n;
    float ceiling_logit;
} pc;

FN void densify_adc_reset_body(uint i) {
    if (i >= pc.n) {
        return;
    }
    opacities[i] = min(opacities[i], pc.ceiling_logit);
    m_opacities[i] = 0.0f;
    v_opacities[i] = 0.0f;
}

void main() { densify_adc_reset_body(global_index()); }
