"""GPU buffers, all allocated through one pool that knows what each one is for.

Every buffer has a name (``splat.means``), a category (:data:`CATEGORIES`), a
dtype and a shape. The pool tracks used and capacity bytes per category and
the high-water mark the profiler reports. Buffers grow by reallocation with
headroom (Kompute tensors cannot grow): the contents are copied on the GPU,
``version`` increments, and every Kompute algorithm bound to the old memory is
dropped, so a recorded sequence that used it must be recorded again
(:attr:`spirula.runtime.sequence.RecordedSequence.stale`).

On the GPU a buffer is a Kompute ``storage`` tensor of 32-bit words (no host
copy); shaders see it as whatever array type they declare.
"""

from __future__ import annotations

import math
import os
import re

import numpy as np

from spirula.errors import OutOfMemoryError, SpirulaError

CATEGORIES = ("splat", "splat x img", "image", "appearance", "viewer", "other")
ALIGN = 16  # bytes: every capacity is a whole number of uvec4s
NAN_WORD = 0x7FC00000


def _poison_default() -> bool:
    return os.environ.get("SPIRULA_POISON_BUFFERS", "") not in ("", "0")


_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}


def memory_limit() -> int | None:
    """``SPIRULA_MEMORY_LIMIT`` in bytes (``512MiB``, ``2GiB``, a plain byte
    count), None when unset: a device memory budget smaller than the GPU's,
    to run as a smaller GPU would (the soak test, docs/testing.md)."""
    text = os.environ.get("SPIRULA_MEMORY_LIMIT", "").strip()
    if not text:
        return None
    match = re.fullmatch(r"([0-9.eE+]+)\s*([KMG]iB|B)?", text, re.IGNORECASE)
    try:
        if match is None:
            raise ValueError
        value = float(match.group(1)) * _UNITS[(match.group(2) or "").upper()]
        if not value > 0:
            raise ValueError
    except (KeyError, ValueError):
        err = SpirulaError("SPIRULA_MEMORY_LIMIT=%s: expected a size such as 512MiB, 2GiB or a number of bytes" % text)
        err.exit_code = 2  # the environment is unusable
        raise err from None
    return int(value)


class Buffer:
    """A pool buffer. ``shape``/``dtype`` describe the used part; ``capacity``
    (bytes) is what is allocated. ``version`` changes when it is reallocated."""

    __slots__ = (
        "pool",
        "name",
        "category",
        "dtype",
        "shape",
        "capacity",
        "tensor",
        "version",
        "scratch",
        "host",
        "__weakref__",
    )

    def __init__(self, pool, name, category, dtype, shape, capacity, tensor, scratch, host=False):
        self.pool = pool
        self.name = name
        self.category = category
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(s) for s in shape)
        self.capacity = capacity
        self.tensor = tensor
        self.version = 0
        self.scratch = scratch
        self.host = host

    @property
    def size(self) -> int:
        """Elements in use."""
        return int(math.prod(self.shape))

    @property
    def nbytes(self) -> int:
        """Bytes in use."""
        return self.size * self.dtype.itemsize

    @property
    def alive(self) -> bool:
        return self.tensor is not None

    def host_view(self) -> np.ndarray:
        """The mapped memory of a host-visible buffer (``alloc(host=True)``), as
        ``shape``/``dtype``: writes reach the GPU at the next submission, and GPU
        writes are visible once a sequence that made them has been waited for."""
        if not self.host:
            raise ValueError("%s is not host-visible" % self.name)
        words = self.tensor.data()
        return words.view(np.uint8)[: self.nbytes].view(self.dtype).reshape(self.shape)

    def __repr__(self):
        return "Buffer(%r, %s, %s%s, %d/%d B)" % (
            self.name,
            self.category,
            self.dtype.name,
            list(self.shape),
            self.nbytes,
            self.capacity,
        )


