"""Rendering a trained run through the training camera's own lens (issue 39 item 4):
``spirula.Renderer`` takes the camera model and distortion (pinhole by default, the
record unchanged), and ``spirula render RUN --camera test:K`` of a fisheye run is the
image evaluation compared with that test image (spirula/train/run.py evaluate_run),
up to the 8-bit PNG."""

import dataclasses

import numpy as np
import pytest
from PIL import Image
from render_cases import random_scene
from test_cli_train import spirula

from spirula.render.video import to_uint8

W, H, VIEWS = 48, 36, 10  # eval split interval:8: test views 0 and 8


@pytest.fixture(scope="module")
def fisheye_run(tmp_path_factory):
    """A 180-degree equidistant fisheye (COLMAP OPENCV_FISHEYE) of the demo world,
    trained for a few steps through its lens."""
    from spirula.data.demo import cameras, fisheye_K, render_view, seed_points, write_colmap_scene

    root = tmp_path_factory.mktemp("lensrender")
    viewmats, _ = cameras(n_views=VIEWS)
    pts, cols = seed_points(np.random.default_rng(7), density=0.3)
    K = fisheye_K(W, H)
    images = [render_view(vm, K, W, H, supersample=1, model="OPENCV_FISHEYE") for vm in viewmats]
    line = "OPENCV_FISHEYE %d %d %.12g %.12g %.12g %.12g 0 0 0 0" % (W, H, K[0, 0], K[1, 1], K[0, 2], K[1, 2])
    data = write_colmap_scene(root / "data", viewmats, images, line, pts, cols)
    run = root / "run"
    args = ["--iterations", 8, "--cap-max", 2000, "--sh-degree", 1, "--appearance", "none"]
    proc = spirula("train", data, "--output", run, *args)
    assert proc.returncode == 0, proc.stderr
    return run


def test_render_camera_matches_what_evaluation_rendered(fisheye_run, tmp_path, device):
    from spirula.cli.common import open_run
    from spirula.train.run import SplatRenderer

    out = tmp_path / "views"
    proc = spirula("render", fisheye_run, "--camera", "test:0", "--out", out)
    assert proc.returncode == 0, proc.stderr
    cfg, params, _, scene = open_run(fisheye_run)
    f = scene.frames[scene.test[0]]
    assert f.model == "OPENCV_FISHEYE"
    got = np.asarray(Image.open(out / (f.name.rsplit(".", 1)[0] + ".png"))).astype(int)
    assert got.shape == (H, W, 3)
    # evaluate_run's renderer (raw splats activated on the GPU) against the command's
    # (activated on the host): float32 ulps apart, so at most one 8-bit level
    r = SplatRenderer(device, params, scene.background, cfg.max_alpha)
    try:
        lens = to_uint8(r.render(f.viewmat, f.K, f.width, f.height, f.model, f.dist)).astype(int)
        pinhole = to_uint8(r.render(f.viewmat, f.K, f.width, f.height)).astype(int)
    finally:
        r.free()
    assert lens.max() > 0 and np.abs(got - lens).max() <= 1
    # and the lens matters: the same camera through a pinhole is another image
    assert np.abs(got - pinhole).mean() > 5 * max(np.abs(got - lens).mean(), 0.1)


def test_render_with_the_dataset_of_a_lens_run_and_its_camera_path(fisheye_run, tmp_path):
    """--dataset with a fisheye dataset loads it with its lens (it used to undistort, which
    refuses a fisheye); a camera path stays a pinhole (50 degrees: a fisheye's K is not one)."""
    from spirula.cli.common import saved_config

    data = saved_config(fisheye_run)["dataset"]
    proc = spirula("render", fisheye_run, "--dataset", data, "--camera", "0", "--out", tmp_path / "v")
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "v").glob("*.png"))) == 1
    proc = spirula("render", fisheye_run, "--images", tmp_path / "p", "--frames", 2)
    assert proc.returncode == 0, proc.stderr
    assert [np.asarray(Image.open(p)).shape for p in sorted((tmp_path / "p").glob("*.png"))] == [(H, W, 3)] * 2


