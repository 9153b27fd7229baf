"""SIFT on the GPU (spirula/features/sift.py, shaders/sift_*.comp): each kernel against its
float64 stage of spirula/reference/sift.py, on that stage's inputs rounded to float32, and
the whole extraction (masks too) against the reference's.

Float error: u = 2^-24 (float32's unit roundoff). Where a bound needs a GPU built-in's
accuracy, it assumes atan within 1e-5 rad and sin, cos within 1e-6 and exp within 1e-6
relative (LLVM's, as lavapipe compiles them, and CUDA's are within a few ulp; Vulkan's
spec allows atan 4096 ulp and sin/cos 2^-11 absolute, a driver that close to its limits
fails these bounds). Discrete decisions (an extremum, a threshold, a histogram peak) are
checked as sets: the reference made strict by the error bound must be inside the
kernel's set, and the kernel's inside the reference made lenient by it."""

import math

import numpy as np
import pytest
from kernel_cases import run_kernel

from spirula.reference import sift as ref
from spirula.runtime.sequence import Threads

U = 2.0**-24
P = ref.SiftParams()


@pytest.fixture(scope="module")
def scene_image():
    """A 128x96 grey view of tests/sfm_scene.py's textured boxes, in [0, 1] (float32)."""
    import sfm_scene

    R, t = sfm_scene.look_at(sfm_scene.arc_centres(3)[1])
    W, H = 128, 96
    K = np.array([[0.95 * W, 0, W / 2], [0, 0.95 * W, H / 2], [0, 0, 1.0]])
    rgb = sfm_scene.render(R, t, K, W, H, sfm_scene._noise_table(0))
    grey = np.round(rgb.astype(np.float64) @ [0.2126, 0.7152, 0.0722])
    return (grey / 255.0).astype(np.float32)


@pytest.fixture(scope="module")
def pyramid32(scene_image):
    """The reference pyramid, each level rounded to float32 (the kernels' inputs)."""
    return [o.astype(np.float32) for o in ref.pyramid(scene_image.astype(np.float64), P)]


def f64(a):
    return np.asarray(a, np.float64)


# ---- the scale space ----------------------------------------------------------------


def test_upsample(backend, scene_image):
    """One rounding per half-step mean (two on the odd-odd pixels): within 2u of the value."""
    H, W = scene_image.shape
    out = run_kernel(
        backend,
        "sift_upsample",
        Threads(4 * W * H),
        dict(src=scene_image),
        {"dst": ((2 * H, 2 * W), np.float32)},
        push=dict(width=W, height=H, dst_offset=0),
    )["dst"]
    want = ref.upsample(f64(scene_image))
    np.testing.assert_allclose(out, want, rtol=2 * U, atol=0)
    assert (out[::2, ::2] == scene_image).all()


def test_downsample(backend, pyramid32):
    src = pyramid32[1][3]
    h, w = src.shape[0] // 2, src.shape[1] // 2
    out = run_kernel(
        backend,
        "sift_downsample",
        Threads(w * h),
        dict(src=src),
        {"dst": ((h, w), np.float32)},
        push=dict(src_offset=0, src_width=src.shape[1], dst_offset=0, width=w, height=h),
    )["dst"]
    assert (out == ref.downsample(src, w, h)).all()


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("sigma", [1.2490, 2.4525])
def test_blur(backend, pyramid32, axis, sigma):
    """sum_k t_k x_k with taps rounded to float32 (each within u relative) and 2R + 1
    rounded products and sums: |error| <= 2 (2R + 1) u max|x| (a convex combination)."""
    src = pyramid32[0][2]
    h, w = src.shape
    taps = ref.gaussian_taps(sigma)
    R = len(taps) // 2
    out = run_kernel(
        backend,
        "sift_blur",
        Threads(w * h),
        dict(src=src, taps=taps.astype(np.float32)),
        {"dst": ((h, w), np.float32)},
        push=dict(width=w, height=h, src_offset=0, dst_offset=0, taps_offset=0, radius=R, axis=axis),
    )["dst"]
    want = (ref.blur_rows if axis == 0 else ref.blur_cols)(f64(src), taps)
    np.testing.assert_allclose(out, want, atol=2 * (2 * R + 1) * U * np.abs(src).max(), rtol=0)


def test_dog(backend, pyramid32):
    """One float32 subtraction of float32 inputs: within u |d|."""
    oc = pyramid32[1]
    L, h, w = oc.shape
    out = run_kernel(
        backend,
        "sift_dog",
        Threads((L - 1) * h * w),
        dict(gauss=oc),
        {"dog": ((L - 1, h, w), np.float32)},
        push=dict(plane=h * w, levels=L - 1, gauss_offset=0, dog_offset=0),
    )["dog"]
    want = ref.dog(f64(oc))
    np.testing.assert_allclose(out, want, rtol=U, atol=0)


