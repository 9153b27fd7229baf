// EWA projection of one 3D Gaussian through one pinhole camera, forward and
// backward (docs/design.md §2.3; the same maths as gsplat 1.5.3's
// fully_fused_projection). Used by projection_fwd, projection_bwd and fpbo, in
// the shaders and the CUDA kernels (dialect.glsl).
//
// Conventions: quaternions are wxyz (q.x = w); matrices below are written as
// maths (R[i][j] = row i, column j) but stored column-major as GLSL does, so
// the maths entry (i, j) is M[j][i].
#ifndef SPIRULA_PROJECTION_GLSL
#define SPIRULA_PROJECTION_GLSL
#include "dialect.glsl"
#include "finite.glsl"

const float ALPHA_THRESHOLD = 1.0f / 255.0f;
const float RADIUS_SIGMAS = 3.33f;
const float CLIP_MARGIN = 0.3f;  // Jacobian clamp: 30% past the frustum

struct Camera {
    mat3 R;  // world -> camera rotation
    vec3 t;  // world -> camera translation
    vec4 f;  // fx, fy, cx, cy
};

// cameras buffer: [C, 20] f32 = viewmat (4x4 row-major) then fx, fy, cx, cy
#define CAMERA_FLOATS 20u
#define LOAD_CAMERA(buf, c)                                                                                           \
    CAMERA(                                                                                                           \
        mat3(buf[(c) * 20u + 0u], buf[(c) * 20u + 4u], buf[(c) * 20u + 8u], buf[(c) * 20u + 1u], buf[(c) * 20u + 5u], \
             buf[(c) * 20u + 9u], buf[(c) * 20u + 2u], buf[(c) * 20u + 6u], buf[(c) * 20u + 10u]),                    \
        vec3(buf[(c) * 20u + 3u], buf[(c) * 20u + 7u], buf[(c) * 20u + 11u]),                                         \
        vec4(buf[(c) * 20u + 16u], buf[(c) * 20u + 17u], buf[(c) * 20u + 18u], buf[(c) * 20u + 19u]))

#ifdef __CUDACC__
// C++17 has no constructor of an aggregate by parentheses: GLSL's Camera(R, t, f)
FN Camera make_camera(mat3 R, vec3 t, vec4 f) {
    Camera cam;
    cam.R = R;
    cam.t = t;
    cam.f = f;
    return cam;
}
#define CAMERA make_camera
#else
#define CAMERA Camera
#endif

FN vec3 camera_position(Camera cam) { return -(transpose(cam.R) * cam.t); }

FN mat3 quat_to_rotmat(vec4 q) {  // q normalized, wxyz
    float w = q.x, x = q.y, y = q.z, z = q.w;
    return mat3(1.0f - 2.0f * (y * y + z * z), 2.0f * (x * y + w * z), 2.0f * (x * z - w * y), 2.0f * (x * y - w * z),
                1.0f - 2.0f * (x * x + z * z), 2.0f * (y * z + w * x), 2.0f * (x * z + w * y), 2.0f * (y * z - w * x),
                1.0f - 2.0f * (x * x + y * y));
}

// d loss / d q (q normalized, wxyz) from d loss / d R (GLSL layout: G[j][i] = dL/dR_ij).
FN vec4 quat_to_rotmat_vjp(vec4 q, mat3 G) {
    float w = q.x, x = q.y, y = q.z, z = q.w;
    float g00 = G[0][0], g01 = G[1][0], g02 = G[2][0];
    float g10 = G[0][1], g11 = G[1][1], g12 = G[2][1];
    float g20 = G[0][2], g21 = G[1][2], g22 = G[2][2];
    return 2.0f * vec4(-z * g01 + y * g02 + z * g10 - x * g12 - y * g20 + x * g21,
                       y * g01 + z * g02 + y * g10 - 2.0f * x * g11 - w * g12 + z * g20 + w * g21 - 2.0f * x * g22,
                       -2.0f * y * g00 + x * g01 + w * g02 + x * g10 + z * g12 - w * g20 + z * g21 - 2.0f * y * g22,
                       -2.0f * z * g00 - w * g01 + x * g02 + w * g10 - 2.0f * z * g11 + y * g12 + x * g20 + y * g21);
}

