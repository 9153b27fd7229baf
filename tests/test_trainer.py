"""The trainer (spirula/train/trainer.py and run.py) on small generated
scenes: one step against the float64 reference, checkpoints and resume,
intersection overflow, and a short run on the demo scene. Density control
is in test_strategy.py."""

import json

import numpy as np
import pytest
from reference.adam import adam
from reference.loss import WINDOW, loss_terms
from reference.render import rasterization, rasterization_bwd
from train_cases import PARAMS, random_init, sigmoid, tiny_scene, write_tiny_mixed_sizes

from spirula.train.config import TrainConfig
from spirula.train.trainer import Trainer


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    return tiny_scene(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def mixed_scene(tmp_path_factory):
    from spirula.data import load_dataset

    return load_dataset(write_tiny_mixed_sizes(tmp_path_factory.mktemp("mixed")))


# ---- the reference of one step ---------------------------------------------------------


def loss_grad(x, y, l1_weight=0.8, ssim_weight=0.2):
    """d loss / d x of reference.loss.loss_terms, analytically: [V,H,W,3].

    SSIM at window position q is S(mu_x, E[x^2], E[xy]) (the y moments are
    constants); with A1 = 2 mu_x mu_y + C1, A2 = 2 s_xy + C2, B1 = mu_x^2 +
    mu_y^2 + C1, B2 = s_xx + s_yy + C2:
        dS/dmu_x  = S (2 mu_y / A1 - 2 mu_y / A2 - 2 mu_x / B1 + 2 mu_x / B2)
        dS/dE[x^2] = -S / B2,   dS/dE[xy] = 2 S / A2
    and pixel p gets sum_q w(p - q) (dS/dmu_x + 2 x_p dS/dE[x^2] + y_p dS/dE[xy]).
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    V, H, W, _ = x.shape
    c1, c2 = 0.01**2, 0.03**2
    n_valid = V * 3 * (H - 10) * (W - 10)
    grad = l1_weight * np.sign(x - y) / x.size
    for v in range(V):
        for ch in range(3):
            a, b = x[v, ..., ch], y[v, ..., ch]

            def means(img):
                out = np.zeros((H - 10, W - 10))
                for dy in range(11):
                    for dx in range(11):
                        out += WINDOW[dy, dx] * img[dy : dy + H - 10, dx : dx + W - 10]
                return out

            mx, my = means(a), means(b)
            sxx, syy, sxy = means(a * a) - mx * mx, means(b * b) - my * my, means(a * b) - mx * my
            A1, A2 = 2 * mx * my + c1, 2 * sxy + c2
            B1, B2 = mx * mx + my * my + c1, sxx + syy + c2
            S = A1 * A2 / (B1 * B2)
            d_mu = S * (2 * my / A1 - 2 * my / A2 - 2 * mx / B1 + 2 * mx / B2)
            d_xx, d_xy = -S / B2, 2 * S / A2
            g_mu, g_xx, g_xy = np.zeros((H, W)), np.zeros((H, W)), np.zeros((H, W))
            for dy in range(11):
                for dx in range(11):
                    w = WINDOW[dy, dx]
                    g_mu[dy : dy + H - 10, dx : dx + W - 10] += w * d_mu
                    g_xx[dy : dy + H - 10, dx : dx + W - 10] += w * d_xx
                    g_xy[dy : dy + H - 10, dx : dx + W - 10] += w * d_xy
            grad[v, ..., ch] -= ssim_weight / n_valid * (g_mu + 2 * a * g_xx + b * g_xy)
    return grad


def test_reference_loss_gradient_matches_finite_differences():
    """The analytic loss gradient above, against central differences of
    reference.loss (checked once here so the step test can rely on it)."""
    rng = np.random.default_rng(0)
    y = np.round(rng.uniform(0.6, 1.0, (1, 19, 23, 3)) * 255) / 255
    x = np.clip(0.3 + 0.2 * rng.standard_normal(y.shape), 0.05, 0.55)
    g = loss_grad(x, y)
    h = 1e-6
    for idx in [(0, 0, 0, 0), (0, 9, 11, 1), (0, 18, 22, 2), (0, 5, 17, 0), (0, 12, 3, 2)]:
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        fd = (loss_terms(xp, y)["loss"] - loss_terms(xm, y)["loss"]) / (2 * h)
        assert g[idx] == pytest.approx(fd, rel=1e-6, abs=1e-12), idx


def training_viewmat(viewmat, world):
    """The dataset camera moved into training coordinates, written as matrix
    products: x_dataset = x_train / scale + center, then the camera, then its
    frame scaled by ``scale``."""
    s, c = world.scale, np.asarray(world.center)
    to_dataset = np.eye(4)
    to_dataset[:3, :3] /= s
    to_dataset[:3, 3] = c
    return np.diag([s, s, s, 1.0]) @ np.asarray(viewmat, np.float64) @ to_dataset


def activated(raw):
    return dict(
        means=raw["means"].astype(np.float64),
        quats=raw["quats"].astype(np.float64),
        scales=np.exp(raw["scales"].astype(np.float64)),
        opacities=sigmoid(raw["opacities"]),
        sh_coeffs=raw["sh"].astype(np.float64),
    )


@pytest.mark.parametrize("case", ["fresh", "resumed", "mixed-sizes"])
def test_one_step_matches_the_reference(device, scene, mixed_scene, case):
    """Trainer.train_step against spirula/reference: render, 0.8 L1 + 0.2 (1 -
    SSIM) against the 8-bit ground truth, rasterization_bwd, the chain to
    log-scales and logits, the MCMC regularizers, then Adam with the
    schedule's rates. "fresh": the first step (Adam step 1, SH degree 0);
    "resumed": step 6 of a run with Adam moments and SH degree 1 active;
    "mixed-sizes": the first step on a half-size view of a dataset with two
    image sizes."""
    n = 60
    mixed = case == "mixed-sizes"
    if mixed:
        scene = mixed_scene
    resumed = case == "resumed"
    # SH degree at the schedule's boundaries: 0 at step 0 even with a band
    # every step; 1 from step 5 with a band every 5 steps. float32 storage:
    # the reference is float32 Adam (compact's rounding: tests/test_compact.py)
    cfg = TrainConfig.from_settings(
        iterations=40,
        strategy="mcmc",
        noise_lr=0.0,
        sh_degree=1,
        sh_every=5 if resumed else 1,
        cap_max=n,
        compact=False,
    )
    trainer = Trainer(scene, cfg, device, init=random_init(n, 1, seed=11))
    if mixed:
        assert sorted(trainer.sizes) == [(32, 24), (64, 48)]
        trainer._order = [next(k for k, i in enumerate(scene.train) if scene.frames[i].width == 32)]
    before = trainer.model.download()
    rng = np.random.default_rng(3)
    if resumed:
        # moments of a run in progress: on the scale of gradients seen so far
        m0 = {k: (rng.standard_normal(a.shape) * 2e-4).astype(np.float32) for k, a in before["params"].items()}
        v0 = {k: (rng.uniform(0.2, 1.0, a.shape) * 1e-7).astype(np.float32) for k, a in before["params"].items()}
        trainer.model.upload(before["params"], dict(exp_avg=m0, exp_avg_sq=v0))
        trainer.step = 5
        before = trainer.model.download()
    step = trainer.step
    out = trainer.train_step()
    after = trainer.model.download()
    assert trainer.step == step + 1
    t = step + 1
    sh_degree = min(step // cfg.sh_every, cfg.sh_degree)
    assert sh_degree == (1 if resumed else 0)

    # which image: the one whose reference loss is the step's loss
    raw = before["params"]
    act = activated(raw)
    cands = []
    for i in scene.train:
        f = scene.frames[i]
        vm = training_viewmat(f.viewmat, trainer.world)[None]
        colors, _, _ = rasterization(
            **act,
            viewmats=vm,
            Ks=f.K[None],
            width=f.width,
            height=f.height,
            sh_degree=sh_degree,
            backgrounds=scene.background[None].astype(np.float64),
        )
        gt = (np.rint(scene.load_image(i).astype(np.float64) * 255) / 255)[None]
        cands.append((abs(loss_terms(colors, gt)["loss"] - out["loss"]), i, vm, colors, gt))
    cands.sort(key=lambda c: c[0])
    (err, image, vm, colors, gt), second = cands[0], cands[1]
    H, W = scene.frames[image].height, scene.frames[image].width
    assert (W, H) == ((32, 24) if mixed else (64, 48)) == (trainer.width, trainer.height)
    ref = loss_terms(colors, gt)
    # loss: float32 window sums (test_loss.py: 2e-5 relative); the next best view is far off
    np.testing.assert_allclose(
        [out["loss"], out["l1"], out["ssim"], out["mse"]],
        [ref["loss"], ref["l1"], ref["ssim"], ref["mse"]],
        rtol=1e-4,
        atol=1e-6,
    )
    assert second[0] > 100 * max(err, 1e-6)
    assert colors.max() < gt.min()  # the L1 sign is the same everywhere (train_cases.py)

    # the GPU's own intermediate images, for a readable failure
    got_colors = device.readback(trainer.raster.out_colors)
    np.testing.assert_allclose(got_colors, colors, atol=1e-5, rtol=1e-2)
    grad_colors = loss_grad(colors, gt)
    got_grad = device.readback(trainer.raster.grad_colors)
    np.testing.assert_allclose(got_grad, grad_colors, rtol=1e-3, atol=1e-4 * np.abs(grad_colors).max())

    g = rasterization_bwd(
        **act,
        viewmats=vm,
        Ks=scene.frames[image].K[None],
        width=W,
        height=H,
        sh_degree=sh_degree,
        backgrounds=scene.background[None].astype(np.float64),
        grad_colors=grad_colors,
    )
    sc, op = act["scales"], act["opacities"]
    grads = dict(
        means=g["means"],
        quats=g["quats"],
        sh=g["sh_coeffs"],
        scales=(g["scales"] + cfg.strategy.scale_reg / (3 * n)) * sc,
        opacities=(g["opacities"] + cfg.strategy.opacity_reg / n) * op * (1 - op),
    )

    centres = np.stack(
        [
            -v[:3, :3].T @ v[:3, 3]
            for v in (training_viewmat(scene.frames[i].viewmat, trainer.world) for i in scene.train)
        ]
    )
    extent = 1.1 * np.linalg.norm(centres - centres.mean(0), axis=1).max()
    lrs = dict(means=1.6e-4 * extent * 0.01 ** (step / cfg.iterations), quats=1e-3, scales=5e-3, opacities=0.05)
    for name in PARAMS:
        lr = lrs.get(name)
        if name == "sh":
            lr = np.full(raw["sh"].shape, 2.5e-3 / 20)
            lr[:, 0] = 2.5e-3
        p = raw[name].astype(np.float64)
        m, v = before["exp_avg"][name].astype(np.float64), before["exp_avg_sq"][name].astype(np.float64)
        want_p, want_m, want_v = adam(p, grads[name], m, v, lr, t)
        got_m, got_v = after["exp_avg"][name], after["exp_avg_sq"][name]
        # the moments carry the gradient: float32 loss gradient (1e-6 relative),
        # atomics in rasterize_bwd, cancellation in sums over pixels; worst seen
        # 1.4e-5 x max|m| (means) on lavapipe, a seventh of the tolerance
        np.testing.assert_allclose(got_m, want_m, rtol=1e-3, atol=1e-4 * np.abs(want_m).max() + 1e-20, err_msg=name)
        np.testing.assert_allclose(got_v, want_v, rtol=2e-3, atol=1e-4 * np.abs(want_v).max() + 1e-30, err_msg=name)
        # the update: Adam of the GPU's own moments with the reference step, rates
        # and bias corrections; float32 arithmetic, ~1e-6 of lr beyond 1 ulp of p
        upd = p - lr / (1 - 0.9**t) * got_m / (np.sqrt(got_v) / np.sqrt(1 - 0.999**t) + 1e-15)
        err = np.abs(after["params"][name] - upd)
        assert (err <= 1e-4 * lr + 2**-22 * np.abs(upd)).all(), (name, err.max())
        # and the whole reference step, where the gradient is clearly resolved (at
        # Adam step 1 the update is lr x sign(g): a gradient within float error
        # of 0 may flip it); worst seen 1.2e-4 lr, from 1 ulp of p
        err = np.abs(after["params"][name] - want_p)
        sure = np.abs(grads[name]) > 1e-2 * np.abs(grads[name]).max()
        assert (err[sure] <= 1e-3 * np.broadcast_to(lr, err.shape)[sure] + 2**-22 * np.abs(want_p[sure])).all(), (
            name,
            err[sure].max(),
        )
    trainer.free()


# ---- checkpoints ---------------------------------------------------------------------


def _resume(scene, cfg, device, path):
    """A fresh Trainer from a checkpoint, as train_run does for --resume."""
    from spirula.data.world import WorldTransform
    from spirula.train.run import find_checkpoint, load_checkpoint

    state = load_checkpoint(find_checkpoint(path))
    world = WorldTransform(tuple(state["world"]["center"]), state["world"]["scale"])
    trainer = Trainer(scene, cfg, device, init=world.to_dataset(state["model"]["params"]), world=world)
    trainer.load_state_dict(state)
    return trainer


def same_step(pa, pb):
    """Two trainers that ran the same step from the same state. rasterize_bwd
    sums with atomics, so the order of float additions (and the last bits of
    the gradients) varies between runs; Adam divides by sqrt(v), which turns
    a gradient within float error of 0 into a step of up to lr either way.
    So: the moments to float error, the parameters exactly (1e-6) wherever
    the gradient is resolved, and within the largest Adam step elsewhere.
    A gradient that is 0 analytically (the rotation of an isotropic splat)
    comes out as float noise of up to ~1e-12: the moments' floor is 1e-10."""
    for name in PARAMS:
        m_a, m_b = pa["exp_avg"][name], pb["exp_avg"][name]
        scale = np.abs(m_a).max()
        np.testing.assert_allclose(m_b, m_a, rtol=1e-3, atol=1e-4 * scale + 1e-10, err_msg=name)
        np.testing.assert_allclose(
            pb["exp_avg_sq"][name],
            pa["exp_avg_sq"][name],
            rtol=2e-3,
            atol=1e-4 * np.abs(pa["exp_avg_sq"][name]).max() + 1e-19,
            err_msg=name,
        )
        sure = np.abs(m_a) > max(1e-2 * scale, 1e-9)
        np.testing.assert_allclose(
            pb["params"][name][sure], pa["params"][name][sure], rtol=1e-6, atol=1e-6, err_msg=name
        )
        assert np.abs(pb["params"][name] - pa["params"][name]).max() <= 2 * 5e-3 + 1e-6, name


def _same_state(a, b):
    da, db = a.model.download(), b.model.download()
    for group in ("params", "exp_avg", "exp_avg_sq"):
        for name in PARAMS:
            np.testing.assert_array_equal(db[group][name], da[group][name], err_msg="%s.%s" % (group, name))


@pytest.mark.parametrize("strategy", ["mcmc", "adc"])
def test_checkpoint_resumes_bit_identical(device, scene, tmp_path, strategy):
    from spirula.train.run import save_checkpoint

    # two refinements (after steps 5 and 10) before the checkpoint: the count changed
    cfg = TrainConfig.from_settings(
        iterations=40,
        strategy=strategy,
        cap_max=800,
        sh_degree=1,
        sh_every=6,
        refine_start=4,
        refine_every=5,
        reset_every=10,
        opacity_reset=True,  # (ADC) a reset before the checkpoint too
        grow_grad2d=1e-6,
    )
    a = Trainer(scene, cfg, device)
    n0 = a.model.n
    for _ in range(12):
        a.train_step()
    assert a.model.n != n0
    path = tmp_path / "ckpt" / "step-0000012.npz"
    save_checkpoint(a, path)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]

    b = _resume(scene, cfg, device, tmp_path)
    assert (b.step, b.model.n) == (a.step, a.model.n)
    _same_state(a, b)
    assert b.rng.bit_generator.state == a.rng.bit_generator.state
    assert list(b._order) == list(a._order)
    assert b.world == a.world and b.extent == a.extent
    if strategy == "adc":
        sa, sb = (t.strategy.state_dict(t.model, t.stats, device) for t in (a, b))
        assert sa["vis_count"].sum() > 0
        for k in sa:
            np.testing.assert_array_equal(sb[k], sa[k], err_msg=k)
    else:  # the relocation record (metrics.json's relocated, relocated_by_step) goes on
        assert [s for s, _ in a.strategy.history] == [5, 10]
        assert b.strategy.history == a.strategy.history
        assert b.strategy.relocated_total == a.strategy.relocated_total
    # the next steps see the same images and do the same thing
    oa, ob = a.train_step(), b.train_step()
    assert ob["n_isects"] == oa["n_isects"] and ob["loss"] == pytest.approx(oa["loss"], rel=1e-6)
    same_step(a.model.download(), b.model.download())
    for _ in range(2):
        oa, ob = a.train_step(), b.train_step()
        assert ob["n_isects"] == oa["n_isects"]
        assert ob["loss"] == pytest.approx(oa["loss"], rel=1e-4)
        assert np.isfinite(ob["loss"])
    a.free()
    b.free()


