// Appearance correction after rendering (docs/design.md §2.8): the per-pixel maths of
// PPISP (ppisp_fwd/bwd) and of the bilateral grid (bilagrid_fwd/bwd), shared by the
// shaders and the CUDA kernels (dialect.glsl). Reference: spirula/reference/appearance.py,
// whose docstring gives the model; written from PPISP (Deutsch et al., CVPR 2026,
// nv-tlabs/ppisp) and BilaRF (Wang et al. 2024, gsplat's lib_bilagrid.py).
#ifndef SPIRULA_APPEARANCE_GLSL
#define SPIRULA_APPEARANCE_GLSL
#include "dialect.glsl"

// The view's dataset image: word 4 + v of StepParams (image_index[v]; the kernels bind
// StepParams as words, tests/test_appearance.py checks the offset against the struct)
const uint STEP_IMAGE_INDEX_WORD = 4u;
// StepParams' prev_capacity and prev_isects (fpbo's guard), as words: adam_small skips with fpbo
const uint STEP_PREV_CAPACITY_WORD = 33u;
const uint STEP_PREV_ISECTS_WORD = 34u;
// per-thread partial sums of ppisp_bwd: exposure, dL/dH (row-major), vignetting
// (3 x cx, cy, a0, a1, a2), CRF (3 x p0..p3)
const uint PPISP_ROWS = 37u;
const uint PPISP_ROW_H = 1u;
const uint PPISP_ROW_VIG = 10u;
const uint PPISP_ROW_CRF = 25u;
const float PPISP_CRF_EPS = 1e-6f;
const float PPISP_INTENSITY_EPS = 1e-5f;
const float PPISP_H_EPS = 1e-10f;
const float LN2 = 0.69314718f;
// PPISP's regularisers (nv-tlabs/ppisp PPISPConfig): weights, smooth L1 betas
const float PPISP_REG_EXPOSURE = 1.0f;
const float PPISP_REG_EXPOSURE_BETA = 0.1f;
const float PPISP_REG_VIG_CENTER = 0.02f;
const float PPISP_REG_VIG_CHANNEL = 0.1f;
const float PPISP_REG_VIG_NON_POS = 0.01f;
const float PPISP_REG_COLOR = 1.0f;
const float PPISP_REG_COLOR_BETA = 0.005f;
const float PPISP_REG_CRF_CHANNEL = 0.1f;
// BT.601 luma: the bilateral grid's guide
const float LUMA_R = 0.299f;
const float LUMA_G = 0.587f;
const float LUMA_B = 0.114f;

FN float softplus(float x) { return x > 20.0f ? x : log(1.0f + exp(x)); }
FN float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }
// d smooth_l1(x, 0; beta)/dx (torch: 0.5 x^2 / beta below beta, |x| - beta / 2 above)
FN float smooth_l1_grad(float x, float beta) { return abs(x) < beta ? x / beta : (x > 0.0f ? 1.0f : -1.0f); }

// ZCA block b (blue, red, green, neutral) of the colour parameters: (b00, b01 = b10, b11)
FN vec3 ppisp_zca(uint b) {
    if (b == 0u) {
        return vec3(0.0480542f, -0.0043631f, 0.0481283f);
    }
    if (b == 1u) {
        return vec3(0.0580570f, -0.0179872f, 0.0431061f);
    }
    if (b == 2u) {
        return vec3(0.0433336f, -0.0180537f, 0.0580500f);
    }
    return vec3(0.0128369f, -0.0034654f, 0.0128158f);
}

FN void cross3(float a0, float a1, float a2, float b0, float b1, float b2, INOUT_ARRAY(float) c[3]) {
    c[0] = a1 * b2 - a2 * b1;
    c[1] = a2 * b0 - a0 * b2;
    c[2] = a0 * b1 - a1 * b0;
}

