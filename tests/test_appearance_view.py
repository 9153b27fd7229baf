"""``spirula view --appearance-of`` and ``spirula render --appearance-of`` (issue 37 item 4;
docs/viewer.md, docs/training.md "Appearance"): a run trained with PPISP on the perturbed
capture (benchmarks/perturbed_capture.py), its web viewer served headless (a fake browser
asks for a view, as tests/test_web_viewer.py's live-view test does), each frame through a
training image's fitted exposure, colour, vignetting and response; the same pixels as
``spirula render --appearance-of`` of that view; the radiance without the option."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from conftest import load_benchmark


class _FakeClient:
    """A browser as the web viewer sees it: an id and a scene that receives images."""

    def __init__(self, client_id):
        self.client_id, self.images = client_id, []
        self.scene = self

    def set_background_image(self, image, format, jpeg_quality=None):
        self.images.append(np.array(image))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


EXPOSURE = 0.6  # stops, written into training image 3's fitted exposure


@pytest.fixture(scope="module")
def run(tmp_path_factory, device):
    """A 60-step PPISP run on the perturbed capture, training image 3's exposure then set
    to EXPOSURE in its checkpoint (60 steps move the fitted exposures only a little)."""
    from spirula.data import load_dataset
    from spirula.train.run_folder import latest_checkpoint

    pc = load_benchmark("perturbed_capture")
    root = tmp_path_factory.mktemp("appearance_view")
    data = pc.write_capture(root / "perturbed")
    pc.train(data, "ppisp", 60, 0, device, root / "run")
    ckpt = latest_checkpoint(root / "run")
    with np.load(ckpt) as z:
        arrays = dict(z)
    arrays["appearance/ppisp"][3] = EXPOSURE  # exposure [F] leads the flat buffer
    np.savez(ckpt, **arrays)
    return root / "run", load_dataset(data)


def _served_frame(source, frame, appearance_of=None) -> np.ndarray:
    """The first frame the web viewer of ``source`` streams for dataset frame ``frame``."""
    from spirula.view import web

    ready, stop, errors = [], threading.Event(), []

    def target():
        try:
            web.serve(source, _free_port(), stop=stop, on_ready=ready.append, log=lambda m: None,
                      appearance_of=appearance_of)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001  (shown by the test's failure)
            errors.append(exc)

    server = threading.Thread(target=target, daemon=True)
    server.start()
    client = _FakeClient(1)
    try:
        end = time.monotonic() + 60
        while not ready and server.is_alive() and time.monotonic() < end:
            time.sleep(0.05)
        assert ready, "web.serve ended before listening: %r" % errors
        ready[0].request(client, frame.viewmat, frame.K, frame.width, frame.height)
        while not client.images and time.monotonic() < end:
            time.sleep(0.05)
        assert client.images, "no frame streamed"
    finally:
        stop.set()
        server.join(timeout=10)
    return client.images[0]


def test_the_web_viewer_applies_a_training_images_appearance(run, tmp_path):
    """The streamed frame of training image 3's camera, with --appearance-of train:3, is
    `spirula render --camera train:3 --appearance-of train:3`'s PNG (the same kernels on the
    same render: equal to one level of rounding), and differs from the radiance (the
    viewer's default) by the fitted exposure: their mean ratio is 2^e within a few percent
    (vignetting, the response curve and 8-bit clipping move it a little)."""
    from PIL import Image

    from spirula.cli.main import main
    from spirula.train.run import appearance_of_view

    folder, scene = run
    f = scene.frames[scene.train[3]]
    looked = _served_frame(folder, f, "train:3").astype(np.int16)
    plain = _served_frame(folder, f).astype(np.int16)
    assert looked.shape == (f.height, f.width, 3) and plain.shape == looked.shape
    with pytest.raises(SystemExit) as exc:
        main(["render", str(folder), "--camera", "train:3", "--appearance-of", "train:3", "--out", str(tmp_path)])
    assert exc.value.code in (0, None)
    png = np.asarray(Image.open(tmp_path / (f.name.rsplit(".", 1)[0] + ".png")).convert("RGB"), np.int16)
    assert np.abs(looked - png).max() <= 1  # the viewer's host rounding against render's: 1 level
    isp, k, _, controller = appearance_of_view(folder, scene, "train:3")
    assert not controller
    e = float(isp["ppisp"][k])
    assert k == 3 and e == pytest.approx(EXPOSURE)
    inside = (plain > 10) & (plain < 200) & (looked < 250)
    ratio = looked[inside].sum() / plain[inside].sum()
    # vignetting (< 1) and the CRF fitted over 60 steps move the ratio by a few percent
    assert ratio == pytest.approx(2.0**e, rel=0.1), (ratio, 2.0**e)
    assert np.abs(looked - plain).max() > 5


def test_appearance_of_is_refused_in_one_line(run, tmp_path, capsys):
    """A test image (no fitted appearance) and a splat file (the radiance alone) are one
    line each, exit status 2, before anything is served or opened."""
    from spirula.cli.main import main

    folder, _ = run
    for source, spec, says in (
        (folder, "test:0", "a test image has no fitted appearance"),
        (folder / "splat.ply", "train:0", "a splat file holds only the radiance"),
        (folder, "train:999", "no such view"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["view", str(source), "--port", str(_free_port()), "--appearance-of", spec])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
