// Compact storage (--compact; docs/design.md, "Compact storage"): the row
// layouts of the SH coefficients and their Adam moments, and the 16-bit
// formats they use. The host's twin is spirula/train/storage.py.
//   sh row, compact: the 3 DC floats as f32 words, then the 3K - 3 higher
//     coefficients as fp16, two per word (low half first), the last word's
//     high half 0 when 3K - 3 is odd: 3 + ceil((3K - 3) / 2) words.
//   m_sh / v_sh rows, compact: the 3K moments as bf16, two per word: the 3 DC
//     moments in words 0-1 (word 1's high half 0), then the 3K - 3 higher ones
//     from word 2, so that moment word 2 + j holds the same two coefficients
//     as sh word 3 + j: 2 + ceil((3K - 3) / 2) words. (A block pass over a
//     workgroup's rows, fpbo, then updates one word of each without sharing.)
//   Adam moments of means, scales (3) and quats (4), compact: bf16, two per
//     word, 2 words a row (the third value's word has a 0 high half).
//     Opacities' moments stay f32: one value is a word either way.
// Rows are whole words: no two splats share a word. Every 16-bit store
// rounds stochastically with bits from storage_bits(seed, splat, element):
// round-to-nearest would freeze values whose step is below half an ulp
// (Adam's v moves by 0.1% a step; bf16 resolves 2^-8).
// Integer maths only (no packHalf2x16, whose rounding and denormal handling
// drivers choose), so both backends store the same bits.
// Shared by the shaders and the CUDA kernels (dialect.glsl).
#ifndef SPIRULA_STORAGE_GLSL
#define SPIRULA_STORAGE_GLSL
#include "dialect.glsl"
#include "random.glsl"

// words in one splat's row of sh (params) and of m_sh / v_sh (moments)
FN uint sh_row_words(bool compact, uint k) { return compact ? 3u + (3u * k - 2u) / 2u : 3u * k; }
FN uint moment_row_words(bool compact, uint k) { return compact ? 2u + (3u * k - 2u) / 2u : 3u * k; }

// words in one splat's row of the Adam moments of means, scales or quats (width 3 or 4)
FN uint geom_moment_words(bool compact, uint width) { return compact ? 2u : width; }
// the element storage_bits rounds value k of those moments with: SH parameters
// use 0 .. 47, their moments 64 .. 111; attr 0 means, 1 scales, 2 quats
FN uint geom_moment_element(uint attr, uint k) { return 112u + 4u * attr + k; }

// 32 random bits for the rounding of element `element` (< 128) of splat `row`: one
// hash of the pair's index mixed with the step's seed (already a hash of run and step,
// strategy.py). Every index of a step is distinct below 2^25 rows; past that two rows
// share their bits, which leaves each rounding unbiased. (Three chained hashes
// here took about a third of fpbo's SH block arithmetic.)
FN uint storage_bits(uint seed, uint row, uint element) { return pcg_hash(seed ^ (row * 128u + element)); }

// fp16 (low 16 bits of h) to f32, exact (subnormals included); selects, no branches
FN float half_to_float(uint h) {
    uint s = (h & 32768u) << 16u;
    uint e = (h >> 10u) & 31u;
    uint m = h & 1023u;
    float sub = float(m) * (1.0f / 16777216.0f);
    sub = s != 0u ? -sub : sub;
    uint bits = s | (e == 31u ? 2139095040u : (e + 112u) << 23u) | (m << 13u);
    return e == 0u ? sub : uintBitsToFloat(bits);
}

// f32 to fp16, rounded stochastically: up with probability (distance to the
// value below) / ulp, using r's low bits as the uniform. Past 65504 rounds to
// Inf; NaN stays NaN; magnitudes below 2^-32 go to (signed) zero. Selects, no branches.
FN uint float_to_half_sr(float x, uint r) {
    uint b = floatBitsToUint(x);
    uint s = (b >> 16u) & 32768u;
    uint mag = b & 2147483647u;
    uint special = mag > 2139095040u ? 32256u : 31744u;
    uint normal = min((mag - 939524096u + (r & 8191u)) >> 13u, 31744u);  // >= 2^-14: 13 bits drop
    uint shift = min(126u - min(mag >> 23u, 126u), 31u);  // fp16 subnormal: M * 2^(e - 126) units of 2^-24
    uint mant = (mag & 8388607u) | 8388608u;
    uint sub = (mag >> 23u) < 95u ? 0u : (mant + (r & ((1u << shift) - 1u))) >> shift;
    return s | (mag >= 2139095040u ? special : (mag >= 947912704u ? normal : sub));
}

// bf16 (low 16 bits of h) to f32, exact
FN float bf16_to_float(uint h) { return uintBitsToFloat(h << 16u); }

// f32 to bf16, rounded stochastically with r's low 16 bits; Inf and NaN kept
FN uint float_to_bf16_sr(float x, uint r) {
    uint b = floatBitsToUint(x);
    if ((b & 2139095040u) == 2139095040u) {
        return (b >> 16u) | ((b & 8388607u) != 0u ? 64u : 0u);
    }
    return (b + (r & 65535u)) >> 16u;
}

// two bf16, rounded stochastically with the low 16 bits of ra and rb, in one word (a low)
FN uint pack_bf16_sr(float a, float b, uint ra, uint rb) {
    return float_to_bf16_sr(a, ra) | (float_to_bf16_sr(b, rb) << 16u);
}

// half `which` (0: low, 1: high) of a word
FN uint word_half(uint word, uint which) { return which != 0u ? word >> 16u : word & 65535u; }

// SH float f of a compact row: the word that holds it, and its value
FN uint sh_compact_word(uint f) { return f < 3u ? f : 3u + (f - 3u) / 2u; }
FN float sh_compact_value(uint word, uint f) {
    return f < 3u ? uintBitsToFloat(word) : half_to_float(word_half(word, (f - 3u) & 1u));
}
// whether SH float f of a compact row, in `word`, is finite (on the bits)
FN bool sh_compact_finite(uint word, uint f) {
    return f < 3u ? (word & 2139095040u) != 2139095040u : (word_half(word, (f - 3u) & 1u) & 31744u) != 31744u;
}
// SH moment f of a compact row: the word that holds it, its half, and its value
FN uint moment_compact_word(uint f) { return f < 3u ? f >> 1u : 2u + (f - 3u) / 2u; }
FN uint moment_compact_half(uint f) { return f < 3u ? f & 1u : (f - 3u) & 1u; }
FN float moment_compact_value(uint word, uint f) { return bf16_to_float(word_half(word, moment_compact_half(f))); }
// value k of a compact row of the moments of means, scales or quats: word k / 2, half k % 2
FN float geom_moment_value(uint word, uint k) { return bf16_to_float(word_half(word, k & 1u)); }
#endif
