"""Soak test: a long `spirula train` with NaNs injected into the splats and a
tight device-memory budget must end with a finished run, or with a
checkpoint and one clear line; never a crash (a traceback, a death by
signal, no checkpoint) or a hang (no output for --stall seconds).

    python benchmarks/soak.py DATASET [--steps 30000] [--memory-limit 1600MiB]
        [--inject-nan-every 1000] [--cap-max 1000000] [--backend vulkan|cuda] [--set KEY=VALUE ...]

It runs the CLI in a subprocess with ``--set inject_nan_every=N`` (every N
steps NaN into one parameter of 1% of the splats, spirula/train/faults.py)
and ``SPIRULA_MEMORY_LIMIT`` (spirula/runtime/buffers.py), watches its
progress lines, and prints one summary line:

    soak: finished | 30000/30000 steps | 251.3 s | 1,000,000 splats, 0 non-finite | test PSNR 33.9 | ...
    soak: checkpoint | step 1234/30000 | ... | spirula: error: out of GPU memory ...

Exit status 0 for those two outcomes, 1 for CRASH or HANG. The GPU version
of docs/testing.md: 30,000 steps of the 1080p benchmark scene
(benchmarks/make_scene.py); tests/test_soak.py runs a short one on lavapipe.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def soak(
    dataset,
    steps: int,
    memory_limit: str | None,
    inject_nan_every: int,
    cap_max: int,
    output: Path,
    stall: float = 300.0,
    backend: str | None = None,
    overrides=(),
    env=None,
) -> dict:
    """Run the soak; return its outcome (``outcome``: finished, checkpoint,
    CRASH or HANG), the summary ``line`` and what it is made of."""
    log_every = max(1, steps // 100)
    cmd = [sys.executable, "-m", "spirula", "train", str(dataset), "--iterations", str(steps)]
    cmd += ["--cap-max", str(cap_max), "--output", str(output), "--save-every", "0"]
    cmd += ["--set", "inject_nan_every=%d" % inject_nan_every, "--set", "log_every=%d" % log_every]
    for item in overrides:
        cmd += ["--set", item]
    if backend:
        cmd += ["--backend", backend]
    env = dict(os.environ if env is None else env)
    env.pop("SPIRULA_MEMORY_LIMIT", None)
    if memory_limit:
        env["SPIRULA_MEMORY_LIMIT"] = memory_limit
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines: queue.Queue = queue.Queue()

    def read():
        for line in proc.stderr:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    stderr, hung, last_step = [], False, 0
    while True:
        try:
            line = lines.get(timeout=stall)
        except queue.Empty:
            hung = True  # no output for `stall` seconds: stop it as a scheduler would, then for good
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
            break
        if line is None:
            break
        stderr.append(line)
        if line.startswith("step "):
            last_step = int(line.split()[1].split("/")[0])
    rc = proc.wait()
    seconds = time.monotonic() - t0
    return _outcome(rc, hung, stderr, last_step, steps, seconds, output, memory_limit)


def _outcome(rc, hung, stderr, last_step, steps, seconds, output, memory_limit) -> dict:
    from spirula.train.run import find_checkpoint, load_checkpoint

    errors = [ln for ln in stderr if ln.startswith("spirula: error:")]
    traceback = any("Traceback" in ln for ln in stderr)
    ckpt_step = None
    try:
        ckpt_step = int(load_checkpoint(find_checkpoint(output))["step"])
    except Exception:
        pass
    metrics = {}
    if (output / "metrics.json").is_file():
        metrics = json.loads((output / "metrics.json").read_text())
    if hung:
        outcome = "HANG"
    elif rc == 0 and metrics.get("step") == steps and not traceback:
        outcome = "finished"
    elif rc > 0 and not traceback and len(errors) == 1 and ckpt_step is not None and str(output) in errors[0]:
        outcome = "checkpoint"
    else:
        outcome = "CRASH"
    step = metrics.get("step") or ckpt_step or last_step
    parts = ["soak: %s" % outcome, "%d/%d steps" % (step, steps), "%.1f s" % seconds]
    if metrics:
        parts.append("%s splats, %d non-finite" % (f"{metrics['n_splats']:,}", metrics.get("nonfinite_splats", 0)))
        psnr = metrics.get("psnr")
        parts.append("test PSNR %s" % ("%.2f" % psnr if psnr is not None else "-"))
        parts.append("peak pool %.1f MiB (limit %s)" % (metrics["peak_vram_mib"], memory_limit or "none"))
    else:
        parts.append("checkpoint of step %s" % ckpt_step)
    parts.append("exit %d" % rc)
    if outcome != "finished":
        tail = errors[-1] if errors else (stderr[-1] if stderr else "(no output)")
        parts.append(tail)
    return dict(
        outcome=outcome,
        line=" | ".join(parts),
        rc=rc,
        stderr=stderr,
        errors=errors,
        checkpoint_step=ckpt_step,
        metrics=metrics,
        seconds=seconds,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--steps", type=int, default=30_000)
    ap.add_argument(
        "--memory-limit",
        default="1600MiB",
        help="SPIRULA_MEMORY_LIMIT for the run (the 1080p scene peaks at ~1,480 MiB over 3,000 steps) "
        "[default: 1600MiB; '' for none]",
    )
    ap.add_argument("--inject-nan-every", type=int, default=1000, help="[default: 1000]")
    ap.add_argument("--cap-max", type=int, default=1_000_000)
    ap.add_argument("--backend", choices=["vulkan", "cuda"], default=None)
    ap.add_argument("--output", type=Path, default=None, help="run folder [default: a temporary one]")
    ap.add_argument("--stall", type=float, default=300.0, help="seconds without output that count as a hang")
    ap.add_argument("--set", dest="overrides", action="append", default=["background=black"], metavar="KEY=VALUE")
    args = ap.parse_args()
    output = args.output or Path(tempfile.mkdtemp(prefix="spirula-soak-")) / "run"
    result = soak(
        args.dataset,
        args.steps,
        args.memory_limit or None,
        args.inject_nan_every,
        args.cap_max,
        output,
        stall=args.stall,
        backend=args.backend,
        overrides=args.overrides,
    )
    if result["outcome"] in ("CRASH", "HANG"):
        print("\n".join(result["stderr"][-30:]), file=sys.stderr)
    print(result["line"], flush=True)
    sys.exit(0 if result["outcome"] in ("finished", "checkpoint") else 1)


if __name__ == "__main__":
    main()
