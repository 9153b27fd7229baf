"""Fuzzing the loaders: small valid datasets of every format, corrupted at
random with a fixed seed (truncated, emptied or deleted files, flipped bytes,
NaN/inf written into numeric fields), each run through
``spirula train DATASET --dry-run``, which loads the dataset as training does
and stops. Every case either exits 2 with exactly one line on stderr naming a
file of the dataset, or (the corruption was harmless: a comment, a POINTS2D
value, a pixel) exits 0 having read the same images as the clean dataset.
Never a traceback.

Cases run in-process through ``spirula.cli.main.main`` (the code path of
``python -m spirula``: the same SpirulaError handling and exit codes); a few
run as real subprocesses to check that the two agree.
"""

import io
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import data_fixtures as fx
import pytest
from conftest import ROOT

from spirula.cli.main import main

FORMATS = ("colmap_bin", "colmap_txt", "blender", "nerfstudio")
CASES_PER_FORMAT = 150
NUMBER = re.compile(rb"-?\d+\.\d+(?:e-?\d+)?")


def write(fmt: str, root: Path) -> Path:
    truth = fx.make_truth()
    if fmt == "colmap_bin":
        return fx.write_colmap(root, truth)
    if fmt == "colmap_txt":
        return fx.write_colmap(root, truth, binary=False)
    if fmt == "blender":
        return fx.write_blender(root, truth)
    return fx.write_nerfstudio(root, truth)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """format -> (dataset folder, its files relative to it, dry-run stdout)."""
    out = {}
    for fmt in FORMATS:
        root = write(fmt, tmp_path_factory.mktemp(fmt) / "data")
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        rc, stdout, stderr = dry_run(root)
        assert rc == 0 and stderr == "", stderr
        out[fmt] = (root, files, stdout.replace(str(root), "DATASET"))
    return out


