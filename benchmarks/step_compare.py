"""One training step from one checkpoint under several configurations, compared
element by element: where two code paths (a backend, a driver-specific shader
variant, an older tree) should compute the same step, their parameters and
Adam moments afterwards differ by float rounding only (issue #46's bisection).

    python benchmarks/step_compare.py RUN --config a --config "b:+env=SPIRULA_NO_FLOAT_ATOMICS=1" \\
        [--config "old:+tree=/tmp/before"] [--steps 1] [--inflate 5]

RUN is a run folder with a checkpoint; each config (quality_sweep.py's syntax:
settings, +backend, +env, +tree) resumes a copy of it for --steps more steps
(with --inflate K, the checkpoint's splats are first repeated K times, each
copy moved by half its scale: long tile lists, as late in a long run). The
first config runs twice: the spread between its two runs (float atomics add
in any order) is the yardstick for the others. Prints, per config and
attribute, the mean absolute difference to the first run relative to the
attribute's mean magnitude; with --as-sets, after matching each splat to the
first run's nearest (by position), since a refinement may put the same
relocated splats into other slots (4048077 and HEAD do: a slot-by-slot
comparison across a refinement then differs by several percent).
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from quality_sweep import RUN_CWD, parse_config, run_env, run_options  # noqa: E402


def latest_checkpoint(run: Path) -> Path:
    ckpts = sorted((run / "ckpt").glob("step-*.npz"))
    if not ckpts:
        raise SystemExit("step_compare: %s has no checkpoint" % run)
    return ckpts[-1]


def inflate(ckpt: Path, k: int):
    """Repeat every splat (and its moments) k times, each copy moved by half its mean scale."""
    a = dict(np.load(ckpt))
    n = len(a["model/params/means"])
    for key in [key for key in a if key.startswith("model/")]:
        a[key] = np.concatenate([a[key]] * k)
    m = a["model/params/means"]
    s = np.exp(a["model/params/scales"]).mean(1, keepdims=True)
    m[n:] += np.random.default_rng(0).standard_normal(m[n:].shape).astype(np.float32) * s[n:] * 0.5
    np.savez(ckpt, **a)


def relative_differences(a: dict, b: dict) -> dict:
    out = {}
    for key in a:
        if key.startswith("model/") and key in b and a[key].shape == b[key].shape:
            x, y = a[key].astype(np.float64), b[key].astype(np.float64)
            out[key[len("model/") :]] = float(np.abs(x - y).mean() / (np.abs(x).mean() + 1e-30))
    return out


def match_rows(a: dict, b: dict) -> dict:
    """``b`` with its splats (and their moments) reordered to ``a``'s: each of
    ``a``'s splats takes ``b``'s nearest in every attribute, each column scaled
    by its spread (a relocated splat's copies share its parameters and differ
    in their moments; counts must agree)."""
    from scipy.spatial import cKDTree

    keys = [k for k in a if k.startswith("model/") and k in b and a[k].shape == b[k].shape]
    n = len(a["model/params/means"])
    if not keys or any(len(a[k]) != n for k in keys):
        return b

    def features(d):
        cols = np.concatenate([d[k].reshape(n, -1).astype(np.float64) for k in keys], axis=1)
        return cols / (ref_std + 1e-30)

    ref_std = np.concatenate([a[k].reshape(n, -1).astype(np.float64) for k in keys], axis=1).std(0)
    _, order = cKDTree(features(b)).query(features(a))
    return {k: (v[order] if k in keys else v) for k, v in b.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--config", action="append", default=[], help="NAME or NAME:ITEMS (quality_sweep.py)")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--inflate", type=int, default=1)
    ap.add_argument("--as-sets", action="store_true", help="match splats by position before comparing")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    configs = [parse_config(c) for c in args.config or ["defaults"]]
    configs.insert(1, (configs[0][0] + "-again", configs[0][1]))
    work = Path(tempfile.mkdtemp(prefix="step_compare-"))
    args.run = args.run.resolve()
    start = latest_checkpoint(args.run)
    step = int(json.loads(np.load(start)["meta"].tobytes())["step"])
    results = {}
    for name, sets in configs:
        run = work / name
        shutil.copytree(args.run, run, ignore=shutil.ignore_patterns("splat.ply", "renders"))
        for old in (run / "ckpt").glob("step-*.npz"):
            if old.name != start.name:
                old.unlink()
        if args.inflate > 1:
            inflate(run / "ckpt" / start.name, args.inflate)
        settings, backend, _, _ = run_options(sets)
        cmd = [sys.executable, "-m", "spirula"] + (["--backend", backend] if backend else [])
        cmd += ["train", "--resume", str(run), "--iterations", str(step + args.steps)]
        for s in settings:
            cmd += ["--set", s]
        proc = subprocess.run(cmd, env=run_env(sets), capture_output=True, text=True, cwd=RUN_CWD)
        if proc.returncode:
            print("[step_compare] %s failed:\n%s" % (name, (proc.stdout + proc.stderr)[-2000:]), flush=True)
            continue
        results[name] = dict(np.load(latest_checkpoint(run)))
    base = configs[0][0]
    table = {}
    if base in results:
        for name, _ in configs[1:]:
            if name in results:
                other = match_rows(results[base], results[name]) if args.as_sets else results[name]
                table[name] = relative_differences(results[base], other)
    keys = sorted({k for row in table.values() for k in row})
    print(
        "[step_compare] mean |x - %s| / mean |x| after %d step(s) from %s%s"
        % (base, args.steps, start, ", splats matched by position" if args.as_sets else "")
    )
    print("%-22s" % "config" + "".join("%14s" % k.split("/")[-1][:12] for k in keys))
    print("%-22s" % "" + "".join("%14s" % k.split("/")[0][:13] for k in keys))
    for name, row in table.items():
        print("%-22s" % name + "".join("%14.3g" % row.get(k, float("nan")) for k in keys))
    if args.json:
        args.json.write_text(json.dumps(table, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
