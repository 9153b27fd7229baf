#version 450
// prefix_sum: exclusive prefix sum of n uint32 (float32 when FLOAT=1) in
// place, as a multi-level scan (spirula/render/scan.py records the levels).
//   PHASE 0: each workgroup scans one block of BLOCK = 256*4 values of `data`
//            and writes the block's total to sums[sums_offset + block].
//   PHASE 1: adds the (already scanned) block offsets back:
//            data[i] += sums[sums_offset + block(i)].
// Workgroup 256, 4 values per thread, one workgroup per block (folded).
//   binding 0  data  [data_offset + n] u32 (f32)  read/write
//   binding 1  sums  [sums_offset + ceil(n/BLOCK)] u32 (f32)  read/write
//                    (may be the same buffer as data, at another offset)
#extension GL_GOOGLE_include_directive : require
#ifndef FLOAT
#define FLOAT 0
#endif
#if FLOAT
#define SCAN_T float
#else
#define SCAN_T uint
#endif
#include "common.glsl"
#include "scan.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint PHASE = 0;

const uint ITEMS = 4u;
const uint BLOCK = 256u * ITEMS;

layout(std430, binding = 0) buffer DataBuf { SCAN_T data[]; };
layout(std430, binding = 1) buffer SumsBuf { SCAN_T sums[]; };

layout(push_constant) uniform Push {
    uint n;
    uint data_offset;
    uint sums_offset;
} pc;

void main() {
    uint block = linear_group_id();
    uint first = block * BLOCK + gl_LocalInvocationID.x * ITEMS;
    if (PHASE == 1u) {
        if (block * BLOCK >= pc.n) {
            return;
        }
        SCAN_T add = sums[pc.sums_offset + block];
        for (uint k = 0u; k < ITEMS; ++k) {
            if (first + k < pc.n) {
                data[pc.data_offset + first + k] += add;
            }
        }
        return;
    }
    SCAN_T v[ITEMS];
    SCAN_T local_sum = SCAN_T(0);
    for (uint k = 0u; k < ITEMS; ++k) {
        v[k] = first + k < pc.n ? data[pc.data_offset + first + k] : SCAN_T(0);
        local_sum += v[k];
    }
    SCAN_T total;
    SCAN_T running = workgroup_exclusive_scan(local_sum, total);
    for (uint k = 0u; k < ITEMS; ++k) {
        if (first + k < pc.n) {
            data[pc.data_offset + first + k] = running;
        }
        running += v[k];
    }
    if (gl_LocalInvocationID.x == 0u && block * BLOCK < max(pc.n, 1u)) {
        sums[pc.sums_offset + block] = total;
    }
}
