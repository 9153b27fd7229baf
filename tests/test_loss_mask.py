"""Loss masks (issue #13): the ground truth's alpha byte drops pixels from
loss_fwd / loss_bwd. Against the float64 reference with a random mask, by
finite differences, and the invariants: a dropped pixel's colour and ground
truth change nothing, and an all-keep mask is the unmasked loss bit for bit."""

import numpy as np
import pytest
from reference.loss import loss_terms
from test_loss import loss_finite_differences

from spirula.selftest import gpu_loss, pack_unpack
from spirula.selftest import loss_case as _case


def _mask(V, H, W, seed, keep=0.7):
    """[V+1,H,W] bool: random pixels and a dropped block (image 0 unused)."""
    rng = np.random.default_rng(seed)
    m = rng.random((V + 1, H, W)) < keep
    m[:, H // 3 : H // 3 + 6, W // 4 : W // 4 + 9] = False
    return m


@pytest.mark.parametrize("V,H,W", [(1, 29, 37), (2, 16, 16), (1, 12, 70)])
def test_masked_loss_value_matches_reference(device, V, H, W):
    colors, gt_images = _case(V, H, W, seed=H)
    masks = _mask(V, H, W, seed=W)
    out, grad = gpu_loss(device, colors, gt_images, image_index=range(1, V + 1), masks=masks)
    ref = loss_terms(colors, np.asarray(pack_unpack(gt_images[1 : V + 1])), mask=masks[1 : V + 1])
    # float32 window sums of ~121 terms per moment: ~1e-6 relative (as unmasked)
    np.testing.assert_allclose(out, [ref["loss"], ref["l1"], ref["ssim"], ref["mse"]], rtol=2e-5, atol=1e-6)
    # a dropped pixel's colour gets exactly no gradient
    assert not np.any(grad[~masks[1 : V + 1]])


def test_masked_loss_gradient_matches_finite_differences(device):
    V, H, W = 1, 18, 21
    colors, gt_images = _case(V, H, W, seed=3)
    masks = _mask(V, H, W, seed=4)
    _, grad = gpu_loss(device, colors, gt_images, image_index=[1], masks=masks)
    gt = pack_unpack(gt_images[1:2])
    m = masks[1:2]
    x = colors.astype(np.float64)
    fd = loss_finite_differences(x, gt, mask=m)
    # the reference does not depend on dropped colours at all: exactly 0 there
    assert not np.any(fd[~m])
    # float32 gradients of a float64 loss: ~1e-6 relative to the largest entry (as unmasked)
    np.testing.assert_allclose(grad, fd, atol=1e-5 * np.abs(fd).max(), rtol=1e-3)


def test_dropped_pixels_change_nothing(device):
    """New colours and ground truth under the mask: the same loss and
    gradient, bit for bit (they enter the windows as 0, whatever they are)."""
    V, H, W = 1, 29, 37
    colors, gt_images = _case(V, H, W, seed=7)
    masks = _mask(V, H, W, seed=8)
    out, grad = gpu_loss(device, colors, gt_images, image_index=[1], masks=masks)
    rng = np.random.default_rng(9)
    drop = ~masks[1:2]
    colors2 = np.where(drop[..., None], rng.random(colors.shape), colors).astype(np.float32)
    gt2 = gt_images.copy()
    gt2[1:2] = np.where(drop[..., None], rng.random(colors.shape), gt_images[1:2])
    out2, grad2 = gpu_loss(device, colors2, gt2, image_index=[1], masks=masks)
    assert out.tobytes() == out2.tobytes()
    assert grad.tobytes() == grad2.tobytes()


def test_all_keep_mask_is_the_unmasked_loss_bit_for_bit(device):
    V, H, W = 2, 29, 37
    colors, gt_images = _case(V, H, W, seed=11)
    keep = np.ones(gt_images.shape[:3], bool)
    a = gpu_loss(device, colors, gt_images, image_index=[1, 2])
    b = gpu_loss(device, colors, gt_images, image_index=[1, 2], masks=keep)
    assert a[0].tobytes() == b[0].tobytes() and a[1].tobytes() == b[1].tobytes()


def test_everything_dropped_is_zero_not_nan(device):
    colors, gt_images = _case(1, 16, 16, seed=12)
    drop = np.zeros(gt_images.shape[:3], bool)
    out, grad = gpu_loss(device, colors, gt_images, image_index=[1], masks=drop)
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0, 0.0])
    assert not np.any(grad)
