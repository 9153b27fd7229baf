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
#include "camera.glsl"
#include "finite.glsl"

const float ALPHA_THRESHOLD = 1.0f / 255.0f;
const float RADIUS_SIGMAS = 3.33f;
const float CLIP_MARGIN = 0.3f;  // Jacobian clamp: 30% past the frustum

struct Camera {
    mat3 R;  // world -> camera rotation
    vec3 t;  // world -> camera translation
    vec4 f;  // fx, fy, cx, cy
};

#define LOAD_CAMERA(buf, c)                                                                                     \
    CAMERA(mat3(buf[(c) * CAMERA_FLOATS + 0u], buf[(c) * CAMERA_FLOATS + 4u], buf[(c) * CAMERA_FLOATS + 8u],    \
                buf[(c) * CAMERA_FLOATS + 1u], buf[(c) * CAMERA_FLOATS + 5u], buf[(c) * CAMERA_FLOATS + 9u],    \
                buf[(c) * CAMERA_FLOATS + 2u], buf[(c) * CAMERA_FLOATS + 6u], buf[(c) * CAMERA_FLOATS + 10u]),  \
           vec3(buf[(c) * CAMERA_FLOATS + 3u], buf[(c) * CAMERA_FLOATS + 7u], buf[(c) * CAMERA_FLOATS + 11u]),  \
           vec4(buf[(c) * CAMERA_FLOATS + 16u], buf[(c) * CAMERA_FLOATS + 17u], buf[(c) * CAMERA_FLOATS + 18u], \
                buf[(c) * CAMERA_FLOATS + 19u]))
// The camera model: one float per camera, the same for every thread of a camera (a uniform branch)
#define CAMERA_MODEL(buf, c) uint(buf[(c) * CAMERA_FLOATS + 12u])
// A non-pinhole camera's lens, read only on that branch (the pinhole path loads what it did)
#define LOAD_LENS(buf, c)                                                                                     \
    LENS(CAMERA_MODEL(buf, c), buf[(c) * CAMERA_FLOATS + 13u],                                                \
         vec4(buf[(c) * CAMERA_FLOATS + 20u], buf[(c) * CAMERA_FLOATS + 21u], buf[(c) * CAMERA_FLOATS + 22u], \
              buf[(c) * CAMERA_FLOATS + 23u]),                                                                \
         vec4(buf[(c) * CAMERA_FLOATS + 24u], buf[(c) * CAMERA_FLOATS + 25u], buf[(c) * CAMERA_FLOATS + 26u], \
              buf[(c) * CAMERA_FLOATS + 27u]),                                                                \
         vec4(buf[(c) * CAMERA_FLOATS + 28u], buf[(c) * CAMERA_FLOATS + 29u], buf[(c) * CAMERA_FLOATS + 30u], \
              buf[(c) * CAMERA_FLOATS + 31u]))

struct Lens {
    uint model;   // CAMERA_OPENCV, CAMERA_OPENCV_FISHEYE or CAMERA_EQUIRECTANGULAR
    float limit;  // OPENCV: largest valid r^2 = (x/z)^2 + (y/z)^2; FISHEYE: largest valid theta
    vec4 ka;      // k1, k2, k3, k4
    vec4 kb;      // k5, k6, p1, p2
    vec4 s;       // s1, s2, s3, s4
};

#ifdef __CUDACC__
// C++17 has no constructor of an aggregate by parentheses: GLSL's Camera(R, t, f)
FN Camera make_camera(mat3 R, vec3 t, vec4 f) {
    Camera cam;
    cam.R = R;
    cam.t = t;
    cam.f = f;
    return cam;
}
FN Lens make_lens(uint model, float limit, vec4 ka, vec4 kb, vec4 s) {
    Lens lens;
    lens.model = model;
    lens.limit = limit;
    lens.ka = ka;
    lens.kb = kb;
    lens.s = s;
    return lens;
}
#define CAMERA make_camera
#define LENS make_lens
#else
#define CAMERA Camera
#define LENS Lens
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

// ---- Lenses other than the pinhole (docs/design.md §2.3 "Camera models") ----
// A Gaussian is projected through a lens by the unscented transform (3DGUT, Wu et al. 2025,
// alpha = 1, beta = 0, kappa = 0): its six sigma points pcam +- sqrt(3) s_i Rc R_i (the
// scaled axes, no Cholesky) through the exact lens, the 2D mean and covariance their average
// and spread. The backward needs only each point's 2x3 Jacobian (lens_project).

