"""GPU buffers, all allocated through one pool that knows what each one is for.

Every buffer has a name (``splat.means``), a category (:data:`CATEGORIES`), a
dtype and a shape. The pool tracks used and capacity bytes per category and
the high-water mark the profiler reports. Buffers grow by reallocation with
headroom (Kompute tensors cannot grow): the contents are copied on the GPU,
``version`` increments, and every Kompute algorithm bound to the old memory is
dropped, so a recorded sequence that used it must be recorded again
(:attr:`spirula.runtime.sequence.Sequence.stale`).

On the GPU a buffer is a Kompute ``storage`` tensor of 32-bit words (no host
copy); shaders see it as whatever array type they declare.
"""

from __future__ import annotations

import math
import re

import numpy as np

from spirula import settings
from spirula.errors import OutOfMemoryError, SpirulaError

CATEGORIES = ("splat", "splat x img", "image", "appearance", "viewer", "other")
ALIGN = 16  # bytes: every capacity is a whole number of uvec4s
NAN_WORD = 0x7FC00000


_UNITS = {
    "": 1,
    "B": 1,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "TIB": 1 << 40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}

# Growth of per-splat buffers: capacity = GROWTH x the live count when they
# must grow (docs/design.md, memory). MCMC adds 5% per refinement, so a
# reallocation (and one re-recording) comes every 4th refinement; right after
# one the splat buffers hold 1.2x their live need, at most 1.26x while room
# for the next refinement is reserved before it is recorded.
GROWTH = 1.2


def parse_size(text, what: str) -> int:
    """Bytes from ``512MiB``, ``8GiB``, ``8GB`` (10^9), ``1.5e9`` or a plain
    byte count; a :class:`SpirulaError` (exit status 2) naming ``what`` otherwise."""
    text = str(text).strip()
    match = re.fullmatch(r"([0-9.eE+]+)\s*([KMGT]i?B|B)?", text, re.IGNORECASE)
    try:
        if match is None:
            raise ValueError
        value = float(match.group(1)) * _UNITS[(match.group(2) or "").upper()]
        if not 1 <= value < 2**63:  # nor NaN, nor infinite
            raise ValueError
    except (KeyError, ValueError):
        err = SpirulaError("%s%s: expected a size such as 512MiB, 2GiB or a number of bytes" % (what, text))
        err.exit_code = 2  # the environment or the command line is unusable
        raise err from None
    return int(value)


def memory_limit() -> int | None:
    """``SPIRULA_MEMORY_LIMIT`` in bytes (``512MiB``, ``2GiB``, a plain byte
    count), None when unset: a device memory budget smaller than the GPU's,
    to run as a smaller GPU would (the soak test, docs/testing.md)."""
    text = settings.memory_limit()
    if not text:
        return None
    return parse_size(text, settings.MEMORY_LIMIT.name + "=")


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
        self.poison = settings.poison_buffers()
        self.env_limit = memory_limit()  # SPIRULA_MEMORY_LIMIT, the testing override
        self.limit = self.env_limit  # bytes of device memory the pool may hold, None: the device's
        self.budget = None  # the training budget (--vram-budget), see set_budget
        self._high_total = -1
        # the worst total capacity / live need (live_bytes) seen since track_ratio(); None: not tracked
        self.worst_ratio = None
        self.worst_ratio_at = None  # (capacity, live) bytes when it was seen
        self._tracking = False
        self.high_water = {"categories": {}, "scratch": 0, "largest": []}
        self.allocations = 0  # device memory blocks created (new buffers and reallocations), ever

    def set_budget(self, budget: int | None):
        """The memory budget of a training run: the pool's limit becomes the
        smaller of it and ``SPIRULA_MEMORY_LIMIT``."""
        self.budget = budget
        limits = [x for x in (budget, self.env_limit) if x is not None]
        self.limit = min(limits) if limits else None

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
            self.allocations += 1
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
        self._reallocate(buf, _round_capacity(nbytes * headroom), buf.capacity if keep and buf.nbytes else 0, shape)
        return True

    def reserve(self, buf: Buffer, capacity: int, *, keep: bool = True) -> bool:
        """Reallocate ``buf`` to hold exactly ``capacity`` bytes (rounded up to
        16) unless it already does; its shape (the used part) is unchanged and
        must fit. True if it was reallocated. ``keep`` copies the used part.
        Out of memory leaves ``buf`` as it was."""
        cap = _round_capacity(max(int(capacity), buf.nbytes))
        if cap == buf.capacity:
            return False
        if buf.host:
            raise ValueError("host buffer %s cannot be reallocated" % buf.name)
        self._reallocate(buf, cap, _round_capacity(buf.nbytes) if keep and buf.nbytes else 0)
        return True

    def _reallocate(self, buf: Buffer, cap: int, copy_bytes: int, shape=None):
        """New memory of ``cap`` bytes for ``buf`` (``shape`` its new used part),
        the first ``copy_bytes`` copied over (0: contents dropped, NaN when
        poisoning); the version bumps. Out of memory leaves ``buf`` as it was."""
        new = self._tensor(buf.name, cap)
        self.device.sync()  # a sequence still running (run_async) may use the old memory
        if copy_bytes:
            self.device.copy_tensors(buf.tensor, new, copy_bytes)
        self.device.forget_tensor(buf.tensor)
        buf.tensor = new
        buf.capacity = cap
        if shape is not None:
            buf.shape = shape
        buf.version += 1
        self._note_usage()
        if self.poison and not copy_bytes:
            self.device.fill(buf, NAN_WORD)

    def free(self, buf: Buffer):
        if buf.tensor is None:
            return
        self.device.sync()
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
                "out of GPU memory allocating buffer %r (%s; the pool already holds %s of its %s, %s)"
                % (
                    name,
                    _fmt_bytes(capacity),
                    _fmt_bytes(self.total_capacity()),
                    _fmt_bytes(self.limit),
                    "SPIRULA_MEMORY_LIMIT" if self.limit == self.env_limit else "--vram-budget",
                )
            )
        try:
            tensor = self.device.new_storage_tensor(capacity // 4)
            self.allocations += 1
            return tensor
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

    def live_bytes(self) -> int:
        """The live need: the bytes in use (each buffer's shape) summed over the
        pool. Per-splat buffers are shaped for the live splat count, the
        rasterizers' intersection buffers for the most intersections their
        views have needed, images and the rest for what they hold."""
        return sum(b.nbytes for b in self.buffers.values())

    def track_ratio(self):
        """Start (or restart) tracking :attr:`worst_ratio`, total capacity over
        live need, at every allocation, reallocation, reshape and free."""
        self.worst_ratio = None
        self.worst_ratio_at = None
        self._tracking = True
        self._check_ratio()

    def _check_ratio(self):
        total, live = self.total_capacity(), self.live_bytes()
        if live <= 0:
            return
        ratio = total / live
        if self.worst_ratio is None or ratio > self.worst_ratio:
            self.worst_ratio = ratio
            self.worst_ratio_at = (total, live)

    def usage(self) -> dict:
        """category -> (buffers, used bytes, capacity bytes), now."""
        out = {}
        for b in self.buffers.values():
            n, used, cap = out.get(b.category, (0, 0, 0))
            out[b.category] = (n + 1, used + b.nbytes, cap + b.capacity)
        return out

    def _note_usage(self):
        if self._tracking:
            self._check_ratio()
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


def fmt_bytes(n: int) -> str:
    """``183.11 MiB``: bytes for a message."""
    return _fmt_bytes(n)


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%.2f %s" % (n / size, unit)
    return "%d B" % n
