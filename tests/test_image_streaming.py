"""Streamed training images (spirula/train/step.py ImageSize, memory.py stream_images):
the same losses and splats as resident images, the automatic choice from the memory
budget and the VRAM it leaves to the images, the one line when even the ring does not
fit, and the peak host memory in metrics.json."""

import json
from pathlib import Path

import numpy as np
import pytest
from train_cases import random_init, run_one_thread, tiny_scene

from spirula.errors import OutOfMemoryError
from spirula.train import memory
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer

STEPS = 30  # past the first densification (MCMC refines every 100 steps from 500: set to 10 below)


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("tiny"))


def _cfg(**kw):
    return TrainConfig.from_settings(
        **dict(dict(sh_degree=1, iterations=STEPS, refine_start=10, refine_every=10), **kw)
    )


def _train(scene, device, steps=STEPS, **kw):
    """Losses of ``steps`` pipelined steps and the final splats."""
    trainer = Trainer(scene, _cfg(**kw), device, init=random_init(400, 1))
    try:
        losses = [trainer.train_step(ahead=True)["loss"] for _ in range(steps)]
        trainer.settle()
        return trainer.streamed, losses, trainer.splat_arrays()
    finally:
        trainer.free()


def compare_runs(path: str) -> dict:
    """Resident, streamed and streamed-decoded-at-each-step runs of the tiny scene at
    ``path``, as JSON: run in a process of its own (test_streamed_images_train_as_resident_ones)."""
    from spirula.backends import open_device
    from spirula.data import load_dataset

    device = open_device("vulkan")
    scene = load_dataset(Path(path))
    runs = {}
    for name, stream, hold in (("resident", False, True), ("streamed", True, True), ("decoded", True, False)):
        memory.host_available_bytes = (lambda: 1 << 62) if hold else (lambda: 0)
        streamed, losses, splats = _train(scene, device, stream_images=stream)
        runs[name] = dict(streamed=streamed, losses=losses, splats={k: v.tolist() for k, v in splats.items()})
    return dict(device=device.info.name, runs=runs)


def test_streamed_images_train_as_resident_ones(scene, tmp_path):
    """Bit for bit on lavapipe with one thread (LP_NUM_THREADS=1): its workgroups then run
    in order, so rasterize_bwd's atomic float sums add in one order. With several threads
    two resident runs already differ in the last bit after ~8 steps (the sums' order), so
    the comparison runs in a process of its own; elsewhere (a GPU) the losses agree to
    float32 rounding that compounds over the steps."""
    out = run_one_thread("test_image_streaming", "compare_runs", scene.path)
    runs = out["runs"]
    assert [runs[k]["streamed"] for k in ("resident", "streamed", "decoded")] == [False, True, True]
    resident = runs["resident"]
    assert len(resident["splats"]["means"]) > 400  # MCMC added splats at steps 10 and 20
    for name in ("streamed", "decoded"):
        run = runs[name]
        if "llvmpipe" in out["device"]:
            assert run["losses"] == resident["losses"], name
            assert run["splats"] == resident["splats"], name
        else:
            assert run["losses"][0] == resident["losses"][0]
            np.testing.assert_allclose(run["losses"], resident["losses"], rtol=1e-4)


@pytest.mark.cuda
def test_streamed_images_train_as_resident_ones_on_cuda(scene, cuda):
    """CUDA's streamed path (each step's view staged in mapped pinned host memory, copied
    into its ring slot on the step's stream): the
    same first loss as resident images, then agreement to float32 rounding that compounds
    over the steps (rasterize_bwd's atomic sums add in any order)."""
    resident = _train(scene, cuda, stream_images=False)
    streamed = _train(scene, cuda, stream_images=True)
    assert (resident[0], streamed[0]) == (False, True)
    assert streamed[1][0] == resident[1][0]
    np.testing.assert_allclose(streamed[1], resident[1], rtol=1e-4)
    assert len(streamed[2]["means"]) == len(resident[2]["means"]) > 400