const float UT_SPREAD = 1.7320508f;  // sqrt(n + lambda), n = 3, lambda = 0
const float TWO_PI = 6.2831853f;

// The depth a lens sorts and culls by: camera z through a perspective lens, the distance
// from the camera centre through a fisheye or an equirectangular one (their views reach
// z <= 0).
FN float lens_depth(uint model, vec3 p) { return model == CAMERA_OPENCV ? p.z : length(p); }

// Whether camera-space point p is inside the lens's valid domain: OPENCV in front (z > 0) with
// (x/z)^2 + (y/z)^2 <= limit (where the radial polynomial stops growing); FISHEYE at an
// angle theta <= limit off the axis; EQUIRECTANGULAR anywhere off the poles' axis.
FN bool lens_valid(Lens L, vec3 p) {
    if (L.model == CAMERA_OPENCV) {
        return p.z > 0.0f && p.x * p.x + p.y * p.y <= L.limit * p.z * p.z;
    }
    float q2 = p.x * p.x + (L.model == CAMERA_OPENCV_FISHEYE ? p.y * p.y : p.z * p.z);
    if (L.model == CAMERA_OPENCV_FISHEYE) {
        return atan(sqrt(q2), p.z) <= L.limit;
    }
    return q2 > 1e-8f * (q2 + p.y * p.y);
}

// (cos t - t / sin t) / t^2, and t / sin t, without cancellation near t = 0
FN float fisheye_c(float t, float t2) {
    return t < 0.1f ? -0.6666667f + t2 * (1.0f / 45.0f) : (cos(t) - t / sin(t)) / t2;
}
FN float fisheye_s(float t, float t2) { return t < 0.01f ? 1.0f + t2 * (1.0f / 6.0f) : t / sin(t); }

// Pixel position of camera-space point p (lens_valid) through the lens with intrinsics f
// (fx, fy, cx, cy); j0, j1 = the rows of d uv / d p. Longitudes are in (-pi, pi].
FN vec2 lens_project(Lens L, vec4 f, vec3 p, OUT(vec3) j0, OUT(vec3) j1) {
    vec2 n;
    if (L.model == CAMERA_OPENCV) {
        float iz = 1.0f / p.z, x = p.x * iz, y = p.y * iz;
        float r2 = x * x + y * y;
        float num = 1.0f + r2 * (L.ka.x + r2 * (L.ka.y + r2 * L.ka.z));
        float den = 1.0f + r2 * (L.ka.w + r2 * (L.kb.x + r2 * L.kb.y));
        float dnum = L.ka.x + r2 * (2.0f * L.ka.y + 3.0f * r2 * L.ka.z);  // d / d r2
        float dden = L.ka.w + r2 * (2.0f * L.kb.x + 3.0f * r2 * L.kb.y);
        float rad = num / den, drad = (dnum * den - num * dden) / (den * den);
        float p1 = L.kb.z, p2 = L.kb.w;
        float sx = L.s.x + 2.0f * L.s.y * r2, sy = L.s.z + 2.0f * L.s.w * r2;  // d (s r2 + s' r4) / d r2
        n = vec2(x * rad + 2.0f * p1 * x * y + p2 * (r2 + 2.0f * x * x) + r2 * (L.s.x + L.s.y * r2),
                 y * rad + p1 * (r2 + 2.0f * y * y) + 2.0f * p2 * x * y + r2 * (L.s.z + L.s.w * r2));
        float dxx = rad + 2.0f * x * x * drad + 2.0f * p1 * y + 6.0f * p2 * x + 2.0f * x * sx;
        float dxy = 2.0f * x * y * drad + 2.0f * p1 * x + 2.0f * p2 * y + 2.0f * y * sx;
        float dyx = 2.0f * x * y * drad + 2.0f * p1 * x + 2.0f * p2 * y + 2.0f * x * sy;
        float dyy = rad + 2.0f * y * y * drad + 6.0f * p1 * y + 2.0f * p2 * x + 2.0f * y * sy;
        // (x, y) = (p.x, p.y) / p.z
        j0 = f.x * iz * vec3(dxx, dxy, -(dxx * x + dxy * y));
        j1 = f.y * iz * vec3(dyx, dyy, -(dyx * x + dyy * y));
    } else if (L.model == CAMERA_OPENCV_FISHEYE) {
        // (u, v) = g (x, y), g = theta_d / rho = P(theta^2) (theta / sin theta) / d
        float rho2 = p.x * p.x + p.y * p.y, d2 = rho2 + p.z * p.z, d = sqrt(d2);
        float t = atan(sqrt(rho2), p.z), t2 = t * t;
        float P = 1.0f + t2 * (L.ka.x + t2 * (L.ka.y + t2 * (L.ka.z + t2 * L.ka.w)));
        float dP = L.ka.x + t2 * (2.0f * L.ka.y + t2 * (3.0f * L.ka.z + 4.0f * t2 * L.ka.w));  // d P / d t2
        float st = fisheye_s(t, t2), ct = p.z / d;
        float g = P * st / d;
        float K = st * st / (d2 * d) * (P * fisheye_c(t, t2) + 2.0f * dP * ct);  // d g / dx = x K
        float gz = -(P + 2.0f * t2 * dP) / d2;                                   // d g / dz
        n = g * vec2(p.x, p.y);
        j0 = f.x * vec3(g + p.x * p.x * K, p.x * p.y * K, p.x * gz);
        j1 = f.y * vec3(p.x * p.y * K, g + p.y * p.y * K, p.y * gz);
    } else {
        // longitude atan(x, z), latitude atan(y, |(x, z)|) (y down: v grows downward)
        float q2 = p.x * p.x + p.z * p.z, q = sqrt(q2), d2 = q2 + p.y * p.y;
        n = vec2(atan(p.x, p.z), atan(p.y, q));
        j0 = f.x * vec3(p.z / q2, 0.0f, -p.x / q2);
        j1 = f.y * vec3(-p.x * p.y / (q * d2), q / d2, -p.z * p.y / (q * d2));
    }
    return vec2(f.x * n.x + f.z, f.y * n.y + f.w);
}

