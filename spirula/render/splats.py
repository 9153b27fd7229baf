"""Gaussian parameters on the GPU: :class:`Splats`, one pool buffer per
parameter, bound to the kernels by name (:meth:`Splats.bindings`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from spirula.runtime.buffers import Buffer

SPLAT_NAMES = ("means", "quats", "scales", "opacities", "sh")  # the parameters, in their order


@dataclasses.dataclass
class Splats:
    """Gaussian parameters on the GPU, one pool buffer each (category ``splat``).

    means [N,3], quats [N,4] (wxyz, any norm), scales [N,3], opacities [N],
    sh [N,K,3], all float32. ``activated``: scales and opacities hold the
    activated values (the numpy API); otherwise log-scales and opacity logits
    (training).
    """

    means: Buffer
    quats: Buffer
    scales: Buffer
    opacities: Buffer
    sh: Buffer
    activated: bool = True
    # compact storage (training with --compact): K, and sh holds
    # spirula/train/storage.py's rows [N, W] uint32; 0: sh is [N,K,3] float32
    sh_k: int = 0

    @property
    def n(self) -> int:
        return self.means.shape[0]

    @property
    def sh_coeffs(self) -> int:
        return self.sh_k or self.sh.shape[1]

    @property
    def compact(self) -> bool:
        return self.sh_k > 0

    @classmethod
    def alloc(
        cls, device, n: int, sh_coeffs: int, activated: bool = True, prefix: str = "splat", category: str = "splat"
    ) -> Splats:
        pool = device.pool
        return cls(
            pool.alloc(prefix + ".means", (n, 3), np.float32, category),
            pool.alloc(prefix + ".quats", (n, 4), np.float32, category),
            pool.alloc(prefix + ".scales", (n, 3), np.float32, category),
            pool.alloc(prefix + ".opacities", (n,), np.float32, category),
            pool.alloc(prefix + ".sh", (n, sh_coeffs, 3), np.float32, category),
            activated,
        )

    @classmethod
    def from_numpy(
        cls, device, means, quats, scales, opacities, sh, activated: bool = True, prefix: str = "splat"
    ) -> Splats:
        sh = np.asarray(sh, np.float32)
        s = cls.alloc(device, len(means), sh.shape[1], activated, prefix)
        for buf, arr in zip(s.buffers(), (means, quats, scales, opacities, sh)):
            device.upload(buf, np.asarray(arr, np.float32))
        return s

    def buffers(self) -> tuple:
        return (self.means, self.quats, self.scales, self.opacities, self.sh)

    def bindings(self, prefix: str = "", names=SPLAT_NAMES) -> dict:
        """The buffers as a kernel binds them: ``{prefix + name: buffer}`` for
        ``names`` (default all five: means, quats, scales, opacities, sh)."""
        return {prefix + name: getattr(self, name) for name in names}

    def to_numpy(self, device) -> dict:
        return {name: device.readback(buf) for name, buf in zip(SPLAT_NAMES, self.buffers())}

    def free(self, device):
        for b in self.buffers():
            device.pool.free(b)
