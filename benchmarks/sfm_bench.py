"""The camera-pose stage's speed, CPU path against GPU path (issue #38 item 6,
docs/sfm.md "Speed"): frames rendered from known cameras, each stage of
``run_sfm`` timed, the poses checked against the true ones.

The workloads are clips of tests/sfm_scene.py's ROOM (textured blocks in a
walled room): an orbit round the blocks (one full turn, looking at them) or a
walk round the room (``--path walk``), every frame kept, as JPEG quality 95
(what ``spirula frames`` writes). The default workloads are the issue's: 120
frames at 384x288 and 200 frames at 1920x1080. Frames are rendered once
(numpy ray casting, one process per core; not what is measured) into
``--work`` (default ``.cache/sfm_bench``), with their true cameras, and reused.

Each run is ``spirula.sfm.colmap.run_sfm`` in this process with one front
end (``--features cpu``: pycolmap's SIFT and matching; ``gpu``: Spirula's
kernels on each ``--backend``) and one ``--mapper``; the table gives each
stage's seconds (match includes pycolmap's verification; verify is that part,
given apart on the GPU path), extract + match (the issue's target: under 20 s
for 200 frames at 1080p on a GPU), the total of the stages, the frames
registered, the models' sizes and the median / max rotation error in degrees
after the similarity that best aligns the registered centres to the true ones
(tests/sfm_scene.py's pose_errors_of). Before the GPU runs, one frame is
extracted and one pair matched on each device untimed (pipelines built).

    python benchmarks/sfm_bench.py                       # both workloads, cpu + gpu (vulkan), both mappers
    python benchmarks/sfm_bench.py --quick               # 20 frames of a quarter turn at 256x192
    python benchmarks/sfm_bench.py --workload 120x384x288 --features gpu --backend vulkan cuda \\
        --mapper global --json out.json

``--workload NxWxH`` (repeatable) replaces the two defaults; ``--turn F``
makes the orbit a fraction F of a turn; ``--cores N`` pins this process to the
first N cores (``os.sched_setaffinity``) and sets pycolmap's threads to N.
benchmarks/gpu_sfm_bench.sh runs it on the GPU machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

WORKLOADS = ((120, 384, 288), (200, 1920, 1080))  # issue #38 item 6
QUICK = (20, 256, 192)  # with --turn 0.25: 4.5 degrees a frame, a couple of minutes on 2 cores
COLUMNS = ("extract", "match", "verify", "map", "undistort")
NAME = "frame_%05d.jpg"


def cameras(path: str, n: int, turn: float = 1.0) -> tuple:
    """``(centres [n,3], targets [n,3])`` of the clip: ``orbit`` (radius 3 m at
    1.6 m round the blocks, ``turn`` of a full turn, looking at them) or
    ``walk`` (tests/sfm_scene.py's walk_path, without its pause)."""
    import sfm_scene

    if path == "walk":
        return sfm_scene.walk_path(n, pause=(0.5, 0.5))
    a = 2 * np.pi * turn * np.arange(n) / n
    c = np.stack([3.0 * np.sin(a), -3.0 * np.cos(a), np.full(n, 1.6)], axis=1)
    return c, np.repeat(sfm_scene.TARGET[None], n, axis=0)


def _render_one(args):
    import sfm_scene
    from PIL import Image

    i, centre, target, width, height, folder = args
    f = 0.95 * width
    K = np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])
    R, t = sfm_scene.look_at(centre, target)
    image = sfm_scene.render(R, t, K, width, height, sfm_scene._noise_table(0), sfm_scene.ROOM)
    Image.fromarray(image).save(Path(folder) / (NAME % (i + 1)), quality=95)
    return R, t


def render_clip(work: Path, path: str, n: int, width: int, height: int, turn: float, jobs: int) -> tuple:
    """The clip's folder of frames and its true cameras ``(folder, names, R [n,3,3], t [n,3])``:
    rendered once into ``work``, then read back."""
    key = "%s%s_%d_%dx%d" % (path, "" if turn == 1.0 or path == "walk" else "%g" % turn, n, width, height)
    folder = work / key / "images"
    truth = work / key / "cameras.npz"
    names = [NAME % (i + 1) for i in range(n)]
    if not truth.is_file() or not all((folder / name).is_file() for name in names):
        shutil.rmtree(work / key, ignore_errors=True)
        folder.mkdir(parents=True)
        centres, targets = cameras(path, n, turn)
        t0 = time.perf_counter()
        jobs_args = [(i, centres[i], targets[i], width, height, str(folder)) for i in range(n)]
        if jobs > 1:
            with ProcessPoolExecutor(jobs) as pool:
                poses = list(pool.map(_render_one, jobs_args))
        else:
            poses = [_render_one(a) for a in jobs_args]
        np.savez(truth, R=np.array([p[0] for p in poses]), t=np.array([p[1] for p in poses]))
        print("[sfm-bench] rendered %s (%d frames) in %.1f s" % (key, n, time.perf_counter() - t0), flush=True)
    cams = np.load(truth)
    return folder, names, cams["R"], cams["t"]