def test_checkpoint_write_is_atomic(device, scene, tmp_path, monkeypatch):
    from spirula.train.run import load_checkpoint, save_checkpoint

    cfg = TrainConfig.from_settings(iterations=10, cap_max=600)
    trainer = Trainer(scene, cfg, device)
    trainer.train_step()
    path = tmp_path / "ckpt" / "step-0000001.npz"
    save_checkpoint(trainer, path)
    good = path.read_bytes()
    trainer.train_step()

    def broken_savez(f, **arrays):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(trainer, path)
    monkeypatch.undo()
    assert path.read_bytes() == good
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left
    assert load_checkpoint(path)["step"] == 1
    trainer.free()


def test_interrupted_run_saves_a_checkpoint_and_resumes(device, scene, tmp_path, monkeypatch):
    """Ctrl-C in train_run leaves ckpt/step-N.npz; --resume finishes the run
    from there with the same result as a run that was never interrupted."""
    from spirula.data import read_splat_ply
    from spirula.train.run import train_run

    # float32 storage: the bound below is float32's; with compact storage a
    # 3e-7 difference upstream can flip a stochastic rounding of a bf16 moment
    # (2e-5 here), which tests/test_compact.py covers
    cfg = TrainConfig.from_settings(iterations=8, cap_max=600, sh_degree=1, save_every=0, log_every=100, compact=False)
    logs = []
    real_step = Trainer.train_step

    def interrupting(self, **kw):
        if self.step == 5:
            raise KeyboardInterrupt
        return real_step(self, **kw)

    monkeypatch.setattr(Trainer, "train_step", interrupting)
    with pytest.raises(KeyboardInterrupt):
        train_run(scene, cfg, device, tmp_path / "run", log=logs.append)
    monkeypatch.undo()
    # step 6 was in flight (pipelined): it completes before the checkpoint
    assert [p.name for p in (tmp_path / "run" / "ckpt").iterdir()] == ["step-0000006.npz"]
    assert any("--resume" in line for line in logs)

    m = train_run(scene, cfg, device, tmp_path / "run", resume=tmp_path / "run", log=logs.append)
    assert m["step"] == 8
    assert [p.name for p in (tmp_path / "run" / "ckpt").iterdir()] == ["step-0000008.npz"]
    m2 = train_run(scene, cfg, device, tmp_path / "straight", log=logs.append)
    resumed = read_splat_ply(tmp_path / "run" / "splat.ply")
    straight = read_splat_ply(tmp_path / "straight" / "splat.ply")
    assert len(resumed["means"]) == len(straight["means"]) == m["n_splats"]
    # runs differ in the order of atomic float sums (see same_step); over 8
    # steps two uninterrupted runs differ by up to 3e-8 in means, 3e-7 in
    # opacities and sh; a resume that lost the Adam moments moves means by ~lr (2e-4)
    for k in ("means", "opacity_logits", "sh_coeffs"):
        np.testing.assert_allclose(resumed[k], straight[k], rtol=0, atol=1e-5, err_msg=k)
    assert m["psnr"] == pytest.approx(m2["psnr"], abs=1e-3)


