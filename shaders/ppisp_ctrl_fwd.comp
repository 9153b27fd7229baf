#version 450
// ppisp_ctrl_fwd: the convolutional half of PPISP's controller on one rendered view
// (docs/design.md §2.8, "PPISP's controller"; include/ppisp_ctrl.glsl; reference
// spirula/reference/ppisp_ctrl.py ctrl_fwd), with the weights of the view's camera
// (image_cameras[frame], camera 0 for a frame >= n_frames). Two phases (spec PHASE):
//   0: one thread per 3x3 cell (H / 3 x W / 3, floor): the 1x1 convolution 3 -> 16 at its
//      nine pixels, each channel's max (the first in row-major order on a tie; its pixel
//      kept, 4 bits, in argmax), ReLU, 16 -> 32, ReLU, 32 -> 64; writes the cell's 64
//      features, a2 [32] and a1 [16] to cells (channel-major, CTRL_CELL_ROWS rows);
//   1: one thread per (channel c, bin 5 i + j) of torch's adaptive average pool to 5 x 5:
//      the mean of the bin's cells in row-major order into x0[c * 25 + 5 i + j]; thread
//      1600 writes the prior exposure x0[1600] = 0.
// Workgroup 256, folded.
//   binding 0  step           [StepParams words]      u32  read   the frame at word 4 + view
//   binding 1  image_cameras  [n_frames]              u32  read   the camera of each frame
//   binding 2  weights        [n_cameras, CTRL_SIZE]  f32  read   include/ppisp_ctrl.glsl's layout
//   binding 3  rgb_in         [V,H,W,3]               f32  read   the rendered colours
//   binding 4  cells          [112, n_cells]          f32  write (PHASE 0), read (PHASE 1)
//   binding 5  argmax         [2, n_cells]            u32  write  8 channels' pixels (4 bits) a word
//   binding 6  act            [CTRL_ACT]              f32  write  x0 [1601] (PHASE 1)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(constant_id = 0) const uint PHASE = 0;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer ImageCamerasBuf { uint image_cameras[]; };
layout(std430, binding = 2) restrict readonly buffer WeightsBuf { float weights[]; };
layout(std430, binding = 3) restrict readonly buffer RgbInBuf { float rgb_in[]; };
layout(std430, binding = 4) restrict buffer CellsBuf { float cells[]; };
layout(std430, binding = 5) restrict writeonly buffer ArgmaxBuf { uint argmax[]; };
layout(std430, binding = 6) restrict writeonly buffer ActBuf { float act[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint view;
    uint n_frames;
} pc;

#include "ppisp_ctrl.glsl"

FN void ctrl_cell(uint cell) {
    uint cw = pc.width / 3u, n_cells = cw * (pc.height / 3u);
    uint w = ctrl_camera() * CTRL_SIZE;
    uint cy = cell / cw, cx = cell - cy * cw;
    float m[16];
    uint arg[16];
    UNROLL
    for (uint o = 0u; o < 16u; o++) {
        m[o] = 0.0f;
        arg[o] = 0u;
    }
    for (uint k = 0u; k < 9u; k++) {
        uint y = 3u * cy + k / 3u, x = 3u * cx + k % 3u;
        uint q = 3u * ((pc.view * pc.height + y) * pc.width + x);
        float r = rgb_in[q], g = rgb_in[q + 1u], b = rgb_in[q + 2u];
        UNROLL
        for (uint o = 0u; o < 16u; o++) {
            float z = weights[w + CTRL_W1 + 48u + o] + weights[w + CTRL_W1 + 3u * o] * r +
                      weights[w + CTRL_W1 + 3u * o + 1u] * g + weights[w + CTRL_W1 + 3u * o + 2u] * b;
            if (k == 0u || z > m[o]) {
                m[o] = z;
                arg[o] = k;
            }
        }
    }
    UNROLL
    for (uint o = 0u; o < 16u; o++) {
        m[o] = max(m[o], 0.0f);
        cells[(CTRL_A1 + o) * n_cells + cell] = m[o];
    }
    uint lo = 0u, hi = 0u;
    UNROLL
    for (uint o = 0u; o < 8u; o++) {
        lo |= arg[o] << (4u * o);
        hi |= arg[o + 8u] << (4u * o);
    }
    argmax[cell] = lo;
    argmax[n_cells + cell] = hi;
    float a2[32];
    for (uint o = 0u; o < 32u; o++) {
        float z = weights[w + CTRL_W2 + 512u + o];
        UNROLL
        for (uint i = 0u; i < 16u; i++) {
            z += weights[w + CTRL_W2 + 16u * o + i] * m[i];
        }
        a2[o] = max(z, 0.0f);
        cells[(CTRL_A2 + o) * n_cells + cell] = a2[o];
    }
    for (uint o = 0u; o < 64u; o++) {
        float z = weights[w + CTRL_W3 + 2048u + o];
        UNROLL
        for (uint i = 0u; i < 32u; i++) {
            z += weights[w + CTRL_W3 + 32u * o + i] * a2[i];
        }
        cells[(CTRL_FEAT + o) * n_cells + cell] = z;
    }
}

FN void ctrl_bin(uint t) {
    if (t == 1600u) {
        act[CTRL_X0 + 1600u] = 0.0f;  // the prior exposure (no EXIF)
        return;
    }
    uint cw = pc.width / 3u, ch = pc.height / 3u, n_cells = cw * ch;
    uint c = t / 25u, b = t - 25u * c, i = b / 5u, j = b - 5u * i;
    uint r0 = ctrl_bin_start(i, ch), r1 = ctrl_bin_end(i, ch);
    uint c0 = ctrl_bin_start(j, cw), c1 = ctrl_bin_end(j, cw);
    float s = 0.0f;
    for (uint y = r0; y < r1; y++) {
        for (uint x = c0; x < c1; x++) {
            s += cells[(CTRL_FEAT + c) * n_cells + y * cw + x];
        }
    }
    act[CTRL_X0 + t] = s / float((r1 - r0) * (c1 - c0));
}

FN void ppisp_ctrl_fwd_body(uint t) {
    if (PHASE == 0u && t < (pc.width / 3u) * (pc.height / 3u)) {
        ctrl_cell(t);
    } else if (PHASE == 1u && t < CTRL_N_IN) {
        ctrl_bin(t);
    }
}

void main() { ppisp_ctrl_fwd_body(global_index()); }
