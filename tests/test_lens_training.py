"""Training through the camera's own lens (issue 39 items 3 and 5).

The demo world ray-traced through a 180-degree equidistant fisheye (COLMAP
OPENCV_FISHEYE) and a 360-degree equirectangular camera (nerfstudio
EQUIRECTANGULAR), with known cameras (spirula/data/demo.py write_lens_scenes),
and the fisheye images undistorted to a 120-degree pinhole crop (what training
had to do before lenses). docs/performance.md, "Lenses", has the numbers of
several seeds ("Other measurements").
"""

import numpy as np
import pytest

from spirula.data import load_dataset
from spirula.data.demo import fisheye_K, render_view, write_colmap_scene
from spirula.data.lenses import lens_limit, pixel_rays, project, valid_mask
from spirula.train.config import TrainConfig
from spirula.train.metrics import psnr
from spirula.train.trainer import Trainer

W, H, VIEWS, STEPS = 96, 72, 24, 100


@pytest.fixture(scope="module")
def lens_scenes(tmp_path_factory):
    from spirula.data.demo import write_lens_scenes

    return write_lens_scenes(tmp_path_factory.mktemp("lenses"), W, H, VIEWS)


def _train(scene, device, seed=0):
    cfg = TrainConfig.from_settings(iterations=STEPS, cap_max=30_000, init_scale=1.0, appearance="none", seed=seed)
    trainer = Trainer(scene, cfg, device)
    for _ in range(STEPS):
        assert np.isfinite(trainer.train_step()["loss"])
    return trainer


def test_pixel_rays_invert_every_lens():
    """Each pixel's ray projects back onto the pixel (the ray tracer and the kernels see the
    same camera), and a fisheye whose polynomial folds inside the image has no ray past it."""
    K = np.array([[30.0, 0, 48], [0, 30, 36], [0, 0, 1]])
    fold = np.zeros(12)
    fold[0] = -0.12  # theta_d = theta (1 - 0.12 theta^2) stops increasing at theta = 95.5 degrees
    lenses = [
        ("PINHOLE", K, None, 1.0),
        ("OPENCV", K, np.array([-0.2, 0.05, 0, 0, 0, 0, 0.001, -0.002, 0, 0, 0, 0]), 1.0),
        ("OPENCV_FISHEYE", K, None, 0.99),
        ("OPENCV_FISHEYE", K, fold, 0.5),
        ("EQUIRECTANGULAR", np.array([[W / (2 * np.pi), 0, 48], [0, H / np.pi, 36], [0, 0, 1]]), None, 1.0),
    ]
    from spirula.reference import projection as ref
    from spirula.render.raster_buffers import CAMERA_MODELS
    from spirula.render.raster_buffers import lens_limit as kernel_limit

    u, v = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
    for model, KK, d, seen in lenses:
        dirs, valid = pixel_rays(model, KK, d, W, H)
        uv, ok = project(model, KK, d, dirs)
        assert ok[valid].all() and valid.mean() >= seen - 0.01, model
        assert np.hypot(uv[..., 0] - u, uv[..., 1] - v)[valid].max() < 1e-9, model
        assert lens_limit(model, d) == kernel_limit(CAMERA_MODELS[model], d), model
        if model != "PINHOLE":  # the same lens as the reference's (and so the kernels')
            p = np.random.default_rng(1).normal(0, 1, (500, 3)) + [0, 0, 0.5]
            want, _, want_ok = ref.lens_project(getattr(ref, model), np.zeros(12) if d is None else d, KK, p)
            got, got_ok = project(model, KK, d, p)
            np.testing.assert_array_equal(got_ok, want_ok)
            np.testing.assert_allclose(got[got_ok], want[want_ok], atol=1e-9)
    assert valid_mask("PINHOLE", K, None, W, H) is None
    assert valid_mask("EQUIRECTANGULAR", lenses[-1][1], None, W, H) is None


