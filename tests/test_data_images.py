"""Image handling: ``images_N`` downscales (computed, cached, reused) and undistortion."""

import data_fixtures as fx
import numpy as np
import pytest
from PIL import Image

from spirula.data import images as images_mod
from spirula.data import load_dataset
from spirula.data.undistort import distort, undistort_points

DIST = dict(k1=-0.12, k2=0.02, p1=0.003, p2=-0.002)


@pytest.fixture(scope="module")
def truth():
    return fx.make_truth()


# --- downscale ---------------------------------------------------------------


def test_downscale_computed_when_missing(tmp_path, truth, capsys):
    fx.write_colmap(tmp_path, truth)
    s = load_dataset(tmp_path, downscale=2)
    err = capsys.readouterr().err
    assert err.count("spirula: downscaling 12 images by 2 into %s" % (tmp_path / "images_2")) == 1
    assert (tmp_path / "images_2" / "0000.png").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left
    for f in s.frames:
        assert (f.width, f.height) == (32, 24)
        assert f.image_path == tmp_path / "images_2" / f.name
        np.testing.assert_allclose(f.K, [[30, 0, 16], [0, 30, 12], [0, 0, 1]])
    # box filter: each output pixel is the mean of a 2x2 block (to 8-bit rounding)
    box = truth.images[4].astype(np.float64).reshape(24, 2, 32, 2, 3).mean(axis=(1, 3)) / 255
    np.testing.assert_allclose(s.load_image(4), box, atol=0.5 / 255 + 1e-6)


def test_downscale_reused_when_present(tmp_path, truth, capsys):
    fx.write_colmap(tmp_path, truth)
    (tmp_path / "images_2").mkdir()
    marker = np.full((24, 32, 3), 77, np.uint8)
    for n in truth.names:
        Image.fromarray(marker).save(tmp_path / "images_2" / n)
    s = load_dataset(tmp_path, downscale=2)
    assert "downscaling" not in capsys.readouterr().err
    np.testing.assert_allclose(s.load_image(0), 77 / 255, atol=1e-7)
    np.testing.assert_allclose(s.frames[0].K, [[30, 0, 16], [0, 30, 12], [0, 0, 1]])
    # A second load of a computed folder reuses it too.
    s2 = load_dataset(tmp_path, downscale=2)
    assert [f.image_path for f in s2.frames] == [f.image_path for f in s.frames]


def test_downscale_uneven_size_scales_k_by_actual_ratio(tmp_path, truth):
    fx.write_colmap(tmp_path, truth)
    s = load_dataset(tmp_path, downscale=5)  # 64x48 -> round(12.8) x round(9.6) = 13x10
    f = s.frames[0]
    assert (f.width, f.height) == (13, 10) and s.load_image(0).shape == (10, 13, 3)
    np.testing.assert_allclose(f.K[0], np.array([60, 0, 32]) * 13 / 64)
    np.testing.assert_allclose(f.K[1], np.array([0, 60, 24]) * 10 / 48)


def test_downscale_read_only_dataset_uses_home_cache(tmp_path, truth, monkeypatch, capsys):
    data = tmp_path / "data"
    fx.write_colmap(data, truth)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(images_mod, "writable", lambda folder: False)
    s = load_dataset(data, downscale=2)
    cache = images_mod.home_cache(data)
    assert cache.parent == tmp_path / "cache" / "spirula" / "datasets"
    assert s.frames[0].image_path == cache / "images_2" / "0000.png"
    assert not (data / "images_2").exists()
    assert "downscaling" in capsys.readouterr().err
    load_dataset(data, downscale=2)  # found there the second time
    assert "downscaling" not in capsys.readouterr().err


def test_downscale_blender_rgba(tmp_path, truth):
    fx.write_blender(tmp_path, truth)
    s = load_dataset(tmp_path, downscale=2)
    assert s.frames[0].image_path == tmp_path / "images_2" / "train" / "r_001.png"
    assert s.load_rgba(0).shape == (24, 32, 4)
    np.testing.assert_allclose(s.frames[0].K, [[30, 0, 16], [0, 30, 12], [0, 0, 1]])


# --- distortion --------------------------------------------------------------


def test_distortion_model_matches_independent_code():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-0.6, 0.6, (2, 1000))
    d = [DIST["k1"], DIST["k2"], 0, 0, DIST["p1"], DIST["p2"]]
    np.testing.assert_allclose(distort(x, y, d), fx.distort_normalized(x, y, **DIST), atol=1e-15)
    xu, yu = undistort_points(*distort(x, y, d), d)
    np.testing.assert_allclose(np.stack([xu, yu]), np.stack([x, y]), atol=1e-12)