def _round_capacity(nbytes: int) -> int:
    return max(ALIGN, -(-int(nbytes) // ALIGN) * ALIGN)


class BufferPool:
    """Allocates, grows and frees the buffers of one device, by category."""

    def __init__(self, device):
        self.device = device
        self.buffers = {}  # id -> Buffer
        self.poison = _poison_default()
        self.limit = memory_limit()  # bytes of device memory the pool may hold, None: the device's
        self._high_total = -1
        self.high_water = {"categories": {}, "scratch": 0, "largest": []}

    # -- allocation -------------------------------------------------------------
    def alloc(
        self,
        name: str,
        shape,
        dtype=np.float32,
        category: str = "other",
        *,
        scratch: bool = False,
        capacity: int | None = None,
        zero: bool = False,
        host: bool = False,
    ) -> Buffer:
        """A new buffer of ``shape`` and ``dtype`` (contents undefined unless ``zero``;
        NaN-filled when ``SPIRULA_POISON_BUFFERS=1``, as the tests run).

        ``host=True``: small host-visible memory that shaders read and write
        directly and the host maps (:meth:`Buffer.host_view`); not part of the
        VRAM accounting.
        """
        if category not in CATEGORIES:
            raise ValueError("unknown buffer category %r (one of %s)" % (category, ", ".join(CATEGORIES)))
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(math.prod(shape)) * np.dtype(dtype).itemsize
        cap = _round_capacity(max(nbytes, capacity or 0))
        if host:
            buf = Buffer(
                self, name, category, dtype, shape, cap, self.device.new_host_tensor(cap // 4), scratch, host=True
            )
            buf.host_view()[...] = 0
            return buf
        buf = Buffer(self, name, category, dtype, shape, cap, self._tensor(name, cap), scratch)
        self.buffers[id(buf)] = buf
        self._note_usage()
        if zero:
            self.device.fill(buf, 0)
        elif self.poison:
            self.device.fill(buf, NAN_WORD)
        return buf

    def resize(self, buf: Buffer, shape, *, keep: bool = True, headroom: float = 1.5) -> bool:
        """Set ``buf``'s shape; reallocate with ``headroom`` if it no longer fits.

        Returns True if the buffer was reallocated (its algorithms are dropped
        and recorded sequences using it are stale). ``keep`` copies the old
        contents (up to the old used size) into the new memory.
        """
        shape = (shape,) if np.isscalar(shape) else tuple(shape)
        nbytes = int(math.prod(shape)) * buf.dtype.itemsize
        if buf.host and nbytes > buf.capacity:
            raise ValueError("host buffer %s cannot grow" % buf.name)
        if nbytes <= buf.capacity:
            buf.shape = shape
            self._note_usage()
            return False
        cap = _round_capacity(nbytes * headroom)
        new = self._tensor(buf.name, cap)
        old_tensor, old_bytes = buf.tensor, buf.nbytes
        if keep and old_bytes:
            self.device.copy_tensors(old_tensor, new, buf.capacity)
        self.device.forget_tensor(old_tensor)
        buf.tensor = new
        buf.capacity = cap
        buf.shape = shape
        buf.version += 1
        self._note_usage()
        if self.poison and not keep:
            self.device.fill(buf, NAN_WORD)
        return True

    def free(self, buf: Buffer):
        if buf.tensor is None:
            return
        self.device.forget_tensor(buf.tensor)
        buf.tensor = None
        buf.version += 1
        self.buffers.pop(id(buf), None)
        self._note_usage()

    def _tensor(self, name: str, capacity: int):
        info = self.device.info
        if info is not None and capacity > info.max_storage_buffer_range:
            raise OutOfMemoryError(
                "buffer %r needs %s but %s binds at most %s per buffer"
                % (name, _fmt_bytes(capacity), info.name, _fmt_bytes(info.max_storage_buffer_range))
            )
        if self.limit is not None and self.total_capacity() + capacity > self.limit:
            raise OutOfMemoryError(
                "out of GPU memory allocating buffer %r (%s; the pool already holds %s of its %s, SPIRULA_MEMORY_LIMIT)"
                % (name, _fmt_bytes(capacity), _fmt_bytes(self.total_capacity()), _fmt_bytes(self.limit))
            )
        try:
            return self.device.new_storage_tensor(capacity // 4)
        except Exception as exc:  # kp raises RuntimeError / vk::SystemError text
            msg = str(exc)
            if "memory" in msg.lower() or "OutOf" in msg:
                raise OutOfMemoryError(
                    "out of GPU memory allocating buffer %r (%s; the pool already holds %s)"
                    % (name, _fmt_bytes(capacity), _fmt_bytes(self.total_capacity()))
                ) from None
            raise

    # -- statistics -------------------------------------------------------------
    @property
    def peak_bytes(self) -> int:
        """The largest total capacity the pool has held."""
        return max(self._high_total, 0)

    def total_capacity(self) -> int:
        return sum(b.capacity for b in self.buffers.values())

    def usage(self) -> dict:
        """category -> (buffers, used bytes, capacity bytes), now."""
        out = {}
        for b in self.buffers.values():
            n, used, cap = out.get(b.category, (0, 0, 0))
            out[b.category] = (n + 1, used + b.nbytes, cap + b.capacity)
        return out

    def _note_usage(self):
        total = self.total_capacity()
        if total <= self._high_total:
            return
        self._high_total = total
        self.high_water = {
            "categories": self.usage(),
            "scratch": sum(b.capacity for b in self.buffers.values() if b.scratch),
            "largest": [
                (b.name, b.category, b.nbytes, b.capacity)
                for b in sorted(self.buffers.values(), key=lambda b: -b.capacity)[:8]
            ],
        }


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n
