// zero_moments(i): splat i's Adam moments restart at 0 (a moved or new splat), in the
// kernel's own buffers. A body include (dialect.glsl): a single-source kernel includes
// it after its push-constant block, having declared the float arrays m_means, v_means,
// m_scales, v_scales ([N,3]), m_opacities, v_opacities ([N]), m_sh, v_sh ([N,SH_COEFFS,3]),
// the vec4 arrays m_quats, v_quats and the constants SH_COEFFS and COMPACT_ROWS
// (COMPACT_ROWS: m_sh, v_sh and the moments of means, quats, scales hold the bf16 rows of
// storage.glsl; bf16 0 is 0 bits, so whole 32-bit words are zeroed).
FN void zero_moments(uint i) {
    uint w3 = geom_moment_words(COMPACT_ROWS, 3u);  // COMPACT_ROWS: bf16 rows of 2 words
    for (uint k = 0u; k < w3; ++k) {
        m_means[w3 * i + k] = 0.0f;
        v_means[w3 * i + k] = 0.0f;
        m_scales[w3 * i + k] = 0.0f;
        v_scales[w3 * i + k] = 0.0f;
    }
    if (COMPACT_ROWS) {  // words 2i, 2i + 1: half of vec4 i / 2
        for (uint k = 0u; k < 2u; ++k) {
            m_quats[i >> 1u][2u * (i & 1u) + k] = 0.0f;
            v_quats[i >> 1u][2u * (i & 1u) + k] = 0.0f;
        }
    } else {
        m_quats[i] = vec4(0.0f);
        v_quats[i] = vec4(0.0f);
    }
    m_opacities[i] = 0.0f;
    v_opacities[i] = 0.0f;
    uint moment_words = moment_row_words(COMPACT_ROWS, SH_COEFFS);
    for (uint k = 0u; k < moment_words; ++k) {
        m_sh[moment_words * i + k] = 0.0f;
        v_sh[moment_words * i + k] = 0.0f;
    }
}