def test_splats_with_non_finite_parameters_are_left_out_of_the_ply(device, scene, tmp_path, monkeypatch):
    """A diverged splat (NaN or inf anywhere) would break a viewer: splat.ply
    leaves it out, says so in one line and counts it in metrics.json."""
    from spirula.data import read_splat_ply
    from spirula.train.run import train_run

    cfg = TrainConfig.from_settings(iterations=2, cap_max=600, sh_degree=1, save_every=0, log_every=100)
    real = Trainer.splat_arrays

    def diverged(self):
        a = real(self)
        a["means"][3, 1] = np.nan
        a["sh"][7, 0, 2] = np.inf
        return a

    monkeypatch.setattr(Trainer, "splat_arrays", diverged)
    logs = []
    m = train_run(scene, cfg, device, tmp_path / "run", log=logs.append)
    ply = read_splat_ply(tmp_path / "run" / "splat.ply")
    assert m["nonfinite_splats"] == 2
    assert len(ply["means"]) == m["n_splats"] - 2
    assert all(np.isfinite(v).all() for v in ply.values() if isinstance(v, np.ndarray))
    assert [line for line in logs if "non-finite" in line] == [
        "spirula: warning: 2 of %d splats have non-finite parameters; splat.ply leaves them out" % m["n_splats"]
    ]
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["nonfinite_splats"] == 2 and isinstance(saved["relocated_by_step"], list)


