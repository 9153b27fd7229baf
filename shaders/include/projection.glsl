// EWA projection of one 3D Gaussian through one pinhole camera, forward and
// backward (docs/design.md §2.3; the same maths as gsplat 1.5.3's
// fully_fused_projection). Used by projection_fwd, projection_bwd and fpbo.
//
// Conventions: quaternions are wxyz (q.x = w); matrices below are written as
// maths (R[i][j] = row i, column j) but stored column-major as GLSL does, so
// the maths entry (i, j) is M[j][i].
#ifndef SPIRULA_PROJECTION_GLSL
#define SPIRULA_PROJECTION_GLSL

const float ALPHA_THRESHOLD = 1.0 / 255.0;
const float RADIUS_SIGMAS = 3.33;
const float CLIP_MARGIN = 0.3;     // Jacobian clamp: 30% past the frustum

struct Camera {
    mat3 R;        // world -> camera rotation
    vec3 t;        // world -> camera translation
    vec4 f;        // fx, fy, cx, cy
};

// cameras buffer: [C, 20] f32 = viewmat (4x4 row-major) then fx, fy, cx, cy
#define CAMERA_FLOATS 20u
#define LOAD_CAMERA(buf, c) Camera( \
    mat3(buf[(c) * 20u + 0u], buf[(c) * 20u + 4u], buf[(c) * 20u + 8u], \
         buf[(c) * 20u + 1u], buf[(c) * 20u + 5u], buf[(c) * 20u + 9u], \
         buf[(c) * 20u + 2u], buf[(c) * 20u + 6u], buf[(c) * 20u + 10u]), \
    vec3(buf[(c) * 20u + 3u], buf[(c) * 20u + 7u], buf[(c) * 20u + 11u]), \
    vec4(buf[(c) * 20u + 16u], buf[(c) * 20u + 17u], buf[(c) * 20u + 18u], buf[(c) * 20u + 19u]))

vec3 camera_position(Camera cam) {
    return -(transpose(cam.R) * cam.t);
}

mat3 quat_to_rotmat(vec4 q) {       // q normalized, wxyz
    float w = q.x, x = q.y, y = q.z, z = q.w;
    return mat3(1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z), 2.0 * (x * z - w * y),
                2.0 * (x * y - w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z + w * x),
                2.0 * (x * z + w * y), 2.0 * (y * z - w * x), 1.0 - 2.0 * (x * x + y * y));
}

// d loss / d q (q normalized, wxyz) from d loss / d R (GLSL layout: G[j][i] = dL/dR_ij).
vec4 quat_to_rotmat_vjp(vec4 q, mat3 G) {
    float w = q.x, x = q.y, y = q.z, z = q.w;
    float g00 = G[0][0], g01 = G[1][0], g02 = G[2][0];
    float g10 = G[0][1], g11 = G[1][1], g12 = G[2][1];
    float g20 = G[0][2], g21 = G[1][2], g22 = G[2][2];
    return 2.0 * vec4(
        -z * g01 + y * g02 + z * g10 - x * g12 - y * g20 + x * g21,
        y * g01 + z * g02 + y * g10 - 2.0 * x * g11 - w * g12 + z * g20 + w * g21 - 2.0 * x * g22,
        -2.0 * y * g00 + x * g01 + w * g02 + x * g10 + z * g12 - w * g20 + z * g21 - 2.0 * y * g22,
        -2.0 * z * g00 - w * g01 + x * g02 + w * g10 - 2.0 * z * g11 + y * g12 + x * g20 + y * g21);
}

// The Jacobian's x/z and y/z, clamped to the frustum widened by CLIP_MARGIN.
// clipped.xy = 1 where the clamp is active (the gradient to x, y is then 0).
vec2 clamped_tan(vec3 pc, vec4 f, float W, float H, out vec2 clipped) {
    float tan_x = 0.5 * W / f.x, tan_y = 0.5 * H / f.y;
    float lim_xp = (W - f.z) / f.x + CLIP_MARGIN * tan_x, lim_xn = f.z / f.x + CLIP_MARGIN * tan_x;
    float lim_yp = (H - f.w) / f.y + CLIP_MARGIN * tan_y, lim_yn = f.w / f.y + CLIP_MARGIN * tan_y;
    vec2 r = pc.xy / pc.z;
    vec2 c = vec2(clamp(r.x, -lim_xn, lim_xp), clamp(r.y, -lim_yn, lim_yp));
    clipped = vec2(c.x != r.x ? 1.0 : 0.0, c.y != r.y ? 1.0 : 0.0);
    return c;
}

