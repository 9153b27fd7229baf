"""One dispatch of a kernel on any device, and the numpy it is checked with.

Shared by the kernels' tests against the numpy reference, which run on each
backend (the ``backend`` fixture of conftest.py), and by the CUDA parity tests
of the hand-written twins (parity_cases.py). ``SPIRULA_PARITY_REPORT=1 pytest -s``
prints what each :func:`assert_near` saw.
"""

from __future__ import annotations

import os

import numpy as np

from spirula.render.rasterizer import EPS2D, FAR_PLANE, NEAR_PLANE, pack_cameras, tile_grid
from spirula.runtime.sequence import Threads

REPORT = os.environ.get("SPIRULA_PARITY_REPORT", "") not in ("", "0")  # print what each check saw (-s)


def profile_rows(code: str, backend_name: str, root) -> dict:
    """Dispatches by kernel name in SS_PROFILE's "GPU time by kernel" table of
    ``python -c code BACKEND`` (run in a fresh process under ``root``, the profiler on)."""
    import subprocess
    import sys

    env = dict(os.environ, SS_PROFILE="1", PYTHONPATH=str(root))
    proc = subprocess.run(
        [sys.executable, "-c", code, backend_name], env=env, capture_output=True, text=True, cwd=str(root), timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    table = proc.stderr.split("---- GPU time by kernel ----\n")[1].split("[spirula-profile] ----")[0]
    return {line.split()[0]: int(line.split()[1]) for line in table.strip().splitlines()[1:]}


def run_kernel(dev, name, groups, inputs: dict, outputs: dict, read=(), push=None, spec=None, defines=None, zero=()):
    """Upload ``inputs`` (name -> array), allocate ``outputs`` (name -> (shape,
    dtype), NaN-poisoned, or zeroed when named in ``zero``), record one dispatch,
    run it, and return every output and every input named in ``read``."""
    bufs = {}
    for n, arr in inputs.items():
        arr = np.ascontiguousarray(arr)
        bufs[n] = dev.pool.alloc("kernel." + n, arr.shape, arr.dtype)
        dev.upload(bufs[n], arr)
    for n, (shape, dtype) in outputs.items():
        bufs[n] = dev.pool.alloc("kernel." + n, shape, dtype, zero=n in zero)
    rec = dev.recorder("kernel." + name)
    rec.dispatch(name, groups, bufs, push=push, spec=spec, defines=defines)
    rec.finish().run()
    out = {n: dev.readback(bufs[n]) for n in list(outputs) + list(read)}
    for b in bufs.values():
        dev.pool.free(b)
    return out


def assert_exact(got, want, what):
    """Bit for bit (floats compared as their bits: NaN payloads and signed zeros too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    g = got.view(np.uint32) if got.dtype.itemsize == 4 else got
    w = want.view(np.uint32) if want.dtype.itemsize == 4 else want
    bad = np.flatnonzero(g.reshape(-1) != w.reshape(-1))
    assert bad.size == 0, "%s: %d of %d differ, first at %d: got %r, want %r" % (
        what,
        bad.size,
        g.size,
        bad[0],
        got.reshape(-1)[bad[0]],
        want.reshape(-1)[bad[0]],
    )


def assert_near(got, want, atol, rtol, what, violations=0.0, mask=None):
    """|got - want| <= atol + rtol |want| (NaN only where both are NaN), on
    ``mask`` rows if given, allowing a fraction ``violations`` outside. ``atol``
    may be an array broadcast against the elements."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, what
    atol = np.broadcast_to(np.asarray(atol, np.float64), want.shape)
    if mask is not None:
        got, want, atol = got[mask], want[mask], atol[mask]
    both_nan = np.isnan(got) & np.isnan(want)
    err = np.where(both_nan, 0.0, np.abs(got - want))
    bound = atol + rtol * np.abs(want)
    bad = ~(err <= bound)
    frac = bad.mean() if bad.size else 0.0
    worst = np.nanmax(np.where(both_nan, 0, err / np.maximum(bound, 1e-38))) if bad.size else 0.0
    if REPORT:
        print(
            "\ncheck %-20s outside %d/%d, worst %.3g x bound, max|d| %.3g, max|ref| %.3g"
            % (
                what,
                bad.sum(),
                bad.size,
                worst,
                np.nanmax(err) if err.size else 0,
                np.nanmax(np.abs(want)) if want.size else 0,
            )
        )
    assert frac <= violations, "%s: %d of %d elements outside %g + %g|ref| (worst %.3g x the bound)" % (
        what,
        bad.sum(),
        bad.size,
        np.max(atol) if atol.size else 0,
        rtol,
        worst,
    )


# ---- random numbers, as include/random.glsl draws them ----------------------------------

_M32 = 0xFFFFFFFF


def np_pcg_hash(v):
    """include/random.glsl's pcg_hash on uint32 arrays (through uint64)."""
    v = np.asarray(v, np.uint64) & _M32
    state = (v * 747796405 + 2891336453) & _M32
    word = (((state >> ((state >> 28) + 4)) ^ state) * 277803737) & _M32
    return (word >> 22) ^ word


def np_random_uniform(seed, index, stream):
    """random_uniform: exact in float32 (the GPUs give the same bits)."""
    h = np_pcg_hash(np.uint64(seed) ^ np_pcg_hash(np.asarray(index, np.uint64) * 8 + stream))
    return ((h >> 8).astype(np.float32) + np.float32(1.0)) * np.float32(1.0 / 16777216.0)


def np_random_normal2(seed, index, stream):
    u1 = np_random_uniform(seed, index, stream).astype(np.float64)
    u2 = np_random_uniform(seed, index, stream + 1).astype(np.float64)
    r = np.sqrt(-2.0 * np.log(u1))
    return r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)


