"""Time to a good splat (issue #44 item 1): test PSNR against training seconds, Spirula
against gsplat 1.5.3, one run at a time on the GPU (the runs are timed, so they do not
share it).

    python benchmarks/time_to_quality.py SCENE [SCENE ...] --seeds 0-2 --iterations 30000 \\
        --eval-every 1000 --gsplat .device/gsplat_train.py [--backends vulkan cuda] [--json OUT]

For each scene and seed: gsplat_train.py to --gsplat-iterations (default --iterations)
with its SSIM loss and with --ssim-lambda 0 (a lower bound of its time), then `spirula
train` on each backend to --iterations, every run evaluating the test views every
--eval-every steps (Spirula's metrics.json ``test_curve``, gsplat_train.py's ``evals``:
training seconds with the evaluations left out). The target of a scene is gsplat's
final test PSNR with SSIM, the mean over seeds (or --target dB without --gsplat); a
run's time to it is where its curve first reaches it, interpolated linearly between
evaluations. Printed per scene: gsplat's final PSNR and training time (both losses),
and per backend the time to the target (median and mean over seeds), its ratios to
gsplat's two times (issue #44's targets: <= 0.25 and <= 0.4) and Spirula's own final
PSNR and time. Settings go to Spirula's runs with --set KEY=VALUE (repeatable).
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quality_sweep import RUN_CWD, gsplat_command, parse_seeds, spirula_command  # noqa: E402


def time_to_target(curve, target):
    """Seconds at which ``curve`` ([(train_s, psnr)], in order) first reaches ``target`` dB,
    linear between points (from (0 s, the first point's PSNR) before the first); None if
    it never does."""
    prev_t, prev_p = 0.0, None
    for t, p in curve:
        if p >= target:
            if prev_p is None or prev_p >= target:
                return t if prev_p is None else prev_t
            return prev_t + (t - prev_t) * (target - prev_p) / (p - prev_p)
        prev_t, prev_p = t, p
    return None


def spirula_curve(metrics):
    return [(c["train_s"], c["psnr"]) for c in metrics["test_curve"]]


def gsplat_curve(metrics):
    return [(e["train_s"], e["psnr"]) for e in metrics["evals"]]


def run(cmd, log):
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=RUN_CWD)
    if proc.returncode != 0:
        raise SystemExit("time_to_quality: %s failed (exit %d): see %s" % (cmd[2], proc.returncode, log))


def _sweep_args(args, scene, iterations):
    """quality_sweep.py's arguments of one run (its command builders are reused)."""
    return argparse.Namespace(
        dataset=str(scene),
        iterations=iterations,
        strategy="mcmc",
        cap_max=args.cap_max,
        eval_every=args.eval_every,
        gsplat=args.gsplat,
    )


def spirula_run(args, scene, backend, seed, out):
    cmd = spirula_command(_sweep_args(args, scene, args.iterations), args.set + ["+backend=" + backend], seed, out)
    run(cmd, out.with_suffix(".log"))
    return json.loads((out / "metrics.json").read_text())


def gsplat_run(args, scene, seed, out, ssim):
    out.mkdir(parents=True, exist_ok=True)
    cmd = gsplat_command(_sweep_args(args, scene, args.gsplat_iterations or args.iterations), seed, out)
    run(cmd + ([] if ssim else ["--ssim-lambda", "0"]), out.with_suffix(".log"))
    return json.loads((out / "metrics.json").read_text())


def _stats(values):
    got = [v for v in values if v is not None]
    if len(got) < len(values):
        return "not reached by %d of %d" % (len(values) - len(got), len(values))
    return "%.1f s median, %.1f mean" % (statistics.median(got), statistics.mean(got))


def measure_scene(args, scene):
    """{"gsplat": {...}, backend: {...}} of one scene, printed as it goes."""
    work = Path(args.workdir) / Path(scene).name
    row = {}
    if args.gsplat:
        for name, ssim in (("gsplat", True), ("gsplat_ssim0", False)):
            runs = [gsplat_run(args, scene, s, work / ("%s-%d" % (name, s)), ssim) for s in args.seeds]
            row[name] = dict(
                psnr=[r["psnr"] for r in runs],
                train_s=[r["train_s"] for r in runs],
                curves=[gsplat_curve(r) for r in runs],
            )
        target = statistics.mean(row["gsplat"]["psnr"])
    else:
        target = args.target
    row["target_psnr"] = target
    print("%s: target %.3f dB" % (scene, target), flush=True)
    for name in ("gsplat", "gsplat_ssim0"):
        if name in row:
            g = row[name]
            seeds = " ".join("%.2f" % p for p in g["psnr"])
            print(
                "  %-13s final %.3f dB (seeds %s), %.1f s training (mean)"
                % (name, statistics.mean(g["psnr"]), seeds, statistics.mean(g["train_s"]))
            )
    for backend in args.backends:
        runs = [spirula_run(args, scene, backend, s, work / ("spirula-%s-%d" % (backend, s))) for s in args.seeds]
        curves = [spirula_curve(r) for r in runs]
        reach = [time_to_target(c, target) for c in curves]
        row[backend] = dict(
            psnr=[r["psnr"] for r in runs], train_s=[c[-1][0] for c in curves], time_to_target=reach, curves=curves
        )
        line = "  spirula %-6s final %.3f dB, %.1f s training; to the target: %s" % (
            backend,
            statistics.mean(row[backend]["psnr"]),
            statistics.mean(row[backend]["train_s"]),
            _stats(reach),
        )
        if args.gsplat and None not in reach:
            t = statistics.mean(reach)
            line += "; %.3fx gsplat's time, %.3fx its SSIM-free time" % (
                t / statistics.mean(row["gsplat"]["train_s"]),
                t / statistics.mean(row["gsplat_ssim0"]["train_s"]),
            )
        print(line, flush=True)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenes", nargs="+")
    ap.add_argument("--seeds", type=parse_seeds, default=[0])
    ap.add_argument("--iterations", type=int, default=30000, help="Spirula's steps")
    ap.add_argument("--gsplat-iterations", type=int, default=None, help="gsplat's steps (default: --iterations)")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--backends", nargs="+", default=["vulkan"])
    ap.add_argument("--gsplat", default=None, help="gsplat_train.py: its final PSNR is the target")
    ap.add_argument("--target", type=float, default=None, help="the target PSNR without --gsplat")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for Spirula's runs")
    ap.add_argument("--workdir", default="/tmp/ttq")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.gsplat is None and args.target is None:
        ap.error("give --gsplat (its final PSNR is the target) or --target")
    args.scenes = [str(Path(s).resolve()) for s in args.scenes]
    if args.gsplat:
        args.gsplat = str(Path(args.gsplat).resolve())
    result = {s: measure_scene(args, s) for s in args.scenes}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
