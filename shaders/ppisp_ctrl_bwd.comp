#version 450
// ppisp_ctrl_bwd: the backward of ppisp_ctrl_fwd (docs/design.md §2.8, "PPISP's controller";
// include/ppisp_ctrl.glsl; reference spirula/reference/ppisp_ctrl.py ctrl_bwd): from dL/d x0
// (ppisp_ctrl_mlp's backward of fc1, in dact) to the gradients of the convolutions' 2,720
// weights and biases of the view's camera. The render is detached: no dL/d rgb. Without
// atomics and in a fixed order, in four phases (spec PHASE):
//   0: one thread per cell: dL/d feat = the sum over the bins holding the cell of
//      dL/d x0 / the bin's cell count (dfeat, over the features in cells: the forward's
//      bins have read them), dz2 = (W3^T dfeat) where a2 > 0, dm = (W2^T dz2) where a1 > 0
//      (the max's gradient, routed to its argmax pixel in phase 1); dz2 and dm into
//      deltas [48, n_cells];
//   1: one thread per (row r < 2720, chunk j < chunks): the sum over the chunk's cells
//      (j x chunk up to (j + 1) x chunk, in order) of row r's term: conv1 dm[o] x[argmax, i]
//      and dm[o], conv2 dz2[o] a1[i] and dz2[o], conv3 dfeat[o] a2[i] and dfeat[o], into
//      partials[r * chunks + j];
//   2: one thread per (row r, j < n_out) sums partials[r * chunks + j + m n_out] over m
//      (j + m n_out < n_in) into partials[r * chunks + j], in place and race-free, as
//      ppisp_bwd's phase 1; the host repeats it until n_out = 1;
//   3: one thread per row writes partials[r * chunks] to grads at the camera's rows.
// Workgroup 256, folded.
//   binding 0  step           [StepParams words]      u32  read   the frame at word 4 + view
//   binding 1  image_cameras  [n_frames]              u32  read
//   binding 2  weights        [n_cameras, CTRL_SIZE]  f32  read
//   binding 3  rgb_in         [V,H,W,3]               f32  read   the rendered colours
//   binding 4  cells          [112, n_cells]          f32  read/write  ppisp_ctrl_fwd's; dfeat over
//                                                                   its features (PHASE 0)
//   binding 5  argmax         [2, n_cells]            u32  read   ppisp_ctrl_fwd's
//   binding 6  dact           [CTRL_ACT]              f32  read   dL/d x0 at 0
//   binding 7  deltas         [48, n_cells]           f32  write (PHASE 0), read (PHASE 1)
//   binding 8  partials       [2720, chunks]          f32  read/write
//   binding 9  grads          [n_cameras, CTRL_SIZE]  f32  write  the convolutions' rows (PHASE 3)
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
layout(std430, binding = 5) restrict readonly buffer ArgmaxBuf { uint argmax[]; };
layout(std430, binding = 6) restrict readonly buffer DactBuf { float dact[]; };
layout(std430, binding = 7) restrict buffer DeltasBuf { float deltas[]; };
layout(std430, binding = 8) restrict buffer PartialsBuf { float partials[]; };
layout(std430, binding = 9) restrict writeonly buffer GradsBuf { float grads[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint view;
    uint n_frames;
    uint chunk;   // cells a thread of PHASE 1 sums
    uint chunks;  // PHASE 1's chunks: the row stride of partials
    uint n_in;    // PHASE 2: values per row before and after this pass
    uint n_out;
} pc;

#include "ppisp_ctrl.glsl"

FN void ctrl_cell_deltas(uint cell) {
    uint cw = pc.width / 3u, ch = pc.height / 3u, n_cells = cw * ch;
    uint w = ctrl_camera() * CTRL_SIZE;
    uint cy = cell / cw, cx = cell - cy * cw;
    float df[64];
    UNROLL
    for (uint o = 0u; o < 64u; o++) {
        df[o] = 0.0f;
    }
    // dL/d feat: each bin holding the cell passes on dL/d its mean / its count (bins in order)
    for (uint i = 0u; i < 5u; i++) {
        uint r0 = ctrl_bin_start(i, ch), r1 = ctrl_bin_end(i, ch);
        for (uint j = 0u; j < 5u; j++) {
            uint c0 = ctrl_bin_start(j, cw), c1 = ctrl_bin_end(j, cw);
            if (cy >= r0 && cy < r1 && cx >= c0 && cx < c1) {
                float inv = 1.0f / float((r1 - r0) * (c1 - c0));
                UNROLL
                for (uint o = 0u; o < 64u; o++) {
                    df[o] += dact[CTRL_X0 + 25u * o + 5u * i + j] * inv;
                }
            }
        }
    }
    for (uint o = 0u; o < 64u; o++) {
        cells[(CTRL_FEAT + o) * n_cells + cell] = df[o];
    }
    float dz2[32];
    for (uint i = 0u; i < 32u; i++) {
        float s = 0.0f;
        for (uint o = 0u; o < 64u; o++) {
            s += weights[w + CTRL_W3 + 32u * o + i] * df[o];
        }
        dz2[i] = cells[(CTRL_A2 + i) * n_cells + cell] > 0.0f ? s : 0.0f;
        deltas[i * n_cells + cell] = dz2[i];
    }
    for (uint i = 0u; i < 16u; i++) {
        float s = 0.0f;
        for (uint o = 0u; o < 32u; o++) {
            s += weights[w + CTRL_W2 + 16u * o + i] * dz2[o];
        }
        deltas[(32u + i) * n_cells + cell] = cells[(CTRL_A1 + i) * n_cells + cell] > 0.0f ? s : 0.0f;
    }
}

// row r's term at one cell (rows: conv1 [16, 3] + 16, conv2 [32, 16] + 32, conv3 [64, 32] + 64)
FN float ctrl_term(uint r, uint cell, uint n_cells, uint cw) {
    if (r < 64u) {
        uint o = r < 48u ? r / 3u : r - 48u;
        float dm = deltas[(32u + o) * n_cells + cell];
        if (r >= 48u) {
            return dm;
        }
        uint k = (argmax[(o / 8u) * n_cells + cell] >> (4u * (o % 8u))) & 15u;
        uint cy = cell / cw, cx = cell - cy * cw;
        uint y = 3u * cy + k / 3u, x = 3u * cx + k % 3u;
        return dm * rgb_in[3u * ((pc.view * pc.height + y) * pc.width + x) + r % 3u];
    }
    if (r < 608u) {
        uint q = r - 64u, o = q < 512u ? q / 16u : q - 512u;
        float dz = deltas[o * n_cells + cell];
        return q < 512u ? dz * cells[(CTRL_A1 + q % 16u) * n_cells + cell] : dz;
    }
    uint q = r - 608u, o = q < 2048u ? q / 32u : q - 2048u;
    float df = cells[(CTRL_FEAT + o) * n_cells + cell];
    return q < 2048u ? df * cells[(CTRL_A2 + q % 32u) * n_cells + cell] : df;
}

FN void ctrl_partial(uint t) {
    uint r = t / pc.chunks, j = t - r * pc.chunks;
    if (r >= CTRL_CONV) {
        return;
    }
    uint cw = pc.width / 3u, n_cells = cw * (pc.height / 3u);
    uint end = min(n_cells, (j + 1u) * pc.chunk);
    float s = 0.0f;
    for (uint cell = j * pc.chunk; cell < end; cell++) {
        s += ctrl_term(r, cell, n_cells, cw);
    }
    partials[r * pc.chunks + j] = s;
}

FN void ctrl_reduce(uint t) {
    uint r = t / pc.n_out, j = t - r * pc.n_out;
    if (r >= CTRL_CONV) {
        return;
    }
    float s = 0.0f;
    for (uint k = j; k < pc.n_in; k += pc.n_out) {
        s += partials[r * pc.chunks + k];
    }
    partials[r * pc.chunks + j] = s;
}

FN void ppisp_ctrl_bwd_body(uint t) {
    if (PHASE == 0u) {
        if (t < (pc.width / 3u) * (pc.height / 3u)) {
            ctrl_cell_deltas(t);
        }
    } else if (PHASE == 1u) {
        ctrl_partial(t);
    } else if (PHASE == 2u) {
        ctrl_reduce(t);
    } else if (t < CTRL_CONV) {
        grads[ctrl_camera() * CTRL_SIZE + t] = partials[t * pc.chunks];
    }
}

void main() { ppisp_ctrl_bwd_body(global_index()); }
