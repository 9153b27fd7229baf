#version 450
// ppisp_fwd: PPISP's image signal processor applied to one rendered view (docs/design.md
// §2.8; include/appearance.glsl; reference spirula/reference/appearance.py): per frame
// exposure 2^e and the colour homography on RG chromaticity (intensity kept), per camera
// the vignetting falloff and the CRF tone curve. The frame is the view's dataset image
// (StepParams.image_index[view]), its camera image_cameras[frame]; a frame >= n_frames
// (a novel view) turns the per-frame stages off, a camera >= n_cameras the per-camera ones.
// One thread per pixel, grid-stride; workgroup 256.
//   binding 0  step           [StepParams words]  u32  read   image_index[view] at word 4 + view
//   binding 1  image_cameras  [n_frames]          u32  read   the camera of each frame
//   binding 2  ppisp          [P]                 f32  read   exposure [F], colour [F,8],
//                                                             vignetting [C,3,5], CRF [C,3,4]
//   binding 3  rgb_in         [V,H,W,3]           f32  read   the rendered colours
//   binding 4  rgb_out        [V,H,W,3]           f32  write  view `view` only
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "appearance.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer StepBuf { uint step[]; };
layout(std430, binding = 1) restrict readonly buffer ImageCamerasBuf { uint image_cameras[]; };
layout(std430, binding = 2) restrict readonly buffer PpispBuf { float ppisp[]; };
layout(std430, binding = 3) restrict readonly buffer RgbInBuf { float rgb_in[]; };
layout(std430, binding = 4) restrict writeonly buffer RgbOutBuf { float rgb_out[]; };

layout(push_constant) uniform Push {
    uint width;
    uint height;
    uint view;
    uint n_frames;
    uint n_cameras;
} pc;

#include "ppisp_load.glsl"

FN void ppisp_fwd_body(uint first, uint stride) {
    bool frame_on, camera_on;
    float e, h[9], v[15], p[12];
    ppisp_load(frame_on, camera_on, e, h, v, p);
    uint hw = pc.width * pc.height, base = pc.view * hw;
    for (uint i = first; i < hw; i += stride) {
        uint q = 3u * (base + i);
        vec3 rgb = vec3(rgb_in[q], rgb_in[q + 1u], rgb_in[q + 2u]);
        vec3 c = ppisp_pixel(rgb, ppisp_uv(i, pc.width, pc.height), frame_on, camera_on, e, h, v, p);
        rgb_out[q] = c.x;
        rgb_out[q + 1u] = c.y;
        rgb_out[q + 2u] = c.z;
    }
}

void main() { ppisp_fwd_body(global_index(), grid_stride()); }