def test_evaluating_between_steps_does_not_change_training(device, scene):
    """evaluate() renders with the training rasterizer (other cameras, its
    own recorded passes); the recorded step must not notice."""
    cfg = TrainConfig.from_settings(iterations=8, cap_max=600, sh_degree=1)
    a = Trainer(scene, cfg, device, init=random_init(200, 1, seed=17))
    b = Trainer(scene, cfg, device, init=random_init(200, 1, seed=17))
    for s in range(6):
        oa, ob = a.train_step(), b.train_step()
        assert ob["n_isects"] == oa["n_isects"]
        assert ob["loss"] == pytest.approx(oa["loss"], rel=1e-5), s
        if s == 2:
            m = a.evaluate()
            assert len(m["per_image"]) == len(scene.test) and np.isfinite(m["psnr"])
    a.free()
    b.free()


# ---- intersection overflow -----------------------------------------------------------


def test_intersection_overflow_grows_the_buffers_and_reruns_the_step(device, scene, monkeypatch):
    def sized(capacity):
        def measure(self, views=8):
            self.raster.reserve(self.model.n, capacity)

        return measure

    cfg = TrainConfig.from_settings(iterations=10, cap_max=600, sh_degree=1)
    monkeypatch.setattr(Trainer, "_measure_intersections", sized(200_000))
    roomy = Trainer(scene, cfg, device)
    monkeypatch.setattr(Trainer, "_measure_intersections", sized(16))
    tight = Trainer(scene, cfg, device)
    assert tight.raster.isect_capacity == 16
    runs = []
    record = tight._sequence
    monkeypatch.setattr(tight, "_sequence", lambda deg: runs.append(deg) or record(deg))

    a, b = roomy.train_step(), tight.train_step()
    assert len(runs) == 2  # overflowed once, then ran again
    assert b["n_isects"] == a["n_isects"] > 16
    assert tight.raster.isect_capacity >= b["n_isects"]
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
    # one Adam step, not two: a second application of the step would double
    # the first moments (0.19 g instead of 0.1 g) and move by another lr
    same_step(roomy.model.download(), tight.model.download())
    b2 = tight.train_step()
    assert len(runs) == 3 and np.isfinite(b2["loss"])
    roomy.free()
    tight.free()


