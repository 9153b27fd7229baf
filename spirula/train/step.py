"""A training step as the GPU runs it: the image-size groups, the recorded
sequence, and the words the host writes before it and reads after it.

    copy step params + camera [+ the streamed view] -> projection_fwd -> depth sort -> tile counts
    -> prefix_sum -> intersect_tile_write -> tile sort -> tile_ranges
    -> rasterize_fwd [-> ppisp_fwd / bilagrid_fwd] -> loss_fwd -> loss_bwd
    [-> bilagrid_bwd, bilagrid_tv / ppisp_bwd] -> rasterize_bwd -> fpbo [-> adam_small]
    -> copy loss and intersection count to host-visible memory

(in brackets: with appearance correction, spirula/train/appearance.py; without it nothing
of it is recorded.)

:class:`ImageSize`: the training views of one image size (ground truth,
resident on the GPU or streamed through a ring of slots; rasterizer, loss
scratch, the recorded steps); :class:`Step`: one step on its
way; :class:`StepIO`: the step parameters on the GPU and the host's two
slots (written by :meth:`StepIO.write`, read back after the step);
:func:`record_step`: the sequence of one step. spirula/train/trainer.py
decides which step runs when.
"""

from __future__ import annotations

import numpy as np

from spirula.errors import OutOfMemoryError
from spirula.progress import track
from spirula.render.raster_buffers import CAMERA_FLOATS, pack_cameras
from spirula.render.rasterizer import Rasterizer
from spirula.runtime.buffers import fmt_bytes
from spirula.train.appearance import APP_WORDS
from spirula.train.loss import LossBuffers, masked_counts, pack_rgba8
from spirula.train.normal_consistency import record_normal_consistency
from spirula.train.optimizer import record_fpbo
from spirula.train.schedule import learning_rates
from spirula.train.step_params import PREV_ISECTS_WORD, STEP_PARAMS_HOST_WORDS, STEP_PARAMS_WORDS, step_params

# host_in words of one step: its StepParams, then its camera (viewmat [4,4], fx fy cx cy), then
# the appearance's words (the view's frame, Adam's scalars; copied only with appearance on)
HOST_IN_WORDS = STEP_PARAMS_WORDS + CAMERA_FLOATS + APP_WORDS
APP_WORD = STEP_PARAMS_WORDS + CAMERA_FLOATS
HOST_OUT_WORDS = 8  # loss, l1, ssim, mse, intersection count
SLOTS = 2  # host_in/host_out slots: the step being read back and the one submitted ahead


def gt_chunk_bytes(device) -> int:
    """The most bytes of ground truth in one buffer: the device's storage buffer range."""
    return device.info.max_storage_buffer_range if device.info is not None else 1 << 62


