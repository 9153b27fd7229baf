"""The Vulkan backend: a Kompute manager plus what Spirula keeps beside it.

:class:`VulkanDevice` owns the ``kp.Manager`` (or borrows one an embedding app
hands over), the kernel registry, the cache of Kompute algorithms (one per
kernel x bound buffers x workgroups x specialization) and the host staging
memory; the buffer pool, the range checks and the transfer timing are the
shared :class:`spirula.runtime.device.Device`'s. Each transfer (:meth:`upload`
H2D, :meth:`readback` D2H, :meth:`copy` D2D, :meth:`fill` memset) is a
``copy``/``fill`` kernel between evals.

Device selection: ``open_device("vulkan", index)``, else ``SPIRULA_DEVICE``,
else a discrete GPU before an integrated one before the CPU driver (lavapipe).
It builds on the Vulkan pieces beside it (vkinfo, kernels, spirv,
pipeline_cache, sequence) and on what both backends share
(:mod:`spirula.runtime`: device, buffers, sequence, profiler).
"""

from __future__ import annotations

import collections

import numpy as np

from spirula import settings
from spirula.backends.vulkan import pipeline_cache, vkinfo
from spirula.backends.vulkan.kernels import KernelRegistry
from spirula.backends.vulkan.sequence import RecordedSequence
from spirula.contract.kernel import Kernel
from spirula.errors import NoVulkanError, SpirulaError
from spirula.runtime import device as shared
from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import grid_stride_groups

STAGING_MAX_BYTES = 64 << 20  # transfers larger than this go in chunks


def _import_kp():
    try:
        import kp
    except ImportError as exc:
        if "libvulkan" in str(exc):
            raise NoVulkanError("no Vulkan loader (libvulkan.so.1): " + vkinfo.INSTALL_HINT) from None
        raise SpirulaError("Kompute's Python module `kp` is not installed: run `make install` (%s)" % exc) from None
    try:
        kp.OpBarrier(False)  # the patch's barrier, with its host flag
    except (AttributeError, TypeError):
        raise SpirulaError(
            "this `kp` lacks Spirula's current patch (kp.OpBarrier(host)): run `make install`, "
            "which builds it (docs/kompute.md)"
        ) from None
    return kp


def list_devices() -> tuple:
    """Every Vulkan device (:class:`~spirula.backends.vulkan.vkinfo.VulkanDeviceInfo`), in the
    loader's order; NoVulkanError with one line where there is none."""
    return vkinfo.list_devices()


def resolve_index(index=None, devices=None) -> int:
    """The device index to use: the argument, else $SPIRULA_DEVICE, else the default."""
    devices = devices if devices is not None else vkinfo.list_devices()
    return shared.resolve_index(index, len(devices), vkinfo.default_index(devices), NoVulkanError, "Vulkan")


def unavailable_reason(index=None):
    """None if Vulkan device ``index`` can be opened here, else the one-line reason."""
    try:
        _import_kp()
        vkinfo.check_requirements(vkinfo.list_devices()[resolve_index(index)])
    except SpirulaError as exc:
        return str(exc)
    return None


def default_buffer_robustness(info) -> bool | str:
    """The ``buffer_robustness`` a device opens with when none is given:
    ``SPIRULA_NO_BUFFER_ROBUSTNESS`` (``0``: the driver's checks everywhere,
    ``kernels``: off for kernels that say ``#pragma spirula_no_bounds_checks``),
    else ``"kernels"`` on NVIDIA's devices (measured faster there:
    notes/performance-history.md, "Buffer robustness per kernel") and True
    elsewhere."""
    chosen = settings.buffer_robustness()
    if chosen is not None:
        return chosen
    return "kernels" if info.vendor_id == vkinfo.VENDOR_NVIDIA else True


def shuffle_sums_defines(info) -> dict:
    """rasterize_bwd's subgroup sums as explicit subgroupShuffleXor
    butterflies added from lane 0 (``SHUFFLE_SUMS=1`` and the butterfly's
    step count ``SUBGROUP_LOG2``), where the device has subgroup shuffles and
    runs compute in one power-of-two subgroup size: every lane is active
    there, which subgroupAdd cannot assume. {} where it cannot run them.
    A VulkanDevice compiles with them on NVIDIA's devices (rasterize_bwd 17%
    faster on an H100); tests add them to ``device.defines`` elsewhere."""
    lo, hi = info.subgroup_size_range
    one_size = lo == hi and lo & (lo - 1) == 0  # the butterfly's steps are then known at compile time
    if not (one_size and info.subgroup_operations & vkinfo.SUBGROUP_SHUFFLE):
        return {}
    return dict(SHUFFLE_SUMS=1, SUBGROUP_LOG2=lo.bit_length() - 1)