# ---- a short run on the demo scene -----------------------------------------------------


def test_short_demo_run_learns_and_writes_its_outputs(device, tmp_path):
    """120 steps of train_run on the generated demo scene (42 train / 6 test
    views, 160x120, 6,346 seed points).

    MCMC's default initial size (0.1 x the distance to the nearest seed
    points) leaves the demo's sparse points as sub-pixel dots that only MCMC
    relocation (from step 500) fills in: 300 default steps reach 5.6 dB. With
    init_scale 1.0 the optimizer alone is visible: test PSNR 10.3 dB at step
    0, 15.03 / 15.12 / 15.11 dB after 120 steps (seeds 0, 1, 2; SSIM 0.57;
    demo-v2), in 15-27 s on 2 cores. The threshold leaves ~1 dB of margin,
    and a trainer that does not learn stays near 10 dB."""
    from spirula.data import load_dataset, read_splat_ply
    from spirula.data.demo import ensure_demo_scene
    from spirula.data.world import WorldTransform
    from spirula.train.run import evaluate_run, load_checkpoint, train_run

    scene = load_dataset(ensure_demo_scene())
    # the demo is rendered with constant appearance (TrainConfig.demo: no appearance correction)
    cfg = TrainConfig.from_settings(
        iterations=120, cap_max=30_000, init_scale=1.0, save_every=50, log_every=1000, appearance="none"
    )
    logs = []
    out = tmp_path / "run"
    m = train_run(scene, cfg, device, out, log=logs.append)
    assert m["psnr"] > 14.0 and m["ssim"] > 0.5, (m["psnr"], m["ssim"])

    saved = json.loads((out / "metrics.json").read_text())
    assert saved["psnr"] == pytest.approx(m["psnr"]) and saved["ssim"] == pytest.approx(m["ssim"])
    assert [p["image"] for p in saved["per_image"]] == [scene.frames[i].name for i in scene.test]
    assert all(np.isfinite(p["psnr"]) and 0 < p["ssim"] <= 1 for p in saved["per_image"])
    assert saved["psnr"] == pytest.approx(np.mean([p["psnr"] for p in saved["per_image"]]))
    assert saved["step"] == 120 and saved["training_time_s"] > 0 and saved["peak_vram_mib"] > 0

    assert TrainConfig.from_dict(json.loads((out / "config.json").read_text())) == cfg
    assert json.loads((out / "config.json").read_text())["dataset"] == str(scene.path)
    ckpts = list((out / "ckpt").iterdir())
    assert [p.name for p in ckpts] == ["step-0000120.npz"]  # the ones at 50 and 100 were replaced
    state = load_checkpoint(ckpts[0])
    assert state["step"] == 120

    # splat.ply: the checkpoint's splats, in dataset coordinates, as many as trained
    ply = read_splat_ply(out / "splat.ply")
    assert len(ply["means"]) == saved["n_splats"] == len(state["model"]["params"]["means"])
    world = WorldTransform(tuple(state["world"]["center"]), state["world"]["scale"])
    want = world.to_dataset(state["model"]["params"])
    np.testing.assert_array_equal(ply["means"], want["means"])
    np.testing.assert_array_equal(ply["log_scales"], want["scales"])
    np.testing.assert_array_equal(ply["opacity_logits"], want["opacities"])
    np.testing.assert_array_equal(ply["sh_coeffs"], want["sh"])
    # rendered from the file, the test views score what training reported
    params = dict(
        means=ply["means"],
        quats=ply["quats"],
        scales=ply["log_scales"],
        opacities=ply["opacity_logits"],
        sh=ply["sh_coeffs"],
    )
    again = evaluate_run(scene, device, params)
    assert again["psnr"] == pytest.approx(m["psnr"], abs=0.01)