# ---- keypoints ----------------------------------------------------------------------


def run_extrema(dev, D, o, mask=None, cap=4096):
    L, h, w = D.shape
    W, H = (w >> -o, h >> -o) if o < 0 else (w << o, h << o)
    inputs = dict(
        dog=D, mask=(np.ones((H, W)) if mask is None else mask).astype(np.uint32), counts=np.zeros(2, np.uint32)
    )
    out = run_kernel(
        dev,
        "sift_extrema",
        Threads((L - 2) * h * w),
        inputs,
        {"keypoints": ((cap, 8), np.float32)},
        read=("counts",),
        push=dict(
            width=w,
            height=h,
            levels=L - 2,
            dog_offset=0,
            octave=o,
            xper=2.0**o,
            peak_threshold=P.peak_threshold,
            edge_threshold=P.edge_threshold,
            sigma0=P.sigma0,
            image_width=W,
            image_height=H,
            has_mask=int(mask is not None),
            capacity=cap,
        ),
    )
    n = int(out["counts"][0])
    assert n <= cap
    return out["keypoints"][:n]


def _matches(kp, refs, tol_of):
    """For each row of kp (x, y, sn), whether a reference keypoint lies within its tolerance."""
    found = np.zeros(len(kp), bool)
    for i, (x, y, sn) in enumerate(kp[:, [0, 1, 3]]):
        for r in refs:
            t = tol_of(r)
            if abs(x - r.x) <= t and abs(y - r.y) <= t and abs(sn - r.sn) <= t:
                found[i] = True
                break
    return found


@pytest.mark.parametrize("octave", [-1, 0, 1])
def test_extrema(backend, pyramid32, octave):
    """The 26 comparisons read the same float32 values as the reference (exact); the
    derivatives are sums of <= 4 DoG values (error <= 8 u M, M = max |DoG|), the refined
    contrast then within 64 u M; the edge score and the offsets (a 3x3 solve) within
    1e-3 relative (<= cond x 8 u, cond <= ~1e3 where the edge test keeps a point).
    Position: |db| <= ||H^-1|| (|dg| + |dH| |b|) <= ||H^-1|| 32 u M (1 + |b|)."""
    D = ref.dog(f64(pyramid32[octave + 1])).astype(np.float32)
    M = float(np.abs(D).max())
    got = run_extrema(backend, D, octave)
    strict = ref.detect(f64(D), octave, P, slack=64 * U * M, rel=1e-3)
    lenient = ref.detect(f64(D), octave, P, slack=-64 * U * M, rel=-1e-3)
    assert len(strict) > (20 if octave < 1 else 3), "too few keypoints to test"

    def tol(r):
        return r.hinv * 32 * U * M * (1 + 3.0) + 1e-6

    assert _matches(got, lenient, tol).all(), "a kernel keypoint the lenient reference lacks"
    strict_rows = np.array([[r.x, r.y, 0, r.sn] for r in strict])
    assert _matches(strict_rows, [_Kp(*g) for g in got[:, [0, 1, 3]]], lambda k: 1e-3).all()
    for g in got:  # sigma and the contrast of the matching reference keypoint
        r = min(lenient, key=lambda r: abs(r.x - g[0]) + abs(r.y - g[1]) + abs(r.sn - g[3]))
        assert abs(g[2] - r.sigma) <= 1e-4 * r.sigma + r.sigma * math.log(2) / 3 * tol(r)
        assert abs(g[4] - r.value) <= 64 * U * M + abs(r.value) * 1e-3
        assert g[5] == octave and g[6] == r.s


class _Kp:
    def __init__(self, x, y, sn):
        self.x, self.y, self.sn = x, y, sn