class ImageSize:
    """The training views of one image size: their ground truth, a rasterizer
    and loss scratch of that size, and the step sequences recorded for it.
    ``images``: their train-list indices; ``capacity``: splats the rasterizer
    starts with room for.

    The ground truth (RGBA8 words, the loss mask in alpha: :func:`pack_rgba8`) is
    loaded by :meth:`load`, one of two ways. Resident: all of it on the GPU,
    [I,H,W] in chunks of at most the device's storage buffer range (42 views
    at 1080p are 332 MiB, and lavapipe binds 128 MiB a buffer); a step reads its
    view in its chunk. Streamed (``streamed``): the packed views stay in host
    memory (one uint8 RGBA array, or decoded from the files at each step when
    host memory is short), and the GPU holds a ring of SLOTS one-view slots:
    the host writes a step's view into the host-visible staging slot of its
    host_in slot when it writes its StepParams, while the step before runs, and
    the step's sequence begins with a copy of that slot into the GPU's slot its
    loss reads. A slot is rewritten only after the step that read it has been
    waited for (the pipelined loop waits for step N before it submits step
    N + 2), as host_in's slots are."""

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
        self.scene, self.name = scene, name
        self.width, self.height, self.images = width, height, images
        self.image_bytes = 4 * width * height  # one packed view
        rng = gt_chunk_bytes(dev)
        if self.image_bytes > rng:
            raise OutOfMemoryError(
                "a %dx%d training image needs %s but %s binds at most %s per buffer; lower --downscale"
                % (width, height, fmt_bytes(self.image_bytes), dev.info.name, fmt_bytes(rng))
            )
        self.streamed = False
        self.host = None  # streamed: [I,H,W] uint32 packed views, None when decoded at each step
        self.staging = []  # streamed: the host-visible [1,H,W] slot of each host_in slot
        self.local = {}  # train index -> (chunk, index in that chunk's gt buffer); streamed: row of host
        self.gt_chunks = []  # resident: the chunks; streamed: the GPU's ring slots
        self.masked = {}  # train index -> (masked_pixels, masked_valid) of its loss mask
        self.chunk = 0  # the chunk (streamed: the ring slot) of the image being trained
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
        self.seqs = {}  # (chunk, slot) -> (key, recorded step)

    def total_bytes(self) -> int:
        """Bytes of every view of this size, packed: what resident ground truth takes."""
        return self.image_bytes * len(self.images)

    def ring_bytes(self) -> int:
        """Device bytes of the streamed ground truth: SLOTS views."""
        return self.image_bytes * SLOTS

    def load(self, dev, streamed: bool = False, hold: bool = True):
        """The ground truth: on the GPU (resident), or ``streamed`` (``hold``: the packed
        views in host memory, else decoded from the files at each step)."""
        w, h, images = self.width, self.height, self.images
        if not streamed:
            per_chunk = max(1, gt_chunk_bytes(dev) // self.image_bytes)
            self.local = {img: (k // per_chunk, k % per_chunk) for k, img in enumerate(images)}
            for c in range(0, len(images), per_chunk):
                part = images[c : c + per_chunk]
                label = self.name + ".gt_images" + (".%d" % (c // per_chunk) if c else "")
                buf = dev.pool.alloc(label, (len(part), h, w), np.uint32, "image")
                # packed view by view: no decoded copy of the whole chunk at once
                packed = np.empty((len(part), h, w), np.uint32)
                for j, i in enumerate(track(part, "loading images", unit="image")):
                    packed[j] = self._pack(i)
                dev.upload(buf, packed)
                del packed
                self.gt_chunks.append(buf)
            return
        self.streamed = True
        self.local = {img: (0, k) for k, img in enumerate(images)}
        for s in range(SLOTS):
            self.gt_chunks.append(dev.pool.alloc("%s.gt_ring.%d" % (self.name, s), (1, h, w), np.uint32, "image"))
            self.staging.append(dev.pool.alloc("%s.gt_staging.%d" % (self.name, s), (1, h, w), np.uint32, host=True))
        if hold:
            self.host = np.empty((len(images), h, w), np.uint32)
            for k, i in enumerate(track(images, "loading images", unit="image")):
                self.host[k] = self._pack(i)
        else:
            for i in images:  # the masks' counts now, the views at their steps
                self.masked[i] = masked_counts(self.scene.load_mask(self.scene.train[i]))

    def _pack(self, image: int) -> np.ndarray:
        """Train view ``image`` decoded and packed: [H,W] uint32 (its mask's counts noted)."""
        scene = self.scene
        pixels = scene.load_image(scene.train[image])
        mask = scene.load_mask(scene.train[image])
        self.masked[image] = masked_counts(mask)
        return pack_rgba8(pixels[None], None if mask is None else mask[None])[0]

    def place(self, image: int, slot: int) -> tuple:
        """(chunk, index in the chunk) a step in host_in slot ``slot`` reads view ``image`` at."""
        return (slot, 0) if self.streamed else self.local[image]

    def stage(self, image: int, slot: int):
        """Streamed: view ``image`` into the staging slot of host_in slot ``slot``
        (the step's sequence copies it to the GPU first); resident: nothing."""
        if not self.streamed:
            return
        view = self.staging[slot].host_view()[0]
        if self.host is not None:
            view[...] = self.host[self.local[image][1]]
        else:
            view[...] = self._pack(image)

    def record_upload(self, rec, slot: int):
        """Streamed: the copy of host_in slot ``slot``'s staged view into the GPU's ring slot."""
        if self.streamed:
            rec.copy(self.staging[slot], self.gt_chunks[slot], nbytes=self.image_bytes)

    @property
    def gt_images(self):
        return self.gt_chunks[self.chunk]

    def free(self, device):
        self.raster.free()
        self.loss.free()
        if self.nc_grad_loss is not None:
            device.pool.free(self.nc_grad_loss)
        for buf in self.gt_chunks + self.staging:
            device.pool.free(buf)


class Step:
    """One training step on its way: ``k`` its 0-based index, ``image`` its
    train-list index, ``group``/``chunk`` where its ground truth is (an
    :class:`ImageSize` and its chunk; streamed: its ring slot),
    ``slot`` its host_in/host_out slot; once submitted, ``seq`` and the
    intersection ``capacity`` it runs with."""

    __slots__ = ("k", "image", "group", "chunk", "sh_degree", "slot", "seq", "capacity", "submitted")

    def __init__(self, k, image, group, chunk, sh_degree, slot):
        self.k, self.image, self.group, self.chunk, self.sh_degree, self.slot = k, image, group, chunk, sh_degree, slot
        self.seq, self.capacity, self.submitted = None, 0, False


class StepIO:
    """The words every step moves: ``params`` (its StepParams on the GPU, which
    every kernel of the step reads), ``host_in`` [SLOTS, HOST_IN_WORDS] (a
    slot's StepParams and camera, written by the host) and ``host_out`` [SLOTS,
    HOST_OUT_WORDS] (loss, l1, ssim, mse and the intersection count, read back)."""

    def __init__(self, pool):
        self.params = pool.alloc("train.params", (STEP_PARAMS_WORDS,), np.uint32, "other", zero=True)
        self.host_in = pool.alloc("train.host_in", (SLOTS, HOST_IN_WORDS), np.uint32, host=True)
        self.host_out = pool.alloc("train.host_out", (SLOTS, HOST_OUT_WORDS), np.float32, host=True)

    def buffers(self) -> tuple:
        return (self.params, self.host_in, self.host_out)

    def read(self, slot: int) -> np.ndarray:
        """What step of ``slot`` left in host_out: [HOST_OUT_WORDS] float32 (a copy)."""
        return self.host_out.host_view()[slot].copy()

    def write(
        self,
        st: Step,
        cfg,
        extent: float,
        n_splats: int,
        viewmat,
        K,
        prev_capacity: int,
        model="PINHOLE",
        dist=None,
        appearance=None,
    ):
        """Step ``st``'s StepParams and camera (training coordinates ``viewmat``,
        ``K``) into its host_in slot. ``prev_capacity``: the intersection
        capacity of the step before it on the GPU when that one is still
        unread (fpbo skips this step if it overflowed), else NO_GUARD."""
        group, strategy = st.group, cfg.strategy
        t = st.k + 1
        lr = learning_rates(cfg, st.k, extent)
        p = step_params(
            step=t,
            seed=(cfg.seed * 1000003 + t * 2654435761) & 0xFFFFFFFF,
            n_views=1,
            n_splats=n_splats,
            image_index=[group.place(st.image, st.slot)[1]] + [0] * 7,
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
            opacity_reg=strategy.opacity_reg,
            scale_reg=strategy.scale_reg,
            flatten_reg=cfg.flatten_weight,
            noise_scale=lr.means * strategy.noise_lr if strategy.name == "mcmc" else 0.0,
            grad_norm_scale_x=group.width / 2.0,
            grad_norm_scale_y=group.height / 2.0,
            prev_capacity=prev_capacity,
        )
        view = self.host_in.host_view()[st.slot]
        view[:STEP_PARAMS_WORDS] = np.frombuffer(p.tobytes(), np.uint32)
        cam = pack_cameras(
            np.asarray(viewmat)[None], np.asarray(K)[None], [model], None if dist is None else dist[None]
        )
        view[STEP_PARAMS_WORDS:APP_WORD] = cam[0].view(np.uint32)
        if appearance is not None:
            view[APP_WORD:] = appearance.host_words(st.k, st.image)


def record_step(
    device,
    cfg,
    model,
    stats,
    group: ImageSize,
    io: StepIO,
    sh_degree: int,
    slot: int,
    distortion: bool,
    normals: bool,
    appearance=None,
    controller: bool = False,
    lenses: bool = True,
):
    """The recorded sequence of one step of ``group``'s image size (its ground
    truth chunk ``group.chunk``) with ``model``'s splats at ``sh_degree``,
    reading its StepParams and camera from host_in slot ``slot``.
    ``distortion``, ``normals``: the geometry terms are in this step's loss;
    ``stats``: the density statistics fpbo accumulates (ADC); ``appearance``: the run's
    :class:`~spirula.train.appearance.Appearance`, or None (nothing of it recorded);
    ``controller``: a step of PPISP's controller's phase (:func:`record_controller_step`);
    ``lenses``: some training view is a lens (False: fpbo without the lens backward)."""
    raster, strategy = group.raster, cfg.strategy
    rec = device.recorder("train.step")
    src = 4 * HOST_IN_WORDS * slot
    # prev_isects is the GPU's (shaders/include/step_params.glsl): the host's copy stops before it
    rec.copy(io.host_in, io.params, nbytes=4 * STEP_PARAMS_HOST_WORDS, src_offset=src)
    rec.copy(io.host_in, raster.cameras, nbytes=4 * CAMERA_FLOATS, src_offset=src + 4 * STEP_PARAMS_WORDS)
    if appearance is not None:
        rec.copy(io.host_in, appearance.words, nbytes=4 * APP_WORDS, src_offset=src + 4 * APP_WORD)
    group.record_upload(rec, slot)  # streamed ground truth: the staged view to the GPU's slot
    raster.record_project(rec, model.params, sh_degree, normals=normals)
    if controller:
        return record_controller_step(rec, group, io, slot, appearance)
    # with the distortion the forward also keeps its running sum: rasterize_bwd's chunks start
    # from the sums behind their end (chunk_state)
    raster.record_raster(rec, distortion=distortion, normals=normals)
    if appearance is None:
        group.loss.record(rec, raster.out_colors, group.gt_images, io.params, raster.grad_colors)
    else:
        # the loss compares the corrected image; its gradient goes back through the models
        colors = appearance.record_forward(rec, raster)
        group.loss.record(rec, colors, group.gt_images, io.params, appearance.loss_grad(raster))
        appearance.record_backward(rec, raster)
    if normals:
        # normal consistency (2DGS): d(weight x mean over pixels of a (1 - N . n_d))/d pixel
        # loss is one constant; its backward writes dL/d the normal image and dL/d the
        # accumulated depth image, which rasterize_bwd (NORMALS) takes to the splats
        grad = group.nc_grad_loss
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
    absgrad = getattr(strategy, "absgrad", False)  # ADC's
    raster.record_raster_backward(rec, absgrad=absgrad, distortion=distortion, normals=normals)
    record_fpbo(
        rec,
        model,
        raster,
        io.params,
        stats,
        sh_degree,
        mcmc_noise=strategy.name == "mcmc",
        adc_stats=strategy.name == "adc",
        absgrad=absgrad,
        depth_grad=distortion or normals,
        flatten=cfg.flatten_weight > 0,
        normals=normals,
        lenses=lenses,
    )
    if appearance is not None:
        appearance.record_optimize(rec, raster, io.params)
    return _record_step_end(rec, group, io, slot)


def record_controller_step(rec, group: ImageSize, io: StepIO, slot: int, appearance):
    """The rest of a step of PPISP's controller's phase (docs/design.md §2.8), after the
    projection: the render, the controller and PPISP with its prediction, the loss, their
    backward down to the controller's weights and its Adam. No rasterize_bwd, fpbo or
    appearance Adam: the splats and the ISP stay as they are (the render is detached)."""
    raster = group.raster
    raster.record_raster(rec)
    colors, grad = appearance.record_controller_forward(rec, raster)
    group.loss.record(rec, colors, group.gt_images, io.params, grad)
    appearance.record_controller_backward(rec, raster)
    appearance.record_controller_optimize(rec, raster, io.params)
    return _record_step_end(rec, group, io, slot)


def _record_step_end(rec, group: ImageSize, io: StepIO, slot: int):
    """The step's results into host_out slot ``slot``, its intersection count for the next
    step's guard; the finished sequence."""
    raster = group.raster
    dst = 4 * HOST_OUT_WORDS * slot
    count = 4 * raster.total_offset
    rec.copy(group.loss.loss_out, io.host_out, nbytes=16, dst_offset=dst)
    rec.copy(raster.offsets_scan.scratch, io.host_out, nbytes=4, src_offset=count, dst_offset=dst + 16)
    # the count for the next step's fpbo, which may run before the host has read this one's
    rec.copy(raster.offsets_scan.scratch, io.params, nbytes=4, src_offset=count, dst_offset=4 * PREV_ISECTS_WORD)
    return rec.finish()