def dry_run(root: Path):
    """``spirula train ROOT --dry-run`` in this process: (exit status, stdout,
    stderr), warnings counted as stderr lines, any other exception a failure
    (it would be a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught, redirect_stdout(out), redirect_stderr(err):
        warnings.simplefilter("always")
        try:
            main(["train", str(root), "--dry-run"])
            rc = 0
        except SystemExit as exc:
            rc = exc.code
    extra = [
        "%s: %s" % (w.category.__name__, w.message) for w in caught if not issubclass(w.category, DeprecationWarning)
    ]
    return rc, out.getvalue(), err.getvalue() + "".join(e + "\n" for e in extra)


# --- corruptions -----------------------------------------------------------------


def truncate(p: Path, rng):
    data = p.read_bytes()
    p.write_bytes(data[: rng.randrange(len(data))] if data else b"")
    return "truncate"


def empty(p: Path, rng):
    p.write_bytes(b"")
    return "empty"


def delete(p: Path, rng):
    p.unlink()
    return "delete"


def flip(p: Path, rng):
    data = bytearray(p.read_bytes())
    for _ in range(rng.randint(1, 4)):
        if data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    p.write_bytes(bytes(data))
    return "flip"


def non_finite(p: Path, rng):
    """NaN, inf or a double too large for float32 into a numeric field: a decimal
    number of a text or JSON file, or a float/double of a binary one."""
    data = bytearray(p.read_bytes())
    value = rng.choice([float("nan"), float("inf"), -float("inf"), 1e39])
    if p.suffix in (".txt", ".json"):
        spans = [m.span() for m in NUMBER.finditer(bytes(data))]
        if not spans:
            return "non-finite (no number)"
        a, b = rng.choice(spans)
        text = {"nan": b"NaN", "inf": b"Infinity", "-inf": b"-Infinity"} if p.suffix == ".json" else {}
        data[a:b] = text.get(repr(value), repr(value).encode())
    elif p.suffix == ".ply":  # float32 x, y or z of a vertex (after the header)
        start = data.index(b"end_header\n") + len(b"end_header\n")
        stride = 27 if b"property float nx" in data else 15
        off = start + stride * rng.randrange((len(data) - start) // stride) + 4 * rng.randrange(3)
        data[off : off + 4] = struct.pack("<f", float("inf") if value == 1e39 else value)  # 1e39 is inf in float32
    else:  # .bin: a double where COLMAP stores them
        offsets = {
            "cameras.bin": [32 + 8 * k for k in range(4)],  # fx fy cx cy
            "images.bin": [8 + 4 + 8 * k for k in range(7)],  # qvec, tvec of the first image
            "points3D.bin": [8 + 8 + 8 * k for k in range(3)],  # xyz of the first point
        }[p.name]
        off = rng.choice(offsets)
        data[off : off + 8] = struct.pack("<d", value)
    p.write_bytes(bytes(data))
    return "non-finite"


CORRUPTIONS = (truncate, empty, delete, flip, flip, non_finite, non_finite)


def cases():
    rng = random.Random(11)
    out = []
    for fmt in FORMATS:
        for k in range(CASES_PER_FORMAT):
            out.append((fmt, k, rng.randrange(2**32)))
    return out


def corrupt(root: Path, files: list, seed: int):
    """Corrupt one file of ``root`` (images less often than the metadata, which
    is where misreading happens); ``(file, what was done)``."""
    rng = random.Random(seed)
    meta = [f for f in files if not f.endswith(".png")]
    name = rng.choice(meta if rng.random() < 0.8 else files)
    op = rng.choice(CORRUPTIONS)
    if op is non_finite and name.endswith(".png"):
        op = flip
    return name, op(root / name, rng)


def check(rc, stdout, stderr, root, files, clean_stdout, what):
    assert "Traceback" not in stderr, (what, stderr)
    if rc == 0:
        # harmless: the same images, splits and seed points as the clean dataset
        # (or random points when the seed point file went away, with a note)
        same = stdout.replace(str(root), "DATASET") == clean_stdout
        random_points = "random points" in stdout and what[1] == "delete"
        no_test_split = what == ("transforms_test.json", "delete")  # optional in Blender datasets
        assert same or random_points or no_test_split, (what, stdout, clean_stdout)
        assert not [ln for ln in stderr.splitlines() if "error" in ln.lower() or "warning" in ln.lower()], (
            what,
            stderr,
        )
        return
    assert rc == 2, (what, rc, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("spirula: error: "), (what, stderr)
    named = [f for f in files if f in lines[0]]
    # a dataset whose defining file is gone is no dataset: the folder is named
    gone = what[1] == "delete" and "not a dataset" in lines[0] and str(root) in lines[0]
    assert named or gone, (what, lines[0])


@pytest.mark.parametrize("fmt,k,seed", cases(), ids=lambda v: str(v))
def test_corrupt_dataset_is_one_line_or_loads_the_same(clean, tmp_path, fmt, k, seed):
    src, files, clean_stdout = clean[fmt]
    root = tmp_path / "data"
    shutil.copytree(src, root)
    what = corrupt(root, files, seed)
    rc, stdout, stderr = dry_run(root)
    check(rc, stdout, stderr, root, files, clean_stdout, what)


@pytest.mark.parametrize("fmt", FORMATS)
def test_subprocess_agrees(clean, tmp_path, fmt):
    """The real command line on one corruption and one harmless change per format."""
    src, files, clean_stdout = clean[fmt]
    env = {k: v for k, v in os.environ.items() if k != "SS_PROFILE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    meta = {"colmap_bin": "sparse/0/cameras.bin", "colmap_txt": "sparse/0/images.txt"}
    meta.update(blender="transforms_train.json", nerfstudio="transforms.json")
    for name, op in ((meta[fmt], empty), (None, None)):
        root = tmp_path / ("data-%s" % (name is None))
        shutil.copytree(src, root)
        what = (name, op(root / name, None) if op else "none")
        proc = subprocess.run(
            [sys.executable, "-m", "spirula", "train", str(root), "--dry-run"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        check(proc.returncode, proc.stdout, proc.stderr, root, files, clean_stdout, what)
        assert (proc.returncode, proc.stdout, proc.stderr) == dry_run(root), what
        assert proc.returncode == (0 if op is None else 2)