def _borrowed_index(manager, index, devices) -> int:
    """The physical device index of a borrowed ``kp.Manager``: ``index`` if
    given (checked against the manager's device name), else the one device of
    that name; a one-line SpirulaError where the name matches none, or
    several and no ``index`` says which (Kompute does not expose the handle)."""
    name = manager.get_device_properties()["device_name"]
    same = [d.index for d in devices if d.name == name]
    if index is not None:
        index = resolve_index(index, devices)
        if devices[index].name != name:
            raise SpirulaError(
                "the borrowed kp.Manager runs on %r but Vulkan device %d is %r" % (name, index, devices[index].name)
            )
        return index
    if not same:
        raise SpirulaError("the borrowed kp.Manager runs on %r, which the Vulkan loader does not list" % name)
    if len(same) > 1:
        raise SpirulaError(
            "the borrowed kp.Manager runs on %r and devices %s share that name: pass the index the manager"
            " was created with (device=N)" % (name, ", ".join(map(str, same)))
        )
    return same[0]


class VulkanDevice(shared.Device):
    """One Vulkan device and everything Spirula allocates on it.

    Args:
        index: physical device index (``spirula devices``); None picks as above.
        manager: an existing ``kp.Manager`` to borrow (embedding); then
            ``index`` names its physical device if known, else it is matched by name.
        float_atomics: use native float atomicAdd where the device offers it
            (``SPIRULA_NO_FLOAT_ATOMICS=1`` forces the compare-and-swap path).
        float_controls: compile the kernels that test finiteness (their shader
            defines SPIRULA_PRESERVE_INF_NAN) with SignedZeroInfNanPreserve for
            float32 where the device offers it (VK_KHR_shader_float_controls),
            so its compiler keeps IEEE's NaN and Inf (spirula/backends/vulkan/spirv.py;
            on by default, False turns it off). The finiteness tests do not
            depend on it (they read bits: finite.glsl).
        buffer_robustness: ``"kernels"`` compiles the kernels whose shader
            says ``#pragma spirula_no_bounds_checks`` (``Kernel.no_bounds_checks``:
            rasterize_bwd) with their storage buffers' robustness disabled,
            where the device has VK_EXT_pipeline_robustness: NVIDIA's driver
            bounds-checks every storage buffer access unless told not to
            (notes/performance-history.md, "What NVIDIA's driver compiled"),
            and rasterize_bwd is 5% faster on an H100 without. True keeps the
            driver's checks everywhere. None: ``default_buffer_robustness``
            (``SPIRULA_NO_BUFFER_ROBUSTNESS``, else ``"kernels"`` on NVIDIA's
            devices and True elsewhere).

    rasterize_bwd's subgroup sums are shuffles on NVIDIA's devices
    (:func:`shuffle_sums_defines`; ``shuffle_sums`` says whether).
    """

    backend = "vulkan"

    def __init__(
        self,
        index: int | None = None,
        manager=None,
        *,
        float_atomics: bool | None = None,
        float_controls: bool | None = None,
        buffer_robustness: bool | str | None = None,
    ):
        self.kp = kp = _import_kp()
        devices = vkinfo.list_devices()
        if manager is None:
            index = resolve_index(index, devices)
            self.info = devices[index]
            vkinfo.check_requirements(self.info)
            if float_atomics is None:
                float_atomics = settings.float_atomics()
            float_atomics = bool(float_atomics and self.info.atomic_float_add)
            if float_controls is None:
                float_controls = True
            float_controls = bool(float_controls and self.info.inf_nan_preserve)
            exts = [vkinfo.ATOMIC_FLOAT_EXTENSION] if float_atomics else []
            exts += [vkinfo.FLOAT_CONTROLS_EXTENSION] if float_controls else []
            if buffer_robustness is None:
                buffer_robustness = default_buffer_robustness(self.info)
            if buffer_robustness not in (True, "kernels"):
                raise ValueError("buffer_robustness: True or 'kernels', not %r" % (buffer_robustness,))
            if vkinfo.PIPELINE_ROBUSTNESS_EXTENSION not in self.info.extensions:
                buffer_robustness = True
            if buffer_robustness is not True:  # then kp's patch can compile some pipelines without it
                exts.append(vkinfo.PIPELINE_ROBUSTNESS_EXTENSION)
            try:
                self.mgr = kp.Manager(index, [], exts)
            except Exception as exc:
                raise NoVulkanError("cannot open Vulkan device %d (%s): %s" % (index, self.info.name, exc)) from None
        else:
            self.mgr = manager
            self.info = devices[_borrowed_index(manager, index, devices)]
            vkinfo.check_requirements(self.info)
            # A borrowed manager's enabled features are unknown unless stated.
            float_atomics = bool(float_atomics)
            float_controls = bool(float_controls)
            buffer_robustness = True  # the host program's pipelines are compiled as it chose
        # A borrowed manager stays the host program's: nothing here destroys it
        # (close() frees Spirula's buffers only), and it outlives this device.
        self.owns_manager = manager is None
        if self.owns_manager:
            # the pipelines compiled by earlier runs on this driver (spirula/backends/vulkan/pipeline_cache.py)
            pipeline_cache.attach(self, self.mgr, self.info)
        self.float_atomics = float_atomics
        self.float_controls = float_controls
        self.buffer_robustness = buffer_robustness
        self.defines = {"ATOMIC_FLOAT": int(float_atomics), "INF_NAN_PRESERVE": int(float_controls)}
        if self.info.vendor_id == vkinfo.VENDOR_NVIDIA:
            # measured faster on NVIDIA only (notes/performance-history.md, "subgroup sums as shuffles")
            self.defines.update(shuffle_sums_defines(self.info))
        lo, hi = self.info.subgroup_size_range
        # radix_sort_scatter sizes its per-subgroup counts from the subgroup sizes it may run with
        self.defines.update(SUBGROUP_SIZE_MIN=lo, SUBGROUP_SIZE_MAX=hi)
        self.kernels = KernelRegistry()
        self._init_device()
        self._algorithms = {}
        self._algorithms_by_tensor = collections.defaultdict(set)
        self._staging = None
        self._staging_words = 0
        self._immediate = None
        bits = self.info.timestamp_valid_bits
        self.timestamp_mask = (1 << bits) - 1 if 0 < bits < 64 else (1 << 64) - 1

    @property
    def shuffle_sums(self) -> bool:
        """Whether rasterize_bwd compiles with its subgroup sums as shuffles (:func:`shuffle_sums_defines`)."""
        return "SHUFFLE_SUMS" in self.defines

    # -- kernels and algorithms ---------------------------------------------------
    def kernel(self, name: str, **defines) -> Kernel:
        """Kernel ``name`` compiled for this device (capability defines merged in)."""
        return self.kernels.get(name, **{**self.defines, **defines})

    def kernel_names(self) -> list:
        """Every shader of ``shaders/``."""
        return self.kernels.names()

    def algorithm(self, kernel: Kernel, tensors, groups: tuple, spec_words: np.ndarray):
        """The cached Kompute algorithm binding ``tensors`` to ``kernel``."""
        key = (kernel.key, tuple(id(t) for t in tensors), groups, spec_words.tobytes())
        algo = self._algorithms.get(key)
        if algo is None:
            push0 = np.zeros(len(kernel.push), np.uint32).view(np.float32)
            if self.buffer_robustness == "kernels":  # for the algorithm created next (kp's patch)
                self.mgr.set_buffer_robustness_disabled(kernel.no_bounds_checks)
            algo = self.mgr.algorithm(list(tensors), kernel.spirv, list(groups), spec_words, push0)
            self._algorithms[key] = (algo, tuple(tensors))
            for t in tensors:
                self._algorithms_by_tensor[id(t)].add(key)
            return algo
        return algo[0]

    def forget_tensor(self, tensor):
        """Drop every algorithm bound to ``tensor`` (so its memory can be freed)."""
        for key in self._algorithms_by_tensor.pop(id(tensor), ()):
            entry = self._algorithms.pop(key, None)
            if entry is not None:
                for t in entry[1]:
                    if t is not tensor:
                        self._algorithms_by_tensor.get(id(t), set()).discard(key)

    def new_storage_tensor(self, words: int):
        return self.mgr.tensor_t(np.empty(words, np.uint32), self.kp.TensorTypes.storage)

    def new_host_tensor(self, words: int):
        return self.mgr.tensor_t(np.zeros(words, np.uint32), self.kp.TensorTypes.host)

    # -- recording ----------------------------------------------------------------
    def sequence(self, plan: list, buffers: list, label: str = "") -> RecordedSequence:
        return RecordedSequence(self, plan, buffers, label)

    def process_memory_used(self):
        """Device-local bytes this process uses, where the driver says (VK_EXT_memory_budget)."""
        try:
            return vkinfo.process_heap_usage(self.info.index)
        except Exception:
            return None

    def close(self):
        super().close()
        saver = getattr(self, "_pipeline_cache_saver", None)
        if saver is not None:
            saver()  # now, rather than when the object is collected

    # -- transfers ----------------------------------------------------------------
    def _staging_array(self, nwords: int) -> np.ndarray:
        if nwords > self._staging_words:
            words = max(1024, 1 << (nwords - 1).bit_length())
            if self._staging is not None:
                self.forget_tensor(self._staging)
            self._staging = self.mgr.tensor_t(np.zeros(words, np.uint32), self.kp.TensorTypes.host)
            self._staging_words = words
        return self._staging.data()

    def _run_now(self, kernel: Kernel, tensors, units: int, push: dict):
        """Dispatch one grid-stride kernel and wait (transfers between evals)."""
        groups = (grid_stride_groups(kernel, units), 1, 1)
        algo = self.algorithm(kernel, tensors, groups, kernel.pack_spec(None))
        prof = self.profiler
        timed = prof is not None and self.info.timestamps
        if self._immediate is None:
            self._immediate = self.mgr.sequence(0, 3 if timed else 0)
        seq = self._immediate
        seq.clear()
        seq.record(self.kp.OpBarrier(False))  # after the dispatches before it
        seq.record(self.kp.OpAlgoDispatch(algo, kernel.pack_push(push)))
        seq.record(self.kp.OpBarrier(True))  # the host reads what it wrote
        seq.eval()
        if timed:
            ts = seq.get_timestamps()
            prof.kernel(kernel.name, int(((ts[2] - ts[1]) & self.timestamp_mask) * self.info.timestamp_period_ns))

    def _copy_words(self, src_tensor, dst_tensor, nwords: int, src_off: int = 0, dst_off: int = 0):
        vec4 = nwords % 4 == 0 and src_off % 4 == 0 and dst_off % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.kernel("copy", VEC4=int(vec4))
        self._run_now(
            kernel,
            (src_tensor, dst_tensor),
            nwords // k,
            dict(src_offset=src_off // k, dst_offset=dst_off // k, count=nwords // k),
        )

    def copy_tensors(self, src_tensor, dst_tensor, nbytes: int):
        """Copy the first ``nbytes`` (a multiple of 4) between raw Kompute tensors."""
        self.sync()
        self._copy_words(src_tensor, dst_tensor, nbytes // 4)

    def _write(self, buf: Buffer, data: np.ndarray, offset: int):
        words = data.view(np.uint32)
        chunk = STAGING_MAX_BYTES // 4
        for start in range(0, words.size, chunk):
            part = words[start : start + chunk]
            staging = self._staging_array(part.size)
            staging[: part.size] = part
            self._copy_words(self._staging, buf.tensor, part.size, 0, offset // 4 + start)

    def _read(self, buf: Buffer, out: np.ndarray, offset: int):
        out = out.view(np.uint32)
        chunk = STAGING_MAX_BYTES // 4
        for start in range(0, out.size, chunk):
            n = min(chunk, out.size - start)
            staging = self._staging_array(n)
            self._copy_words(buf.tensor, self._staging, n, offset // 4 + start, 0)
            out[start : start + n] = staging[:n]

    def _copy(self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int, dst_offset: int):
        self._copy_words(src.tensor, dst.tensor, nbytes // 4, src_offset // 4, dst_offset // 4)

    def _fill(self, buf: Buffer, word: int, nbytes: int, offset: int):
        nwords, off = nbytes // 4, offset // 4
        vec4 = nwords % 4 == 0 and off % 4 == 0
        k = 4 if vec4 else 1
        kernel = self.kernel("fill", VEC4=int(vec4))
        self._run_now(kernel, (buf.tensor,), nwords // k, dict(offset=off // k, count=nwords // k, value=word))
