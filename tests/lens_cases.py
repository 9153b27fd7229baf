"""Scenes seen through lenses other than the pinhole (docs/design.md §2.3 "Camera models"):
Gaussians all around two cameras of one model, at the wide angles where a lens bends
straight lines, for the projection's kernel and reference tests."""

import numpy as np

from spirula.reference.projection import EQUIRECTANGULAR, OPENCV, OPENCV_FISHEYE

# name -> (model id, k1..k6, p1, p2, s1..s4, image size, half field of view of the x axis
# (radians) the focal length is chosen for, largest angle off the axis of the Gaussians)
LENSES = {
    "opencv": (OPENCV, [-0.28, 0.08, 0, 0, 0, 0, 1e-3, -5e-4, 0, 0, 0, 0], (75, 53), 0.9, 1.2),
    "full_opencv": (
        OPENCV,
        [-0.2, 0.05, 0.01, 0.02, -0.01, 0.005, 5e-4, 1e-3, 2e-3, -1e-3, 1e-3, 5e-4],
        (75, 53),
        0.9,
        1.2,
    ),
    "fisheye": (OPENCV_FISHEYE, [0.05, -0.01, 0.002, -3e-4, 0, 0, 0, 0, 0, 0, 0, 0], (77, 67), 1.66, 2.2),
    "equirect": (EQUIRECTANGULAR, [0] * 12, (96, 48), np.pi, np.pi),
}


def lens_scene(name, n=301, seed=0, sh_degree=3):
    """A render_cases-style scene dict, plus ``models`` [2] and ``dists`` [2,12]."""
    model, dist, (W, H), half_fov, max_angle = LENSES[name]
    rng = np.random.default_rng(seed)
    # directions up to max_angle off +z (equirect: all of the sphere), distances 1.5..5
    cos_min = np.cos(max_angle)
    z = rng.uniform(cos_min, 1.0, n)
    phi = rng.uniform(-np.pi, np.pi, n)
    r = np.sqrt(1 - z * z)
    dirs = np.c_[r * np.cos(phi), r * np.sin(phi), z]
    if model == EQUIRECTANGULAR:  # some across the +-180 degree seam (behind: -z) and near the poles
        dirs[:20] = np.c_[rng.uniform(-0.08, 0.08, 20), rng.uniform(-0.5, 0.5, 20), -np.ones(20)]
        dirs[20:26] = np.c_[rng.uniform(-0.05, 0.05, 6), np.sign(rng.uniform(-1, 1, 6)), rng.uniform(-0.05, 0.05, 6)]
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    dist_ = rng.uniform(1.5, 5.0, n)
    means = dirs * dist_[:, None]
    quats = rng.standard_normal((n, 4))
    scales = np.exp(rng.uniform(-3.5, -1.4, (n, 3))) * dist_[:, None] / 3
    opacities = rng.uniform(0.05, 0.95, n)
    K = (sh_degree + 1) ** 2
    sh = rng.standard_normal((n, K, 3)) * np.r_[0.6, np.full(K - 1, 0.15)][None, :, None]
    viewmats, Ks = [], []
    for c in range(2):
        a = 0.15 * c
        R = np.array([[np.cos(a), 0, -np.sin(a)], [0, 1, 0], [np.sin(a), 0, np.cos(a)]])
        vm = np.eye(4)
        vm[:3, :3] = R
        vm[:3, 3] = [0.1 * c, -0.05 * c, 0.1 * c]
        viewmats.append(vm)
        if model == EQUIRECTANGULAR:
            fx, fy = W / (2 * np.pi), H / np.pi
        elif model == OPENCV_FISHEYE:
            fx = fy = 0.5 * W / half_fov
        else:
            fx = 0.5 * W / np.tan(half_fov)
            fy = 1.05 * fx
        Ks.append([[fx, 0, W / 2 + 0.7 * c], [0, fy, H / 2 - 0.4 * c], [0, 0, 1]])
    f32 = np.float32
    return dict(
        means=means.astype(f32),
        quats=quats.astype(f32),
        scales=scales.astype(f32),
        opacities=opacities.astype(f32),
        sh_coeffs=sh.astype(f32),
        viewmats=np.array(viewmats, f32),
        Ks=np.array(Ks, f32),
        width=W,
        height=H,
        sh_degree=sh_degree,
        models=np.full(2, model),
        dists=np.tile(np.asarray(dist, f32), (2, 1)),
    )