// The Jacobian's x/z and y/z, clamped to the frustum widened by CLIP_MARGIN.
// clipped.xy = 1 where the clamp is active (the gradient to x, y is then 0).
FN vec2 clamped_tan(vec3 pc, vec4 f, float W, float H, OUT(vec2) clipped) {
    float tan_x = 0.5f * W / f.x, tan_y = 0.5f * H / f.y;
    float lim_xp = (W - f.z) / f.x + CLIP_MARGIN * tan_x, lim_xn = f.z / f.x + CLIP_MARGIN * tan_x;
    float lim_yp = (H - f.w) / f.y + CLIP_MARGIN * tan_y, lim_yn = f.w / f.y + CLIP_MARGIN * tan_y;
    vec2 r = vec2(pc.x, pc.y) / pc.z;
    vec2 c = vec2(clamp(r.x, -lim_xn, lim_xp), clamp(r.y, -lim_yn, lim_yp));
    clipped = vec2(c.x != r.x ? 1.0f : 0.0f, c.y != r.y ? 1.0f : 0.0f);
    return c;
}

// Projected 2D covariance (before the eps2d blur): J Sigma_c J^T, as (xx, xy, yy).
FN vec3 project_cov(mat3 cov_c, vec3 pc, vec2 tanc, vec4 f) {
    float rz = 1.0f / pc.z;
    vec3 j0 = vec3(f.x * rz, 0.0f, -f.x * tanc.x * rz);  // row 0 of J (tx = z * tanc.x)
    vec3 j1 = vec3(0.0f, f.y * rz, -f.y * tanc.y * rz);
    vec3 s0 = cov_c * j0, s1 = cov_c * j1;  // cov_c symmetric
    return vec3(dot(j0, s0), dot(j0, s1), dot(j1, s1));
}

// Forward projection of a Gaussian whose mean is pcam in camera space (scale
// activated, quat as stored): returns its 2D covariance with the eps2d blur,
// as (xx, xy, yy), its 2D mean in mean2d and that covariance's determinant in det.
FN vec3 project_gaussian(Camera cam, vec3 pcam, vec4 quat, vec3 scale, float W, float H, float eps2d, OUT(vec2) mean2d,
                         OUT(float) det) {
    mat3 R = quat_to_rotmat(quat * inversesqrt(dot(quat, quat)));
    mat3 M = mat3(R[0] * scale.x, R[1] * scale.y, R[2] * scale.z);
    mat3 cov_c = cam.R * (M * transpose(M)) * transpose(cam.R);
    vec2 clipped;
    vec2 tanc = clamped_tan(pcam, cam.f, W, H, clipped);
    vec3 cov2d = project_cov(cov_c, pcam, tanc, cam.f) + vec3(eps2d, 0.0f, eps2d);
    det = cov2d.x * cov2d.z - cov2d.y * cov2d.y;
    mean2d = vec2(cam.f.x * pcam.x / pcam.z + cam.f.z, cam.f.y * pcam.y / pcam.z + cam.f.w);
    return cov2d;
}

// Extent in standard deviations: 3.33, tightened by the opacity (gsplat 1.5.3):
// past sqrt(2 ln(255 o)) sigmas alpha < 1/255, which the rasterizer skips anyway.
FN float opacity_extent(float opacity) { return min(RADIUS_SIGMAS, sqrt(2.0f * log(opacity / ALPHA_THRESHOLD))); }

// Half-size in pixels (x, y) of the screen rectangle of a Gaussian of 2D
// covariance cov2d (xx, xy, yy) and this opacity.
FN vec2 screen_radius(vec3 cov2d, float opacity) {
    float extent = opacity_extent(opacity);
    return ceil(extent * sqrt(vec2(cov2d.x, cov2d.z)));
}

// Both tests below are phrased as what a visible Gaussian satisfies, so that
// NaN fails them under IEEE rules; and they test finiteness on the bits
// (finite.glsl), as Vulkan without float controls lets a compiler assume no
// value is NaN or Inf and fold a comparison with NaN either way.

// Whether a Gaussian at pcam (camera space) with this (activated) opacity
// can be drawn: finite, between the near and far planes, not transparent.
FN bool in_view(vec3 pcam, float opacity, float near_plane, float far_plane) {
    return finite3(pcam) && finite1(opacity) && pcam.z > near_plane && pcam.z < far_plane && opacity >= ALPHA_THRESHOLD;
}