// The homography's parts (reference _homography_parts): T (row-major), the grey target
// (gx, gy), M = skew(grey) T (row-major), the chosen row pair (ia, ib), lambda, and
// H0 = T diag(lambda) S^-1 (row-major); returns s = H0[2][2] + 1e-10.
FN float ppisp_homography_parts(float c[8], INOUT_ARRAY(float) T[9], INOUT_ARRAY(float) M[9], OUT(uint) ia,
                                OUT(uint) ib, INOUT_ARRAY(float) lam[3], INOUT_ARRAY(float) H0[9]) {
    float o[8];
    UNROLL
    for (uint b = 0u; b < 4u; b++) {
        vec3 z = ppisp_zca(b);
        o[2u * b] = c[2u * b] * z.x + c[2u * b + 1u] * z.y;
        o[2u * b + 1u] = c[2u * b] * z.y + c[2u * b + 1u] * z.z;
    }
    T[0] = o[0];
    T[1] = 1.0f + o[2];
    T[2] = o[4];
    T[3] = o[1];
    T[4] = o[3];
    T[5] = 1.0f + o[5];
    T[6] = 1.0f;
    T[7] = 1.0f;
    T[8] = 1.0f;
    float gx = 1.0f / 3.0f + o[6], gy = 1.0f / 3.0f + o[7];
    // skew(grey) = [[0, -1, gy], [1, 0, -gx], [-gy, gx, 0]]
    UNROLL
    for (uint j = 0u; j < 3u; j++) {
        M[j] = -T[3u + j] + gy * T[6u + j];
        M[3u + j] = T[j] - gx * T[6u + j];
        M[6u + j] = -gy * T[j] + gx * T[3u + j];
    }
    float l01[3], l02[3], l12[3];
    cross3(M[0], M[1], M[2], M[3], M[4], M[5], l01);
    cross3(M[0], M[1], M[2], M[6], M[7], M[8], l02);
    cross3(M[3], M[4], M[5], M[6], M[7], M[8], l12);
    float n01 = l01[0] * l01[0] + l01[1] * l01[1] + l01[2] * l01[2];
    float n02 = l02[0] * l02[0] + l02[1] * l02[1] + l02[2] * l02[2];
    float n12 = l12[0] * l12[0] + l12[1] * l12[1] + l12[2] * l12[2];
    uint sel = n01 >= n02 ? (n01 >= n12 ? 0u : 2u) : (n02 >= n12 ? 1u : 2u);
    ia = sel == 2u ? 1u : 0u;
    ib = sel == 0u ? 1u : 2u;
    UNROLL
    for (uint k = 0u; k < 3u; k++) {
        lam[k] = sel == 0u ? l01[k] : (sel == 1u ? l02[k] : l12[k]);
    }
    // S^-1 = [[-1, -1, 1], [1, 0, 0], [0, 1, 0]]: (D S^-1) rows are lam_j times S^-1's
    UNROLL
    for (uint i = 0u; i < 3u; i++) {
        float t0 = T[3u * i] * lam[0], t1 = T[3u * i + 1u] * lam[1], t2 = T[3u * i + 2u] * lam[2];
        H0[3u * i] = -t0 + t1;
        H0[3u * i + 1u] = -t0 + t2;
        H0[3u * i + 2u] = t0;
    }
    return H0[8] + PPISP_H_EPS;
}

// H (row-major) of the 8 colour parameters: H0 / (H0[2][2] + 1e-10)
FN void ppisp_homography(float c[8], INOUT_ARRAY(float) h[9]) {
    float T[9], M[9], lam[3];
    uint ia, ib;
    float s = ppisp_homography_parts(c, T, M, ia, ib, lam, h);
    UNROLL
    for (uint k = 0u; k < 9u; k++) {
        h[k] = h[k] / s;
    }
}

