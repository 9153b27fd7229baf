"""Test PSNR of training configurations over several seeds, several runs at a
time on one GPU (quality does not depend on the runs' speed, so they share it).

    python benchmarks/quality_sweep.py DATASET --seeds 0-4 --parallel 3 \\
        --config defaults --config "gsplat_rates:mcmc_keep_moments=true,lr_opacities=0.05" \\
        [--gsplat .device/gsplat_train.py] [--strategy adc] [--json OUT.json]

Each run is `spirula train DATASET --iterations 3000 --strategy mcmc --cap-max
1000000 --background black --seed S --set KEY=VALUE ...` (the training
benchmark of docs/performance.md); a config is NAME or NAME:KEY=VALUE,KEY=VALUE.
Items starting with + change how the run starts, not a setting:
+backend=cuda, +env=NAME=VALUE (an environment variable; repeatable) and
+tree=DIR (another checkout's spirula/ and shaders/, e.g. an older commit
unpacked there). --eval-every N adds the test PSNR every N steps to each row
("curve"), read from the run's log.
With --gsplat, the peer trainer runs the same seeds (42 + S) with the same
strategy (gsplat's MCMCStrategy, or DefaultStrategy for adc) as config "gsplat".
Prints a line per run as it ends (PSNR, SSIM, splats relocated, the fewest
relocated by one refinement in the run's second half, which is 0 when
relocation stalled, and non-finite splats), then per config the mean,
standard deviation and range.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def parse_seeds(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def parse_config(text):
    name, _, sets = text.partition(":")
    return name, [s for s in sets.split(",") if s]


def run_options(sets):
    """(settings, backend, env, tree) of a config's items (see the docstring)."""
    settings, backend, env, tree = [], None, {}, None
    for item in sets:
        if not item.startswith("+"):
            settings.append(item)
            continue
        key, _, value = item[1:].partition("=")
        if key == "backend":
            backend = value
        elif key == "env":
            name, _, val = value.partition("=")
            env[name] = val
        elif key == "tree":
            tree = value
        else:
            raise SystemExit("quality_sweep: unknown run option %r" % item)
    return settings, backend, env, tree


def run_env(sets) -> dict:
    """The environment of a config's runs: this process's, with its +env and +tree.
    With +tree the run must not start in a checkout (``python -m`` puts the working
    directory first on the path): run it with ``cwd=RUN_CWD``."""
    _, _, env, tree = run_options(sets)
    out = dict(os.environ, **env)
    if tree:
        out["PYTHONPATH"] = os.pathsep.join([tree] + [p for p in [out.get("PYTHONPATH")] if p])
    return out


# where runs start: outside any checkout, so that +tree's PYTHONPATH decides which spirula runs
RUN_CWD = "/"


def spirula_command(args, sets, seed, out):
    sets, backend, _, _ = run_options(sets)
    cmd = [
        sys.executable,
        "-m",
        "spirula",
        "train",
        args.dataset,
        "--iterations",
        str(args.iterations),
        "--strategy",
        args.strategy,
        "--cap-max",
        str(args.cap_max),
        "--background",
        "black",
        "--seed",
        str(seed),
        "--save-every",
        "0",
        "--output",
        str(out),
    ]
    if getattr(args, "eval_every", 0):
        cmd += ["--eval-every", str(args.eval_every)]
    if backend:
        cmd += ["--backend", backend]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def gsplat_command(args, seed, out):
    return [
        sys.executable,
        args.gsplat,
        "--data",
        args.dataset,
        "--strategy",
        args.strategy,
        "--cap-max",
        str(args.cap_max),
        "--steps",
        str(args.iterations),
        "--seed",
        str(42 + seed),
        "--json",
        str(out / "metrics.json"),
    ] + (["--eval-every", str(args.eval_every)] if getattr(args, "eval_every", 0) else [])


# spirula's "step 2500: test PSNR 27.1 ..." and gsplat_train.py's "step   2500  loss ...  test PSNR 27.1"
EVAL_LINE = re.compile(r"step +(\d+)\b[^\n]*?test PSNR ([0-9.]+)")


