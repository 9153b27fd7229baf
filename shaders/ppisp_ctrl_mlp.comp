#version 450
// ppisp_ctrl_mlp: one layer of the MLP of PPISP's controller (docs/design.md §2.8, "PPISP's
// controller"; include/ppisp_ctrl.glsl; reference spirula/reference/ppisp_ctrl.py), with the
// weights of the view's camera; push `layer` 0..3 = fc1 (1601 -> 128), fc2, fc3 (128 -> 128,
// each with ReLU) and the heads (128 -> 9: exposure, colour[8]). The host records the layers
// in order (forward 0, 1, 2, 3; backward 3, 2, 1, 0), one dispatch each. Spec PHASE:
//   0 (forward): one thread per output o: act[out + o] = b[o] + sum_i W[o, i] act[in + i]
//      (i = 0, 1, ...), ReLU but on the heads; the heads also write the prediction into the
//      view's frame slot of ppisp (exposure [F], colour [F, 8]: ppisp_fwd's layout), which
//      ppisp_fwd and ppisp_bwd then read as any frame's;
//   1 (backward): dz = dL/d the layer's pre-activation (the heads': ppisp_bwd's gradient of
//      the frame's exposure and colour in pgrads; else dact[out + o] where act[out + o] > 0);
//      threads [0, out x in) write the weights' gradient dz[o] act[in + i], the next `out`
//      the bias's dz[o], the next `in` dact[in + i] = sum_o W[o, i] dz[o] (o = 0, 1, ...).
//      Written, not added: one view a step, at the camera's rows of grads.
// Workgroup 256, folded.
//   binding 0  step           [StepParams words]      u32  read   the frame at word 4 + view
//   binding 1  image_cameras  [n_frames]              u32  read
//   binding 2  weights        [n_cameras, CTRL_SIZE]  f32  read
//   binding 3  act            [CTRL_ACT]              f32  read/write  x0, h1, h2, h3, out
//   binding 4  dact           [CTRL_ACT]              f32  read/write  dL/d act (PHASE 1)
//   binding 5  ppisp          [P]                     f32  write  the frame's exposure and colour (PHASE 0)
//   binding 6  pgrads         [P]                     f32  read   dL/d ppisp (ppisp_bwd's grads; PHASE 1)
//   binding 7  grads          [n_cameras, CTRL_SIZE]  f32  write  dL/d weights (PHASE 1)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint PHASE = 0;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer ImageCamerasBuf { uint image_cameras[]; };
layout(std430, binding = 2) restrict readonly buffer WeightsBuf { float weights[]; };
layout(std430, binding = 3) restrict buffer ActBuf { float act[]; };
layout(std430, binding = 4) restrict buffer DactBuf { float dact[]; };
layout(std430, binding = 5) restrict writeonly buffer PpispBuf { float ppisp[]; };
layout(std430, binding = 6) restrict readonly buffer PgradsBuf { float pgrads[]; };
layout(std430, binding = 7) restrict writeonly buffer GradsBuf { float grads[]; };

layout(push_constant) uniform Push {
    uint view;
    uint n_frames;
    uint layer;  // 0 fc1, 1 fc2, 2 fc3, 3 heads
} pc;

#include "ppisp_ctrl.glsl"

// the layer's weights (offset in a camera's), input and output (offsets in act) and sizes
FN void ctrl_layer(uint layer, OUT(uint) w, OUT(uint) x, OUT(uint) y, OUT(uint) n_in, OUT(uint) n_out) {
    n_in = layer == 0u ? CTRL_N_IN : CTRL_HIDDEN;
    n_out = layer == 3u ? 9u : CTRL_HIDDEN;
    w = layer == 0u ? CTRL_FC1 : (layer == 1u ? CTRL_FC2 : (layer == 2u ? CTRL_FC3 : CTRL_HEAD));
    x = layer == 0u ? CTRL_X0 : (layer == 1u ? CTRL_H1 : (layer == 2u ? CTRL_H2 : CTRL_H3));
    y = layer == 0u ? CTRL_H1 : (layer == 1u ? CTRL_H2 : (layer == 2u ? CTRL_H3 : CTRL_OUT));
}

FN void ctrl_forward(uint o) {
    uint w, x, y, n_in, n_out;
    ctrl_layer(pc.layer, w, x, y, n_in, n_out);
    if (o >= n_out) {
        return;
    }
    uint base = ctrl_camera() * CTRL_SIZE + w;
    float z = weights[base + n_out * n_in + o];
    for (uint i = 0u; i < n_in; i++) {
        z += weights[base + o * n_in + i] * act[x + i];
    }
    if (pc.layer < 3u) {
        z = max(z, 0.0f);
    } else {
        uint frame = ctrl_frame();
        ppisp[o == 0u ? frame : pc.n_frames + 8u * frame + o - 1u] = z;
    }
    act[y + o] = z;
}

FN float ctrl_dz(uint y, uint o) {
    if (pc.layer == 3u) {
        uint frame = ctrl_frame();
        return pgrads[o == 0u ? frame : pc.n_frames + 8u * frame + o - 1u];
    }
    return act[y + o] > 0.0f ? dact[y + o] : 0.0f;
}

FN void ctrl_backward(uint t) {
    uint w, x, y, n_in, n_out;
    ctrl_layer(pc.layer, w, x, y, n_in, n_out);
    uint base = ctrl_camera() * CTRL_SIZE + w;
    if (t < n_out * n_in) {
        uint o = t / n_in, i = t - o * n_in;
        grads[base + t] = ctrl_dz(y, o) * act[x + i];
    } else if (t < n_out * n_in + n_out) {
        grads[base + t] = ctrl_dz(y, t - n_out * n_in);
    } else if (t < n_out * n_in + n_out + n_in) {
        uint i = t - n_out * n_in - n_out;
        float s = 0.0f;
        for (uint o = 0u; o < n_out; o++) {
            s += weights[base + o * n_in + i] * ctrl_dz(y, o);
        }
        dact[x + i] = s;
    }
}

FN void ppisp_ctrl_mlp_body(uint t) {
    if (PHASE == 0u) {
        ctrl_forward(t);
    } else {
        ctrl_backward(t);
    }
}

void main() { ppisp_ctrl_mlp_body(global_index()); }