// Newton steps of lens_ray: quadratic convergence from the undistorted guess; 8 reach float32
// rounding for every lens whose valid domain reaches the pixel (tests/test_normals.py)
const int LENS_RAY_STEPS = 8;

// The inverse of lens_project: the camera-space ray of pixel position uv, scaled as
// lens_depth measures depth along it (P = depth ray): OPENCV (x/z, y/z, 1), FISHEYE and
// EQUIRECTANGULAR a unit vector. False where the lens's valid domain does not reach uv (ray
// then +z). OPENCV by Newton's method on the 2x2 Jacobian of the distortion, FISHEYE by
// Newton on the increasing theta_d(theta) kept in [0, limit], EQUIRECTANGULAR closed form.
FN bool lens_ray(Lens L, vec4 f, vec2 uv, OUT(vec3) ray) {
    vec2 m = (uv - vec2(f.z, f.w)) / vec2(f.x, f.y);  // distorted normalized coordinates
    ray = vec3(0.0f, 0.0f, 1.0f);
    if (L.model == CAMERA_OPENCV) {
        vec2 xy = m;
        vec3 j0, j1;
        for (int k = 0; k < LENS_RAY_STEPS; ++k) {
            vec2 r = lens_project(L, vec4(1.0f, 1.0f, 0.0f, 0.0f), vec3(xy.x, xy.y, 1.0f), j0, j1) - m;
            float det = j0.x * j1.y - j0.y * j1.x;  // d distorted / d (x, y) at z = 1
            if (!(abs(det) > 1e-12f)) {
                return false;
            }
            xy -= vec2(j1.y * r.x - j0.y * r.y, j0.x * r.y - j1.x * r.x) / det;
        }
        vec2 r = lens_project(L, vec4(1.0f, 1.0f, 0.0f, 0.0f), vec3(xy.x, xy.y, 1.0f), j0, j1) - m;
        bool ok = dot(xy, xy) <= L.limit && dot(r, r) <= 1e-10f * (1.0f + dot(m, m));
        ray = ok ? vec3(xy.x, xy.y, 1.0f) : ray;
        return ok;
    }
    if (L.model == CAMERA_OPENCV_FISHEYE) {
        float td = length(m), t = min(td, L.limit);
        for (int k = 0; k < LENS_RAY_STEPS; ++k) {
            float t2 = t * t;
            float P = 1.0f + t2 * (L.ka.x + t2 * (L.ka.y + t2 * (L.ka.z + t2 * L.ka.w)));
            float dP = L.ka.x + t2 * (2.0f * L.ka.y + t2 * (3.0f * L.ka.z + 4.0f * t2 * L.ka.w));
            t = clamp(t - (t * P - td) / (P + 2.0f * t2 * dP), 0.0f, L.limit);  // d (t P) / dt > 0 below limit
        }
        float t2 = t * t;
        float err = t * (1.0f + t2 * (L.ka.x + t2 * (L.ka.y + t2 * (L.ka.z + t2 * L.ka.w)))) - td;
        if (!(abs(err) <= 1e-5f * (1.0f + td))) {
            return false;  // past theta_d(limit): the fisheye's black border
        }
        float s = td > 1e-20f ? sin(t) / td : 1.0f;
        ray = vec3(s * m.x, s * m.y, cos(t));
        return true;
    }
    if (!(abs(m.x) <= 0.5f * TWO_PI && abs(m.y) <= 0.25f * TWO_PI)) {
        return false;  // past the longitudes' turn or a pole
    }
    float cl = cos(m.y);
    ray = vec3(cl * sin(m.x), sin(m.y), cl * cos(m.x));
    return true;
}