def summarize(name, seed, out, rc, seconds):
    row = dict(config=name, seed=seed, rc=rc, seconds=round(seconds, 1))
    try:
        curve = EVAL_LINE.findall((out / "log.txt").read_text())
    except OSError:
        curve = []
    if curve:
        row["curve"] = [[int(s), float(p)] for s, p in curve]
    try:
        m = json.loads((out / "metrics.json").read_text())
    except (OSError, ValueError):
        return row
    row.update(
        psnr=m.get("psnr"),
        ssim=m.get("ssim"),
        train_psnr=m.get("train_psnr"),
        n_splats=m.get("n_splats"),
        relocated=m.get("relocated"),
        nonfinite=m.get("nonfinite_splats"),
    )
    hist = m.get("relocated_by_step") or []
    if hist:
        row["fewest_relocated_late"] = min(c for _, c in hist[len(hist) // 2 :])
    return row


def run_jobs(jobs, parallel: int, tag: str = "sweep") -> list:
    """Run ``jobs`` ((name, seed, out, cmd, env), each in its folder ``out`` with
    its log there), ``parallel`` at a time; print a row per run as it ends (with
    ``tag``); return the rows (:func:`summarize`'s) in the order they ended."""
    jobs, rows, running = list(jobs), [], []
    while jobs or running:
        while jobs and len(running) < parallel:
            name, seed, out, cmd, env = jobs.pop(0)
            out.mkdir(parents=True, exist_ok=True)
            log = open(out / "log.txt", "w")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=RUN_CWD)
            running.append((name, seed, out, proc, time.time(), log))
        time.sleep(0.5)
        for job in list(running):
            name, seed, out, proc, t0, log = job
            if proc.poll() is None:
                continue
            running.remove(job)
            log.close()
            row = summarize(name, seed, out, proc.returncode, time.time() - t0)
            rows.append(row)
            print("[%s] %s" % (tag, json.dumps(row)), flush=True)
            if proc.returncode:
                print(
                    "[%s] %s seed %d failed; the end of %s:\n%s"
                    % (tag, name, seed, out / "log.txt", (out / "log.txt").read_text()[-1500:]),
                    flush=True,
                )
    return rows


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset")
    ap.add_argument("--config", action="append", default=[], help="NAME or NAME:KEY=VALUE,KEY=VALUE")
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,5")
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--strategy", choices=["mcmc", "adc"], default="mcmc", help="both trainers' densification")
    ap.add_argument("--cap-max", type=int, default=1_000_000, help="MCMC's budget (ADC ignores it)")
    ap.add_argument("--parallel", type=int, default=3, help="runs at a time")
    ap.add_argument("--gsplat", default=None, help="gsplat_train.py: also run the peer")
    ap.add_argument("--eval-every", type=int, default=0, help="test PSNR every N steps too (the row's curve)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/quality_sweep"))
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def main():
    args = parse_args()
    args.dataset = str(Path(args.dataset).resolve())
    args.workdir = args.workdir.resolve()
    if args.gsplat:
        args.gsplat = str(Path(args.gsplat).resolve())
    seeds = parse_seeds(args.seeds)
    configs = [parse_config(c) for c in args.config or ["defaults"]]
    # seed-major order: a sweep cut short still has every config at the first seeds
    jobs = []
    for seed in seeds:
        if args.gsplat:
            out = args.workdir / ("gsplat-%d" % seed)
            jobs.append(("gsplat", seed, out, gsplat_command(args, seed, out), None))
        for name, sets in configs:
            out = args.workdir / ("%s-%d" % (name, seed))
            jobs.append((name, seed, out, spirula_command(args, sets, seed, out), run_env(sets)))
    rows = run_jobs(jobs, args.parallel)
    names = (["gsplat"] if args.gsplat else []) + [n for n, _ in configs]
    table = {}
    for name in names:
        done = [r for r in rows if r["config"] == name and r.get("psnr") is not None]
        if not done:
            continue
        psnr = [r["psnr"] for r in done]
        splats = [r["n_splats"] for r in done if r.get("n_splats") is not None]
        table[name] = dict(
            runs=len(psnr),
            mean=statistics.mean(psnr),
            std=statistics.stdev(psnr) if len(psnr) > 1 else 0.0,
            min=min(psnr),
            max=max(psnr),
            splats_mean=statistics.mean(splats) if splats else None,
        )
        print(
            "[sweep] %-24s %d runs  PSNR mean %.3f  std %.3f  range %.2f-%.2f  splats mean %s"
            % (
                name,
                len(psnr),
                table[name]["mean"],
                table[name]["std"],
                min(psnr),
                max(psnr),
                "%.0f" % table[name]["splats_mean"] if splats else "-",
            ),
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(dict(configs=dict(configs), rows=rows, table=table), indent=1))


if __name__ == "__main__":
    main()