// Projected 2D covariance (before the eps2d blur): J Sigma_c J^T, as (xx, xy, yy).
vec3 project_cov(mat3 cov_c, vec3 pc, vec2 tanc, vec4 f) {
    float rz = 1.0 / pc.z;
    vec3 j0 = vec3(f.x * rz, 0.0, -f.x * tanc.x * rz);     // row 0 of J (tx = z * tanc.x)
    vec3 j1 = vec3(0.0, f.y * rz, -f.y * tanc.y * rz);
    vec3 s0 = cov_c * j0, s1 = cov_c * j1;                  // cov_c symmetric
    return vec3(dot(j0, s0), dot(j0, s1), dot(j1, s1));
}

// Extent in standard deviations: 3.33, tightened by the opacity (gsplat 1.5.3):
// past sqrt(2 ln(255 o)) sigmas alpha < 1/255, which the rasterizer skips anyway.
float opacity_extent(float opacity) {
    return min(RADIUS_SIGMAS, sqrt(2.0 * log(opacity / ALPHA_THRESHOLD)));
}
#endif

#ifdef SPIRULA_PROJECTION_VJP
// Backward of the projection of one visible Gaussian into one camera, in two
// parts. Shaders that use it define SPIRULA_PROJECTION_VJP and include sh.glsl.
// quat is the stored (unnormalized) quaternion, scale the activated scale; the
// gradients are with respect to the same.

// Geometry: adds to (v_mean, v_quat, v_scale) the gradient from the 2D mean
// and conic (v_mean2d, v_conic).
void projection_geometry_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, float W, float H, float eps2d,
                             vec2 v_mean2d, vec3 v_conic, inout vec3 v_mean, inout vec4 v_quat, inout vec3 v_scale) {
    vec3 pcam = cam.R * mean + cam.t;
    float qn = inversesqrt(dot(quat, quat));
    vec4 q = quat * qn;
    mat3 R = quat_to_rotmat(q);
    mat3 M = mat3(R[0] * scale.x, R[1] * scale.y, R[2] * scale.z);
    mat3 cov_c = cam.R * (M * transpose(M)) * transpose(cam.R);
    vec2 clipped;
    vec2 tanc = clamped_tan(pcam, cam.f, W, H, clipped);
    vec3 cov2d = project_cov(cov_c, pcam, tanc, cam.f) + vec3(eps2d, 0.0, eps2d);
    float inv_det = 1.0 / (cov2d.x * cov2d.z - cov2d.y * cov2d.y);
    float a = cov2d.z * inv_det, b = -cov2d.y * inv_det, c = cov2d.x * inv_det;

    // conic = inverse(cov2d): dL/dcov2d = -X V X with V the symmetric gradient
    float va = v_conic.x, vb = 0.5 * v_conic.y, vc = v_conic.z;
    float g00 = -((a * va + b * vb) * a + (a * vb + b * vc) * b);
    float g01 = -((a * va + b * vb) * b + (a * vb + b * vc) * c);
    float g11 = -((b * va + c * vb) * b + (b * vb + c * vc) * c);

    // cov2d = J cov_c J^T
    float rz = 1.0 / pcam.z, rz2 = rz * rz;
    vec3 j0 = vec3(cam.f.x * rz, 0.0, -cam.f.x * tanc.x * rz);
    vec3 j1 = vec3(0.0, cam.f.y * rz, -cam.f.y * tanc.y * rz);
    mat3 v_cov_c = g00 * outerProduct(j0, j0) + g01 * (outerProduct(j0, j1) + outerProduct(j1, j0))
                 + g11 * outerProduct(j1, j1);
    vec3 vj0 = 2.0 * (g00 * (cov_c * j0) + g01 * (cov_c * j1));    // dL/d row 0 of J
    vec3 vj1 = 2.0 * (g01 * (cov_c * j0) + g11 * (cov_c * j1));

    vec3 v_pcam = vec3(0.0);
    v_pcam.z += -cam.f.x * rz2 * vj0.x - cam.f.y * rz2 * vj1.y;
    v_pcam.x += -cam.f.x * rz2 * (1.0 - clipped.x) * vj0.z;
    v_pcam.y += -cam.f.y * rz2 * (1.0 - clipped.y) * vj1.z;
    v_pcam.z += cam.f.x * tanc.x * rz2 * (2.0 - clipped.x) * vj0.z
              + cam.f.y * tanc.y * rz2 * (2.0 - clipped.y) * vj1.z;
    // mean2d = f * xy / z + c
    v_pcam.x += v_mean2d.x * cam.f.x * rz;
    v_pcam.y += v_mean2d.y * cam.f.y * rz;
    v_pcam.z -= (v_mean2d.x * cam.f.x * pcam.x + v_mean2d.y * cam.f.y * pcam.y) * rz2;
    v_mean += transpose(cam.R) * v_pcam;

    // cov_c = Rv Sigma Rv^T, Sigma = M M^T, M = R diag(s)
    mat3 v_cov = transpose(cam.R) * v_cov_c * cam.R;
    mat3 v_M = 2.0 * v_cov * M;
    v_scale += vec3(dot(R[0], v_M[0]), dot(R[1], v_M[1]), dot(R[2], v_M[2]));
    mat3 v_R = mat3(v_M[0] * scale.x, v_M[1] * scale.y, v_M[2] * scale.z);
    vec4 v_q = quat_to_rotmat_vjp(q, v_R);
    v_quat += (v_q - q * dot(q, v_q)) * qn;
}