def test_training_on_two_image_sizes_learns_and_evaluates_every_size(device, mixed_scene):
    """A dataset with 64x48 and 32x24 views trains (one rasterizer per size,
    shared splats) and is evaluated at each view's own size, also at a size
    no training view has."""
    cfg = TrainConfig.from_settings(iterations=60, cap_max=400, sh_degree=1)
    trainer = Trainer(mixed_scene, cfg, device, init=random_init(300, 1, seed=4))
    views = [mixed_scene.train[0], mixed_scene.train[1]]
    assert {(mixed_scene.frames[i].width, mixed_scene.frames[i].height) for i in views} == {(64, 48), (32, 24)}
    before = trainer.evaluate(views)
    for _ in range(60):
        assert np.isfinite(trainer.train_step()["loss"])
    after = trainer.evaluate(views)
    assert [p["image"] for p in after["per_image"]] == [mixed_scene.frames[i].name for i in views]
    # both sizes learn (the scene is brighter than the initial splats: ~2.4 dB at first)
    for b, a in zip(before["per_image"], after["per_image"]):
        assert a["psnr"] > b["psnr"] + 0.3, (b, a)
    f = mixed_scene.frames[views[0]]
    full = trainer.render(f.viewmat, f.K, size=(64, 48))
    K = f.K.copy()
    K[:2] *= 40 / 64
    other = trainer.render(f.viewmat, K, size=(40, 30))  # a size no training view has
    assert other.shape == (30, 40, 3)
    assert abs(other.mean() - full.mean()) < 0.02
    trainer.free()


