// EWA projection of one 3D Gaussian through one pinhole camera, forward and
// backward: the twin of shaders/include/projection.glsl (same maths, same
// order of operations). Quaternions are wxyz (q.x = w); matrices are
// column-major as in GLSL (see glsl.cuh).
#ifndef SPIRULA_PROJECTION_CUH
#define SPIRULA_PROJECTION_CUH

#include "glsl.cuh"
#include "sh.cuh"

namespace spirula {

constexpr float ALPHA_THRESHOLD = 1.0f / 255.0f;
constexpr float RADIUS_SIGMAS = 3.33f;
constexpr float CLIP_MARGIN = 0.3f;      // Jacobian clamp: 30% past the frustum

struct Camera {
    mat3 R;        // world -> camera rotation
    vec3 t;        // world -> camera translation
    vec4 f;        // fx, fy, cx, cy
};

// cameras buffer: [C, 20] f32 = viewmat (4x4 row-major) then fx, fy, cx, cy
constexpr uint32_t CAMERA_FLOATS = 20u;
SPIRULA_FN Camera load_camera(const float* buf, uint32_t c) {
    const float* b = buf + c * CAMERA_FLOATS;
    Camera cam;
    cam.R = mat3_scalars(b[0], b[4], b[8], b[1], b[5], b[9], b[2], b[6], b[10]);
    cam.t = make3(b[3], b[7], b[11]);
    cam.f = make4(b[16], b[17], b[18], b[19]);
    return cam;
}

SPIRULA_FN vec3 camera_position(const Camera& cam) { return -(transpose(cam.R) * cam.t); }

SPIRULA_FN mat3 quat_to_rotmat(vec4 q) {        // q normalized, wxyz
    float w = q.x, x = q.y, y = q.z, z = q.w;
    return mat3_scalars(1.0f - 2.0f * (y * y + z * z), 2.0f * (x * y + w * z), 2.0f * (x * z - w * y),
                        2.0f * (x * y - w * z), 1.0f - 2.0f * (x * x + z * z), 2.0f * (y * z + w * x),
                        2.0f * (x * z + w * y), 2.0f * (y * z - w * x), 1.0f - 2.0f * (x * x + y * y));
}

// d loss / d q (q normalized, wxyz) from d loss / d R (G.c[j][i] = dL/dR_ij).
SPIRULA_FN vec4 quat_to_rotmat_vjp(vec4 q, const mat3& G) {
    float w = q.x, x = q.y, y = q.z, z = q.w;
    float g00 = G.c[0][0], g01 = G.c[1][0], g02 = G.c[2][0];
    float g10 = G.c[0][1], g11 = G.c[1][1], g12 = G.c[2][1];
    float g20 = G.c[0][2], g21 = G.c[1][2], g22 = G.c[2][2];
    return 2.0f * make4(
        -z * g01 + y * g02 + z * g10 - x * g12 - y * g20 + x * g21,
        y * g01 + z * g02 + y * g10 - 2.0f * x * g11 - w * g12 + z * g20 + w * g21 - 2.0f * x * g22,
        -2.0f * y * g00 + x * g01 + w * g02 + x * g10 + z * g12 - w * g20 + z * g21 - 2.0f * y * g22,
        -2.0f * z * g00 - w * g01 + x * g02 + w * g10 - 2.0f * z * g11 + y * g12 + x * g20 + y * g21);
}

// The Jacobian's x/z and y/z, clamped to the frustum widened by CLIP_MARGIN.
// clipped = 1 where the clamp is active (the gradient to x, y is then 0).
SPIRULA_FN vec2 clamped_tan(vec3 pc, vec4 f, float W, float H, vec2& clipped) {
    float tan_x = 0.5f * W / f.x, tan_y = 0.5f * H / f.y;
    float lim_xp = (W - f.z) / f.x + CLIP_MARGIN * tan_x, lim_xn = f.z / f.x + CLIP_MARGIN * tan_x;
    float lim_yp = (H - f.w) / f.y + CLIP_MARGIN * tan_y, lim_yn = f.w / f.y + CLIP_MARGIN * tan_y;
    vec2 r = make2(pc.x / pc.z, pc.y / pc.z);
    vec2 c = make2(glsl_clamp(r.x, -lim_xn, lim_xp), glsl_clamp(r.y, -lim_yn, lim_yp));
    clipped = make2(c.x != r.x ? 1.0f : 0.0f, c.y != r.y ? 1.0f : 0.0f);
    return c;
}

// Projected 2D covariance (before the eps2d blur): J Sigma_c J^T, as (xx, xy, yy).
SPIRULA_FN vec3 project_cov(const mat3& cov_c, vec3 pc, vec2 tanc, vec4 f) {
    float rz = 1.0f / pc.z;
    vec3 j0 = make3(f.x * rz, 0.0f, -f.x * tanc.x * rz);     // row 0 of J
    vec3 j1 = make3(0.0f, f.y * rz, -f.y * tanc.y * rz);
    vec3 s0 = cov_c * j0, s1 = cov_c * j1;                   // cov_c symmetric
    return make3(dot(j0, s0), dot(j0, s1), dot(j1, s1));
}

// Extent in standard deviations: 3.33, tightened by the opacity (gsplat 1.5.3).
SPIRULA_FN float opacity_extent(float opacity) {
    return fminf(RADIUS_SIGMAS, sqrtf(2.0f * logf(opacity / ALPHA_THRESHOLD)));
}

// Backward of the projection of one visible Gaussian into one camera, in two
// parts (projection.glsl's SPIRULA_PROJECTION_VJP half). quat is the stored
// (unnormalized) quaternion, scale the activated scale; the gradients are
// with respect to the same.

// Geometry: adds to (v_mean, v_quat, v_scale) the gradient from the 2D mean
// and conic (v_mean2d, v_conic).
SPIRULA_FN void projection_geometry_vjp(const Camera& cam, vec3 mean, vec4 quat, vec3 scale, float W, float H,
                                        float eps2d, vec2 v_mean2d, vec3 v_conic, vec3& v_mean, vec4& v_quat,
                                        vec3& v_scale) {
    vec3 pcam = cam.R * mean + cam.t;
    float qn = inversesqrt(dot(quat, quat));
    vec4 q = quat * qn;
    mat3 R = quat_to_rotmat(q);
    mat3 M = mat3_cols(R.c[0] * scale.x, R.c[1] * scale.y, R.c[2] * scale.z);
    mat3 cov_c = cam.R * (M * transpose(M)) * transpose(cam.R);
    vec2 clipped;
    vec2 tanc = clamped_tan(pcam, cam.f, W, H, clipped);
    vec3 cov2d = project_cov(cov_c, pcam, tanc, cam.f) + make3(eps2d, 0.0f, eps2d);
    float inv_det = 1.0f / (cov2d.x * cov2d.z - cov2d.y * cov2d.y);
    float a = cov2d.z * inv_det, b = -cov2d.y * inv_det, c = cov2d.x * inv_det;

    // conic = inverse(cov2d): dL/dcov2d = -X V X with V the symmetric gradient
    float va = v_conic.x, vb = 0.5f * v_conic.y, vc = v_conic.z;
    float g00 = -((a * va + b * vb) * a + (a * vb + b * vc) * b);
    float g01 = -((a * va + b * vb) * b + (a * vb + b * vc) * c);
    float g11 = -((b * va + c * vb) * b + (b * vb + c * vc) * c);

    // cov2d = J cov_c J^T
    float rz = 1.0f / pcam.z, rz2 = rz * rz;
    vec3 j0 = make3(cam.f.x * rz, 0.0f, -cam.f.x * tanc.x * rz);
    vec3 j1 = make3(0.0f, cam.f.y * rz, -cam.f.y * tanc.y * rz);
    mat3 v_cov_c = g00 * outerProduct(j0, j0) + g01 * (outerProduct(j0, j1) + outerProduct(j1, j0))
                 + g11 * outerProduct(j1, j1);
    vec3 vj0 = 2.0f * (g00 * (cov_c * j0) + g01 * (cov_c * j1));    // dL/d row 0 of J
    vec3 vj1 = 2.0f * (g01 * (cov_c * j0) + g11 * (cov_c * j1));

    vec3 v_pcam = make3(0.0f, 0.0f, 0.0f);
    v_pcam.z += -cam.f.x * rz2 * vj0.x - cam.f.y * rz2 * vj1.y;
    v_pcam.x += -cam.f.x * rz2 * (1.0f - clipped.x) * vj0.z;
    v_pcam.y += -cam.f.y * rz2 * (1.0f - clipped.y) * vj1.z;
    v_pcam.z += cam.f.x * tanc.x * rz2 * (2.0f - clipped.x) * vj0.z
              + cam.f.y * tanc.y * rz2 * (2.0f - clipped.y) * vj1.z;
    // mean2d = f * xy / z + c
    v_pcam.x += v_mean2d.x * cam.f.x * rz;
    v_pcam.y += v_mean2d.y * cam.f.y * rz;
    v_pcam.z -= (v_mean2d.x * cam.f.x * pcam.x + v_mean2d.y * cam.f.y * pcam.y) * rz2;
    v_mean += transpose(cam.R) * v_pcam;

    // cov_c = Rv Sigma Rv^T, Sigma = M M^T, M = R diag(s)
    mat3 v_cov = transpose(cam.R) * v_cov_c * cam.R;
    mat3 v_M = 2.0f * v_cov * M;
    v_scale += make3(dot(R.c[0], v_M.c[0]), dot(R.c[1], v_M.c[1]), dot(R.c[2], v_M.c[2]));
    mat3 v_R = mat3_cols(v_M.c[0] * scale.x, v_M.c[1] * scale.y, v_M.c[2] * scale.z);
    vec4 v_q = quat_to_rotmat_vjp(q, v_R);
    v_quat += (v_q - q * dot(q, v_q)) * qn;
}

// Colour = max(SH(dir) . sh + 0.5, 0), dir = normalize(mean - camera centre).
// Given w[k] = sh[k] . v_raw (v_raw: v_rgb masked by the clamp), adds the
// gradient through dir to v_mean. DEGREE is SH_DEGREE.
template <int DEGREE>
SPIRULA_FN void sh_direction_vjp(vec3 dir, float inv_len, const float w[16], vec3& v_mean) {
    vec3 v_dir = sh_basis_vjp(DEGREE, dir, w);
    v_mean += (v_dir - dir * dot(dir, v_dir)) * inv_len;
}

// The clamp mask of the colour: 1 where raw + 0.5 >= 0 (greaterThanEqual).
SPIRULA_FN vec3 colour_clamp_mask(vec3 raw) {
    return make3(raw.x + 0.5f >= 0.0f ? 1.0f : 0.0f, raw.y + 0.5f >= 0.0f ? 1.0f : 0.0f,
                 raw.z + 0.5f >= 0.0f ? 1.0f : 0.0f);
}

// Both parts for coefficients held in an array sh[3k + ch] (projection_bwd):
// adds to (v_mean, v_quat, v_scale, v_sh) the gradient from one camera's
// projection outputs (v_mean2d, v_conic, v_rgb).
template <int DEGREE>
SPIRULA_FN void projection_vjp(const Camera& cam, vec3 mean, vec4 quat, vec3 scale, const float sh[48], float W,
                               float H, float eps2d, vec2 v_mean2d, vec3 v_conic, vec3 v_rgb, vec3& v_mean,
                               vec4& v_quat, vec3& v_scale, float v_sh[48]) {
    projection_geometry_vjp(cam, mean, quat, scale, W, H, eps2d, v_mean2d, v_conic, v_mean, v_quat, v_scale);
    vec3 delta = mean - camera_position(cam);
    float inv_len = inversesqrt(dot(delta, delta));
    vec3 dir = delta * inv_len;
    float basis[16];
    sh_basis(DEGREE, dir, basis);
    vec3 raw = make3(0.0f, 0.0f, 0.0f);
    constexpr int n_coeffs = (DEGREE + 1) * (DEGREE + 1);
#pragma unroll
    for (int k = 0; k < n_coeffs; ++k) {
        raw += basis[k] * make3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]);
    }
    vec3 v_raw = v_rgb * colour_clamp_mask(raw);
    float w[16];
#pragma unroll
    for (int k = 0; k < n_coeffs; ++k) {
        v_sh[3 * k] += basis[k] * v_raw.x;
        v_sh[3 * k + 1] += basis[k] * v_raw.y;
        v_sh[3 * k + 2] += basis[k] * v_raw.z;
        w[k] = dot(make3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]), v_raw);
    }
    sh_direction_vjp<DEGREE>(dir, inv_len, w, v_mean);
}

}  // namespace spirula

#endif
