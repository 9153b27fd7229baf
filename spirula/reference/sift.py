"""SIFT as COLMAP's CPU extractor computes it (VLFeat's ``sift.c``), in float64 numpy.

Each stage is a function the tests run a kernel against (``shaders/sift_*.comp``):

- :func:`upsample` (``sift_upsample``), :func:`downsample` (``sift_downsample``),
  :func:`blur_rows` / :func:`blur_cols` (``sift_blur``) with :func:`gaussian_taps`:
  the Gaussian scale space, S + 3 levels an octave (:func:`pyramid`);
- :func:`dog` (``sift_dog``): differences of neighbouring levels;
- :func:`detect` (``sift_extrema``): 26-neighbour extrema of the DoG, refined to
  sub-pixel by up to five Newton steps, kept by contrast, edge and position tests;
- :func:`orientations` (``sift_orientation``): the 36-bin gradient histogram,
  smoothed six times, peaks >= 0.8 of its maximum, parabola-refined;
- :func:`descriptor_hist` (``sift_descriptor``): the 4x4x8 histogram with trilinear
  weights in the keypoint's frame (VLFeat's bin order);
- :func:`normalize` (``sift_normalize``): L2, clamp 0.2, L2; then RootSIFT (L1, sqrt)
  or nothing; 512 x, rounded, clamped to 255, in COLMAP's (UBC) bin order.

:func:`extract` composes them: keypoints [N,4] (x, y in COLMAP's pixel convention,
centres at +0.5; scale sigma; orientation in radians, image axes) and descriptors
[N,128] uint8, as COLMAP stores them. Written from VLFeat 0.9.21's sift.c and COLMAP's
sift.cc (what they compute, not their code); VLFeat's fast exp and atan approximations
are replaced by the exact functions.

Coordinates inside an octave are VLFeat's: pixel (x, y) of octave o at integer x, y,
image position x 2^o.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class SiftParams:
    """COLMAP's SiftExtractionOptions defaults (pycolmap 4.2)."""

    num_octaves: int = 4
    octave_resolution: int = 3  # S
    first_octave: int = -1
    peak_threshold: float = 0.02 / 3
    edge_threshold: float = 10.0
    max_num_orientations: int = 2
    root: bool = True  # L1_ROOT; False: L2 (plain SIFT)
    sigma_nominal: float = 0.5  # the input image's own blur
    magnif: float = 3.0

    @property
    def sigma0(self) -> float:
        return 1.6 * 2.0 ** (1.0 / self.octave_resolution)

    @property
    def sigmak(self) -> float:
        return 2.0 ** (1.0 / self.octave_resolution)


def octave_size(width: int, height: int, o: int) -> tuple:
    """(w, h) of octave ``o``: the image doubled per octave below 0, halved (floor) above."""
    if o < 0:
        return width << -o, height << -o
    return width >> o, height >> o


def level_sigmas(p: SiftParams) -> tuple:
    """(first, steps): the blur that takes an octave's base to level 0 of octave first_octave
    (from the nominal sigma, doubled per upsampling), and the incremental blur of each next
    level s = 0..S+1 (level index 1..S+2): sqrt(sigma_s^2 - sigma_{s-1}^2)."""
    S = p.octave_resolution
    sa = p.sigma0 * p.sigmak**-1
    sb = p.sigma_nominal * 2.0 ** (-p.first_octave)
    first = math.sqrt(sa * sa - sb * sb) if sa > sb else 0.0
    dsigma0 = p.sigma0 * math.sqrt(1.0 - 1.0 / (p.sigmak * p.sigmak))
    return first, [dsigma0 * p.sigmak**s for s in range(0, S + 2)]


def gaussian_taps(sigma: float) -> np.ndarray:
    """The normalised kernel VLFeat smooths with: radius max(ceil(4 sigma), 1)."""
    r = max(int(math.ceil(4.0 * sigma)), 1)
    d = np.arange(-r, r + 1) / sigma
    g = np.exp(-0.5 * d * d)
    return g / g.sum()


def _convolve(img: np.ndarray, taps: np.ndarray, axis: int) -> np.ndarray:
    r = len(taps) // 2
    n = img.shape[axis]
    out = np.zeros(img.shape, np.float64)
    for k, t in enumerate(taps):
        idx = np.clip(np.arange(n) + k - r, 0, n - 1)  # padded by continuity
        out += t * np.take(img, idx, axis=axis)
    return out