// Colour = max(SH(dir) . sh + 0.5, 0), dir = normalize(mean - camera centre).
// Given the SH basis at dir, the raw colour SH(dir) . sh, and w[k] =
// sh[k] . v_raw (v_raw: v_rgb masked by the clamp), adds the gradient through
// dir to v_mean.
void sh_direction_vjp(int degree, vec3 dir, float inv_len, float w[16], inout vec3 v_mean) {
    vec3 v_dir = sh_basis_vjp(degree, dir, w);
    v_mean += (v_dir - dir * dot(dir, v_dir)) * inv_len;
}

// Both parts for coefficients held in an array sh[3k + ch] (projection_bwd).
void projection_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, int degree, float sh[48],
                    float W, float H, float eps2d, vec2 v_mean2d, vec3 v_conic, vec3 v_rgb,
                    inout vec3 v_mean, inout vec4 v_quat, inout vec3 v_scale, inout float v_sh[48]) {
    projection_geometry_vjp(cam, mean, quat, scale, W, H, eps2d, v_mean2d, v_conic, v_mean, v_quat, v_scale);
    vec3 delta = mean - camera_position(cam);
    float inv_len = inversesqrt(dot(delta, delta));
    vec3 dir = delta * inv_len;
    float basis[16];
    sh_basis(degree, dir, basis);
    vec3 raw = vec3(0.0);
    int n_coeffs = (degree + 1) * (degree + 1);
    for (int k = 0; k < n_coeffs; ++k) {
        raw += basis[k] * vec3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]);
    }
    vec3 v_raw = v_rgb * vec3(greaterThanEqual(raw + 0.5, vec3(0.0)));
    float w[16];
    for (int k = 0; k < n_coeffs; ++k) {
        v_sh[3 * k] += basis[k] * v_raw.x;
        v_sh[3 * k + 1] += basis[k] * v_raw.y;
        v_sh[3 * k + 2] += basis[k] * v_raw.z;
        w[k] = dot(vec3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]), v_raw);
    }
    sh_direction_vjp(degree, dir, inv_len, w, v_mean);
}
#endif
