"""fpbo_bench: one fused projection backward + Adam step over N splats at SH
degree 3, from random screen-space gradients (docs/design.md §7).

    pytest benchmarks/test_fpbo_bench.py --benchmark-only -s [--bench-full]

Default 50,000 splats (lavapipe-sized); --bench-full: 5,000,000, the workload
of `gsplat_raster_bench.py --adam` (the raster_bench slab with SH degree 3).
GPU time from the profiler's timestamps; reports ms and Msplat/ms. Three
variants: with MCMC's position noise compiled in (fpbo_bench), without
(fpbo_bench_no_noise, ADC's and the peer's work), and with noise over compact
storage (fpbo_bench_compact: fp16 SH, bf16 moments), which is what training
records by default.
"""

import statistics

import numpy as np
import pytest
from scenes import camera, make_scene
from test_raster_bench import profiled_device  # noqa: F401  (fixture)


class FpboWorkload:
    """The benchmark's inputs: the slab of ``n`` splats projected once into a
    ``width`` x ``height`` view, random gradients (1e-3) on the visible ones,
    and the step parameters of step 10. ``new_model()`` allocates and fills
    one copy of the splats and their Adam state; ``record(model)`` records
    fpbo over it."""

    def __init__(self, device, n, width, height, mcmc_noise, compact=False):
        from spirula.render.rasterizer import Rasterizer
        from spirula.train.step_params import STEP_PARAMS_WORDS, step_params

        self.device, self.n, self.mcmc_noise, self.compact = device, n, mcmc_noise, compact
        self.scene = make_scene(n, sh_degree=3)
        self.raster = Rasterizer(device, width, height, 1, capacity=n, name="fpbo.raster")
        self.raster.set_cameras(*camera(width, height, 900.0 * width / 1237))
        model = self.new_model()
        rec = device.recorder("fpbo.project")
        self.raster.record_project(rec, model.params, 3)
        rec.finish().run()
        self.visible = (device.readback(self.raster.radii, shape=(n, 2)) != 0).any(-1)
        rng = np.random.default_rng(2)
        for name, width in (("grad_xy", 2), ("grad_conics", 3), ("grad_rgb", 3), ("grad_opacity", 1)):
            g = (rng.standard_normal((n, width)) * 1e-3).astype(np.float32) * self.visible[:, None]
            device.upload(getattr(self.raster, name), g if width > 1 else g[:, 0])
        device.upload(self.raster.offsets_scan.scratch, np.zeros(1, np.uint32), offset=4 * self.raster.total_offset)
        self.params = device.pool.alloc("fpbo.params", (STEP_PARAMS_WORDS,), np.uint32)
        p = step_params(
            step=10,
            n_views=1,
            n_splats=n,
            lr_means=1e-4,
            lr_quats=1e-3,
            lr_scales=5e-3,
            lr_opacities=0.05,
            lr_sh0=2.5e-3,
            lr_shN=1.25e-4,
            bias1=1 - 0.9**10,
            bias2=1 - 0.999**10,
            beta1=0.9,
            beta2=0.999,
            adam_eps=1e-15,
            noise_scale=1e-4 * 5e5 if mcmc_noise else 0.0,
        )  # lr_means x noise_lr
        device.upload(self.params, np.frombuffer(p.tobytes(), np.uint32))
        self.stats = (
            device.pool.alloc("fpbo.g2d", (n,), np.float32, zero=True),
            device.pool.alloc("fpbo.cnt", (n,), np.uint32, zero=True),
        )
        self.first_model = model

    def new_model(self):
        from spirula.train.model import SplatModel

        s = self.scene
        model = SplatModel(self.device, self.n, self.n, 16, compact=self.compact)
        model.upload(
            dict(means=s["means"], quats=s["quats"], scales=s["log_scales"], opacities=s["opacity_logits"], sh=s["sh"])
        )
        return model

    def record(self, model):
        from spirula.train.optimizer import record_fpbo

        rec = self.device.recorder("fpbo")
        record_fpbo(
            rec,
            model,
            self.raster,
            self.params,
            self.stats,
            3,
            mcmc_noise=self.mcmc_noise,
            adc_stats=False,
            lenses=False,
        )
        return rec.finish()


@pytest.mark.parametrize(
    "mcmc_noise,compact", [(True, False), (False, False), (True, True)], ids=["noise", "no-noise", "compact"]
)
def test_fpbo_bench(benchmark, profiled_device, bench_opts, mcmc_noise, compact):  # noqa: F811
    device = profiled_device
    prof = device.profiler
    n = bench_opts.n or bench_opts.pick(50_000, 5_000_000)
    w, h = (1237, 822) if bench_opts.full else (320, 214)
    work = FpboWorkload(device, n, w, h, mcmc_noise, compact)
    seq = work.record(work.first_model)
    bench_opts.warm_up(seq.run)
    times = []
    for _ in range(bench_opts.iters or bench_opts.pick(5, 20)):
        prof.kernels.clear()
        seq.run()
        times.append(prof.kernels["fpbo"].ns / 1e6)
    ms = statistics.median(times)
    bench_opts.record(
        "fpbo_bench_compact" if compact else ("fpbo_bench" if mcmc_noise else "fpbo_bench_no_noise"),
        n=n,
        visible=int(work.visible.sum()),
        sh_degree=3,
        fpbo_ms=ms,
        msplat_per_ms=n / 1e6 / ms,
        device=device.info.name,
    )
    benchmark.extra_info.update(fpbo_ms=ms, msplat_per_ms=n / 1e6 / ms)
    benchmark.pedantic(seq.run, rounds=3, iterations=1)
