"""The trainer: a whole 3DGS training step as one recorded GPU sequence.

Per step the host writes a few scalars (step, learning rates, which image)
into host-visible memory and evaluates the recorded step once:

    copy step params + camera -> projection_fwd -> depth sort -> tile counts
    -> prefix_sum -> intersect_tile_write -> tile sort -> tile_ranges
    -> rasterize_fwd -> loss_fwd -> loss_bwd -> rasterize_bwd -> fpbo
    -> copy loss and intersection count to host-visible memory

No image, gradient or parameter crosses the bus; the host reads back four
floats and one count. The sequence is recorded again only when the splat
count, the SH degree or a buffer's allocation changes (densification, the
SH schedule, intersection growth).

Pipelined steps (``TrainConfig.pipeline_steps``, on by default): a waited-for
evaluation costs a round trip (~0.6 ms on an H200, a fifth of a 256x256
step) with the GPU idle. So :meth:`Trainer.train_step` with ``ahead=True``
submits the next step before waiting for this one: two slots of
``host_in``/``host_out`` (and a step sequence recorded for each), the GPU
runs them in order, and the host reads step N's loss and intersection count
while step N+1 runs. Where the host needs the state (densification, opacity
reset, NaN injection after a step) nothing is submitted ahead; evaluation,
checkpoints and exports call :meth:`Trainer.settle`, which completes a step
in flight. The step in flight runs exactly what the synchronous loop would
(the same image order, learning rates and seed); the results differ from a
synchronous run only as two synchronous runs do (rasterize_bwd's atomic
float sums).

Training images may differ in size (several COLMAP cameras, portrait and
landscape photos): each size gets its own :class:`_ImageSize` (rasterizer,
loss scratch, ground truth and recorded step); the splats, their optimizer
state and the step parameters are shared.
"""

from __future__ import annotations

import numpy as np

from spirula.data.world import WorldTransform
from spirula.errors import OutOfMemoryError, SpirulaError
from spirula.progress import track
from spirula.render.rasterizer import Rasterizer
from spirula.runtime.buffers import GROWTH, NAN_WORD, fmt_bytes, parse_size
from spirula.train import strategy as strategies
from spirula.train.config import TrainConfig
from spirula.train.loss import LossBuffers, masked_counts, pack_rgba8
from spirula.train.model import PARAM_NAMES, SplatModel, init_from_points
from spirula.train.normal_consistency import record_normal_consistency
from spirula.train.optimizer import record_fpbo
from spirula.train.schedule import learning_rates, sh_degree_at
from spirula.train.step_params import (
    NO_GUARD,
    PREV_ISECTS_WORD,
    STEP_PARAMS_HOST_WORDS,
    STEP_PARAMS_WORDS,
    step_params,
)

# Intersection buffers hold ISECT_HEADROOM x the most intersections a view has
# needed: the count differs from view to view, and a view past the capacity
# costs its step twice (run, grow, run again). 1.25 keeps the buffers within
# the 1.3x of the live need (docs/design.md, memory); more is grown at 90%.
ISECT_HEADROOM = 1.25
# host_in words of one step: its StepParams, then its camera (viewmat [4,4], fx fy cx cy)
HOST_IN_WORDS = STEP_PARAMS_WORDS + 20
HOST_OUT_WORDS = 8  # loss, l1, ssim, mse, intersection count
SLOTS = 2  # host_in/host_out slots: the step being read back and the one submitted ahead
# The default memory budget: this fraction of the device's local memory. The
# rest is for what the pool does not see: the driver, pipelines and
# descriptor pools, Kompute's staging buffers, a display on the same GPU, and
# the one buffer that exists twice while it grows.
DEFAULT_BUDGET_FRACTION = 0.85


def gt_chunk_bytes(device) -> int:
    """The most bytes of ground truth in one buffer: the device's storage buffer range."""
    return device.info.max_storage_buffer_range if device.info is not None else 1 << 62