def write_distorted(root, truth, dist):
    _, dimg = fx.render_pinhole_and_distorted(dist)
    params = [fx.F, fx.F, fx.W / 2, fx.H / 2, dist["k1"], dist["k2"], dist["p1"], dist["p2"]]
    fx.write_colmap(root, truth, model="OPENCV", params=params, images=[dimg] * fx.N_CAMS)


def test_undistortion_recovers_pinhole_image(tmp_path, truth, capsys):
    """The distorted image is an 8-bit rendering of a smooth scene through the
    lens; undistorting it must give the pinhole rendering. Error budget: 8-bit
    rounding of the input (0.5/255) and of the output (0.5/255), plus bilinear
    interpolation of a signal of amplitude 0.4 with wavelength >= 30 px
    (h^2/8 |f''| <= 0.4 (2 pi/30)^2 / 8 ~ 0.002 per axis): under 0.01 everywhere,
    while the distorted image itself is off by > 0.1."""
    write_distorted(tmp_path, truth, DIST)
    pin, dimg = fx.render_pinhole_and_distorted(DIST)
    s = load_dataset(tmp_path, undistort=True)
    err = capsys.readouterr().err.splitlines()
    out_dir = tmp_path / "spirula_undistorted" / "images"
    assert err == ["spirula: undistorting 12 images (OPENCV) into %s" % out_dir]
    f = s.frames[0]
    assert f.image_path == out_dir / "0000.png"
    np.testing.assert_allclose(f.K, truth.K)  # same K, pinhole now
    img = s.load_image(0)
    assert np.abs(dimg / 255.0 - pin).max() > 0.1
    assert np.abs(img - pin).max() < 0.01
    assert np.abs(img - pin).mean() < 0.003
    # Loading again reuses the cache silently and gives the same pixels.
    s2 = load_dataset(tmp_path, undistort=True)
    assert capsys.readouterr().err == ""
    np.testing.assert_array_equal(s2.load_image(0), img)


def test_undistortion_outside_source_is_noted(tmp_path, truth, capsys):
    """Pincushion distortion: the pinhole image's corners lie outside the
    distorted one; they are edge-filled and the note says how many."""
    dist = dict(DIST, k1=0.15)
    write_distorted(tmp_path, truth, dist)
    pin, _ = fx.render_pinhole_and_distorted(dist)
    s = load_dataset(tmp_path, undistort=True)
    err = capsys.readouterr().err
    assert "lie outside the source" in err and err.count("\n") == 1
    img = s.load_image(1)
    v, u = np.mgrid[0 : fx.H, 0 : fx.W] + 0.5
    xd, yd = fx.distort_normalized((u - fx.W / 2) / fx.F, (v - fx.H / 2) / fx.F, **dist)
    sx, sy = fx.F * xd + fx.W / 2, fx.F * yd + fx.H / 2
    inside = (sx > 0.5) & (sx < fx.W - 0.5) & (sy > 0.5) & (sy < fx.H - 0.5)
    assert 0.8 < inside.mean() < 1.0
    assert np.abs(img - pin)[inside].max() < 0.01


def test_undistortion_recomputed_when_camera_changes(tmp_path, truth, capsys):
    write_distorted(tmp_path, truth, DIST)
    load_dataset(tmp_path, undistort=True)
    capsys.readouterr()
    write_distorted(tmp_path, truth, dict(DIST, k1=-0.1))
    load_dataset(tmp_path, undistort=True)
    assert "undistorting 12 images" in capsys.readouterr().err


def test_nerfstudio_distortion_and_downscale(tmp_path, truth, capsys):
    """nerfstudio k1, k2, p1, p2 are the same model; downscale happens first,
    then the downscaled images are undistorted with the scaled K."""
    pin, dimg = fx.render_pinhole_and_distorted(DIST)
    fx.write_nerfstudio(tmp_path, truth, dist=DIST, images=[dimg] * fx.N_CAMS)
    s = load_dataset(tmp_path, downscale=2, undistort=True)
    err = capsys.readouterr().err
    assert "downscaling 12 images by 2" in err
    assert "undistorting 12 images (OPENCV) into %s" % (tmp_path / "spirula_undistorted" / "images_2") in err
    np.testing.assert_allclose(s.frames[0].K, [[30, 0, 16], [0, 30, 12], [0, 0, 1]])
    box = pin.reshape(24, 2, 32, 2, 3).mean(axis=(1, 3))
    assert np.abs(s.load_image(0) - box)[2:-2, 2:-2].max() < 0.03
