#version 450
// pack_rgba8: the viewers' frame, a float RGB image packed into RGBA8 words on
// the GPU, so a frame reads back 4 bytes a pixel instead of 12. Bit for bit
// spirula/render/video.py to_uint8: each channel clamped to [0, 1] (NaN -> 0),
// times 255 in one f32 multiply, rounded to nearest, ties to even (np.rint);
// alpha 255. packed[i] = r | g << 8 | b << 16 | 255 << 24: on a little-endian
// host the words read as bytes R, G, B, A. One thread per pixel, grid-stride;
// workgroup 256.
//   binding 0  rgb     [>= 3 * (src_offset + count)]  f32  read   row-major RGB
//   binding 1  packed  [>= count]                     u32  write
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) restrict readonly buffer RgbBuf { float rgb[]; };
layout(std430, binding = 1) restrict writeonly buffer PackedBuf { uint packed[]; };

layout(push_constant) uniform Push {
    uint src_offset;  // first pixel of rgb (a camera's image: camera * H * W)
    uint count;       // pixels
} pc;

// to_uint8 of one channel: NaN fails x > 0 and becomes 0; +inf becomes 255.
FN uint channel8(float x) {
    float c = x > 0.0f ? min(x, 1.0f) : 0.0f;
    return uint(roundEven(c * 255.0f));
}

FN void pack_rgba8_body(uint i) {
    uint s = 3u * (pc.src_offset + i);
    packed[i] = channel8(rgb[s]) | (channel8(rgb[s + 1u]) << 8) | (channel8(rgb[s + 2u]) << 16) | 0xFF000000u;
}

void main() {
    for (uint i = global_index(); i < pc.count; i += grid_stride()) {
        pack_rgba8_body(i);
    }
}