// dL/d(colour parameters) from G = dL/dH (row-major): reference color_homography_vjp
FN void ppisp_homography_vjp(float c[8], float G[9], INOUT_ARRAY(float) gc[8]) {
    float T[9], M[9], lam[3], H0[9];
    uint ia, ib;
    float s = ppisp_homography_parts(c, T, M, ia, ib, lam, H0);
    float G0[9];
    float gh0 = 0.0f;
    UNROLL
    for (uint k = 0u; k < 9u; k++) {
        G0[k] = G[k] / s;
        gh0 += G[k] * H0[k];
    }
    G0[8] -= gh0 / (s * s);
    // A = G0 S^-T: A[i][j] = sum_k G0[i][k] S^-1[j][k]
    float A[9];
    UNROLL
    for (uint i = 0u; i < 3u; i++) {
        A[3u * i] = -G0[3u * i] - G0[3u * i + 1u] + G0[3u * i + 2u];
        A[3u * i + 1u] = G0[3u * i];
        A[3u * i + 2u] = G0[3u * i + 1u];
    }
    float gT[9], glam[3];
    UNROLL
    for (uint j = 0u; j < 3u; j++) {
        glam[j] = T[j] * A[j] + T[3u + j] * A[3u + j] + T[6u + j] * A[6u + j];
    }
    UNROLL
    for (uint k = 0u; k < 9u; k++) {
        gT[k] = A[k] * lam[k % 3u];
    }
    // lam = M[ia] x M[ib]: dL/dM[ia] = M[ib] x glam, dL/dM[ib] = glam x M[ia]
    float gM[9];
    UNROLL
    for (uint k = 0u; k < 9u; k++) {
        gM[k] = 0.0f;
    }
    float ga[3], gb[3];
    cross3(M[3u * ib], M[3u * ib + 1u], M[3u * ib + 2u], glam[0], glam[1], glam[2], ga);
    cross3(glam[0], glam[1], glam[2], M[3u * ia], M[3u * ia + 1u], M[3u * ia + 2u], gb);
    UNROLL
    for (uint j = 0u; j < 3u; j++) {
        gM[3u * ia + j] += ga[j];
        gM[3u * ib + j] += gb[j];
    }
    // M = K T: dL/dK = gM T^T (the entries that hold gx, gy), dL/dT += K^T gM
    float gK02 = gM[0] * T[6] + gM[1] * T[7] + gM[2] * T[8];
    float gK12 = gM[3] * T[6] + gM[4] * T[7] + gM[5] * T[8];
    float gK20 = gM[6] * T[0] + gM[7] * T[1] + gM[8] * T[2];
    float gK21 = gM[6] * T[3] + gM[7] * T[4] + gM[8] * T[5];
    float gx = -gK12 + gK21;  // dL/d(the grey target's x, y): K[1][2] = -x, K[2][1] = x, ...
    float gy = gK02 - gK20;
    // the grey target itself, from M's construction (T's row 2 is ones): M[3] = T[0] - x, M[0] = -T[3] + y
    float tx = T[0] - M[3], ty = M[0] + T[3];
    // K^T gM, rows 0 and 1 (T's row 2 is constant): K^T = [[0, 1, -y], [-1, 0, x], [y, -x, 0]]
    UNROLL
    for (uint j = 0u; j < 3u; j++) {
        gT[j] += gM[3u + j] - ty * gM[6u + j];
        gT[3u + j] += -gM[j] + tx * gM[6u + j];
    }
    float go[8];
    go[0] = gT[0];
    go[1] = gT[3];
    go[2] = gT[1];
    go[3] = gT[4];
    go[4] = gT[2];
    go[5] = gT[5];
    go[6] = gx;
    go[7] = gy;
    UNROLL
    for (uint b = 0u; b < 4u; b++) {
        vec3 z = ppisp_zca(b);
        gc[2u * b] = z.x * go[2u * b] + z.y * go[2u * b + 1u];
        gc[2u * b + 1u] = z.y * go[2u * b] + z.z * go[2u * b + 1u];
    }
}

// uv of pixel p's centre in a W x H image: (centre - size / 2) / max(W, H)
FN vec2 ppisp_uv(uint p, uint W, uint H) {
    float s = float(max(W, H));
    return vec2((float(p % W) + 0.5f - 0.5f * float(W)) / s, (float(p / W) + 0.5f - 0.5f * float(H)) / s);
}

// The unclamped vignetting falloff of one channel's (cx, cy, a0, a1, a2) = v[5k..5k+4]
FN float ppisp_falloff(float v[15], uint k, vec2 uv) {
    float du = uv.x - v[5u * k], dv = uv.y - v[5u * k + 1u];
    float r2 = du * du + dv * dv;
    return 1.0f + r2 * (v[5u * k + 2u] + r2 * (v[5u * k + 3u] + r2 * v[5u * k + 4u]));
}

// colour correction of one pixel by H (row-major): intensity kept
FN vec3 ppisp_color(vec3 c, float h[9]) {
    float I = c.x + c.y + c.z;
    float v0 = h[0] * c.x + h[1] * c.y + h[2] * I;
    float v1 = h[3] * c.x + h[4] * c.y + h[5] * I;
    float v2 = h[6] * c.x + h[7] * c.y + h[8] * I;
    float k = I / (v2 + PPISP_INTENSITY_EPS);
    float w0 = v0 * k, w1 = v1 * k;
    return vec3(w0, w1, v2 * k - w0 - w1);
}

// The CRF curve's decoded parameters of channel k of p[12]: toe, shoulder, gamma, centre,
// lerp = toe + centre (shoulder - toe), a = shoulder centre / lerp
FN void ppisp_crf_decode(float p[12], uint k, OUT(float) toe, OUT(float) sh, OUT(float) gam, OUT(float) ctr,
                         OUT(float) lerp_, OUT(float) a) {
    toe = 0.3f + softplus(p[4u * k]);
    sh = 0.3f + softplus(p[4u * k + 1u]);
    gam = 0.1f + softplus(p[4u * k + 2u]);
    ctr = sigmoid(p[4u * k + 3u]);
    lerp_ = toe + ctr * (sh - toe);
    a = sh * ctr / lerp_;
}