def blur_rows(img: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """Along x (each row), edges clamped."""
    return _convolve(np.asarray(img, np.float64), taps, 1)


def blur_cols(img: np.ndarray, taps: np.ndarray) -> np.ndarray:
    """Along y (each column), edges clamped."""
    return _convolve(np.asarray(img, np.float64), taps, 0)


def blur(img, sigma):
    taps = gaussian_taps(sigma)
    return blur_cols(blur_rows(img, taps), taps)


def upsample(img: np.ndarray) -> np.ndarray:
    """[h,w] -> [2h,2w]: pixel (2x, 2y) is (x, y), odd ones the mean of their neighbours
    (bilinear at half steps), the last row and column repeated."""
    img = np.asarray(img, np.float64)

    def rows(a):  # along axis 1
        b = np.concatenate([a[:, 1:], a[:, -1:]], 1)
        out = np.empty((a.shape[0], 2 * a.shape[1]))
        out[:, 0::2] = a
        out[:, 1::2] = 0.5 * (a + b)
        return out

    return rows(rows(img).T).T


def downsample(img: np.ndarray, w: int, h: int) -> np.ndarray:
    """Every other pixel: [h,w] of pixels (2x, 2y)."""
    return np.asarray(img, np.float64)[0 : 2 * h : 2, 0 : 2 * w : 2]


def pyramid(img: np.ndarray, p: SiftParams = SiftParams()) -> list:
    """The Gaussian scale space: a [S+3, h, w] array per octave (levels s = -1 .. S+1)."""
    img = np.asarray(img, np.float64)
    H, W = img.shape
    first, steps = level_sigmas(p)
    base = img
    for _ in range(-p.first_octave):
        base = upsample(base)
    if p.first_octave > 0:
        w, h = octave_size(W, H, p.first_octave)
        base = downsample(img, w, h)  # (VLFeat downsamples in steps; the same pixels)
    if first > 0:
        base = blur(base, first)
    out = []
    for o in range(p.first_octave, p.first_octave + p.num_octaves):
        if o > p.first_octave:
            w, h = octave_size(W, H, o)
            base = downsample(out[-1][p.octave_resolution], w, h)
        levels = [base]
        for sd in steps:
            levels.append(blur(levels[-1], sd))
        out.append(np.stack(levels))
    return out


def dog(octave: np.ndarray) -> np.ndarray:
    """[S+3,h,w] -> [S+2,h,w]: level j + 1 minus level j."""
    return octave[1:] - octave[:-1]


@dataclasses.dataclass
class Keypoint:
    o: int  # octave
    s: int  # DoG level of the extremum, -1 .. S+1 (VLFeat's is): the Gaussian level index s + 1
    x: float  # octave pixels
    y: float
    sn: float  # refined level
    sigma: float  # octave pixels: sigma0 2^(sn / S)
    value: float  # refined contrast
    hinv: float  # ||H^-1||_2 of the last step (the position's sensitivity to the DoG's error)


def _refine_step(D, s, x, y):
    """Gradient, Hessian and Newton step at integer (s, x, y) of the DoG stack D."""

    def at(dx, dy, ds):
        return float(D[s + ds, y + dy, x + dx])

    v = at(0, 0, 0)
    g = np.array(
        [0.5 * (at(1, 0, 0) - at(-1, 0, 0)), 0.5 * (at(0, 1, 0) - at(0, -1, 0)), 0.5 * (at(0, 0, 1) - at(0, 0, -1))]
    )
    dxx = at(1, 0, 0) + at(-1, 0, 0) - 2.0 * v
    dyy = at(0, 1, 0) + at(0, -1, 0) - 2.0 * v
    dss = at(0, 0, 1) + at(0, 0, -1) - 2.0 * v
    dxy = 0.25 * (at(1, 1, 0) + at(-1, -1, 0) - at(-1, 1, 0) - at(1, -1, 0))
    dxs = 0.25 * (at(1, 0, 1) + at(-1, 0, -1) - at(-1, 0, 1) - at(1, 0, -1))
    dys = 0.25 * (at(0, 1, 1) + at(0, -1, -1) - at(0, -1, 1) - at(0, 1, -1))
    Hm = np.array([[dxx, dxy, dxs], [dxy, dyy, dys], [dxs, dys, dss]])
    # VLFeat: Gaussian elimination with partial pivoting; a pivot below 1e-10 gives b = 0
    A, b = Hm.copy(), -g.copy()
    singular = False
    for j in range(3):
        i = j + int(np.argmax(np.abs(A[j:, j])))
        if abs(A[i, j]) < 1e-10:
            singular = True
            break
        A[[i, j]] = A[[j, i]]
        b[[i, j]] = b[[j, i]]
        piv = A[j, j]
        A[j] /= piv
        b[j] /= piv
        for ii in range(j + 1, 3):
            b[ii] -= A[ii, j] * b[j]
            A[ii] -= A[ii, j] * A[j]
    if singular:
        b = np.zeros(3)
    else:
        for i in (2, 1):
            b[:i] -= b[i] * A[:i, i]
    return v, g, Hm, b


def detect(D: np.ndarray, o: int, p: SiftParams = SiftParams(), slack: float = 0.0, rel: float = 0.0) -> list:
    """VLFeat's detector on one octave's DoG stack [S+2,h,w] (levels s = -1 .. S).

    ``slack`` (DoG units, for the comparisons of values) and ``rel`` (relative, for the
    edge score and the offsets' 1.5 limit) > 0 make every decision strict by that margin
    (a candidate near a threshold is dropped), < 0 lenient (kept). The kernel's set lies
    between the two for margins above its float32 error."""
    S = p.octave_resolution
    L, h, w = D.shape
    tp = p.peak_threshold
    te = p.edge_threshold
    c = D[1 : L - 1, 1 : h - 1, 1 : w - 1]
    nb = [
        D[1 + ds : L - 1 + ds, 1 + dy : h - 1 + dy, 1 + dx : w - 1 + dx]
        for ds in (-1, 0, 1)
        for dy in (-1, 0, 1)
        for dx in (-1, 0, 1)
        if (ds, dy, dx) != (0, 0, 0)
    ]
    is_max = c >= 0.8 * tp + slack
    is_min = c <= -0.8 * tp - slack
    for n in nb:
        is_max &= c > n + slack
        is_min &= c < n - slack
    out = []
    for j, yy, xx in zip(*np.nonzero(is_max | is_min)):
        s, y, x = int(j) + 1, int(yy) + 1, int(xx) + 1  # index into D
        for _ in range(5):
            v, g, Hm, b = _refine_step(D, s, x, y)
            dx = (1 if (b[0] > 0.6 and x < w - 2) else 0) + (-1 if (b[0] < -0.6 and x > 1) else 0)
            dy = (1 if (b[1] > 0.6 and y < h - 2) else 0) + (-1 if (b[1] < -0.6 and y > 1) else 0)
            if dx == 0 and dy == 0:
                break
            x += dx
            y += dy
        val = v + 0.5 * float(g @ b)
        det = Hm[0, 0] * Hm[1, 1] - Hm[0, 1] * Hm[0, 1]
        tr = Hm[0, 0] + Hm[1, 1]
        score = tr * tr / det if det != 0 else (math.inf if tr != 0 else math.nan)
        xn, yn, sn = x + b[0], y + b[1], (s - 1) + b[2]  # s - 1: the DoG level's scale index
        bound = (te + 1) ** 2 / te
        good = (
            abs(val) > tp + slack
            and score < bound * (1 - rel)
            and score >= 0
            and max(abs(b[0]), abs(b[1]), abs(b[2])) < 1.5 * (1 - rel)
            and 0 <= xn <= w - 1
            and 0 <= yn <= h - 1
            and -1 <= sn <= S + 1
        )
        if good:
            try:
                hinv = float(np.linalg.norm(np.linalg.inv(Hm), 2))
            except np.linalg.LinAlgError:
                hinv = math.inf
            sigma = p.sigma0 * 2.0 ** (sn / S)
            out.append(Keypoint(o, s - 1, float(xn), float(yn), float(sn), sigma, float(val), hinv))
    return out


def gradient(G: np.ndarray) -> tuple:
    """VLFeat's gradient of a level: central differences / 2 inside, one-sided (not halved)
    on the border; (magnitude, angle in [0, 2 pi))."""
    G = np.asarray(G, np.float64)
    gx = np.empty_like(G)
    gy = np.empty_like(G)
    gx[:, 1:-1] = 0.5 * (G[:, 2:] - G[:, :-2])
    gx[:, 0] = G[:, 1] - G[:, 0]
    gx[:, -1] = G[:, -1] - G[:, -2]
    gy[1:-1] = 0.5 * (G[2:] - G[:-2])
    gy[0] = G[1] - G[0]
    gy[-1] = G[-1] - G[-2]
    ang = np.mod(np.arctan2(gy, gx) + 2 * np.pi, 2 * np.pi)
    return np.hypot(gx, gy), ang


NBINS = 36


def orientation_hist(G: np.ndarray, x: float, y: float, sigma: float, grad=None) -> tuple:
    """The smoothed 36-bin histogram of the keypoint at octave position (x, y), sigma, and
    the mass (sum of magnitude x window) that went in."""
    h_, w_ = G.shape
    mod, ang = gradient(G) if grad is None else grad
    xi, yi = int(x + 0.5), int(y + 0.5)
    sw = 1.5 * sigma
    W = int(math.floor(3.0 * sw))
    ys = np.arange(max(-W, -yi), min(W, h_ - 1 - yi) + 1)
    xs = np.arange(max(-W, -xi), min(W, w_ - 1 - xi) + 1)
    YS, XS = np.meshgrid(ys, xs, indexing="ij")
    dx = xi + XS - x
    dy = yi + YS - y
    r2 = dx * dx + dy * dy
    keep = r2 < W * W + 0.6
    wgt = np.exp(-r2 / (2 * sw * sw))
    m = mod[yi + YS, xi + XS] * wgt
    fbin = NBINS * ang[yi + YS, xi + XS] / (2 * np.pi)
    b = np.floor(fbin - 0.5).astype(np.int64)
    rb = fbin - b - 0.5
    hist = np.zeros(NBINS)
    np.add.at(hist, (b[keep] + NBINS) % NBINS, ((1 - rb) * m)[keep])
    np.add.at(hist, (b[keep] + 1) % NBINS, (rb * m)[keep])
    for _ in range(6):
        hist = (np.roll(hist, 1) + hist + np.roll(hist, -1)) / 3.0
    return hist, float(m[keep].sum())


def orientation_peaks(hist: np.ndarray, slack: float = 0.0, most: int = 4) -> list:
    """Angles (radians, [0, 2 pi) up to the parabola's reach) of the peaks >= 0.8 max,
    in bin order, at most ``most``; ``slack`` as for :func:`detect` (absolute, histogram
    units)."""
    maxh = hist.max()
    out = []
    for i in range(NBINS):
        h0, hm, hp = hist[i], hist[(i - 1) % NBINS], hist[(i + 1) % NBINS]
        if h0 > 0.8 * maxh + slack and h0 > hm + slack and h0 > hp + slack:
            di = -0.5 * (hp - hm) / (hp + hm - 2 * h0)
            out.append(2 * np.pi * (i + di + 0.5) / NBINS)
            if len(out) == most:
                break
    return out


def orientations(G, x, y, sigma, most=4, grad=None) -> list:
    return orientation_peaks(orientation_hist(G, x, y, sigma, grad)[0], 0.0, most)


NBP, NBO = 4, 8


def descriptor_hist(G: np.ndarray, x: float, y: float, sigma: float, angle: float, magnif=3.0, grad=None) -> tuple:
    """VLFeat's 128-bin histogram (index bin_theta + 8 bin_x + 32 bin_y), unnormalised, and
    each bin's support mass (sum of magnitude x window over the samples that reach it)."""
    h_, w_ = G.shape
    mod, ang = gradient(G) if grad is None else grad
    xi, yi = int(x + 0.5), int(y + 0.5)
    st0, ct0 = math.sin(angle), math.cos(angle)
    SBP = magnif * sigma + 2.220446049250313e-16
    W = int(math.floor(math.sqrt(2.0) * SBP * (NBP + 1) / 2.0 + 0.5))
    ys = np.arange(max(-W, 1 - yi), min(W, h_ - yi - 2) + 1)
    xs = np.arange(max(-W, 1 - xi), min(W, w_ - xi - 2) + 1)
    YS, XS = np.meshgrid(ys, xs, indexing="ij")
    m = mod[yi + YS, xi + XS].ravel()
    theta = np.mod(ang[yi + YS, xi + XS].ravel() - angle, 2 * np.pi)
    dx = (xi + XS - x).ravel()
    dy = (yi + YS - y).ravel()
    nx = (ct0 * dx + st0 * dy) / SBP
    ny = (-st0 * dx + ct0 * dy) / SBP
    nt = NBO * theta / (2 * np.pi)
    win = np.exp(-(nx * nx + ny * ny) / (2.0 * (NBP / 2) ** 2))
    hist = np.zeros(NBP * NBP * NBO)
    mass = np.zeros(NBP * NBP * NBO)
    bt = np.floor(nt).astype(np.int64)
    rt = nt - bt
    for by in range(-NBP // 2, NBP // 2):
        for bx in range(-NBP // 2, NBP // 2):
            wx = 1.0 - np.abs(nx - (bx + 0.5))
            wy = 1.0 - np.abs(ny - (by + 0.5))
            sel = (wx > 0) & (wy > 0)
            base = NBO * (bx + NBP // 2) + NBO * NBP * (by + NBP // 2)
            ww = (win * m * wx * wy)[sel]
            np.add.at(hist, base + bt[sel] % NBO, ww * (1 - rt[sel]))
            np.add.at(hist, base + (bt[sel] + 1) % NBO, ww * rt[sel])
            mass[base : base + NBO] = (win * m)[sel].sum()
    return hist, mass


EPS_F = 1.1920928955078125e-07  # VLFeat adds FLT_EPSILON to each L2 norm


def normalize_float(hist: np.ndarray, root: bool = True) -> np.ndarray:
    """[..., 128] VLFeat order -> the float descriptor before quantisation, UBC order."""
    d = np.asarray(hist, np.float64)
    d = d / (np.sqrt((d * d).sum(-1, keepdims=True)) + EPS_F)
    d = np.minimum(d, 0.2)
    d = d / (np.sqrt((d * d).sum(-1, keepdims=True)) + EPS_F)
    if root:
        l1 = np.abs(d).sum(-1, keepdims=True)
        d = np.sqrt(d / np.where(l1 > 0, l1, 1.0))
    # COLMAP's TransformVLFeatToUBCFeatureDescriptors: orientation bin k -> (8 - k) % 8
    k = np.arange(128)
    dst = (k // 8) * 8 + (8 - k % 8) % 8
    out = np.empty_like(d)
    out[..., dst] = d
    return out


def normalize(hist: np.ndarray, root: bool = True) -> np.ndarray:
    """The uint8 descriptor as COLMAP stores it: min(255, round(512 d)), half away from 0."""
    return np.minimum(np.floor(512.0 * normalize_float(hist, root) + 0.5), 255).astype(np.uint8)


def extract(img: np.ndarray, p: SiftParams = SiftParams(), mask=None) -> tuple:
    """Grey image [H,W] in [0,1] -> (keypoints [N,4] x, y (COLMAP's convention: + 0.5),
    sigma, orientation (radians, (-pi, pi]); descriptors [N,128] uint8), sorted by octave,
    level, y, x, orientation. ``mask`` [H,W]: keypoints on a 0 are dropped (COLMAP: the
    pixel holding (x + 0.5, y + 0.5))."""
    H, W = np.shape(img)
    kps, descs = [], []
    for o, octave in zip(range(p.first_octave, p.first_octave + p.num_octaves), pyramid(img, p)):
        xper = 2.0**o
        grads = {}
        for k in detect(dog(octave), o, p):
            X, Y = k.x * xper, k.y * xper
            if mask is not None and mask[min(int(Y + 0.5), H - 1), min(int(X + 0.5), W - 1)] == 0:
                continue
            G = octave[k.s + 1]
            if k.s not in grads:
                grads[k.s] = gradient(G)
            for a in orientations(G, k.x, k.y, k.sigma, p.max_num_orientations, grads[k.s]):
                hist, _ = descriptor_hist(G, k.x, k.y, k.sigma, a, p.magnif, grads[k.s])
                kps.append((o, k.s, Y, X, math.remainder(a, 2 * math.pi), k.sigma * xper))
                descs.append(normalize(hist, p.root))
    if not kps:
        return np.zeros((0, 4), np.float32), np.zeros((0, 128), np.uint8)
    order = sorted(range(len(kps)), key=lambda i: kps[i][:5])
    k = np.array([kps[i] for i in order])
    keypoints = np.stack([k[:, 3] + 0.5, k[:, 2] + 0.5, k[:, 5], k[:, 4]], 1).astype(np.float32)
    return keypoints, np.array([descs[i] for i in order])
