"""Small workloads the tests run in a fresh process (under the validation
layer, or with SS_PROFILE=1): ``python -c "import tests.workloads as w; w.runtime()"``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spirula.runtime.sequence import Threads

TEST_SHADERS = Path(__file__).resolve().parent / "shaders"


def test_kernels():
    from spirula.backends.vulkan.kernels import KernelRegistry
    from spirula.contract.kernel import shader_dir

    return KernelRegistry(source_dir=TEST_SHADERS, include_dirs=[shader_dir() / "include"])


def runtime(steps: int = 3):
    """Every runtime operation: the four transfers, a recorded sequence with
    dependent kernels, copies and fills, a prefix sum, buffer growth, async runs."""
    from spirula.backends import open_device
    from spirula.render.scan import PrefixSum

    dev = open_device("vulkan")
    tk = test_kernels()
    n = 3000
    a = dev.pool.alloc("w.a", (n,), np.uint32, category="splat")
    b = dev.pool.alloc("w.b", (n,), np.uint32, category="image")
    x = dev.pool.alloc("w.x", (n,), np.float32, category="splat x img")
    dev.upload(a, np.arange(n, dtype=np.uint32))
    dev.fill(b, 0)
    dev.fill(x, 1.0)
    scan = PrefixSum(dev, n)
    rec = dev.recorder("workload")
    inc = tk.get("increment")
    for i in range(4):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        rec.dispatch(inc, Threads(n), dict(src=src, dst=dst), push=dict(n=n))
    rec.dispatch(tk.get("saxpy"), Threads(n), dict(x=x, y=x), push=dict(n=n, a=0.5))
    rec.copy(a, b)
    scan.record(rec, b, n)
    rec.fill(x, 2.0, nbytes=16)
    seq = rec.finish()
    for _ in range(steps):
        seq.run()
    seq.run_async()
    seq.wait()
    got = dev.readback(a)
    assert np.array_equal(got, np.arange(n) + 4 * (steps + 1)), got[:4]
    dev.pool.resize(a, (4 * n,))
    dev.copy(a, b, nbytes=4 * n)
    dev.readback(b)
    return dev


def out_of_bounds():
    """A deliberate out-of-range write: the test kernel `increment` over 1,000
    values into a buffer of 256 (the canary of GPU-assisted validation)."""
    from spirula.backends import open_device

    dev = open_device("vulkan")
    tk = test_kernels()
    src = dev.pool.alloc("w.oob.src", (1000,), np.uint32, zero=True)
    dst = dev.pool.alloc("w.oob.dst", (256,), np.uint32)
    rec = dev.recorder("out_of_bounds")
    rec.dispatch(tk.get("increment"), Threads(1000), dict(src=src, dst=dst), push=dict(n=1000))
    rec.finish().run()
    return dev


def spin(n: int = 1 << 14, iters: int = 20000):
    """One long dispatch of the spin kernel (for timestamp vs wall-clock checks)."""
    from spirula.backends import open_device

    dev = open_device("vulkan")
    out = dev.pool.alloc("w.spin", (n,), np.uint32)
    rec = dev.recorder("spin")
    rec.dispatch(test_kernels().get("spin"), Threads(n), dict(out_words=out), push=dict(n=n, iters=iters))
    return dev, rec.finish()


def render():
    """The rasterizer's whole forward and backward: through the numpy API
    (two evals, exact intersection count) and as one recorded sequence (the
    training form, intersections read on the GPU), each run twice."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from render_cases import random_scene

    from spirula.backends import open_device, set_device
    from spirula.render.api import rasterization, rasterization_backward
    from spirula.render.rasterizer import Rasterizer, Splats

    dev = open_device("vulkan")
    set_device(dev)
    s = random_scene(n=120, sh_degree=2)
    colors, alphas, _, meta = rasterization(**s, backgrounds=np.ones((2, 3), np.float32))
    rasterization_backward(meta, np.ones_like(colors), np.ones_like(alphas), absgrad=True)

    splats = Splats.from_numpy(
        dev,
        s["means"],
        s["quats"],
        np.log(s["scales"]),
        np.log(s["opacities"] / (1 - s["opacities"])),
        s["sh_coeffs"],
        activated=False,
    )
    grads = Splats.alloc(dev, splats.n, splats.sh_coeffs, prefix="w.grad")
    raster = Rasterizer(dev, s["width"], s["height"], 2, capacity=splats.n, isect_capacity=4 * meta["n_isects"])
    raster.set_cameras(s["viewmats"], s["Ks"])
    raster.set_backgrounds(None)
    dev.fill(raster.grad_colors, 0.5)
    rec = dev.recorder("train-like step")
    raster.record_project(rec, splats, 2)
    raster.record_raster(rec)
    raster.record_backward(rec, splats, 2, grads, absgrad=True)
    seq = rec.finish()
    seq.run()
    seq.run()
    assert raster.num_intersections() == meta["n_isects"]
    assert np.isfinite(dev.readback(grads.means)).all()