def test_extrema_mask(backend, pyramid32):
    """Keypoints whose image pixel (int(x 2^o + 0.5), ...) is 0 in the mask are dropped."""
    D = ref.dog(f64(pyramid32[1])).astype(np.float32)
    h, w = D.shape[1:]
    mask = np.ones((h, w))
    mask[:, : w // 2] = 0
    all_kp = run_extrema(backend, D, 0)
    kept = run_extrema(backend, D, 0, mask)
    col = np.minimum((all_kp[:, 0] + 0.5).astype(int), w - 1)
    assert 0 < len(kept) < len(all_kp)
    assert len(kept) == (col >= w // 2).sum()
    assert ((kept[:, 0] + 0.5).astype(int) >= w // 2).all()


# ---- orientations and descriptors ---------------------------------------------------------

ATAN, TRIG, EXP = 1e-5, 1e-6, 1e-6  # assumed built-in accuracies (module docstring)


def _keypoints32(pyramid32, octave):
    D = ref.dog(f64(pyramid32[octave + 1]))
    kps = ref.detect(D, octave, P)
    rec = np.zeros((len(kps), 8), np.float32)
    for i, k in enumerate(kps):
        rec[i] = (k.x, k.y, k.sigma, k.sn, k.value, octave, k.s, 0)
    return rec


def test_orientation(backend, pyramid32):
    """Histogram bins: each sample's split moves by 36 / (2 pi) ATAN of a bin, its weight
    by EXP, the sums round n u: |dh| <= (36 ATAN / (2 pi) + EXP + n u) x the mass. Peaks
    beyond that margin must be found, and found only where the lenient reference has
    them; the angle within 2 pi / 36 x dh (1 + 4 |di|) / |h+ + h- - 2 h0| + 1e-6."""
    octave = 0
    oc = pyramid32[octave + 1]
    L, h, w = oc.shape
    kp = _keypoints32(pyramid32, octave)
    n = len(kp)
    out = run_kernel(
        backend,
        "sift_orientation",
        Threads(n),
        dict(gauss=oc, octaves=np.array([[w, h, 0, 0]], np.uint32), keypoints=kp, counts=np.array([n, 0], np.uint32)),
        {"oriented": ((4 * n, 8), np.float32)},
        read=("counts",),
        push=dict(first_octave=octave, levels=L, capacity=n, capacity_oriented=4 * n, max_orientations=4),
    )
    got = out["oriented"][: out["counts"][1]]
    grads = {}
    checked = 0
    for k in range(n):
        x, y, sigma, s = f64(kp[k, 0]), f64(kp[k, 1]), f64(kp[k, 2]), int(kp[k, 6])
        if s not in grads:
            grads[s] = ref.gradient(f64(oc[s + 1]))
        hist, mass = ref.orientation_hist(f64(oc[s + 1]), x, y, sigma, grads[s])
        samples = (2 * math.floor(4.5 * sigma) + 1) ** 2
        dh = (36 * ATAN / (2 * math.pi) + EXP + samples * U) * mass
        strict = ref.orientation_peaks(hist, dh)
        lenient = ref.orientation_peaks(hist, -dh)
        mine = np.sort(got[got[:, 6] == k][:, 3])
        assert len(strict) <= len(mine) <= len(lenient), k

        def near(a, angles, tol):
            return any(abs(math.remainder(a - b, 2 * math.pi)) <= tol for b in angles)

        for a in strict:
            i = int(math.floor(a * 36 / (2 * math.pi)))  # the peak's bin (di in (-1/2, 1/2))
            i = min(max(i, 0), 35)
            h0, hm, hp = hist[i], hist[(i - 1) % 36], hist[(i + 1) % 36]
            di = a * 36 / (2 * math.pi) - i - 0.5
            tol = 2 * math.pi / 36 * dh * (1 + 4 * abs(di)) / abs(hp + hm - 2 * h0) + 1e-6
            assert near(a, mine, tol), (k, a, mine, tol)
            checked += 1
        for a in mine:
            assert near(a, lenient, 0.05), (k, a, lenient)
    assert checked > 20


def test_descriptor(backend, pyramid32):
    """Each bin is a sum over the samples that reach it of magnitude x window x trilinear
    weights: sin/cos (TRIG) move n_x, n_y by <= 6 TRIG, atan moves n_t by 8 ATAN / (2 pi),
    the window moves by EXP, the float32 sums by n u: |dh_b| <= (12 TRIG + 8 ATAN / (2 pi)
    + EXP + n u) x the bin's support mass."""
    octave = 0
    oc = pyramid32[octave + 1]
    L, h, w = oc.shape
    kp = _keypoints32(pyramid32, octave)
    rng = np.random.default_rng(0)
    oriented = np.zeros((len(kp), 8), np.float32)
    oriented[:, :3] = kp[:, :3]
    oriented[:, 3] = rng.uniform(0, 2 * np.pi, len(kp))
    oriented[:, 4] = octave
    oriented[:, 5] = kp[:, 6]
    n = len(kp)
    out = run_kernel(
        backend,
        "sift_descriptor",
        Threads(16 * n),
        dict(
            gauss=oc, octaves=np.array([[w, h, 0, 0]], np.uint32), oriented=oriented, counts=np.array([0, n], np.uint32)
        ),
        {"hist": ((n, 128), np.float32)},
        push=dict(first_octave=octave, levels=L, capacity=n, magnif=3.0),
    )["hist"]
    grads = {}
    for k in range(n):
        x, y, sigma, a = (float(v) for v in oriented[k, :4])
        s = int(oriented[k, 5])
        if s not in grads:
            grads[s] = ref.gradient(f64(oc[s + 1]))
        want, mass = ref.descriptor_hist(f64(oc[s + 1]), x, y, sigma, a, 3.0, grads[s])
        samples = (2 * math.floor(math.sqrt(2) * 3 * sigma * 2.5 + 0.5) + 1) ** 2
        bound = (12 * TRIG + 8 * ATAN / (2 * math.pi) + EXP + samples * U) * mass + 1e-12
        assert (np.abs(out[k] - want) <= bound).all(), (k, np.abs(out[k] - want).max(), bound.max())
        assert want.max() > 0


@pytest.mark.parametrize("root", [1, 0])
def test_normalize(backend, root):
    """Float32 norms over 128 terms, divisions, a sqrt: d within 300 u relative; 512 d then
    rounds the same way unless the reference's 512 d lies within 512 d 300 u + 1e-4 of a
    half (there the bytes may differ by 1)."""
    rng = np.random.default_rng(1)
    n = 500
    hist = rng.exponential(1.0, (n, 128)) * (rng.random((n, 128)) < 0.7)
    hist[:50, :3] *= 40  # clamped bins
    hist = hist.astype(np.float32)
    out = run_kernel(
        backend,
        "sift_normalize",
        Threads(n),
        dict(hist=hist, counts=np.array([0, n], np.uint32)),
        {"descriptors": ((n, 32), np.uint32)},
        push=dict(capacity=n, root=root),
    )["descriptors"]
    got = out.view(np.uint8).reshape(n, 128).astype(int)
    d = 512 * ref.normalize_float(f64(hist), bool(root))
    want = ref.normalize(f64(hist), bool(root)).astype(int)
    near_half = np.abs(d - np.floor(d) - 0.5) <= d * 300 * U + 1e-4
    diff = got - want
    assert (np.abs(diff) <= 1).all() and (diff[~near_half] == 0).all()


# ---- the whole extraction ------------------------------------------------------------------


def _match_rate(a, b, tol=0.01):
    """Fraction of rows of a with a row of b within tol in x, y and (circular) angle x 10."""
    from scipy.spatial import cKDTree

    def f(k):
        return np.c_[k[:, :2], 10 * np.cos(k[:, 3]), 10 * np.sin(k[:, 3])]

    d, j = cKDTree(f(b)).query(f(a))
    return d <= tol, j


def test_extract_features_matches_reference(device, scene_image):
    """extract_features against reference.extract on the same grey image: the stages'
    bounds above make near-threshold keypoints and peaks flip, a few in a thousand;
    matched descriptors within 1 (the rounding of 512 d at a half)."""
    from spirula.features import extract_features

    img = np.round(scene_image * 255).astype(np.uint8)
    kp, desc = extract_features(device, img)
    rk, rd = ref.extract(img / 255.0)
    assert kp.shape[1] == 4 and desc.shape == (len(kp), 128) and desc.dtype == np.uint8
    assert len(rk) > 50
    ok, j = _match_rate(kp, rk)
    back, _ = _match_rate(rk, kp)
    assert ok.mean() >= 0.99 and back.mean() >= 0.99, (ok.mean(), back.mean())
    diff = np.abs(desc[ok].astype(int) - rd[j[ok]].astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def test_extract_features_mask(device, scene_image):
    """A mask's zeros keep keypoints out (COLMAP's rule: the pixel holding x, y); where it
    is 1, the keypoints are those without a mask."""
    from spirula.features import extract_features

    img = np.round(scene_image * 255).astype(np.uint8)
    H, W = img.shape
    mask = np.ones((H, W), np.uint8)
    mask[:, : W // 2] = 0
    kp, _ = extract_features(device, img)
    km, _ = extract_features(device, img, mask)
    inside = mask[np.minimum(kp[:, 1].astype(int), H - 1), np.minimum(kp[:, 0].astype(int), W - 1)] != 0
    assert 0 < len(km) < len(kp)
    assert (km[:, 0].astype(int) >= W // 2).all()
    np.testing.assert_array_equal(np.sort(km[:, 0]), np.sort(kp[inside, 0]))
