"""PPISP's exposures from the photos' EXIF (spirula/data/exif.py; docs/training.md,
"Appearance"): the stops each photo's settings let through, relative to their mean, start
the per-image exposure offsets; a set where any image lacks them starts at 0."""

import dataclasses

import numpy as np
import pytest
from train_cases import random_init, tiny_scene

from spirula.data.exif import exposure_stops, relative_exposures
from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


def _jpeg(path, time=None, fnumber=None, iso=None, rgb=(120, 120, 120)):
    from PIL import ExifTags, Image, TiffImagePlugin

    im = Image.new("RGB", (8, 6), rgb)
    exif = Image.Exif()
    ifd = exif.get_ifd(ExifTags.IFD.Exif)
    if time is not None:
        ifd[ExifTags.Base.ExposureTime] = TiffImagePlugin.IFDRational(*time)
    if fnumber is not None:
        ifd[ExifTags.Base.FNumber] = TiffImagePlugin.IFDRational(*fnumber)
    if iso is not None:
        ifd[ExifTags.Base.ISOSpeedRatings] = iso
    im.save(path, exif=exif)
    return path


def test_stops_follow_time_iso_and_aperture(tmp_path):
    base = exposure_stops(_jpeg(tmp_path / "a.jpg", (1, 60), (28, 10), 100))
    assert base == pytest.approx(np.log2(100 / 60 / 2.8**2))
    assert exposure_stops(_jpeg(tmp_path / "b.jpg", (1, 30), (28, 10), 100)) == pytest.approx(base + 1)  # twice as long
    assert exposure_stops(_jpeg(tmp_path / "c.jpg", (1, 60), (28, 10), 400)) == pytest.approx(base + 2)  # ISO x4
    assert exposure_stops(_jpeg(tmp_path / "d.jpg", (1, 60), (56, 10), 100)) == pytest.approx(base - 2)  # f/5.6
    assert exposure_stops(_jpeg(tmp_path / "e.jpg", (1, 60), None, 100)) is None  # no f-number
    assert exposure_stops(_jpeg(tmp_path / "f.jpg", (0, 1), (28, 10), 100)) is None  # a zero time
    from PIL import Image

    Image.new("RGB", (4, 4)).save(tmp_path / "g.png")
    assert exposure_stops(tmp_path / "g.png") is None


def test_a_run_on_photos_starts_ppisp_from_their_exif(tmp_path, device):
    """The tiny scene's training images as JPEGs with EXIF one stop apart: PPISP's exposures
    start at the stops less their mean (exposure leads PPISP's flat buffer) and the run
    says so; --no-exposure-from-exif, or one image without EXIF, starts them at 0."""
    from PIL import Image

    scene = tiny_scene(tmp_path / "tiny")
    train = list(scene.train)
    times = [(1, 2 ** (4 - k % 3)) for k in range(len(train))]  # 1/16, 1/8, 1/4 s: 0, +1, +2 stops

    def with_exif(missing=None):
        for k, i in enumerate(train):
            f = scene.frames[i]
            img = Image.open(f.image_path).convert("RGB")
            path = tmp_path / ("photo%d.jpg" % k)
            if k == missing:
                img.save(path)
            else:
                exif = _jpeg(tmp_path / "x.jpg", times[k], (4, 1), 100)
                img.save(path, exif=Image.open(exif).getexif())
            scene.frames[i] = dataclasses.replace(f, image_path=path)

    stops = np.log2([t[0] / t[1] for t in times])
    want = (stops - stops.mean()).astype(np.float32)
    for missing, flag, expect in ((None, True, want), (None, False, 0 * want), (1, True, 0 * want)):
        with_exif(missing)
        assert (relative_exposures([scene.frames[i] for i in train]) is not None) == (missing is None)
        said = []
        cfg = TrainConfig.from_settings(appearance="ppisp", exposure_from_exif=flag, iterations=2, sh_degree=0)
        t = Trainer(scene, cfg, device, init=random_init(50, 0), log=said.append)
        try:
            got = device.readback(t.appearance.ppisp)[: len(train)]
            np.testing.assert_allclose(got, expect, atol=1e-6)
            assert any("EXIF" in m for m in said) == (flag and missing is None), said
        finally:
            t.free()