def train(strategy: str = "mcmc", shuffle_sums: bool = False, stream_images: bool = False):
    """Training steps with density control on the tiny COLMAP scene of
    tests/train_cases.py: MCMC steps (position noise on), relocation of dead
    splats and 5% growth, then steps again with the new count; or ADC steps
    (gradient statistics), clone/split/prune, an opacity reset and steps again.
    The intersection buffers start far too small, so the first step overflows,
    grows them and runs again. Then an evaluation render and a checkpoint's
    readback. ``shuffle_sums``: rasterize_bwd compiled with the subgroup sums
    as shuffles (NVIDIA's default) on any device that can run them; ``stream_images``:
    the training images streamed through the ring of slots (each step's staged view
    copied at its start)."""
    import sys
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from train_cases import random_init, refine, tiny_scene

    from spirula.backends import open_device, set_device
    from spirula.train.config import TrainConfig
    from spirula.train.trainer import Trainer

    dev = open_device("vulkan")
    if shuffle_sums:
        from spirula.backends.vulkan.device import shuffle_sums_defines

        dev.defines.update(shuffle_sums_defines(dev.info))
        assert dev.shuffle_sums
    set_device(dev)
    with tempfile.TemporaryDirectory() as tmp:
        scene = tiny_scene(Path(tmp))
        init = random_init(300, 1, seed=1)
        if strategy == "mcmc":
            init["opacities"][::7] = -7.0  # dead: relocated onto live splats
        cfg = TrainConfig.from_settings(
            iterations=20,
            strategy=strategy,
            cap_max=1000,
            sh_degree=1,
            sh_every=2,
            grow_grad2d=1e-7,
            refine_start=1000,
            stream_images=stream_images,
        )
        measure = Trainer._measure_intersections
        Trainer._measure_intersections = lambda self, views=8: self.raster.reserve(self.model.n, 64)
        try:
            trainer = Trainer(scene, cfg, dev, init=init)
        finally:
            Trainer._measure_intersections = measure
        assert bool(trainer.streamed) == stream_images
        n0 = trainer.model.n
        for _ in range(3):
            assert np.isfinite(trainer.train_step()["loss"])
        assert trainer.raster.isect_capacity > 64
        refine(trainer, 600)
        if strategy == "adc":
            trainer.strategy.reset_opacity(trainer.model, dev)
            assert trainer.model.n > n0, (trainer.model.n, n0)
        else:
            assert trainer.model.n == int(1.05 * n0), trainer.model.n
        for _ in range(2):
            assert np.isfinite(trainer.train_step()["loss"])
        trainer.evaluate()
        trainer.state_dict()
        trainer.free()


def network_and_lenses():
    """The neural-network runtime's layers (tests/test_nn.py's one sequence of every layer), the
    SAM 2 trunk and neck in one sequence (tests/test_sam_hiera.py's tiny one), and the normal
    consistency through a lens (the selftest's pinhole + fisheye case), each checked."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_nn
    import test_sam_hiera as h

    from spirula import nn, selftest
    from spirula.backends import open_device
    from spirula.sam.hiera import Hiera
    from spirula.sam.neck import FpnNeck

    dev = open_device("vulkan")
    test_nn.run_layers(dev, test_nn._case())
    w, wn = h.tiny_weights(h.TINY)
    model, neck = Hiera(dev, h.TINY, w), FpnNeck(dev, wn)
    x = nn.Tensor.from_numpy(dev, np.random.default_rng(1).normal(size=(1, 3, 64, 64)))
    rec = dev.recorder("validation.sam")
    outs = model.forward(rec, x)
    levels = neck.forward(rec, outs)
    rec.finish().run()
    assert all(np.isfinite(o.numpy()).all() for o in outs + levels)
    rows = selftest.check_nn(dev) + selftest.check_normal_consistency(dev)
    assert all(r.ok for r in rows), [r for r in rows if not r.ok]
