"""splat.ply: the 3DGS layout, exact round trip, channel-major f_rest, atomic writes;
seed point clouds."""

import os

import data_fixtures as fx
import numpy as np
import pytest

from spirula.data import read_points_ply, read_splat_ply, write_splat_ply
from spirula.data.ply import read_ply_vertices
from spirula.errors import DiskFullError, SpirulaError


def random_splats(n, K, seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        means=rng.normal(size=(n, 3)).astype(np.float32),
        quats=rng.normal(size=(n, 4)).astype(np.float32),
        log_scales=rng.normal(size=(n, 3)).astype(np.float32),
        opacity_logits=rng.normal(size=n).astype(np.float32),
        sh_coeffs=rng.normal(size=(n, K, 3)).astype(np.float32),
    )


def header_lines(path):
    data = path.read_bytes()
    return data[: data.index(b"end_header\n") + len(b"end_header\n")].decode().splitlines()


@pytest.mark.parametrize("K", [1, 4, 9, 16])
def test_round_trip_exact(tmp_path, K):
    s = random_splats(257, K)
    write_splat_ply(tmp_path / "splat.ply", **s)
    back = read_splat_ply(tmp_path / "splat.ply")
    for key, val in s.items():
        assert back[key].dtype == np.float32
        np.testing.assert_array_equal(back[key], val, err_msg=key)
    assert back["sh_degree"] == int(np.sqrt(K)) - 1