class _ImageSize:
    """The training views of one image size: their ground truth on the GPU
    (RGBA8, [I,H,W], in chunks of at most the device's storage buffer range:
    42 views at 1080p are 332 MiB, and lavapipe binds 128 MiB a buffer), a
    rasterizer and loss scratch of that size, and the step sequence recorded
    for each chunk. ``images``: their train-list indices; ``capacity``:
    splats the rasterizer starts with room for."""

    def __init__(
        self,
        dev,
        scene,
        width: int,
        height: int,
        images: list,
        name: str,
        capacity: int,
        max_alpha: float,
        geometry: bool = False,
        normals: bool = False,
    ):
        self.width, self.height, self.images = width, height, images
        image_bytes = 4 * width * height
        rng = gt_chunk_bytes(dev)
        if image_bytes > rng:
            raise OutOfMemoryError(
                "a %dx%d training image needs %s but %s binds at most %s per buffer; lower --downscale"
                % (width, height, fmt_bytes(image_bytes), dev.info.name, fmt_bytes(rng))
            )
        per_chunk = max(1, rng // image_bytes)
        # train index -> (chunk, index in that chunk's gt buffer)
        self.local = {img: (k // per_chunk, k % per_chunk) for k, img in enumerate(images)}
        self.gt_chunks = []
        self.masked = {}  # train index -> (masked_pixels, masked_valid) of its loss mask
        for c in range(0, len(images), per_chunk):
            part = images[c : c + per_chunk]
            label = name + ".gt_images" + (".%d" % (c // per_chunk) if c else "")
            buf = dev.pool.alloc(label, (len(part), height, width), np.uint32, "image")
            pixels = [scene.load_image(scene.train[i]) for i in track(part, "loading images", unit="image")]
            masks = [scene.load_mask(scene.train[i]) for i in part]
            for i, m in zip(part, masks):
                self.masked[i] = masked_counts(m)
            keep = (
                None
                if all(m is None for m in masks)
                else np.stack([np.ones((height, width), bool) if m is None else m for m in masks])
            )
            dev.upload(buf, pack_rgba8(np.stack(pixels), keep))
            self.gt_chunks.append(buf)
        self.chunk = 0  # the chunk of the image being trained
        self.raster = Rasterizer(
            dev,
            width,
            height,
            1,
            capacity=capacity,
            name=name + ".raster",
            max_alpha=max_alpha,
            geometry=geometry,
            normals=normals,
        )
        self.raster.set_backgrounds(scene.background[None])
        # the normal consistency's dL/d per-pixel loss: the constant normal_weight / pixels
        self.nc_grad_loss = (
            dev.pool.alloc(name + ".nc_grad_loss", (1, height, width), np.float32, "image") if normals else None
        )
        self.loss = LossBuffers(dev, 1, width, height, name=name + ".loss")
        self.seqs = {}  # chunk -> (key, recorded step)

    @property
    def gt_images(self):
        return self.gt_chunks[self.chunk]

    def free(self, device):
        self.raster.free()
        self.loss.free()
        if self.nc_grad_loss is not None:
            device.pool.free(self.nc_grad_loss)
        for buf in self.gt_chunks:
            device.pool.free(buf)


class _Step:
    """One training step on its way: ``k`` its 0-based index, ``image`` its
    train-list index, ``group``/``chunk`` where its ground truth is,
    ``slot`` its host_in/host_out slot; once submitted, ``seq`` and the
    intersection ``capacity`` it runs with."""

    __slots__ = ("k", "image", "group", "chunk", "sh_degree", "slot", "seq", "capacity", "submitted")

    def __init__(self, k, image, group, chunk, sh_degree, slot):
        self.k, self.image, self.group, self.chunk, self.sh_degree, self.slot = k, image, group, chunk, sh_degree, slot
        self.seq, self.capacity, self.submitted = None, 0, False


class Trainer:
    """Trains splats on a :class:`~spirula.data.Scene` with a :class:`TrainConfig`.

    ``step`` counts completed steps. Use :meth:`train_step` to run,
    :meth:`evaluate` for test metrics, :meth:`state_dict` /
    :meth:`load_state_dict` for checkpoints and :meth:`splat_arrays` for
    export. Training happens in normalized coordinates (:mod:`spirula.data.world`);
    ``init`` and :meth:`splat_arrays` are in the dataset's.
    """

    def __init__(
        self,
        scene,
        cfg: TrainConfig,
        device,
        init: dict | None = None,
        world: WorldTransform | None = None,
        log=None,
    ):
        before = set(device.pool.buffers)
        try:
            self._build(scene, cfg, device, init, world, log)
        except BaseException:
            # what was allocated before the failure goes back to the pool (a
            # caller may go on: a smaller run, the memory bench's search)
            for key in set(device.pool.buffers) - before:
                device.pool.free(device.pool.buffers[key])
            device.pool.set_budget(None)
            raise

    def _build(self, scene, cfg, device, init, world, log):
        self.scene, self.cfg, self.device = scene, cfg, device
        self.notes = []  # the one-line messages about memory (budget, caps), also sent to ``log``
        self._log = log
        frames = [scene.frames[i] for i in scene.train]
        if not frames:
            raise SpirulaError("%s: no training images" % scene.path)
        self.sh_coeffs = (cfg.sh_degree + 1) ** 2
        self.step = 0
        self.rng = np.random.default_rng(cfg.seed)
        self._order = []
        pool = device.pool

        dataset_viewmats = np.stack([f.viewmat for f in frames]).astype(np.float64)
        self.world = world or WorldTransform.from_cameras(dataset_viewmats, cfg.world_center)
        self.viewmats = self.world.viewmats(dataset_viewmats)
        self.Ks = np.stack([f.K for f in frames]).astype(np.float64)
        centres = -np.einsum("nji,nj->ni", self.viewmats[:, :3, :3], self.viewmats[:, :3, 3])
        self.extent = 1.1 * float(np.linalg.norm(centres - centres.mean(0), axis=1).max()) or 1.0

        if init is None:
            init = init_from_points(
                self.world.points(scene.points), scene.point_colors, cfg, self.sh_coeffs, seed=cfg.seed
            )
        else:
            init = self.world.to_training(init)
        n = len(init["means"])
        self.strategy = strategies.make(cfg)
        self.budget = self._budget()
        pool.set_budget(self.budget)
        try:
            self.model = SplatModel(device, n, self.strategy.capacity(n), self.sh_coeffs, compact=cfg.compact)
        except OutOfMemoryError as exc:
            raise OutOfMemoryError("%s; lower the splat count or the SH degree (--sh-degree)" % exc) from None
        self.model.upload(init)
        self.stats = (
            pool.alloc("train.grad2d_sum", (n,), np.float32, "splat", zero=True, capacity=4 * self.model.capacity),
            pool.alloc("train.vis_count", (n,), np.uint32, "splat", zero=True, capacity=4 * self.model.capacity),
        )

        # one group per image size, the most common first (named "train" when alone)
        by_size = {}
        for k, f in enumerate(frames):
            by_size.setdefault((f.width, f.height), []).append(k)
        sizes = sorted(by_size, key=lambda wh: (-len(by_size[wh]), wh))
        self.sizes = {
            wh: _ImageSize(
                device,
                scene,
                wh[0],
                wh[1],
                by_size[wh],
                "train" if len(sizes) == 1 else "train.%dx%d" % wh,
                self.model.capacity,
                cfg.max_alpha,
                geometry=cfg.distortion_weight > 0,
                normals=cfg.normal_weight > 0,
            )
            for wh in sizes
        }
        self._size_of_image = [self.sizes[(f.width, f.height)] for f in frames]
        self._eval_rasters = {}
        self.params = pool.alloc("train.params", (STEP_PARAMS_WORDS,), np.uint32, "other", zero=True)
        self.host_in = pool.alloc("train.host_in", (SLOTS, HOST_IN_WORDS), np.uint32, host=True)
        self.host_out = pool.alloc("train.host_out", (SLOTS, HOST_OUT_WORDS), np.float32, host=True)
        self._slot = 0  # the host_in/host_out slot of the next step submitted
        self._ahead = None  # the _Step submitted ahead (pipelined), not yet read back
        self._settled = None  # the result of a step settle() completed, for the next train_step()
        self._isects_per_splat = 0.0
        for group in self.sizes.values():
            self._active = group
            self._measure_intersections()
        self._active = self.sizes[sizes[0]]
        self.splat_limit = self._splat_limit()
        pool.track_ratio()

    # -- memory -------------------------------------------------------------------
    def _say(self, msg: str):
        self.notes.append(msg)
        if self._log is not None:
            self._log("spirula: " + msg)

    def _budget(self) -> int | None:
        """The memory budget in bytes: --vram-budget, else DEFAULT_BUDGET_FRACTION
        of the device's local memory (None when the device does not say)."""
        if self.cfg.vram_budget is not None:
            return parse_size(self.cfg.vram_budget, "--vram-budget ")
        info = self.device.info
        local = getattr(info, "device_local_bytes", 0) if info is not None else 0
        return int(local * DEFAULT_BUDGET_FRACTION) if local else None

    def splat_row_bytes(self) -> dict:
        """Bytes per splat of every per-splat buffer, by name, from the buffers'
        own layouts: the model, the statistics, the strategy's scratch and
        every training rasterizer's per-view buffers."""
        rows = dict(self.model.row_bytes())
        for stat in self.stats:
            rows[stat.name] = stat.dtype.itemsize
        rows.update(self.strategy.row_bytes())
        for group in self.sizes.values():
            rows.update({"%s.%s" % (group.raster.name, k): v for k, v in group.raster.row_bytes().items()})
        return rows

    def _splat_limit(self) -> int:
        """The most splats this run may hold: what every per-splat buffer can
        bind (device limit) and what fits the budget; MCMC's cap and ADC's
        growth stop there (one line each when it binds)."""
        cfg, info, pool = self.cfg, self.device.info, self.device.pool
        rows = self.splat_row_bytes()
        deg = "SH degree %d" % cfg.sh_degree
        limit, why = 1 << 62, None
        rng = info.max_storage_buffer_range if info is not None else 1 << 62
        name, row = max(rows.items(), key=lambda kv: kv[1])
        by_range = rng // row
        if by_range < limit:
            limit = by_range
            why = "buffer %s binds at most %s on %s" % (name, fmt_bytes(rng), info.name)
        if self.budget is not None:
            per_view_groups = len(self.sizes)
            isect_bytes = max(g.raster.isect_bytes() for g in self.sizes.values())
            isect = isect_bytes * ISECT_HEADROOM * self._isects_per_splat * per_view_groups
            # one buffer exists twice while it grows; ADC writes one group at a time
            model_rows = self.model.row_bytes()
            largest_group = max(sum(model_rows[b.name] for b in group.buffers()) for group in self.model.groups())
            transient = row if cfg.strategy == "mcmc" else largest_group + 12
            per_splat = sum(rows.values()) + isect + transient
            fixed = sum(b.capacity for b in pool.buffers.values() if b.category not in ("splat", "splat x img"))
            fit = max(int((self.budget - fixed) // per_splat), 0)
            source = (
                "--vram-budget"
                if cfg.vram_budget is not None
                else "%d%% of %s's %s"
                % (round(100 * DEFAULT_BUDGET_FRACTION), info.name, fmt_bytes(info.device_local_bytes))
            )
            self._say(
                "memory budget %s (%s): %s splats fit at %s (%s a splat)"
                % (fmt_bytes(self.budget), source, f"{fit:,}", deg, fmt_bytes(int(per_splat)))
            )
            if fit < limit:
                limit = fit
                why = "the memory budget %s holds %s splats at %s" % (fmt_bytes(self.budget), f"{fit:,}", deg)
        limit = max(limit, self.model.n)
        if cfg.strategy == "mcmc":
            if limit < cfg.cap_max:
                self._say("splat cap lowered to %s: %s" % (f"{limit:,}", why))
            self.strategy.cap = min(cfg.cap_max, limit)
        else:
            self.strategy.limit = limit
            self.strategy.limit_reason = why
        self.strategy.say = self._say
        return limit

    def fit_splat_buffers(self):
        """Room in the statistics and every view for the model's splats
        (grown by GROWTH past their capacity, within the splat limit), shaped
        for the live count."""
        pool, n = self.device.pool, self.model.n
        room = max(self.model.capacity, min(int(np.ceil(n * GROWTH)), getattr(self, "splat_limit", n)), n)
        for stat in self.stats:
            item = stat.dtype.itemsize
            if stat.capacity < item * n or stat.capacity > item * room * GROWTH:
                pool.reserve(stat, item * max(room, stat.shape[0]), keep=True)
                pool.resize(stat, (n,), keep=True)
                self.device.fill(stat, 0)
            else:
                pool.resize(stat, (n,), keep=True)
        for group in self.sizes.values():
            group.raster.reserve(n, room=room)

    # The image size being trained (the last step's); for one size, the only one.
    raster = property(lambda self: self._active.raster)
    loss = property(lambda self: self._active.loss)
    gt_images = property(lambda self: self._active.gt_images)
    width = property(lambda self: self._active.width)
    height = property(lambda self: self._active.height)

    def reserve_views(self, n: int):
        """Room for ``n`` splats in every image size's rasterizer."""
        self.settle()
        for group in self.sizes.values():
            group.raster.reserve(n)

    def adopt(self, changes):
        """Take over what the strategy changed (:class:`~spirula.train.strategy.Changes`):
        its splats, and room for them in the statistics and every view."""
        self.model = changes.model
        if changes.n_after != changes.n_before or changes.model.capacity != self.stats[0].shape[0]:
            self.fit_splat_buffers()

    # -- the recorded step --------------------------------------------------------
    def _measure_intersections(self, views=8):
        """Size the active image size's intersection buffers from a few of its
        views (phase 1 only)."""
        images = self._active.images
        idx = self.rng.choice(images, views, replace=False) if len(images) > views else images
        self.raster.reserve(self.model.n)
        most = 1
        for i in idx:
            self.raster.set_cameras(self.viewmats[i : i + 1], self.Ks[i : i + 1])
            rec = self.device.recorder("train.measure")
            self.raster.record_project(rec, self.model.params, 0)
            rec.finish().run()
            most = max(most, self.raster.num_intersections())
        self._isects_per_splat = max(self._isects_per_splat, most / max(self.model.n, 1))
        self.raster.reserve(self.model.n, most, isect_room=int(most * ISECT_HEADROOM))

    def _sequence(self, st):
        """The recorded step for ``st`` (a :class:`_Step`): its image size and
        chunk, its SH degree, its host_in/host_out slot."""
        group = self._active = st.group
        group.chunk = st.chunk
        distortion = self._distortion_on(st.k)
        normals = self._normals_on(st.k)
        key = (self.model.n, st.sh_degree, group.raster.isect_capacity, distortion, normals)
        old_key, seq = group.seqs.get((st.chunk, st.slot), (None, None))
        if seq is None or old_key != key or seq.stale:
            seq = self._record(st.sh_degree, distortion, st.slot, normals)
            group.seqs[(st.chunk, st.slot)] = (key, seq)
        return seq

    def _distortion_on(self, k: int | None = None) -> bool:
        """The depth distortion is in the loss of step ``k`` (0-based; default:
        the next) (--geometry, from distortion_from on)."""
        k = self.step if k is None else k
        return self.cfg.distortion_weight > 0 and k >= self.cfg.distortion_from

    def _normals_on(self, k: int | None = None) -> bool:
        """The normal consistency is in the loss of step ``k`` (0-based; default: the
        next) (--geometry, from normal_from on)."""
        k = self.step if k is None else k
        return self.cfg.normal_weight > 0 and k >= self.cfg.normal_from

    def _record(self, sh_degree: int, distortion: bool, slot: int, normals: bool = False):
        dev, raster, cfg = self.device, self.raster, self.cfg
        rec = dev.recorder("train.step")
        src = 4 * HOST_IN_WORDS * slot
        # prev_isects is the GPU's (shaders/include/step_params.glsl): the host's copy stops before it
        rec.copy(self.host_in, self.params, nbytes=4 * STEP_PARAMS_HOST_WORDS, src_offset=src)
        rec.copy(self.host_in, raster.cameras, nbytes=80, src_offset=src + 4 * STEP_PARAMS_WORDS)
        raster.record_project(rec, self.model.params, sh_degree, normals=normals)
        # with the distortion the forward also keeps its running sum: rasterize_bwd's chunks start
        # from the sums behind their end (chunk_state)
        raster.record_raster(rec, distortion=distortion, normals=normals)
        self.loss.record(rec, raster.out_colors, self.gt_images, self.params, raster.grad_colors)
        if normals:
            # normal consistency (2DGS): d(weight x mean over pixels of a (1 - N . n_d))/d pixel
            # loss is one constant; its backward writes dL/d the normal image and dL/d the
            # accumulated depth image, which rasterize_bwd (NORMALS) takes to the splats
            grad = self._active.nc_grad_loss
            rec.fill(grad, float(cfg.normal_weight / (raster.width * raster.height)))
            record_normal_consistency(
                rec,
                raster.out_normals,
                raster.out_depths,
                raster.out_alphas,
                raster.cameras,
                raster.width,
                raster.height,
                raster.n_cameras,
                grad_loss=grad,
                grad_normals=raster.grad_normal_image,
                grad_depths=raster.grad_depth_image,
            )
        if distortion:
            # d(weight x mean over pixels of the distortion)/d pixel distortion: one constant.
            rec.fill(raster.grad_distort, float(cfg.distortion_weight / (raster.width * raster.height)))
        raster.record_raster_backward(rec, absgrad=cfg.absgrad, distortion=distortion, normals=normals)
        record_fpbo(
            rec,
            self.model,
            raster,
            self.params,
            self.stats,
            sh_degree,
            mcmc_noise=cfg.strategy == "mcmc",
            adc_stats=cfg.strategy == "adc",
            absgrad=cfg.absgrad,
            depth_grad=distortion or normals,
            flatten=cfg.flatten_weight > 0,
            normals=normals,
        )
        dst = 4 * HOST_OUT_WORDS * slot
        count = 4 * raster.total_offset
        rec.copy(self.loss.loss_out, self.host_out, nbytes=16, dst_offset=dst)
        rec.copy(raster.offsets_scan.scratch, self.host_out, nbytes=4, src_offset=count, dst_offset=dst + 16)
        # the count for the next step's fpbo, which may run before the host has read this one's
        rec.copy(raster.offsets_scan.scratch, self.params, nbytes=4, src_offset=count, dst_offset=4 * PREV_ISECTS_WORD)
        return rec.finish()

    def _next_image(self) -> int:
        if not self._order:
            self._order = list(self.rng.permutation(len(self.viewmats)))
        return int(self._order.pop())

    def _write_params(self, st, prev_capacity: int):
        """Step ``st``'s StepParams and camera into its host_in slot.
        ``prev_capacity``: the intersection capacity of the step before it on
        the GPU when that one is still unread (fpbo skips this step if it
        overflowed), else NO_GUARD."""
        cfg, group = self.cfg, st.group
        t = st.k + 1
        lr = learning_rates(cfg, st.k, self.extent)
        p = step_params(
            step=t,
            seed=(cfg.seed * 1000003 + t * 2654435761) & 0xFFFFFFFF,
            n_views=1,
            n_splats=self.model.n,
            image_index=[group.local[st.image][1]] + [0] * 7,
            masked_pixels=group.masked[st.image][0],
            masked_valid=group.masked[st.image][1],
            lr_means=lr.means,
            lr_quats=lr.quats,
            lr_scales=lr.scales,
            lr_opacities=lr.opacities,
            lr_sh0=lr.sh0,
            lr_shN=lr.shN,
            bias1=1 - cfg.beta1**t,
            bias2=1 - cfg.beta2**t,
            beta1=cfg.beta1,
            beta2=cfg.beta2,
            adam_eps=cfg.adam_eps,
            l1_weight=cfg.l1_weight,
            ssim_weight=cfg.ssim_weight,
            opacity_reg=cfg.opacity_reg,
            scale_reg=cfg.scale_reg,
            flatten_reg=cfg.flatten_weight,
            noise_scale=lr.means * cfg.noise_lr if cfg.strategy == "mcmc" else 0.0,
            grad_norm_scale_x=group.width / 2.0,
            grad_norm_scale_y=group.height / 2.0,
            prev_capacity=prev_capacity,
        )
        view = self.host_in.host_view()[st.slot]
        view[:STEP_PARAMS_WORDS] = np.frombuffer(p.tobytes(), np.uint32)
        cam = np.zeros(20, np.float32)
        cam[:16] = self.viewmats[st.image].reshape(-1)
        K = self.Ks[st.image]
        cam[16:] = (K[0, 0], K[1, 1], K[0, 2], K[1, 2])
        view[STEP_PARAMS_WORDS:] = cam.view(np.uint32)

    def _new_step(self, k: int):
        """Step ``k`` (0-based): its image (the next of the shuffled order), size
        group, chunk and SH degree, and a host_in/host_out slot."""
        image = self._next_image()
        group = self._size_of_image[image]
        st = _Step(k, image, group, group.local[image][0], sh_degree_at(self.cfg, k), self._slot)
        self._slot = (self._slot + 1) % SLOTS
        return st

    def _submit(self, st, prev=None):
        """Record (if needed), write and submit step ``st``; ``prev``: the step
        submitted before it and not yet read back (None: known whole)."""
        st.seq = self._sequence(st)
        st.capacity = st.group.raster.isect_capacity
        self._write_params(st, NO_GUARD if prev is None else prev.capacity)
        st.seq.run_async()
        st.submitted = True

    def _may_run_ahead(self, k: int) -> bool:
        """Whether step ``k + 1`` may be submitted before step ``k``'s results
        are read: nothing after step ``k`` needs the host (densification,
        opacity reset, NaN injection)."""
        cfg = self.cfg
        if not cfg.pipeline_steps or self.strategy.due(k):
            return False
        return not (cfg.inject_nan_every and (k + 1) % cfg.inject_nan_every == 0)

    def train_step(self, ahead: bool = False) -> dict:
        """One optimization step (re-run after growing the intersection
        buffers if they overflowed), then the strategy's densification.
        Returns loss, l1, ssim, mse, the intersection count and the splat
        count after the step.

        ``ahead``: the caller will call train_step again without touching the
        trainer's GPU state in between (anything that does calls
        :meth:`settle` first), so the next step may be submitted before this
        one's results are read (with ``TrainConfig.pipeline_steps``).

        The intersection overflow with a step in flight: a step whose count
        passes the capacity changes nothing (fpbo), and neither does the step
        submitted after it, since its fpbo compares the count the first one
        left in ``params.prev_isects`` with the capacity the host wrote into
        its ``prev_capacity``. The host then grows the buffers, runs the first
        again and submits the second again on the next call: both steps run
        as in the synchronous loop, and no capacity has to be guessed ahead."""
        if self._settled is not None:
            out, self._settled = self._settled, None
            return out
        return self._run_step(ahead)

    def _run_step(self, ahead: bool) -> dict:
        st = self._ahead
        self._ahead = None
        if st is None:
            st = self._new_step(self.step)
        if not st.submitted:
            self._submit(st)
        nxt = None
        if ahead and self._may_run_ahead(st.k):
            nxt = self._new_step(st.k + 1)
            self._submit(nxt, prev=st)
        st.seq.wait()
        raster = st.group.raster
        out = self.host_out.host_view()[st.slot].copy()
        n_isects = int(out[4:5].view(np.uint32)[0])
        if n_isects > raster.isect_capacity:
            if nxt is not None:
                nxt.seq.wait()  # it changed nothing either (prev_isects > prev_capacity)
                nxt.submitted = False
            while n_isects > raster.isect_capacity:
                # fpbo left the splats unchanged: grow and run this step again
                raster.reserve(self.model.n, n_isects, isect_room=int(n_isects * ISECT_HEADROOM))
                self._submit(st)
                st.seq.wait()
                out = self.host_out.host_view()[st.slot].copy()
                n_isects = int(out[4:5].view(np.uint32)[0])
        self._ahead = nxt
        self._active = st.group
        self.step += 1  # counted before growing: out of memory there leaves a whole step to checkpoint
        if n_isects > 0.9 * raster.isect_capacity:
            raster.reserve(self.model.n, n_isects, isect_room=int(n_isects * ISECT_HEADROOM))
        elif n_isects > raster.isect_keys.shape[0]:
            raster.reserve(self.model.n, n_isects)  # the live need: the most a view has needed
        changes = self.strategy.step_post_backward(
            self.model,
            self.stats,
            self.step - 1,  # 0-based, as gsplat
            self.extent,
            self.device,
        )
        if changes is not None:
            self.adopt(changes)
        if self.cfg.inject_nan_every and self.step % self.cfg.inject_nan_every == 0:
            self.inject_nan()
        return dict(
            loss=float(out[0]),
            l1=float(out[1]),
            ssim=float(out[2]),
            mse=float(out[3]),
            n_isects=n_isects,
            n_splats=self.model.n,
        )

    def settle(self):
        """Complete the step in flight, if one is (``train_step(ahead=True)``):
        it counts in ``step`` and the next :meth:`train_step` returns its
        results. Afterwards the GPU state is that of ``step`` whole steps."""
        if self._ahead is not None and self._settled is None:
            self._settled = self._run_step(False)

    def inject_nan(self) -> tuple:
        """Testing aid (``inject_nan_every``): NaN into one parameter (means,
        quats, scales, opacities, sh in turn) of 1% of the splats (at least
        one), a run of rows from a place drawn from (seed, step). Returns
        (parameter, first row, rows)."""
        every = self.cfg.inject_nan_every or 1
        name = PARAM_NAMES[(self.step // every) % len(PARAM_NAMES)]
        n = self.model.n
        rows = max(1, n // 100)
        first = int(np.random.default_rng((self.cfg.seed, self.step)).integers(0, n - rows + 1))
        buf = self.model.params.buffers()[PARAM_NAMES.index(name)]
        row_bytes = buf.nbytes // n
        self.device.fill(buf, NAN_WORD, nbytes=rows * row_bytes, offset=first * row_bytes)
        return name, first, rows

    # -- evaluation and export ----------------------------------------------------
    def _raster_for(self, width: int, height: int) -> Rasterizer:
        """A rasterizer of this size: a training one, or one made for evaluation."""
        group = self.sizes.get((width, height))
        if group is not None:
            return group.raster
        raster = self._eval_rasters.get((width, height))
        if raster is None:
            raster = self._eval_rasters[(width, height)] = Rasterizer(
                self.device,
                width,
                height,
                1,
                capacity=self.model.n,
                name="eval.%dx%d" % (width, height),
                max_alpha=self.cfg.max_alpha,
            )
            raster.set_backgrounds(self.scene.background[None])
        raster.reserve(self.model.n)
        return raster

    def render(self, viewmat, K, sh_degree: int | None = None, size: tuple | None = None) -> np.ndarray:
        """One image [H,W,3] float32 of the current splats (background
        composited) from a dataset camera (world->camera ``viewmat``, ``K``),
        ``size`` (width, height) pixels (default: the training images')."""
        self.settle()
        deg = self.cfg.sh_degree if sh_degree is None else sh_degree
        raster = self._raster_for(*size) if size is not None else self.raster
        raster.set_cameras(self.world.viewmats(np.asarray(viewmat)[None]), np.asarray(K)[None])
        raster.forward(self.model.params, deg)
        return self.device.readback(raster.out_colors)[0]

    def evaluate(self, indices=None) -> dict:
        """PSNR and SSIM of every test image (clamped to [0, 1])."""
        self.settle()
        from spirula.train.metrics import psnr, ssim

        indices = self.scene.test if indices is None else indices
        per = []
        for i in track(indices, "evaluating", unit="view"):
            f = self.scene.frames[i]
            img = np.clip(self.render(f.viewmat, f.K, sh_degree_at(self.cfg, self.step), (f.width, f.height)), 0, 1)
            gt, mask = self.scene.load_image(i), self.scene.load_mask(i)
            per.append(dict(image=f.name, psnr=psnr(img, gt, mask), ssim=ssim(img, gt, mask)))
        mean = {k: float(np.mean([p[k] for p in per])) if per else float("nan") for k in ("psnr", "ssim")}
        return dict(per_image=per, **mean)

    def splat_arrays(self) -> dict:
        """Current raw parameters in dataset coordinates, as numpy: means, quats,
        scales (log), opacities (logit), sh."""
        self.settle()
        return self.world.to_dataset(self.model.download()["params"])

    # -- checkpoints ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything --resume needs, as numpy arrays and plain values."""
        self.settle()
        state = self.model.download()
        return dict(
            step=self.step,
            config=self.cfg.to_json(),
            model=state,
            world=dict(center=list(self.world.center), scale=self.world.scale),
            rng=self.rng.bit_generator.state,
            order=list(map(int, self._order)),
            strategy=self.strategy.state_dict(self.model, self.stats, self.device),
            isect_capacity=max(g.raster.isect_capacity for g in self.sizes.values()),
        )

    def load_state_dict(self, state: dict):
        self.device.sync()
        self._ahead = self._settled = None  # what was in flight is replaced
        model = state["model"]
        self.model.set_count(len(model["params"]["means"]))
        self.model.upload(model["params"], {"exp_avg": model["exp_avg"], "exp_avg_sq": model["exp_avg_sq"]})
        self.step = int(state["step"])
        self.rng.bit_generator.state = state["rng"]
        self._order = list(state["order"])
        self.strategy.load_state_dict(state["strategy"], self.stats, self.device)
        self.fit_splat_buffers()
        for group in self.sizes.values():
            isects = int(state.get("isect_capacity", 1))
            group.raster.reserve(self.model.n, int(isects / ISECT_HEADROOM), isect_room=isects)
            group.seqs.clear()

    def free(self):
        self.device.sync()
        self._ahead = self._settled = None
        self.model.free()
        self.strategy.free(self.device)
        for group in self.sizes.values():
            group.free(self.device)
        for raster in self._eval_rasters.values():
            raster.free()
        for b in (self.params, self.host_in, self.host_out) + self.stats:
            self.device.pool.free(b)
        self.device.pool.set_budget(None)  # the budget was this run's
