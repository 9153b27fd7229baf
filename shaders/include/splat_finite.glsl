// splat_finite(i): whether splat i's opacity logit, mean, log-scale, rotation and SH
// coefficients are all finite (finite.glsl), read from the kernel's own buffers. A body
// include (dialect.glsl): a single-source kernel includes it after its push-constant
// block, having declared the float arrays opacities[], means[] ([N,3]), scales[]
// ([N,3]), sh[] ([N,SH_COEFFS,3], or COMPACT_ROWS rows of storage.glsl), vec4 quats[]
// and the constants SH_COEFFS and COMPACT_ROWS, and included finite.glsl.
FN bool splat_finite(uint i) {
    vec4 q = quats[i];
    bool ok = splat_values_finite(opacities[i], q, vec3(means[3u * i], means[3u * i + 1u], means[3u * i + 2u]),
                                  vec3(scales[3u * i], scales[3u * i + 1u], scales[3u * i + 2u]));
    uint base = i * sh_row_words(COMPACT_ROWS, SH_COEFFS);
    for (uint k = 0u; k < 3u * SH_COEFFS; ++k) {
        ok = ok && (COMPACT_ROWS ? sh_compact_finite(floatBitsToUint(sh[base + sh_compact_word(k)]), k)
                                 : finite1(sh[base + k]));
    }
    return ok;
}