def step_param_words(**values) -> np.ndarray:
    from spirula.train.step_params import step_params

    return np.frombuffer(step_params(**values).tobytes(), np.uint32).copy()


def logit(p):
    p = np.asarray(p, np.float64)
    return np.log(p / (1 - p)).astype(np.float32)


# ---- projection ------------------------------------------------------------------------


def scene_inputs(scene, activated=True):
    """projection_fwd/bwd inputs of a render_cases scene."""
    scales, opac = scene["scales"], scene["opacities"]
    if not activated:
        scales, opac = np.log(scales), np.log(opac / (1 - opac))
    return dict(
        means=scene["means"],
        quats=scene["quats"],
        scales=scales.astype(np.float32),
        opacities=opac.astype(np.float32),
        sh=scene["sh_coeffs"],
        cameras=pack_cameras(scene["viewmats"], scene["Ks"], scene.get("models"), scene.get("dists")),
    )


def project(dev, scene, sh_degree, activated=True, compact=False, normals=False):
    """projection_fwd of ``scene`` on ``dev``: the outputs by binding name
    (``compact``: sh as spirula/train/storage.py's rows, the COMPACT variant; ``normals``:
    the NORMALS variant, also the splat normals)."""
    from spirula.train import storage

    inputs = scene_inputs(scene, activated)
    if compact:
        inputs["sh"] = storage.encode_sh(inputs["sh"])
    n, C = len(scene["means"]), len(scene["viewmats"])
    W, H = scene["width"], scene["height"]
    tw, th = tile_grid(W, H)
    rows = C * n
    return run_kernel(
        dev,
        "projection_fwd",
        Threads(rows),
        inputs,
        dict(
            xyop=((rows, 4), np.float32),
            conics=((rows, 4), np.float32),
            rgb=((rows, 4), np.float32),
            radii=((rows, 2), np.int32),
            tile_counts=((rows,), np.uint32),
            depth_keys=((rows,), np.uint32),
            depth_ids=((rows,), np.uint32),
            normals=((rows, 4), np.float32),
        ),
        push=dict(
            n=n,
            n_cameras=C,
            width=W,
            height=H,
            tile_width=tw,
            tile_height=th,
            eps2d=EPS2D,
            near_plane=NEAR_PLANE,
            far_plane=FAR_PLANE,
        ),
        spec=dict(
            SH_DEGREE=sh_degree, SH_COEFFS=scene["sh_coeffs"].shape[1], ACTIVATED=int(activated), NORMALS=int(normals)
        ),
        defines=dict(COMPACT=1) if compact else None,
    )