def test_viewer_camera_of_a_fisheye_view_is_a_plain_pinhole(fisheye_run):
    """The viewers stay pinhole: a fisheye view's camera gets the default field of view (its
    focal length would be a 115-degree pinhole), a perspective one keeps its own."""
    from spirula.cli.common import open_run
    from spirula.view.camera import DEFAULT_FOV_Y, CameraPath

    scene = open_run(fisheye_run)[3]
    assert CameraPath.from_frames(scene.frames).camera(0).fov_y == pytest.approx(DEFAULT_FOV_Y)
    f = scene.frames[0]
    pin = dataclasses.replace(f, model="PINHOLE")
    want = np.degrees(2 * np.arctan(f.height / (2 * f.K[1, 1])))
    assert CameraPath.from_frames([pin]).camera(0).fov_y == pytest.approx(want)


def test_renderer_takes_the_lens(device):
    """Renderer.render(model=, dist=) is rasterization(camera_models=, dists=) bit for bit;
    the default is the pinhole, and a pinhole is the image it always was."""
    from spirula.errors import UsageError
    from spirula.render.api import rasterization
    from spirula.render.renderer import Renderer

    s = random_scene(n=300, cameras=1, sh_degree=1, seed=3)
    vm, K = s["viewmats"][0], s["Ks"][0]
    w, h = s["width"], s["height"]
    splats = {k: s[k] for k in ("means", "quats", "scales", "opacities", "sh_coeffs")}
    dist = np.zeros(12)
    dist[:2] = 0.05, -0.01
    with Renderer(device=device) as r:
        r.set_splats(**splats)
        plain = r.render(vm, K, w, h).numpy()
        assert np.array_equal(plain, r.render(vm, K, w, h, model="PINHOLE").numpy())
        want = rasterization(**splats, viewmats=vm[None], Ks=K[None], width=w, height=h, device=device)[0][0]
        assert np.array_equal(plain, want)
        for model in ("OPENCV_FISHEYE", "EQUIRECTANGULAR"):
            got = r.render(vm, K, w, h, model=model, dist=dist).numpy()
            want = rasterization(
                **splats,
                viewmats=vm[None],
                Ks=K[None],
                width=w,
                height=h,
                camera_models=[model],
                dists=dist[None],
                device=device,
            )[0][0]
            assert np.array_equal(got, want), model
            assert not np.array_equal(got, plain), model
        with pytest.raises(UsageError, match="camera model"):
            r.render(vm, K, w, h, model="FISHEYE")
        with pytest.raises(UsageError, match="dist"):
            r.render(vm, K, w, h, model="OPENCV", dist=np.zeros(5))


def test_mesh_cameras_of_a_lens_dataset_are_pinholes_at_its_poses(fisheye_run):
    """spirula mesh --dataset (mesh/cameras.py dataset_cameras) of a fisheye dataset: one
    90-degree pinhole per frame at its pose (undistortion refuses a fisheye); an
    equirectangular frame's six cube faces, proper rotations looking along its 6 axes."""
    from spirula.cli.common import open_run, saved_config
    from spirula.mesh.cameras import dataset_cameras, pinholes_of

    cams = dataset_cameras(saved_config(fisheye_run)["dataset"], size=W)
    scene = open_run(fisheye_run)[3]
    assert len(cams) == len(scene.frames)
    np.testing.assert_allclose(cams.viewmats, np.stack([f.viewmat for f in scene.frames]), atol=1e-9)
    assert tuple(cams.sizes[0]) == (W, H) and cams.Ks[0, 0, 0] == pytest.approx(W / 2)
    f = dataclasses.replace(scene.frames[0], model="EQUIRECTANGULAR", width=2 * H, height=H)
    faces = pinholes_of(f)
    assert len(faces) == 6 and all(size == (H // 2, H // 2) for _, _, size in faces)
    np.testing.assert_allclose(faces[0][0], f.viewmat, atol=1e-12)
    R = np.asarray(f.viewmat)[:3, :3]
    eye = -R.T @ np.asarray(f.viewmat)[:3, 3]
    axes = []
    for vm, K, _ in faces:
        assert np.linalg.det(vm[:3, :3]) == pytest.approx(1.0) and K[0, 0] == K[0, 2] == H // 2 / 2  # 90 degrees
        np.testing.assert_allclose(-vm[:3, :3].T @ vm[:3, 3], eye, atol=1e-9)  # the same centre
        axes.append(R @ vm[2, :3])  # the face's forward axis in the frame's camera axes
    np.testing.assert_allclose(
        np.array(axes), [[0, 0, 1], [1, 0, 0], [0, 0, -1], [-1, 0, 0], [0, -1, 0], [0, 1, 0]], atol=1e-9
    )
