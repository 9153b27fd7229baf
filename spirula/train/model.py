"""The trainable splats on the GPU: parameters and Adam moments.

Parameters are stored raw, as the optimizer sees them and as splat.ply holds
them: means [N,3], quats [N,4] (wxyz, unnormalized), log-scales [N,3],
opacity logits [N], SH coefficients [N,K,3]. Adam's first and second moments
have the same shapes. Buffers are allocated for a capacity (MCMC's budget, or
ADC's count with headroom) and their shapes follow the live count ``n``.
"""

from __future__ import annotations

import numpy as np

from spirula.render.rasterizer import Splats
from spirula.train import storage
from spirula.train.storage import PARAM_NAMES


def _shape(name: str, n: int, sh_coeffs: int, moment: bool = False, compact: bool = False) -> tuple:
    return (n,) + storage.row_layout(name, moment, sh_coeffs, compact)[0]


def alloc_splats(
    device, n: int, capacity: int, sh_coeffs: int, prefix: str, moment: bool = False, compact: bool = False
) -> Splats:
    """Splats-shaped raw buffers (activated=False) of ``n`` rows and room for
    ``capacity``, laid out as :func:`spirula.train.storage.row_layout` says."""
    bufs = []
    for name in PARAM_NAMES:
        row_shape, dtype = storage.row_layout(name, moment, sh_coeffs, compact)
        row = storage.row_bytes(name, moment, sh_coeffs, compact)
        bufs.append(
            device.pool.alloc(
                "%s.%s" % (prefix, name), (n,) + row_shape, dtype, "splat", capacity=row * max(capacity, 1)
            )
        )
    return Splats(*bufs, activated=False, sh_k=sh_coeffs if compact else 0)


GROUPS = (("params", "splat"), ("exp_avg", "splat.adam_m"), ("exp_avg_sq", "splat.adam_v"))  # attribute, prefix