def _probe(scene, device, cap):
    """What a resident run's buffers take: (the pool's bytes beside the ground truth and the
    splats, the ground truth's, the pool's bytes without the ground truth, a splat's, the
    image category's)."""
    trainer = Trainer(scene, _cfg(cap_max=cap), device, init=random_init(400, 1))
    try:
        pool = device.pool
        gt = sum(b.capacity for g in trainer.sizes.values() for b in g.gt_chunks)
        per_splat = memory.splat_bytes(
            trainer.cfg, trainer.splat_row_bytes(), trainer.model, trainer.sizes, trainer._isects_per_splat
        )
        images = sum(b.capacity for b in pool.buffers.values() if b.category == "image")
        total = sum(g.total_bytes() for g in trainer.sizes.values())
        return memory.fixed_bytes(pool) - gt, total, pool.total_capacity() - gt, per_splat, images
    finally:
        trainer.free()


def test_a_budget_too_small_for_the_images_streams_them(scene, device):
    """The images would take room MCMC's cap needs: streamed, and the VRAM report's image
    category holds the ring (two views) instead of every view; with room for both, resident."""
    cap = 2000
    fixed, total, _, per_splat, images = _probe(scene, device, cap)
    need = fixed + cap * per_splat
    for extra, streams in ((total // 2, True), (3 * total, False)):
        said = []
        budget = int(need + extra)
        trainer = Trainer(
            scene, _cfg(cap_max=cap, vram_budget="%dB" % budget), device, init=random_init(400, 1), log=said.append
        )
        try:
            assert trainer.streamed == streams, said
            for _ in range(3):
                trainer.train_step(ahead=True)
            trainer.settle()
            snap = sum(b.capacity for b in device.pool.buffers.values() if b.category == "image")
            ring = sum(g.ring_bytes() for g in trainer.sizes.values())
            gt = sum(b.capacity for g in trainer.sizes.values() for b in g.gt_chunks)
            if streams:
                assert gt == ring < total
                assert snap < images and any("streaming the 10 training images" in m for m in said), said
                assert trainer.strategy.cap == cap  # the splats got the room
            else:
                assert gt >= total and snap == images
        finally:
            trainer.free()


def test_a_budget_without_room_for_the_ring_is_one_line(scene, device, monkeypatch):
    """A budget that holds every buffer made before the images (their peak too) but not
    the ring after them: one line, and the pool back as it was."""
    seen = []
    decide = memory.stream_images

    def probe(*args):
        pool = device.pool
        seen.append((pool.peak_bytes, pool.total_capacity()))
        return decide(*args)

    monkeypatch.setattr(device.pool, "_high_total", 0)  # this run's peak
    monkeypatch.setattr(memory, "stream_images", probe)
    Trainer(scene, _cfg(stream_images=True), device, init=random_init(400, 1)).free()
    monkeypatch.setattr(memory, "stream_images", decide)
    ((peak, held),) = seen
    ring = 2 * 4 * scene.frames[0].width * scene.frames[0].height
    budget = max(peak, held + ring // 2)
    assert budget < held + ring
    with pytest.raises(OutOfMemoryError) as exc:
        Trainer(scene, _cfg(stream_images=True, vram_budget="%dB" % budget), device, init=random_init(400, 1))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(
        "--vram-budget %s holds not even the streamed images' ring" % (memory.fmt_bytes(budget))
    ), msg
    assert device.pool.limit is None or device.pool.limit == device.pool.env_limit


def test_metrics_report_the_peak_host_memory(scene, device, tmp_path):
    from spirula.train.run import train_run

    m = train_run(scene, _cfg(stream_images=True, iterations=4), device, tmp_path / "run", log=lambda msg: None)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["streamed_images"] is True and m["streamed_images"] is True
    assert 10 < saved["peak_host_mib"] < 1 << 20


def test_streamed_images_of_two_sizes_train_as_resident_ones(device, tmp_path):
    """A ring per image size; the losses agree (several lavapipe threads here: the
    atomic sums' order may differ in the last bit, so to float tolerance)."""
    from train_cases import write_tiny_mixed_sizes

    from spirula.data import load_dataset

    scene = load_dataset(write_tiny_mixed_sizes(tmp_path))
    resident = _train(scene, device, steps=8, stream_images=False)
    streamed = _train(scene, device, steps=8, stream_images=True)
    assert (resident[0], streamed[0]) == (False, True)
    assert streamed[1][0] == resident[1][0]
    np.testing.assert_allclose(streamed[1], resident[1], rtol=1e-5)
