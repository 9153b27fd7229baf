#version 450
// densify_mcmc_sample: draw `count` source splats with probability
// proportional to their weight (inverse CDF: binary search of a uniform draw
// in the exclusive prefix sum of the weights), with replacement, and count
// how often each source is drawn.
// One thread per draw j < count (workgroup 256, folded).
//   binding 0  cdf        [N]        f32  read   exclusive prefix sum of the weights
//   binding 1  totals     [..]       f32  read   sum of the weights at total_offset
//   binding 2  counts     [..]       u32  read   count = min(counts[count_offset], count_max)
//   binding 3  sample_src [count]    u32  write  drawn source of draw j
//   binding 4  copies     [N]        u32  add    times each splat was drawn (zeroed before)
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "random.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer CdfBuf { float cdf[]; };
layout(std430, binding = 1) readonly buffer TotalsBuf { float totals[]; };
layout(std430, binding = 2) readonly buffer CountsBuf { uint counts[]; };
layout(std430, binding = 3) writeonly buffer SampleSrcBuf { uint sample_src[]; };
layout(std430, binding = 4) buffer CopiesBuf { uint copies[]; };

layout(push_constant) uniform Push {
    uint n;
    uint count_max;
    uint count_offset;
    uint total_offset;
    uint seed;
    uint stream;
} pc;

FN void densify_mcmc_sample_body(uint j) {
    float total = totals[pc.total_offset];
    if (j >= min(counts[pc.count_offset], pc.count_max) || !(total > 0.0f) || pc.n == 0u) {
        return;
    }
    // strictly below the total, so zero-weight splats at the end are never drawn
    float u = min(random_uniform(pc.seed, j, pc.stream) * total, total * (1.0f - 1.0f / 8388608.0f));
    // the last i with cdf[i] <= u (zero-weight splats are never the answer: the
    // next one starts at the same cdf value)
    uint lo = 0u, hi = pc.n - 1u;
    while (lo < hi) {
        uint mid = (lo + hi + 1u) >> 1u;
        if (cdf[mid] <= u) {
            lo = mid;
        } else {
            hi = mid - 1u;
        }
    }
    sample_src[j] = lo;
    atomicAdd(copies[lo], 1u);
}

void main() { densify_mcmc_sample_body(global_index()); }