# ---- pipelined steps ----------------------------------------------------------------------


def _run_steps(scene, device, cfg, steps, capacity=None, monkeypatch=None):
    """``steps`` steps of a Trainer, each call letting the next step go ahead;
    (trainer, per-step results, submissions of the step sequence)."""
    if capacity is not None:

        def measure(self, views=8):
            self.raster.reserve(self.model.n, capacity)

        monkeypatch.setattr(Trainer, "_measure_intersections", measure)
    t = Trainer(scene, cfg, device)
    submits = []
    real = t._submit
    t._submit = lambda st, prev=None: submits.append((st.k, prev is not None)) or real(st, prev)
    outs = [t.train_step(ahead=i + 1 < steps) for i in range(steps)]
    t.settle()
    return t, outs, submits


def test_pipelined_steps_match_synchronous_ones(device, scene):
    """pipeline_steps (the default) submits step N+1 before reading step N back;
    the run is the synchronous one: the same images in the same order, the same
    intersection counts and losses of the same steps, the same splats (MCMC
    relocating at steps 5 and 10, where nothing goes ahead)."""
    kw = dict(iterations=12, cap_max=600, sh_degree=1, refine_start=4, refine_every=5, compact=False)
    sync, so, ss = _run_steps(scene, device, TrainConfig.from_settings(pipeline_steps=False, **kw), 12)
    pipe, po, ps = _run_steps(scene, device, TrainConfig.from_settings(**kw), 12)
    assert not any(ahead for _, ahead in ss)
    ahead = [k for k, a in ps if a]
    # every step but the first and those after a relocation (after 0-based steps 5 and 10) went ahead
    assert ahead == [k for k in range(1, 12) if k not in (6, 11)]
    assert pipe.step == sync.step == 12 and pipe._ahead is None
    assert [o["n_isects"] for o in po] == [o["n_isects"] for o in so]
    assert [o["n_splats"] for o in po] == [o["n_splats"] for o in so]
    # rasterize_bwd's atomic sums make two runs differ in the last bits (same_step): two
    # synchronous runs of these 12 steps differ by 3e-8 in means, 1e-6 in opacities, 2e-7 in
    # sh, but by up to 3e-3 in quats (Adam turns a rotation gradient within float noise of 0
    # into a step of up to lr): the bound of test_interrupted_run_saves_a_checkpoint_and_resumes
    np.testing.assert_allclose([o["loss"] for o in po], [o["loss"] for o in so], rtol=1e-5)
    assert pipe.rng.bit_generator.state == sync.rng.bit_generator.state and pipe._order == sync._order
    da, db = sync.model.download()["params"], pipe.model.download()["params"]
    for k in ("means", "opacities", "sh"):
        np.testing.assert_allclose(db[k], da[k], rtol=0, atol=1e-5, err_msg=k)
    sync.free()
    pipe.free()