STAGE_LINE = re.compile(r"^(extract|match|map|gate|undistort|write)\s+([\d.]+) s")


def run_one(folder, names, R, t, out: Path, features: str, backend, mapper: str, device, threads: int) -> dict:
    """One ``run_sfm``: its stage times, registration and pose errors (a failure recorded, not raised)."""
    import pycolmap
    import sfm_scene

    from spirula.sfm import colmap

    shutil.rmtree(out, ignore_errors=True)
    lines = []
    row = dict(features=features, backend=backend if features == "gpu" else "pycolmap", mapper=mapper)
    t0 = time.perf_counter()
    try:
        result = colmap.run_sfm(
            folder,
            out,
            mapper=mapper,
            features=features,
            device=device,
            num_threads=threads,
            log=lines.append,
        )
        times = dict(result.times)
        row.update(models=result.model_sizes, ok=True)
    except Exception as exc:  # the gate failed, or a backend broke: the row says so
        times = {m.group(1): float(m.group(2)) for m in map(STAGE_LINE.match, lines) if m}
        row.update(ok=False, error="%s: %s" % (type(exc).__name__, " ".join(str(exc).split())[:300]))
        if not isinstance(exc, colmap.SfmError):
            traceback.print_exc()
    row["wall"] = time.perf_counter() - t0
    row["lines"] = lines
    row["times"] = {k: round(v, 3) for k, v in times.items()}
    row["total"] = sum(times.get(k, 0.0) for k in colmap.STAGES)
    row["extract_match"] = times.get("extract", 0.0) + times.get("match", 0.0)
    sparse = sorted((out / "colmap" / "sparse").glob("*/images.bin")) if (out / "colmap").is_dir() else []
    if "models" not in row:
        row["models"] = sorted((pycolmap.Reconstruction(p.parent).num_reg_images() for p in sparse), reverse=True)
    best = max((pycolmap.Reconstruction(p.parent) for p in sparse), key=lambda r: r.num_reg_images(), default=None)
    row["frames"] = len(names)
    if best is not None:
        rot, centre, got = sfm_scene.pose_errors_of(best, names, R, t)
        row["registered"] = len(got)
        if len(got) >= 3:
            row.update(
                rot_median=float(np.median(rot)),
                rot_max=float(rot.max()),
                centre_median=float(np.median(centre)),
            )
    else:
        row["registered"] = 0
    return row


def fmt(v, width=7):
    return ("%*.1f" % (width, v)) if isinstance(v, float) else ("%*s" % (width, v))


def table(rows) -> str:
    head = (
        "| workload | front end | mapper | "
        + " | ".join(COLUMNS)
        + " | extract + match | total | registered | models | rotation median / max (deg) |"
    )
    out = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        t = r["times"]
        match = t.get("match")
        cells = [
            "%.1f" % t["extract"] if "extract" in t else "-",
            "%.1f" % match if match is not None else "-",
            "%.1f" % t["verify"] if "verify" in t else "-",
            "%.1f" % t["map"] if "map" in t else "-",
            "%.1f" % t["undistort"] if "undistort" in t else "-",
        ]
        front = "cpu (pycolmap)" if r["features"] == "cpu" else "gpu (%s)" % r["backend"]
        rot = "%.3f / %.3f" % (r["rot_median"], r["rot_max"]) if "rot_median" in r else "-"
        out.append(
            "| %s | %s | %s | %s | %.1f | %.1f | %d / %d | %s | %s |"
            % (
                r["workload"],
                front,
                r["mapper"],
                " | ".join(cells),
                r["extract_match"],
                r["total"],
                r["registered"],
                r["frames"],
                ", ".join(map(str, r["models"])) or "-",
                rot if r["ok"] else rot + " FAILED: " + r["error"][:80],
            )
        )
    return "\n".join(out)


