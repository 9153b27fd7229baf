"""PPISP's controller in training (issue 37 item 2; docs/training.md, "Appearance";
docs/design.md §2.8): its settings, its phase freezing the splats and the ISP, a novel
view through its prediction, a resumed run restoring it, and, on a capture whose exposure
follows the view (benchmarks/perturbed_capture.py, ``drift``), test views scored better with
its prediction than with the identity."""

import numpy as np
import pytest
from conftest import load_benchmark

from spirula.reference import appearance as app_ref
from spirula.reference import ppisp_ctrl as ref
from spirula.train.appearance import apply_appearance, controller_start
from spirula.train.config import TrainConfig


def test_the_controller_follows_ppisp_and_starts_at_the_ratio():
    cfg = TrainConfig()
    assert cfg.controller is None and cfg.controller_activation_ratio == 0.8 and cfg.controller_lr == 1e-3
    assert cfg.controller_for("ppisp") and cfg.controller_for("both")
    assert not cfg.controller_for("bilagrid") and not cfg.controller_for("none")
    assert not TrainConfig(controller=False).controller_for("ppisp")
    assert controller_start(30_000) == 24_000 and controller_start(300, 0.5) == 150


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    pc = load_benchmark("perturbed_capture")
    root = tmp_path_factory.mktemp("captures")
    return pc, pc.write_capture(root / "drift", perturb=False, drift=0.7)


def _trainer(scene, device, iterations=4, ratio=0.5, **kw):
    from spirula.train.trainer import Trainer

    cfg = TrainConfig.from_settings(iterations=iterations, appearance="ppisp", pipeline_steps=False,
                                    controller_activation_ratio=ratio, **kw)  # fmt: skip
    return Trainer(scene, cfg, device), cfg


def test_the_controllers_phase_trains_only_the_controller(device, captures):
    """From step int(0.5 x 4) = 2 on, the splats, their Adam moments and the ISP stay as
    they were and the controller's weights move; before, the controller stays."""
    from spirula.data import load_dataset

    scene = load_dataset(captures[1])
    t, _ = _trainer(scene, device)
    try:
        w0 = device.readback(t.appearance.controller.weights)
        for _ in range(2):
            t.train_step()
        before = t.state_dict()
        assert np.array_equal(before["appearance"]["ctrl"], w0) and not t.controller_trained()
        for _ in range(2):
            out = t.train_step()
        after = t.state_dict()
        assert np.isfinite(out["loss"]) and t.controller_trained()
    finally:
        t.free()
    for group in ("params", "exp_avg", "exp_avg_sq"):
        for k in before["model"][group]:
            assert np.array_equal(before["model"][group][k], after["model"][group][k]), (group, k)
    for k in ("ppisp", "ppisp_m", "ppisp_v"):
        assert np.array_equal(before["appearance"][k], after["appearance"][k]), k
    moved = np.abs(after["appearance"]["ctrl"] - w0)
    assert moved.max() > 0 and np.isfinite(after["appearance"]["ctrl"]).all()


def test_a_novel_view_gets_the_controllers_prediction(device):
    """apply_appearance(controller=True) on a render: the camera's network (reference
    ctrl_fwd) predicts exposure and colour, then PPISP with the camera's vignetting and CRF
    (reference ppisp_fwd); float32 against float64, the largest error 1e-4 of the image."""
    rng = np.random.default_rng(0)
    img = rng.uniform(0, 1, (22, 31, 3)).astype(np.float32)
    F, C, cam = 2, 2, 1
    weights = ref.ctrl_init(rng, C)
    flat = app_ref.ppisp_init(F, C) + rng.normal(0, 0.1, app_ref.ppisp_layout(F, C)["size"][0])
    isp = dict(mode="ppisp", n_frames=F, n_cameras=C, ppisp=flat.astype(np.float32),
               controller=weights.astype(np.float32).ravel())  # fmt: skip
    got = apply_appearance(device, img, isp, None, cam, controller=True)
    w = weights[cam].astype(np.float32).astype(np.float64)
    out = ref.ctrl_fwd(img.astype(np.float64), w)["out"]
    p = app_ref.ppisp_unpack(flat.astype(np.float32).astype(np.float64), F, C)
    want = app_ref.ppisp_fwd(img.astype(np.float64), out[0], out[1:], p["vignetting"][cam], p["crf"][cam])
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
    plain = apply_appearance(device, img, isp, None, cam)
    assert np.abs(got - plain).max() > 1e-3  # the prediction changed the view


def test_resume_restores_the_controller(device, captures, tmp_path):
    """A checkpoint in the controller's phase holds its weights and Adam moments; 6 steps
    and 4 + resume + 2 end with the same weights."""
    from spirula.data import load_dataset
    from spirula.train.run import load_checkpoint, save_checkpoint
    from spirula.train.trainer import Trainer

    scene = load_dataset(captures[1])
    a, cfg = _trainer(scene, device, iterations=6)
    try:
        for _ in range(4):
            a.train_step()
        save_checkpoint(a, tmp_path / "ckpt.npz")
        for _ in range(2):
            a.train_step()
        want = a.appearance.state_dict()
    finally:
        a.free()
    state = load_checkpoint(tmp_path / "ckpt.npz")
    assert {"ctrl", "ctrl_m", "ctrl_v"} <= set(state["appearance"])
    b = Trainer(scene, cfg, device)
    try:
        b.load_state_dict(state)
        for _ in range(2):
            b.train_step()
        got = b.appearance.state_dict()
    finally:
        b.free()
    for k in ("ctrl", "ctrl_m", "ctrl_v", "ppisp"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-7, err_msg=k)
