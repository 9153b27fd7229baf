"""The quality gate of compact storage (issues #12 and #46): test PSNR of
float32 and --compact training at equal steps, several seeds, paired by seed.

    python benchmarks/compact_quality.py DATASET [DATASET ...] --seeds 0-2 \\
        [--iterations 30000] [--cap-max 1000000] [--parallel 2] [--json OUT.json]

Each run is quality_sweep.py's (`spirula train DATASET --iterations N
--cap-max CAP --background black --seed S`), once with `--set compact=false`
and once with `--set compact=true`. Prints a line per run as it ends, then
per dataset the mean and median PSNR of each mode and the paired
differences (compact minus float32, per seed): their mean, median, and the
mean's standard error. The gate for making compact the default (issue #46:
long runs, at least two scenes, e.g. an object-centric one with a large cap
and a 1080p scene-like one): on every dataset, the mean paired difference is
not below zero by more than its standard error. A 3,000-step gate passed
where 30,000 steps lost 0.6 dB, so the default is 30,000 steps. The script
prints PASS or FAIL and exits 0 either way (1 if a run failed).
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from quality_sweep import parse_seeds, run_env, run_jobs, spirula_command  # noqa: E402

MODES = (("float32", ["compact=false"]), ("compact", ["compact=true"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--seeds", default="0-2", help="e.g. 0-4 or 0,2,5")
    ap.add_argument("--iterations", type=int, default=30_000)
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--strategy", choices=["mcmc", "adc"], default="mcmc")
    ap.add_argument("--parallel", type=int, default=2, help="runs at a time")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/compact_quality"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    args.workdir = args.workdir.resolve()
    jobs = []
    for dataset in args.datasets:
        args.dataset = str(Path(dataset).resolve())
        for seed in parse_seeds(args.seeds):
            for mode, sets in MODES:
                out = args.workdir / ("%s-%s-%d" % (Path(dataset).name, mode, seed))
                cmd = spirula_command(args, sets, seed, out)
                jobs.append(("%s:%s" % (dataset, mode), seed, out, cmd, run_env(sets)))
    rows = run_jobs(jobs, args.parallel, tag="compact")
    verdicts = []
    for dataset in args.datasets:
        psnr = {
            mode: {r["seed"]: r["psnr"] for r in rows if r["config"] == "%s:%s" % (dataset, mode) and r.get("psnr")}
            for mode, _ in MODES
        }
        for mode, _ in MODES:
            values = list(psnr[mode].values())
            if values:
                print(
                    "[compact] %s %-8s %d runs  PSNR mean %.3f  median %.3f"
                    % (dataset, mode, len(values), statistics.mean(values), statistics.median(values))
                )
        paired = sorted(set(psnr["float32"]) & set(psnr["compact"]))
        diffs = [psnr["compact"][s] - psnr["float32"][s] for s in paired]
        if len(diffs) > 1:
            mean, se = statistics.mean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5
            verdicts.append(mean >= -se)
            print(
                "[compact] %s compact - float32 over %d seeds: mean %+.4f dB  median %+.4f dB"
                "  (standard error %.4f): %s"
                % (dataset, len(diffs), mean, statistics.median(diffs), se, "PASS" if verdicts[-1] else "FAIL")
            )
    enough = len(verdicts) >= 2 and len(verdicts) == len(args.datasets)
    print(
        "[compact] gate (on every dataset the mean difference >= -its standard error; 2+ datasets, 2+ seeds): %s"
        % ("PASS" if enough and all(verdicts) else "FAIL" if verdicts else "no pairs")
    )
    if args.json:
        args.json.write_text(json.dumps(dict(rows=rows), indent=1))
    sys.exit(1 if any(r["rc"] for r in rows) else 0)


if __name__ == "__main__":
    main()
