// Workgroup-wide exclusive prefix sum of one SCAN_T (uint unless the includer
// defines it, e.g. float) per thread, for any subgroup size:
// subgroupInclusiveAdd inside each subgroup, then the first subgroup scans the
// per-subgroup totals in chunks of its own width.
// Call from uniform control flow (it contains barriers).
#ifndef SPIRULA_SCAN_GLSL
#define SPIRULA_SCAN_GLSL
#ifndef SCAN_T
#define SCAN_T uint
#endif
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

// One slot per subgroup, for workgroups of up to 256 threads. A literal size:
// this file is included before the local_size layout, where gl_WorkGroupSize
// is still (1, 1, 1).
shared SCAN_T s_scan_subgroup[256];
shared SCAN_T s_scan_total;

SCAN_T workgroup_exclusive_scan(SCAN_T value, out SCAN_T total) {
    SCAN_T inclusive = subgroupInclusiveAdd(value);
    if (gl_SubgroupInvocationID == gl_SubgroupSize - 1u) {
        s_scan_subgroup[gl_SubgroupID] = inclusive;
    }
    barrier();
    if (gl_SubgroupID == 0u) {
        SCAN_T carry = SCAN_T(0);
        for (uint base = 0u; base < gl_NumSubgroups; base += gl_SubgroupSize) {
            uint i = base + gl_SubgroupInvocationID;
            SCAN_T x = i < gl_NumSubgroups ? s_scan_subgroup[i] : SCAN_T(0);
            SCAN_T scanned = subgroupInclusiveAdd(x);
            if (i < gl_NumSubgroups) {
                s_scan_subgroup[i] = carry + scanned - x;
            }
            carry += subgroupAdd(x);
        }
        if (gl_SubgroupInvocationID == 0u) {
            s_scan_total = carry;
        }
    }
    barrier();
    total = s_scan_total;
    SCAN_T result = s_scan_subgroup[gl_SubgroupID] + inclusive - value;
    barrier();  // s_scan_* may be reused by the caller's next scan
    return result;
}
#endif