// Whether a projected Gaussian is drawn: finite, positive-definite
// covariance, a non-empty rectangle that meets the W x H image.
FN bool on_screen(float det, vec2 mean2d, vec2 radius, float W, float H) {
    return finite1(det) && finite2(mean2d) && finite2(radius) && det > 0.0f && (radius.x > 0.0f || radius.y > 0.0f) &&
           mean2d.x + radius.x > 0.0f && mean2d.x - radius.x < W && mean2d.y + radius.y > 0.0f &&
           mean2d.y - radius.y < H;
}
#endif

// Which axis of a splat is its normal: the smallest scale's, the first of equal ones (0..2)
FN int smallest_axis(vec3 s) { return (s.x <= s.y && s.x <= s.z) ? 0 : (s.y <= s.z ? 1 : 2); }

// A splat's camera-space normal (projection_fwd with NORMALS, --geometry's normal consistency;
// reference spirula/reference/normals.py splat_normals): column smallest_axis(s) of its
// rotation R (world), rotated by the camera's Rc, turned to the camera (n . pcam <= 0, pcam
// the splat's camera-space mean).
FN vec3 splat_normal(mat3 R, vec3 s, mat3 Rc, vec3 pcam) {
    vec3 n = Rc * R[smallest_axis(s)];
    return dot(n, pcam) > 0.0f ? -n : n;
}

#ifdef SPIRULA_PROJECTION_VJP
// Backward of the projection of one visible Gaussian into one camera, in two
// parts. Shaders that use it define SPIRULA_PROJECTION_VJP and include sh.glsl.
// quat is the stored (unnormalized) quaternion, scale the activated scale; the
// gradients are with respect to the same.

// Geometry: adds to (v_mean, v_quat, v_scale) the gradient from the 2D mean
// and conic (v_mean2d, v_conic).
FN void projection_geometry_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, float W, float H, float eps2d,
                                vec2 v_mean2d, vec3 v_conic, INOUT(vec3) v_mean, INOUT(vec4) v_quat,
                                INOUT(vec3) v_scale) {
    vec3 pcam = cam.R * mean + cam.t;
    float qn = inversesqrt(dot(quat, quat));
    vec4 q = quat * qn;
    mat3 R = quat_to_rotmat(q);
    mat3 M = mat3(R[0] * scale.x, R[1] * scale.y, R[2] * scale.z);
    mat3 cov_c = cam.R * (M * transpose(M)) * transpose(cam.R);
    vec2 clipped;
    vec2 tanc = clamped_tan(pcam, cam.f, W, H, clipped);
    vec3 cov2d = project_cov(cov_c, pcam, tanc, cam.f) + vec3(eps2d, 0.0f, eps2d);
    float inv_det = 1.0f / (cov2d.x * cov2d.z - cov2d.y * cov2d.y);
    float a = cov2d.z * inv_det, b = -cov2d.y * inv_det, c = cov2d.x * inv_det;

    // conic = inverse(cov2d): dL/dcov2d = -X V X with V the symmetric gradient
    float va = v_conic.x, vb = 0.5f * v_conic.y, vc = v_conic.z;
    float g00 = -((a * va + b * vb) * a + (a * vb + b * vc) * b);
    float g01 = -((a * va + b * vb) * b + (a * vb + b * vc) * c);
    float g11 = -((b * va + c * vb) * b + (b * vb + c * vc) * c);

    // cov2d = J cov_c J^T
    float rz = 1.0f / pcam.z, rz2 = rz * rz;
    vec3 j0 = vec3(cam.f.x * rz, 0.0f, -cam.f.x * tanc.x * rz);
    vec3 j1 = vec3(0.0f, cam.f.y * rz, -cam.f.y * tanc.y * rz);
    mat3 v_cov_c =
        g00 * outerProduct(j0, j0) + g01 * (outerProduct(j0, j1) + outerProduct(j1, j0)) + g11 * outerProduct(j1, j1);
    vec3 vj0 = 2.0f * (g00 * (cov_c * j0) + g01 * (cov_c * j1));  // dL/d row 0 of J
    vec3 vj1 = 2.0f * (g01 * (cov_c * j0) + g11 * (cov_c * j1));

    vec3 v_pcam = vec3(0.0f);
    v_pcam.z += -cam.f.x * rz2 * vj0.x - cam.f.y * rz2 * vj1.y;
    v_pcam.x += -cam.f.x * rz2 * (1.0f - clipped.x) * vj0.z;
    v_pcam.y += -cam.f.y * rz2 * (1.0f - clipped.y) * vj1.z;
    v_pcam.z +=
        cam.f.x * tanc.x * rz2 * (2.0f - clipped.x) * vj0.z + cam.f.y * tanc.y * rz2 * (2.0f - clipped.y) * vj1.z;
    // mean2d = f * xy / z + c
    v_pcam.x += v_mean2d.x * cam.f.x * rz;
    v_pcam.y += v_mean2d.y * cam.f.y * rz;
    v_pcam.z -= (v_mean2d.x * cam.f.x * pcam.x + v_mean2d.y * cam.f.y * pcam.y) * rz2;
    v_mean += transpose(cam.R) * v_pcam;

    // cov_c = Rv Sigma Rv^T, Sigma = M M^T, M = R diag(s)
    mat3 v_cov = transpose(cam.R) * v_cov_c * cam.R;
    mat3 v_M = 2.0f * v_cov * M;
    v_scale += vec3(dot(R[0], v_M[0]), dot(R[1], v_M[1]), dot(R[2], v_M[2]));
    mat3 v_R = mat3(v_M[0] * scale.x, v_M[1] * scale.y, v_M[2] * scale.z);
    vec4 v_q = quat_to_rotmat_vjp(q, v_R);
    v_quat += (v_q - q * dot(q, v_q)) * qn;
}

