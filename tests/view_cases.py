"""Small splat sets and cameras for the viewer tests (tests/test_view_*.py)."""

import numpy as np


def blob_params(n: int = 300, seed: int = 0) -> dict:
    """Raw splat parameters (log-scales, logits; SH degree 1) of ``n`` coloured
    splats in a ball of radius ~1 around (0, 0, 0.5): what a PLY or a run holds."""
    rng = np.random.default_rng(seed)
    sh = np.zeros((n, 4, 3), np.float32)
    sh[:, 0] = rng.normal(0, 1.0, (n, 3))
    sh[:, 1:] = rng.normal(0, 0.2, (n, 3, 3))
    return dict(
        means=(rng.normal(0, 0.5, (n, 3)) + [0, 0, 0.5]).astype(np.float32),
        quats=rng.normal(0, 1, (n, 4)).astype(np.float32),
        scales=np.log(rng.uniform(0.03, 0.12, (n, 3))).astype(np.float32),
        opacities=rng.normal(1.0, 1.0, n).astype(np.float32),
        sh=sh,
    )


def activated(params: dict) -> dict:
    """The same splats as spirula.rasterization() takes them."""
    return dict(
        means=params["means"],
        quats=params["quats"],
        scales=np.exp(params["scales"]),
        opacities=1 / (1 + np.exp(-params["opacities"])),
        sh_coeffs=params["sh"],
    )
