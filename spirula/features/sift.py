"""SIFT on the GPU, as COLMAP's CPU extractor (VLFeat) computes it (docs/sfm.md, "SIFT on the GPU").

One recorded sequence per image size runs the whole extraction (``shaders/sift_*.comp``):

- the Gaussian scale space: ``sift_upsample`` (first octave -1) or a copy, then per level
  ``sift_blur`` along x and along y (a scratch plane between), ``sift_downsample`` (+ a
  copy) for each next octave's base; every level of every octave in one buffer;
- per octave ``sift_dog`` and ``sift_extrema`` (26-neighbour extrema, sub-pixel refinement,
  contrast, edge and mask tests; an atomic counter appends the keypoints);
- ``sift_orientation`` (up to ``max_num_orientations`` per keypoint, appended),
  ``sift_descriptor`` (the 4x4x8 histograms, a thread per spatial bin) and
  ``sift_normalize`` (RootSIFT or L2, bytes in COLMAP's order);

dispatched over the buffers' capacities (a thread past the count returns at once). The
host reads the two counts, the oriented keypoints and their descriptors; a count past its
capacity grows the buffers and runs again. The float64 reference of every stage is
:mod:`spirula.reference.sift`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from spirula.errors import UsageError
from spirula.runtime.sequence import Threads

LUMA = (0.2126, 0.7152, 0.0722)  # RGB -> grey: Rec. 709 (FreeImage's, as COLMAP reads images)


@dataclasses.dataclass(frozen=True)
class SiftOptions:
    """pycolmap's SiftExtractionOptions that change what is extracted (their defaults)."""

    max_num_features: int = 8192
    first_octave: int = -1  # -1 (doubled) or 0
    num_octaves: int = 4
    octave_resolution: int = 3
    peak_threshold: float = 0.02 / 3
    edge_threshold: float = 10.0
    max_num_orientations: int = 2
    normalization: str = "L1_ROOT"  # or "L2"

    def __post_init__(self):
        if self.first_octave not in (-1, 0):
            raise UsageError("SIFT first_octave must be -1 or 0, not %r" % (self.first_octave,))
        if self.normalization not in ("L1_ROOT", "L2"):
            raise UsageError("SIFT normalization must be L1_ROOT or L2, not %r" % (self.normalization,))
        if not 1 <= self.max_num_orientations <= 4:
            raise UsageError("SIFT max_num_orientations must be 1..4")

    @property
    def sigma0(self) -> float:
        return 1.6 * 2.0 ** (1.0 / self.octave_resolution)


def gaussian_taps(sigma: float) -> np.ndarray:
    """VLFeat's kernel: radius max(ceil(4 sigma), 1), normalised (float64; uploaded as float32)."""
    r = max(int(math.ceil(4.0 * sigma)), 1)
    d = np.arange(-r, r + 1) / sigma
    g = np.exp(-0.5 * d * d)
    return g / g.sum()


def blur_sigmas(opts: SiftOptions) -> list:
    """The blur that takes the base of the first octave (nominal sigma 0.5, doubled by the
    upsampling) to level 0, then each level's increment over the one before (S + 2)."""
    S = opts.octave_resolution
    k = 2.0 ** (1.0 / S)
    sa = opts.sigma0 / k
    sb = 0.5 * 2.0 ** (-opts.first_octave)
    first = math.sqrt(sa * sa - sb * sb) if sa > sb else 0.0
    d0 = opts.sigma0 * math.sqrt(1.0 - 1.0 / (k * k))
    return [first] + [d0 * k**s for s in range(S + 2)]


def to_grey(image) -> np.ndarray:
    """[H,W] or [H,W,3|4] uint8 (or float in [0, 1]) -> [H,W] float32 in [0, 1]."""
    a = np.asarray(image)
    if a.ndim == 3:
        a = a[..., :3].astype(np.float64) @ np.array(LUMA)
        if np.asarray(image).dtype == np.uint8:
            a = np.round(a)
    if a.ndim != 2:
        raise UsageError("SIFT: an image is [H,W] or [H,W,3], not %s" % (np.shape(image),))
    if np.asarray(image).dtype == np.uint8:
        return (a.astype(np.float32) / np.float32(255.0)).astype(np.float32)
    return np.asarray(a, np.float32)