def warm_up(device, folder, names):
    """One frame extracted and one pair matched, untimed: the pipelines built."""
    from spirula.features import extract_features, match_features, release
    from spirula.sfm import front

    grey, _ = front.read_grey(folder / names[0], 3200)
    _, a = extract_features(device, grey, None)
    grey, _ = front.read_grey(folder / names[1], 3200)
    _, b = extract_features(device, grey, None)
    match_features(device, a, b)
    release(device)


def machine() -> dict:
    import pycolmap

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return dict(
        host=platform.node(),
        cpu=cpu,
        cores=len(os.sched_getaffinity(0)),
        pycolmap=pycolmap.__version__,
        date=time.strftime("%Y-%m-%d"),
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", action="append", default=None, metavar="NxWxH", help="frames x width x height")
    ap.add_argument("--frames", type=int, default=None, help="one workload of this many frames (with --size)")
    ap.add_argument("--size", default=None, help="WxH of that workload")
    ap.add_argument("--quick", action="store_true", help="20 frames of a quarter turn at 256x192")
    ap.add_argument("--path", choices=("orbit", "walk"), default="orbit")
    ap.add_argument("--turn", type=float, default=None, help="the orbit's fraction of a turn (default 1)")
    ap.add_argument("--features", nargs="+", choices=("cpu", "gpu"), default=["cpu", "gpu"])
    ap.add_argument("--backend", nargs="+", choices=("vulkan", "cuda"), default=["vulkan"])
    ap.add_argument("--mapper", nargs="+", choices=("incremental", "global"), default=["global", "incremental"])
    ap.add_argument("--work", type=Path, default=ROOT / ".cache" / "sfm_bench")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="rendering processes")
    ap.add_argument("--cores", type=int, default=None, help="pin to the first N cores, N threads for pycolmap")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.cores:
        os.sched_setaffinity(0, range(a.cores))
    if a.workload:
        loads = [tuple(int(v) for v in w.split("x")) for w in a.workload]
    elif a.frames or a.size or a.quick:
        n, w, h = QUICK if a.quick else (WORKLOADS[0][0], *WORKLOADS[0][1:])
        if a.size:
            w, h = (int(v) for v in a.size.split("x"))
        loads = [(a.frames or n, w, h)]
    else:
        loads = list(WORKLOADS)
    turn = a.turn if a.turn is not None else (0.25 if a.quick else 1.0)
    info = machine()
    devices = {}
    if "gpu" in a.features:
        from spirula.backends import open_device

        for backend in a.backend:
            try:
                devices[backend] = open_device(backend)
                info["device_" + backend] = devices[backend].info.name
            except Exception as exc:  # no such backend here: its rows are left out
                print("[sfm-bench] %s: no device (%s)" % (backend, " ".join(str(exc).split())), flush=True)
    print("[sfm-bench] %s" % json.dumps(info), flush=True)
    rows = []
    for n, w, h in loads:
        folder, names, R, t = render_clip(a.work, a.path, n, w, h, turn, max(1, a.jobs))
        label = "%d x %dx%d %s%s" % (n, w, h, a.path, " (%g turn)" % turn if a.path == "orbit" and turn != 1 else "")
        runs = []
        for features in a.features:
            for backend in a.backend if features == "gpu" else [None]:
                if features == "gpu" and backend not in devices:
                    continue
                for mapper in a.mapper:
                    runs.append((features, backend, mapper))
        for backend, device in devices.items():
            t0 = time.perf_counter()
            warm_up(device, folder, names)
            print("[sfm-bench] %s warm-up %.1f s" % (backend, time.perf_counter() - t0), flush=True)
        for features, backend, mapper in runs:
            out = a.work / "runs" / ("%d_%dx%d_%s_%s_%s" % (n, w, h, features, backend or "pycolmap", mapper))
            row = run_one(folder, names, R, t, out, features, backend, mapper, devices.get(backend), a.cores or -1)
            row["workload"] = label
            rows.append(row)
            print(
                "[sfm-bench] %s %s %s: %s; ext+match %.1f s, total %.1f s, %d/%d registered, models %s%s"
                % (
                    label,
                    features,
                    backend or "pycolmap",
                    mapper,
                    row["extract_match"],
                    row["total"],
                    row["registered"],
                    row["frames"],
                    row["models"],
                    ", rot median %.3f deg" % row["rot_median"] if "rot_median" in row else "",
                )
                + ("" if row["ok"] else " FAILED: " + row["error"]),
                flush=True,
            )
            if a.json:  # after every run: a call cut short keeps what it finished
                a.json.write_text(json.dumps(dict(machine=info, rows=rows), indent=1))
    print(table(rows))
    return rows


if __name__ == "__main__":
    main()
