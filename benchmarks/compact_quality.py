"""The quality gate of compact storage (issue #12 item 4): test PSNR of
float32 and --compact training at equal steps, several seeds, paired by seed.

    python benchmarks/compact_quality.py DATASET [DATASET ...] --seeds 0-4 \\
        [--iterations 7000] [--parallel 2] [--json OUT.json]

Each run is quality_sweep.py's (`spirula train DATASET --iterations N
--cap-max 1000000 --background black --seed S`), once as is and once with
`--set compact=true`. Prints a line per run as it ends, then per dataset the
mean and median PSNR of each mode and the paired differences (compact minus
float32, per seed): their mean, median, and the mean's standard error. The
gate for making compact the default: the mean difference over every
dataset's seeds is at least -0.05 dB (a drop of at most 0.05 dB); the script
prints PASS or FAIL against it and exits 0 either way (1 if a run failed).
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from quality_sweep import parse_seeds, spirula_command, summarize  # noqa: E402

GATE_DB = 0.05
MODES = (("float32", ["compact=false"]), ("compact", ["compact=true"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,5")
    ap.add_argument("--iterations", type=int, default=7000)
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--parallel", type=int, default=2, help="runs at a time")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/compact_quality"))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    seeds = parse_seeds(args.seeds)
    jobs = []
    for dataset in args.datasets:
        for seed in seeds:
            for mode, sets in MODES:
                out = args.workdir / ("%s-%s-%d" % (Path(dataset).name, mode, seed))
                args.dataset = dataset
                jobs.append((dataset, mode, seed, out, spirula_command(args, sets, seed, out)))
    rows, running, failed = [], [], False
    while jobs or running:
        while jobs and len(running) < args.parallel:
            dataset, mode, seed, out, cmd = jobs.pop(0)
            out.mkdir(parents=True, exist_ok=True)
            log = open(out / "log.txt", "w")
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            running.append((dataset, mode, seed, out, proc, time.time(), log))
        time.sleep(0.5)
        for job in list(running):
            dataset, mode, seed, out, proc, t0, log = job
            if proc.poll() is None:
                continue
            running.remove(job)
            log.close()
            row = summarize(mode, seed, out, proc.returncode, time.time() - t0)
            row["dataset"] = dataset
            rows.append(row)
            failed |= proc.returncode != 0
            print("[compact] " + json.dumps(row), flush=True)
    diffs_all = []
    for dataset in args.datasets:
        psnr = {
            mode: {
                r["seed"]: r["psnr"] for r in rows if r["dataset"] == dataset and r["config"] == mode and r.get("psnr")
            }
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
        diffs_all += diffs
        if diffs:
            se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
            print(
                "[compact] %s compact - float32 over %d seeds: mean %+.4f dB  median %+.4f dB  (standard error %.4f)"
                % (dataset, len(diffs), statistics.mean(diffs), statistics.median(diffs), se)
            )
    if diffs_all:
        mean = statistics.mean(diffs_all)
        print(
            "[compact] all: mean difference %+.4f dB over %d pairs: %s (gate: a drop of at most %.2f dB)"
            % (mean, len(diffs_all), "PASS" if mean >= -GATE_DB else "FAIL", GATE_DB)
        )
    if args.json:
        args.json.write_text(json.dumps(dict(rows=rows), indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