def test_pipelined_overflow_reruns_both_steps(device, scene, monkeypatch):
    """A tiny intersection capacity overflows with the next step already
    submitted: that step changes nothing either (fpbo reads prev_isects), the
    first runs again after growing, the second is submitted again; the run is
    the one with roomy buffers."""
    kw = dict(iterations=6, cap_max=600, sh_degree=1, compact=False)
    roomy, ro, _ = _run_steps(
        scene, device, TrainConfig.from_settings(pipeline_steps=False, **kw), 6, 200_000, monkeypatch
    )
    tight, to, ts = _run_steps(scene, device, TrainConfig.from_settings(**kw), 6, 16, monkeypatch)
    ks = [k for k, _ in ts]
    assert ks[:4] == [0, 1, 0, 1]  # step 0 overflowed with step 1 in flight: both again
    assert [o["n_isects"] for o in to] == [o["n_isects"] for o in ro]
    np.testing.assert_allclose([o["loss"] for o in to], [o["loss"] for o in ro], rtol=1e-5)
    da, db = roomy.model.download()["params"], tight.model.download()["params"]
    for k in ("means", "opacities", "sh"):  # as above
        np.testing.assert_allclose(db[k], da[k], rtol=0, atol=1e-5, err_msg=k)
    roomy.free()
    tight.free()
