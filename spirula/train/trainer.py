"""The trainer: the order of the steps, and everything around them.

Per step the host writes a few scalars (step, learning rates, which image)
into host-visible memory and evaluates the recorded step once
(spirula/train/step.py: the groups of one image size, the sequence, the
words in and out); no gradient or parameter crosses the bus, nor any image
unless the images are streamed (one view a step, staged while the step
before runs: :class:`~spirula.train.step.ImageSize`); the host reads back
four floats and one count. The sequence is recorded again
only when the splat count, the SH degree or a buffer's allocation changes
(densification, the SH schedule, intersection growth). The memory budget
and the splat limit are spirula/train/memory.py's.

Pipelined steps (``TrainConfig.pipeline_steps``, on by default): a waited-for
evaluation costs a round trip (~0.6 ms on an H200, a fifth of a 256x256
step) with the GPU idle. So :meth:`Trainer.train_step` with ``ahead=True``
submits the next step before waiting for this one: two slots of
``host_in``/``host_out`` (and a step sequence recorded for each), the GPU
runs them in order, and the host reads step N's loss and intersection count
while step N+1 runs. Where the host needs the state (densification, opacity
reset, a fault injected after a step) nothing is submitted ahead; evaluation,
checkpoints and exports call :meth:`Trainer.settle`, which completes a step
in flight. The step in flight runs exactly what the synchronous loop would
(the same image order, learning rates and seed); the results differ from a
synchronous run only as two synchronous runs do (rasterize_bwd's atomic
float sums).

Training images may differ in size (several COLMAP cameras, portrait and
landscape photos): each size gets its own :class:`~spirula.train.step.ImageSize`
(rasterizer, loss scratch, ground truth and recorded step); the splats, their
optimizer state and the step parameters are shared.
"""

from __future__ import annotations

import numpy as np

from spirula.data.exif import relative_exposures
from spirula.data.world import WorldTransform
from spirula.errors import OutOfMemoryError, SpirulaError
from spirula.render.rasterizer import Rasterizer
from spirula.runtime.buffers import NAN_WORD, fmt_bytes
from spirula.train import memory
from spirula.train import strategy as strategies
from spirula.train.appearance import Appearance, apply_appearance
from spirula.train.config import TrainConfig
from spirula.train.faults import FaultInjection
from spirula.train.memory import ISECT_HEADROOM
from spirula.train.model import PARAM_NAMES, SplatModel, init_from_points
from spirula.train.schedule import sh_degree_at
from spirula.train.step import SLOTS, ImageSize, Step, StepIO, record_step
from spirula.train.step_params import NO_GUARD


def camera_for_size(isp: dict, width: int, height: int):
    """The appearance's camera of a ``width`` x ``height`` image (one per training image
    size), or None: a size no training image has gets no per-camera stage."""
    for k, (w, h) in enumerate(np.asarray(isp.get("camera_sizes", np.zeros((0, 2)))).tolist()):
        if (w, h) == (width, height):
            return k
    return None


