#version 450
// ppisp_bwd: the vector-Jacobian product of ppisp_fwd for one view (docs/design.md §2.8;
// include/appearance.glsl; reference spirula/reference/appearance.py): dL/d rgb_in per
// pixel, and the parameters' gradients summed over the image, without atomics in the sum
// and in a fixed order (both backends, every run), in three phases (spec PHASE):
//   0: thread t < threads walks the pixels t, t + threads, ... (coalesced), writes each
//      pixel's grad_rgb and keeps its sums of the 37 per-pixel parameter terms (exposure,
//      dL/dH row-major, vignetting 3x5, CRF 3x4) in registers, then partials[r * threads + t];
//   1: one thread per (row r, j < n_out) sums partials[r * threads + j + m n_out] over m
//      (j + m n_out < n_in) into partials[r * threads + j]: in place and race-free (a
//      thread reads only its own j below n_out); the host repeats it until n_out = 1;
//   2: one thread turns the 37 sums into the parameters' gradients (dL/dH through the
//      homography's VJP to the 8 colour parameters) and adds them to grads at the frame's
//      and camera's rows (stages that are off add nothing); with reg > 0 it also adds
//      reg x the gradients of PPISP's regularisers over every frame and camera
//      (include/appearance.glsl ppisp_reg_*).
// Workgroup 256.
//   binding 0  step           [StepParams words]  u32  read   image_index[view] at word 4 + view
//   binding 1  image_cameras  [n_frames]          u32  read
//   binding 2  ppisp          [P]                 f32  read   as ppisp_fwd
//   binding 3  rgb_in         [V,H,W,3]           f32  read
//   binding 4  grad_out       [V,H,W,3]           f32  read   dL/d rgb_out
//   binding 5  grad_rgb       [V,H,W,3]           f32  write  dL/d rgb_in, view `view` only (PHASE 0)
//   binding 6  partials       [37, threads]       f32  read/write
//   binding 7  grads          [P]                 f32  add    dL/d ppisp (GRAD_T: include/atomics.glsl;
//                                                             one thread adds, so no contention)
#extension GL_GOOGLE_include_directive : require
#include "atomics.glsl"
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint PHASE = 0;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer ImageCamerasBuf { uint image_cameras[]; };
layout(std430, binding = 2) restrict readonly buffer PpispBuf { float ppisp[]; };
layout(std430, binding = 3) restrict readonly buffer RgbInBuf { float rgb_in[]; };
layout(std430, binding = 4) restrict readonly buffer GradOutBuf { float grad_out[]; };
layout(std430, binding = 5) restrict writeonly buffer GradRgbBuf { float grad_rgb[]; };
layout(std430, binding = 6) restrict buffer PartialsBuf { float partials[]; };
layout(std430, binding = 7) restrict buffer GradsBuf { GRAD_T grads[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint view;
    uint n_frames;
    uint n_cameras;
    uint threads;  // PHASE 0's threads: the row stride of partials
    uint n_in;     // PHASE 1: values per row before and after this pass
    uint n_out;
    float reg;  // PPISP's regularisers' weight (1: nv-tlabs/ppisp's; 0: none), PHASE 2
} pc;

#include "ppisp_load.glsl"

FN void ppisp_pixels(uint t) {
    bool frame_on, camera_on;
    float e, h[9], v[15], p[12];
    ppisp_load(frame_on, camera_on, e, h, v, p);
    float acc[PPISP_ROWS];
    UNROLL
    for (uint r = 0u; r < PPISP_ROWS; r++) {
        acc[r] = 0.0f;
    }
    uint hw = pc.width * pc.height, base = pc.view * hw;
    for (uint i = t; i < hw; i += pc.threads) {
        uint q = 3u * (base + i);
        vec3 rgb = vec3(rgb_in[q], rgb_in[q + 1u], rgb_in[q + 2u]);
        vec3 g = vec3(grad_out[q], grad_out[q + 1u], grad_out[q + 2u]);
        vec3 gi = ppisp_pixel_vjp(rgb, ppisp_uv(i, pc.width, pc.height), frame_on, camera_on, e, h, v, p, g, acc);
        grad_rgb[q] = gi.x;
        grad_rgb[q + 1u] = gi.y;
        grad_rgb[q + 2u] = gi.z;
    }
    UNROLL
    for (uint r = 0u; r < PPISP_ROWS; r++) {
        partials[r * pc.threads + t] = acc[r];
    }
}

FN void ppisp_reduce(uint i) {
    uint r = i / pc.n_out, j = i % pc.n_out;
    if (r >= PPISP_ROWS) {
        return;
    }
    float s = 0.0f;
    for (uint k = j; k < pc.n_in; k += pc.n_out) {
        s += partials[r * pc.threads + k];
    }
    partials[r * pc.threads + j] = s;
}

FN void ppisp_finish() {
    uint frame = step[STEP_IMAGE_INDEX_WORD + pc.view];
    bool frame_on = frame < pc.n_frames;
    uint camera = frame_on ? image_cameras[frame] : 0xFFFFFFFFu;
    bool camera_on = camera < pc.n_cameras;
    if (frame_on) {
        ATOMIC_ADD(grads, frame, partials[0]);
        float c[8], G[9], gc[8];
        UNROLL
        for (uint k = 0u; k < 8u; k++) {
            c[k] = ppisp[pc.n_frames + 8u * frame + k];
        }
        UNROLL
        for (uint k = 0u; k < 9u; k++) {
            G[k] = partials[(PPISP_ROW_H + k) * pc.threads];
        }
        ppisp_homography_vjp(c, G, gc);
        UNROLL
        for (uint k = 0u; k < 8u; k++) {
            ATOMIC_ADD(grads, pc.n_frames + 8u * frame + k, gc[k]);
        }
    }
    if (camera_on) {
        uint vig = 9u * pc.n_frames + 15u * camera, crf = 9u * pc.n_frames + 15u * pc.n_cameras + 12u * camera;
        UNROLL
        for (uint k = 0u; k < 15u; k++) {
            ATOMIC_ADD(grads, vig + k, partials[(PPISP_ROW_VIG + k) * pc.threads]);
        }
        UNROLL
        for (uint k = 0u; k < 12u; k++) {
            ATOMIC_ADD(grads, crf + k, partials[(PPISP_ROW_CRF + k) * pc.threads]);
        }
    }
}

// reg x the gradients of PPISP's regularisers (nv-tlabs/ppisp PPISPConfig's weights and
// get_regularization_loss; reference ppisp_reg): exposure mean and colour-offset mean (smooth
// L1 of the mean over frames), vignetting centre (mean |c|^2) and positive falloff (mean
// relu), the variance over channels of vignetting and CRF parameters (biased, mean)
FN void ppisp_regularise() {
    uint nf = pc.n_frames, nc = pc.n_cameras;
    if (nf > 0u) {
        float mean = 0.0f;
        float cm[8];
        UNROLL
        for (uint k = 0u; k < 8u; k++) {
            cm[k] = 0.0f;
        }
        for (uint f = 0u; f < nf; f++) {
            mean += ppisp[f];
            UNROLL
            for (uint k = 0u; k < 8u; k++) {
                cm[k] += ppisp[nf + 8u * f + k];
            }
        }
        float inv = 1.0f / float(nf);
        float ge = pc.reg * PPISP_REG_EXPOSURE * smooth_l1_grad(mean * inv, PPISP_REG_EXPOSURE_BETA) * inv;
        float gc[8];
        UNROLL
        for (uint b = 0u; b < 4u; b++) {
            vec3 z = ppisp_zca(b);
            float r0 = (cm[2u * b] * z.x + cm[2u * b + 1u] * z.y) * inv;
            float r1 = (cm[2u * b] * z.y + cm[2u * b + 1u] * z.z) * inv;
            float g0 = smooth_l1_grad(r0, PPISP_REG_COLOR_BETA), g1 = smooth_l1_grad(r1, PPISP_REG_COLOR_BETA);
            float s = pc.reg * PPISP_REG_COLOR / 8.0f * inv;
            gc[2u * b] = s * (z.x * g0 + z.y * g1);
            gc[2u * b + 1u] = s * (z.y * g0 + z.z * g1);
        }
        for (uint f = 0u; f < nf; f++) {
            ATOMIC_ADD(grads, f, ge);
            UNROLL
            for (uint k = 0u; k < 8u; k++) {
                ATOMIC_ADD(grads, nf + 8u * f + k, gc[k]);
            }
        }
    }
    float c3 = 3.0f * float(nc);
    for (uint c = 0u; c < nc; c++) {
        uint vig = 9u * nf + 15u * c, crf = 9u * nf + 15u * nc + 12u * c;
        for (uint j = 0u; j < 5u; j++) {
            float mu = (ppisp[vig + j] + ppisp[vig + 5u + j] + ppisp[vig + 10u + j]) / 3.0f;
            for (uint k = 0u; k < 3u; k++) {
                float x = ppisp[vig + 5u * k + j];
                float g = PPISP_REG_VIG_CHANNEL * 2.0f * (x - mu) / (5.0f * c3);
                g += j < 2u ? PPISP_REG_VIG_CENTER * 2.0f * x / c3
                            : (x > 0.0f ? PPISP_REG_VIG_NON_POS / (3.0f * c3) : 0.0f);
                ATOMIC_ADD(grads, vig + 5u * k + j, pc.reg * g);
            }
        }
        for (uint j = 0u; j < 4u; j++) {
            float mu = (ppisp[crf + j] + ppisp[crf + 4u + j] + ppisp[crf + 8u + j]) / 3.0f;
            for (uint k = 0u; k < 3u; k++) {
                float g = PPISP_REG_CRF_CHANNEL * 2.0f * (ppisp[crf + 4u * k + j] - mu) / (4.0f * c3);
                ATOMIC_ADD(grads, crf + 4u * k + j, pc.reg * g);
            }
        }
    }
}

FN void ppisp_bwd_body(uint i) {
    if (PHASE == 0u && i < pc.threads) {
        ppisp_pixels(i);
    } else if (PHASE == 1u) {
        ppisp_reduce(i);
    } else if (PHASE == 2u && i == 0u) {
        ppisp_finish();
        if (pc.reg > 0.0f) {
            ppisp_regularise();
        }
    }
}

void main() { ppisp_bwd_body(global_index()); }