def test_loss_ignores_the_fisheye_border_past_its_valid_angle(tmp_path):
    """Item 3: a fisheye whose polynomial folds inside the frame (its black border: no ray
    reaches it) gets a loss mask of exactly the pixels with a ray, combined with a dataset's
    own mask; metrics and the loss (spirula/train/step.py) read it through Scene.load_mask."""
    from PIL import Image

    from spirula.data.demo import cameras, seed_points

    K = fisheye_K(48, 36)
    d = np.zeros(12)
    d[0] = -0.1
    vms, _ = cameras(n_views=2)
    images = [render_view(vm, K, 48, 36, supersample=1, model="OPENCV_FISHEYE", dist=d) for vm in vms]
    pts, cols = seed_points(np.random.default_rng(0), density=0.1)
    params = "%.12g %.12g %.12g %.12g -0.1 0 0 0" % (K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    root = write_colmap_scene(tmp_path / "fold", vms, images, "OPENCV_FISHEYE 48 36 " + params, pts, cols)
    scene = load_dataset(root, eval_split="none")
    mask = scene.load_mask(0)
    _, rays = pixel_rays("OPENCV_FISHEYE", K, d, 48, 36)
    np.testing.assert_array_equal(mask, rays)
    assert 0.2 < (~mask).mean() < 0.6 and not mask[0, 0] and mask[18, 24]
    assert np.all(scene.load_image(0)[~mask] == 0)  # the border the ray tracer left black
    (root / "masks").mkdir()
    file_mask = np.full((36, 48), 255, np.uint8)
    file_mask[:, 20:24] = 0
    for name in ("0000", "0001"):
        Image.fromarray(file_mask).save(root / "masks" / (name + ".png"))
    both = load_dataset(root, eval_split="none").load_mask(1)
    np.testing.assert_array_equal(both, rays & (file_mask == 255))


@pytest.mark.slow
def test_training_through_the_fisheye_beats_training_on_its_undistortion(device, lens_scenes):
    """Item 5: 100 steps on the 21 fisheye training images (96x72, 180 degrees across) vs 100
    steps on the same images undistorted to a 120-degree pinhole crop, both rendered through
    the 3 fisheye test cameras: PSNR over the whole image and over the part the crop covers
    (45% of it). Measured on lavapipe, seeds 0 / 1 / 2 (seed 0 here): native 17.56 / 17.48 /
    17.70 dB whole, 17.10 / 17.00 / 17.16 on the crop's part; undistorted 17.23 / 17.28 / 17.31
    whole, 16.08 / 16.08 / 16.10 on the crop's part (+0.20..0.39 dB whole, +0.92..1.06 on the
    crop: more views of every point, no resampling). 60-100 s on 2 busy cores."""
    fish, pin = load_dataset(lens_scenes["fisheye"]), load_dataset(lens_scenes["pinhole"])
    assert fish.frames[0].model == "OPENCV_FISHEYE" and pin.frames[0].model == "PINHOLE"
    f0 = fish.frames[0]
    dirs, _ = pixel_rays(f0.model, f0.K, f0.dist, W, H)
    uv, ok = project("PINHOLE", lens_scenes["K_pinhole"], None, dirs)
    crop = ok & (uv[..., 0] >= 0) & (uv[..., 0] <= W) & (uv[..., 1] >= 0) & (uv[..., 1] <= H)
    assert 0.4 < crop.mean() < 0.5
    scores = {}
    for name, scene in (("native", fish), ("undistorted", pin)):
        trainer = _train(scene, device)
        assert trainer.lenses == (name == "native")  # fpbo's lens backward only where a view needs it
        whole, part = [], []
        for i in fish.test:
            f = fish.frames[i]
            img = trainer.render(f.viewmat, f.K, size=(W, H), model=f.model, dist=f.dist)
            gt = fish.load_image(i)
            whole.append(psnr(img, gt))
            part.append(psnr(img, gt, crop))
        scores[name] = (np.mean(whole), np.mean(part))
        trainer.free()
    native, undistorted = scores["native"], scores["undistorted"]
    assert native[0] > undistorted[0] + 0.15 and native[1] > undistorted[1] + 0.4, scores


@pytest.mark.slow
def test_equirectangular_scene_trains_to_a_sharp_result(device, lens_scenes):
    """Item 5: 100 steps on 21 equirectangular images (192x96, the whole sphere) reach a
    test PSNR far above the best flat colour (the training images' mean): 19.66 / 19.58 /
    19.50 dB (seeds 0 / 1 / 2) against 12.68. 35-60 s on 2 busy cores."""
    scene = load_dataset(lens_scenes["equirect"])
    assert scene.frames[0].model == "EQUIRECTANGULAR" and (scene.frames[0].width, scene.frames[0].height) == (192, 96)
    flat = np.mean([scene.load_image(i).reshape(-1, 3).mean(0) for i in scene.train], 0)
    baseline = np.mean([psnr(np.broadcast_to(flat, (96, 192, 3)), scene.load_image(i)) for i in scene.test])
    trainer = _train(scene, device)
    m = trainer.evaluate()
    trainer.free()
    assert m["psnr"] > baseline + 5.0, (m, baseline)