FN float ppisp_crf(float x_in, float p[12], uint k) {
    float toe, sh, gam, ctr, lerp_, a;
    ppisp_crf_decode(p, k, toe, sh, gam, ctr, lerp_, a);
    float x = clamp(x_in, 0.0f, 1.0f);
    float y;
    if (x <= ctr) {
        y = a * pow(max(x / ctr, PPISP_CRF_EPS), toe);
    } else {
        y = 1.0f - (1.0f - a) * pow(max((1.0f - x) / (1.0f - ctr), PPISP_CRF_EPS), sh);
    }
    return pow(max(y, PPISP_CRF_EPS), gam);
}

// dL/dx_in of channel k's CRF with cotangent g; adds dL/dp[4k..4k+3] to acc[row..row+3]
FN float ppisp_crf_vjp(float x_in, float p[12], uint k, float g, INOUT_ARRAY(float) acc[PPISP_ROWS], uint row) {
    float toe, sh, gam, ctr, lerp_, a;
    ppisp_crf_decode(p, k, toe, sh, gam, ctr, lerp_, a);
    float b = 1.0f - a;
    float x = clamp(x_in, 0.0f, 1.0f);
    bool low = x <= ctr;
    float u = low ? x / ctr : (1.0f - x) / (1.0f - ctr);
    float um = max(u, PPISP_CRF_EPS);
    float e = low ? toe : sh;
    float pw = pow(um, e);
    float y = low ? a * pw : 1.0f - b * pw;
    float z = max(y, PPISP_CRF_EPS);
    float out_ = pow(z, gam);
    float d_gam = g * out_ * log(z);
    float d_y = y >= PPISP_CRF_EPS ? g * gam * out_ / z : 0.0f;
    float s = low ? a : -b;  // y = const + s pw
    float d_e = d_y * s * pw * log(um);
    float d_u = u >= PPISP_CRF_EPS ? d_y * s * e * pw / um : 0.0f;
    float d_a = d_y * pw;  // low: y = a pw; high: y = 1 - (1 - a) pw
    float d_x, d_ctr;
    if (low) {
        d_x = d_u / ctr;
        d_ctr = -d_u * x / (ctr * ctr);
    } else {
        d_x = -d_u / (1.0f - ctr);
        d_ctr = d_u * (1.0f - x) / ((1.0f - ctr) * (1.0f - ctr));
    }
    float d_toe = (low ? d_e : 0.0f) - d_a * a * (1.0f - ctr) / lerp_;
    float d_sh = (low ? 0.0f : d_e) + d_a * (ctr / lerp_ - a * ctr / lerp_);
    d_ctr += d_a * (sh / lerp_ - a * (sh - toe) / lerp_);
    acc[row] += d_toe * sigmoid(p[4u * k]);
    acc[row + 1u] += d_sh * sigmoid(p[4u * k + 1u]);
    acc[row + 2u] += d_gam * sigmoid(p[4u * k + 2u]);
    acc[row + 3u] += d_ctr * ctr * (1.0f - ctr);
    return x_in >= 0.0f && x_in <= 1.0f ? d_x : 0.0f;
}

// The whole ISP of one pixel: exposure e and colour H when frame_on, vignetting v and
// CRF p when camera_on
FN vec3 ppisp_pixel(vec3 rgb, vec2 uv, bool frame_on, bool camera_on, float e, float h[9], float v[15], float p[12]) {
    vec3 c = rgb;
    if (frame_on) {
        c = c * exp2(e);
    }
    if (camera_on) {
        c.x *= clamp(ppisp_falloff(v, 0u, uv), 0.0f, 1.0f);
        c.y *= clamp(ppisp_falloff(v, 1u, uv), 0.0f, 1.0f);
        c.z *= clamp(ppisp_falloff(v, 2u, uv), 0.0f, 1.0f);
    }
    if (frame_on) {
        c = ppisp_color(c, h);
    }
    if (camera_on) {
        c = vec3(ppisp_crf(c.x, p, 0u), ppisp_crf(c.y, p, 1u), ppisp_crf(c.z, p, 2u));
    }
    return c;
}