// Backward of splat_normal: adds to v_quat (w.r.t. the stored, unnormalized quaternion)
// the gradient from v_n = dL/d the camera-space normal. The axis choice and the turn to the
// camera are piecewise constant: no gradient to the scales or the mean.
FN void splat_normal_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, vec3 v_n, INOUT(vec4) v_quat) {
    float qn = inversesqrt(dot(quat, quat));
    vec4 q = quat * qn;
    mat3 R = quat_to_rotmat(q);
    int k = smallest_axis(scale);
    vec3 pcam = cam.R * mean + cam.t;
    float sgn = dot(cam.R * R[k], pcam) > 0.0f ? -1.0f : 1.0f;
    mat3 v_R = mat3(0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f);
    v_R[k] = sgn * (transpose(cam.R) * v_n);
    vec4 v_q = quat_to_rotmat_vjp(q, v_R);
    v_quat += (v_q - q * dot(q, v_q)) * qn;
}

// Colour = max(SH(dir) . sh + 0.5, 0), dir = normalize(mean - camera centre).
// Given the SH basis at dir, the raw colour SH(dir) . sh, and w[k] =
// sh[k] . v_raw (v_raw: v_rgb masked by the clamp), adds the gradient through
// dir to v_mean.
FN void sh_direction_vjp(int degree, vec3 dir, float inv_len, float w[16], INOUT(vec3) v_mean) {
    vec3 v_dir = sh_basis_vjp(degree, dir, w);
    v_mean += (v_dir - dir * dot(dir, v_dir)) * inv_len;
}

// Both parts for coefficients held in an array sh[3k + ch] (projection_bwd).
FN void projection_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, int degree, float sh[48], float W, float H,
                       float eps2d, vec2 v_mean2d, vec3 v_conic, vec3 v_rgb, INOUT(vec3) v_mean, INOUT(vec4) v_quat,
                       INOUT(vec3) v_scale, INOUT_ARRAY(float) v_sh[48]) {
    projection_geometry_vjp(cam, mean, quat, scale, W, H, eps2d, v_mean2d, v_conic, v_mean, v_quat, v_scale);
    vec3 delta = mean - camera_position(cam);
    float inv_len = inversesqrt(dot(delta, delta));
    vec3 dir = delta * inv_len;
    float basis[16];
    sh_basis(degree, dir, basis);
    vec3 raw = vec3(0.0f);
    int n_coeffs = (degree + 1) * (degree + 1);
    UNROLL for (int k = 0; k < n_coeffs; ++k) { raw += basis[k] * vec3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]); }
    vec3 v_raw = v_rgb * vec3(greaterThanEqual(raw + 0.5f, vec3(0.0f)));
    float w[16];
    UNROLL for (int k = 0; k < n_coeffs; ++k) {
        v_sh[3 * k] += basis[k] * v_raw.x;
        v_sh[3 * k + 1] += basis[k] * v_raw.y;
        v_sh[3 * k + 2] += basis[k] * v_raw.z;
        w[k] = dot(vec3(sh[3 * k], sh[3 * k + 1], sh[3 * k + 2]), v_raw);
    }
    sh_direction_vjp(degree, dir, inv_len, w, v_mean);
}
#endif