class SplatModel:
    """Parameters (``params``) and Adam moments (``exp_avg``, ``exp_avg_sq``).

    ``n``: live splats; ``capacity``: splats every buffer has room for. Room
    grows with :meth:`reserve` (or :meth:`set_count` past the capacity),
    by :data:`~spirula.runtime.buffers.GROWTH` unless told exactly."""

    def __init__(self, device, n: int, capacity: int, sh_coeffs: int, compact: bool = False):
        self.device = device
        self.sh_coeffs = sh_coeffs
        self.compact = compact  # storage.py's compact rows (sh, the moments)
        self.capacity = max(capacity, n, 1)
        for g in range(len(GROUPS)):
            setattr(self, GROUPS[g][0], self.alloc_group(g, n, self.capacity))
        self.n = n

    def alloc_group(self, group: int, n: int, capacity: int) -> Splats:
        """Group ``group`` (0 params, 1 first moments, 2 second moments) of
        ``n`` rows with room for ``capacity``."""
        return alloc_splats(self.device, n, capacity, self.sh_coeffs, GROUPS[group][1], group > 0, self.compact)

    def groups(self):
        return tuple(getattr(self, attr) for attr, _ in GROUPS)

    def moment_bindings(self, *names) -> dict:
        """Adam's moments as the kernels bind them: ``m_<name>`` (first) and
        ``v_<name>`` (second) for ``names`` (default: every parameter)."""
        names = names or PARAM_NAMES
        return {**self.exp_avg.bindings("m_", names), **self.exp_avg_sq.bindings("v_", names)}

    def bindings(self, *names) -> dict:
        """The parameters (``<name>``) and their moments (:meth:`moment_bindings`)
        as the kernels bind them, for ``names`` (default: every parameter)."""
        names = names or PARAM_NAMES
        return {**self.params.bindings("", names), **self.moment_bindings(*names)}

    def row_bytes(self) -> dict:
        """Bytes per splat of every buffer, by buffer name, from the buffers' own layouts."""
        return {
            buf.name: int(np.prod(buf.shape[1:], dtype=np.int64)) * buf.dtype.itemsize
            for group in self.groups()
            for buf in group.buffers()
        }

    def reserve(self, capacity: int) -> bool:
        """Room for ``capacity`` splats (contents kept); True if buffers were
        reallocated. Out of memory part way leaves a consistent model (some
        buffers larger)."""
        if capacity <= self.capacity:
            return False
        rows = self.row_bytes()
        grew = False
        for group in self.groups():
            for buf in group.buffers():
                if buf.capacity < rows[buf.name] * capacity:
                    grew |= self.device.pool.reserve(buf, rows[buf.name] * capacity, keep=True)
        self.capacity = capacity
        return grew

    def set_count(self, n: int) -> bool:
        """Change the live count; True if buffers were reallocated (growth past capacity)."""
        from spirula.runtime.buffers import GROWTH

        grew = self.reserve(int(np.ceil(n * GROWTH))) if n > self.capacity else False
        for group in self.groups():
            moment = group is not self.params
            for name, buf in zip(PARAM_NAMES, group.buffers()):
                shape = _shape(name, n, self.sh_coeffs, moment, self.compact)
                grew |= self.device.pool.resize(buf, shape, keep=True)
        self.n = n
        return grew

    def upload(self, arrays: dict, moments: dict | None = None):
        """Set parameters from numpy (``arrays``: means, quats, scales (log),
        opacities (logit), sh); moments from ``moments`` ({'exp_avg': {...},
        'exp_avg_sq': {...}}) or zero."""
        n = len(arrays["means"])
        self.set_count(n)
        for name, buf in zip(PARAM_NAMES, self.params.buffers()):
            self.device.upload(buf, self._encode(name, arrays[name], False, n))
        for key, group in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            for name, buf in zip(PARAM_NAMES, group.buffers()):
                if moments is None:
                    self.device.fill(buf, 0, nbytes=buf.nbytes)
                else:
                    self.device.upload(buf, self._encode(name, moments[key][name], True, n))

    def _encode(self, name: str, array, moment: bool, n: int) -> np.ndarray:
        """float32 numpy -> the buffer's layout (compact: storage.py's rows)."""
        x = np.ascontiguousarray(array, np.float32)
        if self.compact:
            x = storage.encode(
                name,
                x.reshape((n,) + storage.row_layout(name, False, self.sh_coeffs, False)[0]),
                moment,
                self.sh_coeffs,
            )
        return x.reshape(_shape(name, n, self.sh_coeffs, moment, self.compact))

    def download(self) -> dict:
        """{'params': {...}, 'exp_avg': {...}, 'exp_avg_sq': {...}} as float32 numpy."""
        out = {}
        for key, group in (("params", self.params), ("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
            out[key] = {name: self.device.readback(buf) for name, buf in zip(PARAM_NAMES, group.buffers())}
            if self.compact:  # float32 always: checkpoints resume in either mode
                for name in PARAM_NAMES:
                    out[key][name] = storage.decode(name, out[key][name], key != "params", self.sh_coeffs)
        return out

    def free(self):
        for group in self.groups():
            group.free(self.device)


def init_from_points(points, colors, strategy, sh_coeffs: int, seed: int = 0) -> dict:
    """Initial raw parameters from seed points (gsplat simple_trainer's init):
    log-scale = log(init_scale * mean distance to the 3 nearest other points)
    (scipy cKDTree), quats uniform in [0,1)^4, opacity logit(init_opacity),
    SH DC from the point colours ((rgb - 0.5) / C0), higher bands 0. ``strategy``:
    the strategy's settings (:class:`~spirula.train.config.MCMC` or ``ADC``:
    ``init_opacity``, ``init_scale``)."""
    from scipy.spatial import cKDTree

    points = np.asarray(points, np.float64)
    n = len(points)
    rng = np.random.default_rng(seed)
    if n >= 2:
        k = min(4, n)
        dist, _ = cKDTree(points).query(points, k=k)
        d = np.sqrt((dist[:, 1:] ** 2).mean(-1))
        d = np.where(d > 0, d, d[d > 0].min() if (d > 0).any() else 0.01)
    else:
        d = np.full(n, 0.01)
    sh = np.zeros((n, sh_coeffs, 3), np.float32)
    rgb = np.asarray(colors, np.float64) / 255.0 if colors is not None else np.full((n, 3), 0.5)
    sh[:, 0] = (rgb - 0.5) / 0.28209479177387814
    o = float(strategy.init_opacity)
    return {
        "means": points.astype(np.float32),
        "quats": rng.random((n, 4)).astype(np.float32),
        "scales": np.repeat(np.log(d * strategy.init_scale)[:, None], 3, 1).astype(np.float32),
        "opacities": np.full(n, np.log(o / (1 - o)), np.float32),
        "sh": sh,
    }