class SiftExtractor:
    """SIFT of images of one size on ``device``: buffers and sequences made once."""

    def __init__(self, device, width: int, height: int, options: SiftOptions = SiftOptions(), capacity: int = 0):
        if min(width, height) < 16:
            raise UsageError("SIFT: an image of %dx%d is too small (16 pixels at least)" % (width, height))
        self.device, self.width, self.height, self.opts = device, int(width), int(height), options
        S = options.octave_resolution
        self.levels = S + 3
        self.octaves = []  # (o, w, h, gauss offset, dog offset)
        g = d = 0
        for o in range(options.first_octave, options.first_octave + options.num_octaves):
            w, h = (width << -o, height << -o) if o < 0 else (width >> o, height >> o)
            if min(w, h) < 3:
                break
            self.octaves.append((o, w, h, g, d))
            g += self.levels * w * h
            d += (S + 2) * w * h
        self.sigmas = blur_sigmas(options)
        taps = [gaussian_taps(s) if s > 0 else np.ones(1) for s in self.sigmas]
        self.tap_offsets = np.cumsum([0] + [len(t) for t in taps])[:-1].tolist()
        self.radii = [len(t) // 2 for t in taps]
        pool = device.pool
        largest = max(w * h for _, w, h, _, _ in self.octaves)
        self._bufs = dict(
            image=pool.alloc("sift.image", (height, width), np.float32, "image"),
            mask=pool.alloc("sift.mask", (height, width), np.uint32, "image"),
            gauss=pool.alloc("sift.gauss", (g,), np.float32, "image"),
            dog=pool.alloc("sift.dog", (d,), np.float32, "image"),
            temp=pool.alloc("sift.temp", (largest,), np.float32, "image"),
            taps=pool.alloc("sift.taps", (self.tap_offsets[-1] + len(taps[-1]),), np.float32, "image"),
            octaves=pool.alloc("sift.octaves", (len(self.octaves), 4), np.uint32, "image"),
            counts=pool.alloc("sift.counts", (2,), np.uint32, "image"),
        )
        device.upload(self._bufs["taps"], np.concatenate(taps).astype(np.float32))
        device.upload(
            self._bufs["octaves"],
            np.array([(w, h, go, 0) for _, w, h, go, _ in self.octaves], np.uint32).reshape(-1, 4),
        )
        self._capacity(capacity or max(4096, 2 * options.max_num_features))
        self._seqs = {}

    def _capacity(self, cap: int):
        pool = self.device.pool
        for name in ("keypoints", "oriented", "hist", "descriptors"):
            if name in self._bufs:
                pool.free(self._bufs.pop(name))
        self.capacity = cap
        self._bufs.update(
            keypoints=pool.alloc("sift.keypoints", (cap, 8), np.float32, "image"),
            oriented=pool.alloc("sift.oriented", (cap, 8), np.float32, "image"),
            hist=pool.alloc("sift.hist", (cap, 128), np.float32, "image"),
            descriptors=pool.alloc("sift.descriptors", (cap, 32), np.uint32, "image"),
        )
        self._seqs = {}

    # -- recording ----------------------------------------------------------------------
    def _blur(self, rec, src_off, dst_off, w, h, i):
        b = self._bufs
        for axis, (src, so, dst, do) in enumerate(
            ((b["gauss"], src_off, b["temp"], 0), (b["temp"], 0, b["gauss"], dst_off))
        ):
            rec.dispatch(
                "sift_blur",
                Threads(w * h),
                dict(src=src, taps=b["taps"], dst=dst),
                push=dict(
                    width=w,
                    height=h,
                    src_offset=so,
                    dst_offset=do,
                    taps_offset=self.tap_offsets[i],
                    radius=self.radii[i],
                    axis=axis,
                ),
            )

    def record(self, has_mask: bool):
        """The sequence of one extraction (counts zeroed first)."""
        b, opts, W, H = self._bufs, self.opts, self.width, self.height
        S = opts.octave_resolution
        rec = self.device.recorder("sift")
        rec.fill(b["counts"], 0)
        for n, (o, w, h, go, do) in enumerate(self.octaves):
            if n == 0:
                if o == -1:
                    rec.dispatch(
                        "sift_upsample",
                        Threads(w * h),
                        dict(src=b["image"], dst=b["gauss"]),
                        push=dict(width=W, height=H, dst_offset=go),
                    )
                else:
                    rec.copy(b["image"], b["gauss"], 4 * w * h, 0, 4 * go)
                if self.sigmas[0] > 0:
                    self._blur(rec, go, go, w, h, 0)
            else:
                _, pw, _, pgo, _ = self.octaves[n - 1]
                rec.dispatch(
                    "sift_downsample",
                    Threads(w * h),
                    dict(src=b["gauss"], dst=b["temp"]),
                    push=dict(
                        src_offset=pgo + S * pw * self.octaves[n - 1][2], src_width=pw, dst_offset=0, width=w, height=h
                    ),
                )
                rec.copy(b["temp"], b["gauss"], 4 * w * h, 0, 4 * go)
            for s in range(1, S + 3):
                self._blur(rec, go + (s - 1) * w * h, go + s * w * h, w, h, s)
            rec.dispatch(
                "sift_dog",
                Threads((S + 2) * w * h),
                dict(gauss=b["gauss"], dog=b["dog"]),
                push=dict(plane=w * h, levels=S + 2, gauss_offset=go, dog_offset=do),
            )
            rec.dispatch(
                "sift_extrema",
                Threads(S * w * h),
                dict(dog=b["dog"], mask=b["mask"], keypoints=b["keypoints"], counts=b["counts"]),
                push=dict(
                    width=w,
                    height=h,
                    levels=S,
                    dog_offset=do,
                    octave=o,
                    xper=2.0**o,
                    peak_threshold=opts.peak_threshold,
                    edge_threshold=opts.edge_threshold,
                    sigma0=opts.sigma0,
                    image_width=W,
                    image_height=H,
                    has_mask=int(has_mask),
                    capacity=self.capacity,
                ),
            )
        common = dict(first_octave=opts.first_octave, levels=self.levels)
        rec.dispatch(
            "sift_orientation",
            Threads(self.capacity),
            dict(
                gauss=b["gauss"],
                octaves=b["octaves"],
                keypoints=b["keypoints"],
                oriented=b["oriented"],
                counts=b["counts"],
            ),
            push=dict(
                common,
                capacity=self.capacity,
                capacity_oriented=self.capacity,
                max_orientations=opts.max_num_orientations,
            ),
        )
        rec.dispatch(
            "sift_descriptor",
            Threads(16 * self.capacity),
            dict(gauss=b["gauss"], octaves=b["octaves"], oriented=b["oriented"], counts=b["counts"], hist=b["hist"]),
            push=dict(common, capacity=self.capacity, magnif=3.0),
        )
        rec.dispatch(
            "sift_normalize",
            Threads(self.capacity),
            dict(hist=b["hist"], counts=b["counts"], descriptors=b["descriptors"]),
            push=dict(capacity=self.capacity, root=int(opts.normalization == "L1_ROOT")),
        )
        return rec.finish()

    # -- running --------------------------------------------------------------------------
    def run(self, grey: np.ndarray, mask=None) -> tuple:
        """Upload, run, read back: (records [N,8] float32 as sift_orientation writes them,
        descriptors [N,128] uint8), N the oriented keypoints, in the GPU's order."""
        dev, b = self.device, self._bufs
        if grey.shape != (self.height, self.width):
            raise UsageError("SIFT: image of %s for an extractor of %dx%d" % (grey.shape, self.width, self.height))
        dev.upload(b["image"], np.ascontiguousarray(grey, np.float32))
        has_mask = mask is not None
        if has_mask:
            m = np.asarray(mask)
            if m.shape[:2] != grey.shape:
                raise UsageError("SIFT: mask of %s for an image of %s" % (m.shape, grey.shape))
            if m.ndim == 3:
                m = m[..., 0]
            dev.upload(b["mask"], (m != 0).astype(np.uint32))
        while True:
            seq = self._seqs.get(has_mask)
            if seq is None or seq.stale:
                seq = self._seqs[has_mask] = self.record(has_mask)
            seq.run()
            counts = dev.readback(b["counts"])
            if max(counts) <= self.capacity:
                break
            self._capacity(int(max(counts) * 1.25) + 64)
        n = int(counts[1])
        if n == 0:
            return np.zeros((0, 8), np.float32), np.zeros((0, 128), np.uint8)
        rec = dev.readback(b["oriented"], (n, 8))
        desc = dev.readback(b["descriptors"], (n, 32)).view(np.uint8).reshape(n, 128)
        return rec, desc

    def extract(self, image, mask=None) -> tuple:
        """(keypoints [N,4] float32: x, y (COLMAP's pixels, centres at +0.5), scale (sigma,
        image pixels), orientation (radians, (-pi, pi]); descriptors [N,128] uint8),
        sorted coarse levels first (within a level by y, x, orientation), at most
        max_num_features: whole levels from the coarsest down, as COLMAP keeps them."""
        rec, desc = self.run(to_grey(image), mask)
        if len(rec) == 0:
            return np.zeros((0, 4), np.float32), desc
        xper = np.exp2(rec[:, 4].astype(np.float64))
        ang = np.remainder(rec[:, 3].astype(np.float64) + np.pi, 2 * np.pi) - np.pi
        kp = np.stack([rec[:, 0] * xper + 0.5, rec[:, 1] * xper + 0.5, rec[:, 2] * xper, ang], 1)
        order = np.lexsort((kp[:, 3], kp[:, 0], kp[:, 1], -rec[:, 5], -rec[:, 4]))
        order = order[: self.opts.max_num_features]
        return kp[order].astype(np.float32), np.ascontiguousarray(desc[order])

    def close(self):
        for buf in self._bufs.values():
            self.device.pool.free(buf)
        self._bufs = {}
        self._seqs = {}


_EXTRACTORS = {}


def extract_features(device, image, mask=None, options: SiftOptions | None = None) -> tuple:
    """SIFT keypoints and descriptors of one image on ``device``: (keypoints [N,4] float32
    x, y, scale, orientation; descriptors [N,128] uint8 as COLMAP stores them). An
    extractor per (device, size, options) is kept for the next image."""
    options = options or SiftOptions()
    h, w = np.shape(image)[:2]
    key = (id(device), w, h, options)
    ex = _EXTRACTORS.get(key)
    if ex is None or ex.device is not device:
        ex = _EXTRACTORS[key] = SiftExtractor(device, w, h, options)
    return ex.extract(image, mask)


def release(device) -> None:
    """Free the buffers of the extractors kept for ``device``."""
    for key in [k for k, ex in _EXTRACTORS.items() if ex.device is device]:
        _EXTRACTORS.pop(key).close()