// Its vector-Jacobian product: returns dL/drgb, adds the pixel's parameter terms to acc
// (rows as PPISP_ROWS: dL/dH, not yet dL/d colour parameters)
FN vec3 ppisp_pixel_vjp(vec3 rgb, vec2 uv, bool frame_on, bool camera_on, float e, float h[9], float v[15], float p[12],
                        vec3 g, INOUT_ARRAY(float) acc[PPISP_ROWS]) {
    // the forward's intermediates
    float scale = frame_on ? exp2(e) : 1.0f;
    vec3 c_exp = rgb * scale;
    vec3 f = vec3(1.0f);
    if (camera_on) {
        f = vec3(ppisp_falloff(v, 0u, uv), ppisp_falloff(v, 1u, uv), ppisp_falloff(v, 2u, uv));
    }
    vec3 c_vig =
        camera_on ? c_exp * vec3(clamp(f.x, 0.0f, 1.0f), clamp(f.y, 0.0f, 1.0f), clamp(f.z, 0.0f, 1.0f)) : c_exp;
    vec3 c_col = frame_on ? ppisp_color(c_vig, h) : c_vig;
    vec3 gc = g;
    if (camera_on) {
        gc = vec3(ppisp_crf_vjp(c_col.x, p, 0u, g.x, acc, PPISP_ROW_CRF),
                  ppisp_crf_vjp(c_col.y, p, 1u, g.y, acc, PPISP_ROW_CRF + 4u),
                  ppisp_crf_vjp(c_col.z, p, 2u, g.z, acc, PPISP_ROW_CRF + 8u));
    }
    if (frame_on) {
        float I = c_vig.x + c_vig.y + c_vig.z;
        float r0 = c_vig.x, r1 = c_vig.y;
        float v0 = h[0] * r0 + h[1] * r1 + h[2] * I;
        float v1 = h[3] * r0 + h[4] * r1 + h[5] * I;
        float v2 = h[6] * r0 + h[7] * r1 + h[8] * I;
        float den = v2 + PPISP_INTENSITY_EPS;
        float k = I / den;
        float gw0 = gc.x - gc.z, gw1 = gc.y - gc.z, gw2 = gc.z;
        float gk = gw0 * v0 + gw1 * v1 + gw2 * v2;
        float gv0 = gw0 * k, gv1 = gw1 * k, gv2 = gw2 * k - gk * I / (den * den);
        acc[PPISP_ROW_H] += gv0 * r0;
        acc[PPISP_ROW_H + 1u] += gv0 * r1;
        acc[PPISP_ROW_H + 2u] += gv0 * I;
        acc[PPISP_ROW_H + 3u] += gv1 * r0;
        acc[PPISP_ROW_H + 4u] += gv1 * r1;
        acc[PPISP_ROW_H + 5u] += gv1 * I;
        acc[PPISP_ROW_H + 6u] += gv2 * r0;
        acc[PPISP_ROW_H + 7u] += gv2 * r1;
        acc[PPISP_ROW_H + 8u] += gv2 * I;
        float gI = gk / den + h[2] * gv0 + h[5] * gv1 + h[8] * gv2;
        gc = vec3(h[0] * gv0 + h[3] * gv1 + h[6] * gv2 + gI, h[1] * gv0 + h[4] * gv1 + h[7] * gv2 + gI, gI);
    }
    if (camera_on) {
        UNROLL
        for (uint k = 0u; k < 3u; k++) {
            float fk = f[k];
            float gf = fk >= 0.0f && fk <= 1.0f ? gc[k] * c_exp[k] : 0.0f;
            float du = uv.x - v[5u * k], dv = uv.y - v[5u * k + 1u];
            float r2 = du * du + dv * dv;
            float gr2 = gf * (v[5u * k + 2u] + r2 * (2.0f * v[5u * k + 3u] + r2 * 3.0f * v[5u * k + 4u]));
            uint row = PPISP_ROW_VIG + 5u * k;
            acc[row] += -2.0f * gr2 * du;
            acc[row + 1u] += -2.0f * gr2 * dv;
            acc[row + 2u] += gf * r2;
            acc[row + 3u] += gf * r2 * r2;
            acc[row + 4u] += gf * r2 * r2 * r2;
            gc[k] = gc[k] * clamp(fk, 0.0f, 1.0f);
        }
    }
    if (frame_on) {
        acc[0] += (gc.x * rgb.x + gc.y * rgb.y + gc.z * rgb.z) * scale * LN2;
        gc = gc * scale;
    }
    return gc;
}

// ---- bilateral grid -------------------------------------------------------------------

// One axis of the grid's sampling: the lower node i0 (<= n - 2), the fraction, and
// whether the unclamped coordinate lies strictly inside (its gradient passes)
FN bool bilagrid_axis(float coord, uint n, OUT(uint) i0, OUT(float) frac) {
    float top = float(n - 1u);
    float c = clamp(coord, 0.0f, top);
    i0 = min(uint(floor(c)), n >= 2u ? n - 2u : 0u);
    frac = c - float(i0);
    return coord > 0.0f && coord < top;
}
#endif