class Trainer:
    """Trains splats on a :class:`~spirula.data.Scene` with a :class:`TrainConfig`.

    ``step`` counts completed steps. Use :meth:`train_step` to run,
    :meth:`evaluate` for test metrics, :meth:`state_dict` /
    :meth:`load_state_dict` for checkpoints and :meth:`splat_arrays` for
    export. Training happens in normalized coordinates (:mod:`spirula.data.world`);
    ``init`` and :meth:`splat_arrays` are in the dataset's. ``faults``: a
    testing aid's hook (:class:`~spirula.train.faults.FaultInjection`), called
    after every step.
    """

    def __init__(
        self,
        scene,
        cfg: TrainConfig,
        device,
        init: dict | None = None,
        world: WorldTransform | None = None,
        log=None,
        faults: FaultInjection | None = None,
    ):
        self.faults = faults
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
        # each frame's lens (Frame.model, Frame.dist; docs/design.md §2.3)
        self.models = [getattr(f, "model", "PINHOLE") for f in frames]
        self.lenses = any(m != "PINHOLE" for m in self.models)  # fpbo's LENSES
        self.dists = np.stack([np.zeros(12) if getattr(f, "dist", None) is None else f.dist for f in frames])
        centres = -np.einsum("nji,nj->ni", self.viewmats[:, :3, :3], self.viewmats[:, :3, 3])
        self.extent = 1.1 * float(np.linalg.norm(centres - centres.mean(0), axis=1).max()) or 1.0

        if init is None:
            init = init_from_points(
                self.world.points(scene.points), scene.point_colors, cfg.strategy, self.sh_coeffs, seed=cfg.seed
            )
        else:
            init = self.world.to_training(init)
        n = len(init["means"])
        self.strategy = strategies.make(cfg)
        self.budget = memory.memory_budget(cfg.vram_budget, device)
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
            wh: ImageSize(
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
        # appearance correction (docs/design.md §2.8): None (the default of a bare
        # TrainConfig; train_run resolves it from the dataset) and "none" record nothing
        mode = cfg.appearance or "none"
        self.appearance = None
        if mode != "none":
            exposures = None
            if mode in ("ppisp", "both") and cfg.exposure_from_exif:
                exposures = relative_exposures(frames)
                if exposures is not None and log is not None:
                    log("spirula: PPISP's exposures start from the photos' EXIF: %+.2f to %+.2f stops about their"
                        " mean" % (exposures.min(), exposures.max()))  # fmt: skip
            self.appearance = Appearance(
                device, mode, frames, cfg.iterations, cfg.appearance_lr, cfg.bilagrid_lr or cfg.appearance_lr,
                controller=cfg.controller_for(mode), controller_ratio=cfg.controller_activation_ratio,
                controller_lr=cfg.controller_lr, seed=cfg.seed, exposures=exposures,
            )  # fmt: skip
        self._eval_rasters = {}
        self.io = StepIO(pool)  # the step parameters on the GPU, the host's slots in and out
        self._slot = 0  # the host_in/host_out slot of the next step submitted
        self._ahead = None  # the Step submitted ahead (pipelined), not yet read back
        self._settled = None  # the result of a step settle() completed, for the next train_step()
        self._isects_per_splat = 0.0
        for group in self.sizes.values():
            self._active = group
            self._measure_intersections()
        self._active = self.sizes[sizes[0]]
        self._load_images()
        self.splat_limit = memory.splat_limit(
            cfg,
            device,
            self.budget,
            self.splat_row_bytes(),
            self.model,
            self.sizes,
            self._isects_per_splat,
            self.strategy,
            self._say,
        )
        if self.streamed:
            self._say(self._stream_note)
        pool.track_ratio()

    def _load_images(self):
        """The ground truth of every image size: on the GPU, or streamed through a ring
        of slots when the budget wants it (:func:`spirula.train.memory.stream_images`)."""
        groups = list(self.sizes.values())
        total = sum(g.total_bytes() for g in groups)
        ring = sum(g.ring_bytes() for g in groups)
        streamed = memory.stream_images(
            self.cfg, self.device, self.budget, self.splat_row_bytes(), self.model, self.sizes,
            self._isects_per_splat, total, ring,
        )  # fmt: skip
        self.streamed = streamed  # the images are streamed (this line says how)
        if not streamed:
            for g in groups:
                g.load(self.device)
            return
        hold = total <= memory.host_available_bytes() * memory.HOST_IMAGE_FRACTION
        for g in groups:
            g.load(self.device, streamed=True, hold=hold)
        n = sum(len(g.images) for g in groups)
        self._stream_note = "streaming the %d training images (%s) from %s through a ring of %s on the GPU" % (
            n,
            fmt_bytes(total),
            "host memory" if hold else "their files (host memory is short)",
            fmt_bytes(ring),
        )

    # -- memory (spirula/train/memory.py) ---------------------------------------------
    def _say(self, msg: str):
        self.notes.append(msg)
        if self._log is not None:
            self._log("spirula: " + msg)

    def splat_row_bytes(self) -> dict:
        """Bytes per splat of every per-splat buffer, by name (:func:`spirula.train.memory.splat_row_bytes`)."""
        return memory.splat_row_bytes(self.model, self.stats, self.strategy, self.sizes)

    def fit_splat_buffers(self):
        """Room in the statistics and every view for the model's splats
        (:func:`spirula.train.memory.fit_splat_buffers`, within the splat limit)."""
        memory.fit_splat_buffers(self.device, self.model, self.stats, self.sizes, getattr(self, "splat_limit", None))

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

    # -- the recorded step (spirula/train/step.py) -------------------------------------
    def _measure_intersections(self, views=8):
        """Size the active image size's intersection buffers from a few of its
        views (phase 1 only)."""
        images = self._active.images
        idx = self.rng.choice(images, views, replace=False) if len(images) > views else images
        self.raster.reserve(self.model.n)
        most = 1
        for i in idx:
            self.raster.set_cameras(
                self.viewmats[i : i + 1], self.Ks[i : i + 1], self.models[i : i + 1], self.dists[i : i + 1]
            )
            rec = self.device.recorder("train.measure")
            self.raster.record_project(rec, self.model.params, 0)
            rec.finish().run()
            most = max(most, self.raster.num_intersections())
        self._isects_per_splat = max(self._isects_per_splat, most / max(self.model.n, 1))
        self.raster.reserve(self.model.n, most, isect_room=int(most * ISECT_HEADROOM))

    def _sequence(self, st):
        """The recorded step for ``st`` (a :class:`~spirula.train.step.Step`): its
        image size and chunk, its SH degree, its host_in/host_out slot."""
        group = self._active = st.group
        group.chunk = st.chunk
        distortion = self._distortion_on(st.k)
        normals = self._normals_on(st.k)
        controller = self._controller_on(st.k)
        key = (self.model.n, st.sh_degree, group.raster.isect_capacity, distortion, normals, controller)
        old_key, seq = group.seqs.get((st.chunk, st.slot), (None, None))
        if seq is None or old_key != key or seq.stale:
            seq = record_step(
                self.device,
                self.cfg,
                self.model,
                self.stats,
                group,
                self.io,
                st.sh_degree,
                st.slot,
                distortion,
                normals,
                self.appearance,
                controller,
                lenses=self.lenses,
            )
            group.seqs[(st.chunk, st.slot)] = (key, seq)
        return seq

    def _distortion_on(self, k: int | None = None) -> bool:
        """The depth distortion is in the loss of step ``k`` (0-based; default:
        the next) (--geometry, from distortion_from on)."""
        k = self.step if k is None else k
        return self.cfg.distortion_weight > 0 and k >= self.cfg.distortion_from

    def _controller_on(self, k: int | None = None) -> bool:
        """Step ``k`` (0-based; default: the next) trains PPISP's controller, the splats and
        the ISP frozen (docs/design.md §2.8)."""
        k = self.step if k is None else k
        return self.appearance is not None and self.appearance.controller_on(k)

    def controller_trained(self) -> bool:
        """PPISP's controller has trained (its phase has begun): evaluate(controller=True)."""
        return self.appearance is not None and self.appearance.controller_trained(self.step)

    def _normals_on(self, k: int | None = None) -> bool:
        """The normal consistency is in the loss of step ``k`` (0-based; default: the
        next) (--geometry, from normal_from on)."""
        k = self.step if k is None else k
        return self.cfg.normal_weight > 0 and k >= self.cfg.normal_from

    def _next_image(self) -> int:
        if not self._order:
            self._order = list(self.rng.permutation(len(self.viewmats)))
        return int(self._order.pop())

    def _new_step(self, k: int):
        """Step ``k`` (0-based): its image (the next of the shuffled order), size
        group, chunk and SH degree, and a host_in/host_out slot."""
        image = self._next_image()
        group = self._size_of_image[image]
        st = Step(k, image, group, group.place(image, self._slot)[0], sh_degree_at(self.cfg, k), self._slot)
        self._slot = (self._slot + 1) % SLOTS
        return st

    def _submit(self, st, prev=None):
        """Record (if needed), write and submit step ``st``; ``prev``: the step
        submitted before it and not yet read back (None: known whole)."""
        st.seq = self._sequence(st)
        st.capacity = st.group.raster.isect_capacity
        self.io.write(
            st,
            self.cfg,
            self.extent,
            self.model.n,
            self.viewmats[st.image],
            self.Ks[st.image],
            NO_GUARD if prev is None else prev.capacity,
            self.models[st.image],
            self.dists[st.image],
            self.appearance,
        )
        st.group.stage(st.image, st.slot)  # streamed: its view, while the step before runs
        st.seq.run_async()
        st.submitted = True

    def _may_run_ahead(self, k: int) -> bool:
        """Whether step ``k + 1`` may be submitted before step ``k``'s results
        are read: nothing after step ``k`` needs the host (densification,
        opacity reset, a fault injected)."""
        if not self.cfg.pipeline_steps or self.strategy.due(k):
            return False
        return not (self.faults is not None and self.faults.due(k + 1))

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
        out = self.io.read(st.slot)
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
                out = self.io.read(st.slot)
                n_isects = int(out[4:5].view(np.uint32)[0])
        self._ahead = nxt
        self._active = st.group
        self.step += 1  # counted before growing: out of memory there leaves a whole step to checkpoint
        if n_isects > 0.9 * raster.isect_capacity:
            raster.reserve(self.model.n, n_isects, isect_room=int(n_isects * ISECT_HEADROOM))
        elif n_isects > raster.isect_keys.shape[0]:
            raster.reserve(self.model.n, n_isects)  # the live need: the most a view has needed
        changes = None
        if not self._controller_on(self.step - 1):  # the controller's phase: the splats stay as they are
            changes = self.strategy.step_post_backward(
                self.model,
                self.stats,
                self.step - 1,  # 0-based, as gsplat
                self.extent,
                self.device,
            )
        if changes is not None:
            self.adopt(changes)
        if self.faults is not None:
            self.faults.after_step(self)
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

    def inject_nan(self, every: int = 1) -> tuple:
        """Testing aid (:class:`~spirula.train.faults.FaultInjection`): NaN into
        one parameter (means, quats, scales, opacities, sh in turn: the
        ``step // every``-th) of 1% of the splats (at least one), a run of rows
        from a place drawn from (seed, step). Returns (parameter, first row, rows)."""
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

    def render(
        self, viewmat, K, sh_degree: int | None = None, size: tuple | None = None, model="PINHOLE", dist=None
    ) -> np.ndarray:
        """One image [H,W,3] float32 of the current splats (background
        composited) from a dataset camera (world->camera ``viewmat``, ``K``,
        its lens ``model``, ``dist``), ``size`` (width, height) pixels (default:
        the training images')."""
        self.settle()
        deg = self.cfg.sh_degree if sh_degree is None else sh_degree
        raster = self._raster_for(*size) if size is not None else self.raster
        raster.set_cameras(
            self.world.viewmats(np.asarray(viewmat)[None]),
            np.asarray(K)[None],
            [model],
            None if dist is None else dist[None],
        )
        raster.forward(self.model.params, deg)
        return self.device.readback(raster.out_colors)[0]

    def evaluate(self, indices=None, controller: bool = False) -> dict:
        """PSNR and SSIM of every test image (clamped to [0, 1]), and the colour-corrected
        PSNR (:func:`~spirula.train.metrics.evaluate_views`). With appearance correction the
        render goes through the ISP as for a novel view: per-frame stages at their identity
        (the captures' mean exposure and colour), the camera's vignetting and CRF;
        ``controller``: the exposure and colour PPISP's controller predicts from the render."""
        self.settle()
        from spirula.train.metrics import evaluate_views

        isp = self.appearance_isp()

        def render(i):
            f = self.scene.frames[i]
            img = self.render(f.viewmat, f.K, sh_degree_at(self.cfg, self.step), (f.width, f.height), f.model, f.dist)
            if isp is not None:
                cam = camera_for_size(isp, f.width, f.height)
                img = apply_appearance(self.device, img, isp, None, cam, controller=controller)
            return img

        indices = self.scene.test if indices is None else indices
        return evaluate_views(self.scene, indices, render)

    def appearance_isp(self) -> dict | None:
        """The appearance models as numpy (:meth:`Appearance.isp`, with each camera's image
        size; PPISP's controller's weights only once it has trained), or None without them."""
        if self.appearance is None:
            return None
        self.settle()
        isp = self.appearance.isp()
        sizes = {}
        for k, f in zip(self.appearance.cameras, (self.scene.frames[i] for i in self.scene.train)):
            sizes.setdefault(k, (f.width, f.height))
        isp["camera_sizes"] = np.asarray([sizes[k] for k in range(self.appearance.n_cameras)], np.int32)
        if not self.controller_trained():
            isp.pop("controller", None)  # untrained: novel views keep the identity
        return isp

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
            appearance=self.appearance.state_dict() if self.appearance is not None else {},
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
        if self.appearance is not None:
            self.appearance.load_state_dict(state.get("appearance", {}))
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
        if self.appearance is not None:
            self.appearance.free()
        for group in self.sizes.values():
            group.free(self.device)
        for raster in self._eval_rasters.values():
            raster.free()
        for b in self.io.buffers() + self.stats:
            self.device.pool.free(b)
        self.device.pool.set_budget(None)  # the budget was this run's