// The six sigma points of a Gaussian at pcam whose camera-space axes (already times
// UT_SPREAD) are the columns of A: point k = pcam + (k even ? 1 : -1) A[k / 2].
FN vec3 sigma_point(vec3 pcam, mat3 A, int k) { return (k & 1) == 0 ? pcam + A[k >> 1] : pcam - A[k >> 1]; }

// An equirectangular sigma point's u within half a turn of the mean's (u_ref): a Gaussian
// across the +-180 degree seam stays one small ellipse on the side of its mean.
FN float unwrap_u(Lens L, vec4 f, float u, float u_ref) {
    if (L.model != CAMERA_EQUIRECTANGULAR) {
        return u;
    }
    float turn = TWO_PI * f.x;
    return u - turn * floor((u - u_ref) / turn + 0.5f);
}

// Forward through a lens: the 2D covariance with the eps2d blur (xx, xy, yy), its 2D mean in
// mean2d, its determinant in det; ok = every sigma point is inside the lens's valid domain
// (else the Gaussian is culled).
FN vec3 project_gaussian_ut(Camera cam, Lens L, vec3 pcam, vec4 quat, vec3 scale, float eps2d, OUT(vec2) mean2d,
                            OUT(float) det, OUT(bool) ok) {
    mat3 R = quat_to_rotmat(quat * inversesqrt(dot(quat, quat)));
    mat3 A = cam.R * mat3(R[0] * (scale.x * UT_SPREAD), R[1] * (scale.y * UT_SPREAD), R[2] * (scale.z * UT_SPREAD));
    vec3 j0, j1;
    float u_ref = cam.f.x * atan(pcam.x, pcam.z) + cam.f.z;  // used by EQUIRECTANGULAR only
    vec2 u[6];
    ok = true;
    vec2 m = vec2(0.0f);
    UNROLL for (int k = 0; k < 6; ++k) {
        vec3 p = sigma_point(pcam, A, k);
        ok = ok && lens_valid(L, p);
        u[k] = lens_project(L, cam.f, p, j0, j1);
        u[k].x = unwrap_u(L, cam.f, u[k].x, u_ref);
        m += u[k];
    }
    m = (1.0f / 6.0f) * m;
    vec3 cov = vec3(0.0f);
    UNROLL for (int k = 0; k < 6; ++k) {
        vec2 e = u[k] - m;
        cov += vec3(e.x * e.x, e.x * e.y, e.y * e.y);
    }
    cov = cov * (1.0f / 6.0f) + vec3(eps2d, 0.0f, eps2d);
    det = cov.x * cov.z - cov.y * cov.y;
    mean2d = m;
    return cov;
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

// dL/d cov2d as (xx, xy, yy) from dL/d conic, conic = inverse(cov2d) (both (xx, xy, yy), the
// conic's xy gradient counting both off-diagonal entries): -X V X, V the symmetric gradient
FN vec3 conic_vjp(vec3 cov2d, vec3 v_conic) {
    float inv_det = 1.0f / (cov2d.x * cov2d.z - cov2d.y * cov2d.y);
    float a = cov2d.z * inv_det, b = -cov2d.y * inv_det, c = cov2d.x * inv_det;
    float va = v_conic.x, vb = 0.5f * v_conic.y, vc = v_conic.z;
    return vec3(-((a * va + b * vb) * a + (a * vb + b * vc) * b), -((a * va + b * vb) * b + (a * vb + b * vc) * c),
                -((b * va + c * vb) * b + (b * vb + c * vc) * c));
}

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
    vec3 g = conic_vjp(cov2d, v_conic);
    float g00 = g.x, g01 = g.y, g11 = g.z;

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

// Geometry through a lens (project_gaussian_ut's backward): adds to (v_mean, v_quat, v_scale)
// the gradient from the 2D mean and conic. With d_k = u_k - mean2d (sum 0), cov2d =
// 1/6 sum d_k d_k^T + eps2d I and mean2d = 1/6 sum u_k: dL/du_k = (2 G d_k + v_mean2d) / 6,
// G = dL/dcov2d; then dL/dp_k = J_k^T dL/du_k, and p_k = pcam +- A[k/2].
FN void projection_geometry_vjp_ut(Camera cam, Lens L, vec3 mean, vec4 quat, vec3 scale, float eps2d, vec2 v_mean2d,
                                   vec3 v_conic, INOUT(vec3) v_mean, INOUT(vec4) v_quat, INOUT(vec3) v_scale) {
    vec3 pcam = cam.R * mean + cam.t;
    float qn = inversesqrt(dot(quat, quat));
    vec4 q = quat * qn;
    mat3 R = quat_to_rotmat(q);
    mat3 A = cam.R * mat3(R[0] * (scale.x * UT_SPREAD), R[1] * (scale.y * UT_SPREAD), R[2] * (scale.z * UT_SPREAD));
    vec3 j0, j1;
    float u_ref = cam.f.x * atan(pcam.x, pcam.z) + cam.f.z;
    vec2 u[6];
    vec2 m = vec2(0.0f);
    UNROLL for (int k = 0; k < 6; ++k) {
        u[k] = lens_project(L, cam.f, sigma_point(pcam, A, k), j0, j1);
        u[k].x = unwrap_u(L, cam.f, u[k].x, u_ref);
        m += u[k];
    }
    m = (1.0f / 6.0f) * m;
    vec3 cov2d = vec3(eps2d, 0.0f, eps2d);
    UNROLL for (int k = 0; k < 6; ++k) {
        vec2 e = u[k] - m;
        cov2d += vec3(e.x * e.x, e.x * e.y, e.y * e.y) * (1.0f / 6.0f);
    }
    vec3 g = conic_vjp(cov2d, v_conic);
    float g00 = g.x, g01 = g.y, g11 = g.z;

    vec3 v_pcam = vec3(0.0f);
    mat3 v_A = mat3(0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f);
    UNROLL for (int k = 0; k < 6; ++k) {
        lens_project(L, cam.f, sigma_point(pcam, A, k), j0, j1);
        vec2 e = u[k] - m;
        vec2 v_u = (2.0f * vec2(g00 * e.x + g01 * e.y, g01 * e.x + g11 * e.y) + v_mean2d) * (1.0f / 6.0f);
        vec3 v_p = v_u.x * j0 + v_u.y * j1;
        v_pcam += v_p;
        v_A[k >> 1] += (k & 1) == 0 ? v_p : -v_p;
    }
    v_mean += transpose(cam.R) * v_pcam;
    // A = Rc M UT_SPREAD, M = R diag(s)
    mat3 v_M = transpose(cam.R) * v_A * UT_SPREAD;
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

// The colour part of projection_vjp (the same for every lens)
FN void projection_colour_vjp(Camera cam, vec3 mean, int degree, float sh[48], vec3 v_rgb, INOUT(vec3) v_mean,
                              INOUT_ARRAY(float) v_sh[48]) {
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

// Both parts for coefficients held in an array sh[3k + ch] (projection_bwd).
FN void projection_vjp(Camera cam, vec3 mean, vec4 quat, vec3 scale, int degree, float sh[48], float W, float H,
                       float eps2d, vec2 v_mean2d, vec3 v_conic, vec3 v_rgb, INOUT(vec3) v_mean, INOUT(vec4) v_quat,
                       INOUT(vec3) v_scale, INOUT_ARRAY(float) v_sh[48]) {
    projection_geometry_vjp(cam, mean, quat, scale, W, H, eps2d, v_mean2d, v_conic, v_mean, v_quat, v_scale);
    projection_colour_vjp(cam, mean, degree, sh, v_rgb, v_mean, v_sh);
}
#endif
