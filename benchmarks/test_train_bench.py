"""Training speed over three regimes (issue #16 item 1), against the gsplat peer in the same call.

    pytest benchmarks/test_train_bench.py --benchmark-only --bench-full -s \\
        [--bench-backend vulkan|cuda] [--bench-gsplat .device/gsplat_train.py] \\
        [--bench-steps 2000] [--bench-profile] [--bench-json OUT.json]

Regimes (``--bench-full``; the scene is benchmarks/make_scene.py's demo world, Blender layout
with seed points, read identically by Spirula and by ``gsplat_train.py``; MCMC with the seed
count at the budget, so the step time is that of the budget from the first step):

==========  ==============  ======  =============  ==========================
regime      images          views   splats (cap)   steps (``--bench-steps``)
==========  ==============  ======  =============  ==========================
``s256``    256 x 256       84+12   100,000        2,000
``d256``    256 x 256       84+12   1,000,000      2,000
``hd1080``  1920 x 1080     42+6    1,000,000      2,000
==========  ==============  ======  =============  ==========================

Without ``--bench-full``: 64 x 64, 12 views, 2,000 splats, 40 steps (a lavapipe smoke run).

Each run is a separate process (``spirula train``; the peer's ``gsplat_train.py`` with its
default 0.2 SSIM weight and with ``--ssim-lambda 0``, a lower bound for gsplat's
simple_trainer with its fused SSIM), so memory and warm-up are each run's own. Printed per
run: ms/step median and mean over the training steps (evaluation excluded, as both report
it), the splat count and test PSNR; per regime the ratios Spirula / peer. With
``--bench-profile`` one more Spirula run of a quarter of the steps prints ``SS_PROFILE``'s
GPU time by kernel. Scenes are written once to ``SPIRULA_BENCH_SCENES`` (default
``/tmp/spirula-bench-scenes``) and reused; ``SPIRULA_BENCH_TREE`` times another checkout's
``spirula train`` (the tree before a change) on the same scenes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the Spirula tree whose `spirula train` is timed: this one, or another checkout (a before/after
# comparison in one GPU call, benchmarks/gpu_regimes.sh)
TREE = Path(os.environ.get("SPIRULA_BENCH_TREE", ROOT))

# name: (width, height, views, make_scene density (x ~6,000 seed points), cap)
REGIMES = {
    "s256": (256, 256, 96, 17, 100_000),
    "d256": (256, 256, 96, 170, 1_000_000),
    "hd1080": (1920, 1080, 48, 170, 1_000_000),
}
SMALL = (64, 64, 12, 0.34, 2_000)


def _scene(name: str, width: int, height: int, views: int, density: float) -> Path:
    base = Path(os.environ.get("SPIRULA_BENCH_SCENES", "/tmp/spirula-bench-scenes"))
    out = base / ("%s_%dx%d_v%d_d%g" % (name, width, height, views, density))
    if not (out / "transforms_train.json").is_file():
        cmd = [sys.executable, str(ROOT / "benchmarks/make_scene.py"), str(out)]
        cmd += ["--width", str(width), "--height", str(height), "--views", str(views), "--density", str(density)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return out


def _metrics_line(m: dict) -> dict:
    return dict(
        ms_median=m.get("ms_per_step_median"),
        ms_mean=m.get("ms_per_step_mean"),
        splats=m.get("n_splats"),
        psnr=m.get("psnr"),
        # where a mean above the median comes from: the five slowest [step, ms] (Spirula only)
        slowest=(m.get("slowest_steps") or [])[:5] or None,
    )


def _spirula(scene: Path, out: Path, backend: str, steps: int, cap: int, profile: bool = False) -> tuple:
    cmd = [sys.executable, "-m", "spirula", "train", str(scene), "--iterations", str(steps)]
    cmd += ["--cap-max", str(cap), "--background", "black", "--backend", backend, "--output", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TREE), os.environ.get("PYTHONPATH", "")]))
    env.pop("SS_PROFILE", None)
    if profile:
        env["SS_PROFILE"] = "1"
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=TREE)
    if r.returncode != 0:
        raise RuntimeError("spirula train failed:\n" + (r.stderr or r.stdout)[-3000:])
    report = ""
    if profile:
        text = r.stdout + r.stderr
        report = text[text.find("[spirula-profile]") :] if "[spirula-profile]" in text else ""
    return json.loads((out / "metrics.json").read_text()), report


def _gsplat(script: str, scene: Path, out: Path, steps: int, cap: int, ssim_lambda: float) -> dict:
    js = out / "gsplat.json"
    cmd = [sys.executable, script, "--data", str(scene), "--strategy", "mcmc", "--cap-max", str(cap)]
    cmd += ["--steps", str(steps), "--ssim-lambda", str(ssim_lambda), "--json", str(js)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("gsplat_train.py failed:\n" + (r.stderr or r.stdout)[-3000:])
    return json.loads(js.read_text())


@pytest.mark.parametrize("regime", list(REGIMES))
def test_train_regime(benchmark, bench_opts, request, regime, tmp_path):
    cfg = request.config
    if not bench_opts.full and regime != "s256":
        pytest.skip("one smoke regime without --bench-full")
    width, height, views, density, cap = REGIMES[regime] if bench_opts.full else SMALL
    steps = cfg.getoption("--bench-steps") or bench_opts.pick(40, 2000)
    scene = _scene(regime if bench_opts.full else "smoke", width, height, views, density)
    name = "train_%s_%s" % (regime if bench_opts.full else "smoke", bench_opts.backend)

    def run():
        return _spirula(scene, tmp_path / "spirula", bench_opts.backend, steps, cap)

    metrics, _ = benchmark.pedantic(run, rounds=1, iterations=1)
    ours = _metrics_line(metrics)
    from spirula.render.rasterizer import default_chunk

    bench_opts.record(name, steps=steps, chunk=default_chunk(), **ours)
    benchmark.extra_info.update(ours)
    peer = cfg.getoption("--bench-gsplat")
    if peer:
        for label, lam in (("ssim", 0.2), ("nossim", 0.0)):
            theirs = _metrics_line(_gsplat(peer, scene, tmp_path, steps, cap, lam))
            ratio = dict(
                ratio_median=ours["ms_median"] / theirs["ms_median"],
                ratio_mean=ours["ms_mean"] / theirs["ms_mean"],
            )
            bench_opts.record("gsplat_%s_%s" % (regime, label), steps=steps, **theirs, **ratio)
            benchmark.extra_info["vs_gsplat_" + label] = ratio
    if cfg.getoption("--bench-profile"):
        _, report = _spirula(scene, tmp_path / "profiled", bench_opts.backend, max(steps // 4, 20), cap, profile=True)
        print(report)
        bench_opts.results[name]["profile"] = report