def test_header_exact(tmp_path):
    write_splat_ply(tmp_path / "s.ply", **random_splats(3, 16))
    rest = ["property float f_rest_%d" % i for i in range(45)]
    assert header_lines(tmp_path / "s.ply") == (
        ["ply", "format binary_little_endian 1.0", "element vertex 3"]
        + ["property float %s" % p for p in ("x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2")]
        + rest
        + [
            "property float %s" % p
            for p in ("opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
        ]
        + ["end_header"]
    )
    size = (tmp_path / "s.ply").stat().st_size
    assert size == len("\n".join(header_lines(tmp_path / "s.ply")) + "\n") + 3 * 62 * 4


def test_f_rest_channel_major_hand_made(tmp_path):
    """sh[0, k, c] = 10 k + c (k: coefficient, c: channel). Channel-major means
    f_rest lists R's coefficients 1..3, then G's, then B's."""
    sh = np.array([[[10 * k + c for c in range(3)] for k in range(4)]], dtype=np.float32)
    write_splat_ply(
        tmp_path / "s.ply",
        means=[[1, 2, 3]],
        quats=[[1, 0, 0, 0]],
        log_scales=[[-1, -2, -3]],
        opacity_logits=[0.5],
        sh_coeffs=sh,
    )
    v = read_ply_vertices(tmp_path / "s.ply")
    assert [float(v["f_dc_%d" % c][0]) for c in range(3)] == [0, 1, 2]
    assert [float(v["f_rest_%d" % i][0]) for i in range(9)] == [10, 20, 30, 11, 21, 31, 12, 22, 32]
    raw = np.frombuffer((tmp_path / "s.ply").read_bytes()[-4 * 26 :], dtype="<f4")
    np.testing.assert_array_equal(
        raw, [1, 2, 3, 0, 0, 0, 0, 1, 2, 10, 20, 30, 11, 21, 31, 12, 22, 32, 0.5, -1, -2, -3, 1, 0, 0, 0]
    )


def test_opacity_n_by_1_and_float64_accepted(tmp_path):
    s = random_splats(5, 4)
    s64 = {k: v.astype(np.float64) for k, v in s.items()}
    s64["opacity_logits"] = s64["opacity_logits"][:, None]
    write_splat_ply(tmp_path / "s.ply", **s64)
    np.testing.assert_array_equal(read_splat_ply(tmp_path / "s.ply")["opacity_logits"], s["opacity_logits"])


def test_bad_shapes_raise(tmp_path):
    s = random_splats(5, 4)
    with pytest.raises(ValueError, match="quats"):
        write_splat_ply(tmp_path / "s.ply", **dict(s, quats=s["quats"][:, :3]))
    with pytest.raises(ValueError, match="sh_coeffs"):
        write_splat_ply(tmp_path / "s.ply", **dict(s, sh_coeffs=np.zeros((5, 3, 3))))
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "splat.ply"
    write_splat_ply(path, **random_splats(10, 4))
    assert [p.name for p in tmp_path.iterdir()] == ["splat.ply"]
    before = path.read_bytes()

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(DiskFullError):  # ENOSPC is one line naming the file (spirula/files.py)
        write_splat_ply(path, **random_splats(20, 4, seed=1))
    assert [p.name for p in tmp_path.iterdir()] == ["splat.ply"]  # temp removed
    assert path.read_bytes() == before  # old file untouched


def test_read_accepts_other_property_orders_and_extras(tmp_path):
    """A viewer-compatible file from another tool: double properties, extra ones, another order."""
    s = random_splats(4, 4)
    names = (
        ["rot_0", "rot_1", "rot_2", "rot_3", "x", "y", "z", "extra", "opacity", "f_dc_0", "f_dc_1", "f_dc_2"]
        + ["f_rest_%d" % i for i in range(9)]
        + ["scale_0", "scale_1", "scale_2"]
    )
    a = np.zeros(4, dtype=[(n, "<f8") for n in names])
    for i, n in enumerate("xyz"):
        a[n] = s["means"][:, i]
    for i in range(4):
        a["rot_%d" % i] = s["quats"][:, i]
    for i in range(3):
        a["scale_%d" % i] = s["log_scales"][:, i]
        a["f_dc_%d" % i] = s["sh_coeffs"][:, 0, i]
    a["opacity"] = s["opacity_logits"]
    rest = s["sh_coeffs"][:, 1:, :].transpose(0, 2, 1).reshape(4, 9)
    for i in range(9):
        a["f_rest_%d" % i] = rest[:, i]
    head = (
        "ply\nformat binary_little_endian 1.0\ncomment other tool\nelement vertex 4\n"
        + "".join("property double %s\n" % n for n in names)
        + "end_header\n"
    )
    (tmp_path / "o.ply").write_bytes(head.encode() + a.tobytes())
    back = read_splat_ply(tmp_path / "o.ply")
    for key, val in s.items():
        np.testing.assert_array_equal(back[key], val, err_msg=key)


def test_read_points_ply_binary_ascii_and_no_colors(tmp_path):
    truth = fx.make_truth()
    fx.write_points_ply(tmp_path / "p.ply", truth.points, truth.colors)
    pts, cols = read_points_ply(tmp_path / "p.ply")
    np.testing.assert_array_equal(pts, truth.points)
    np.testing.assert_array_equal(cols, truth.colors)
    (tmp_path / "a.ply").write_text(
        "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\n"
        "property float z\nend_header\n0 1 2\n3.5 4 5\n"
    )
    pts, cols = read_points_ply(tmp_path / "a.ply")
    np.testing.assert_array_equal(pts, [[0, 1, 2], [3.5, 4, 5]])
    np.testing.assert_array_equal(cols, np.full((2, 3), 128))


def test_bad_ply_files(tmp_path):
    (tmp_path / "n.ply").write_text("hello\n")
    with pytest.raises(SpirulaError, match=r"n\.ply: not a PLY file"):
        read_splat_ply(tmp_path / "n.ply")
    write_splat_ply(tmp_path / "t.ply", **random_splats(10, 4))
    data = (tmp_path / "t.ply").read_bytes()
    (tmp_path / "t.ply").write_bytes(data[:-5])
    with pytest.raises(SpirulaError, match=r"t\.ply: truncated"):
        read_splat_ply(tmp_path / "t.ply")
    with pytest.raises(SpirulaError, match=r"p\.ply: missing property z"):
        (tmp_path / "p.ply").write_text(
            "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\nproperty float y\nend_header\n1 2\n"
        )
        read_points_ply(tmp_path / "p.ply")
