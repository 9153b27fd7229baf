"""The neural-network runtime (spirula/nn/, issue 41): each layer's kernel against the
float64 reference (spirula/reference/nn.py) on each backend (the ``backend`` fixture: the CUDA
half runs with ``-m cuda`` where a CUDA GPU is), within the float error bounds derived there
(fp16 weight rounding, f32 sums), the two backends against each other, and the kernels' rows
in SS_PROFILE's table."""

import numpy as np
import pytest
from conftest import ROOT
from kernel_cases import REPORT, assert_near, profile_rows

from spirula import nn
from spirula.reference import nn as ref


def _f32(a):
    return np.asarray(a, np.float32).astype(np.float64)


def _case(seed=0, rows=5, n_in=37, n_out=11, width=48, T=9, C=16, heads=2):
    """Inputs rounded to f32 (as the kernels see them); an odd n_in pads a weight row."""
    rng = np.random.default_rng(seed)
    c = dict(
        x=_f32(rng.normal(size=(rows, n_in))),
        w=rng.normal(0.0, 0.3, (n_out, n_in)),
        b=_f32(rng.normal(size=n_out)),
        xn=_f32(rng.normal(1.5, 2.0, (rows, width))),
        g=_f32(rng.normal(1.0, 0.2, width)),
        beta=_f32(rng.normal(0.0, 0.2, width)),
        xg=_f32(np.concatenate([rng.normal(0.0, 3.0, 200), np.linspace(-12.0, 12.0, 97), [0.0, -0.0]])),
        xs=_f32(rng.normal(0.0, 4.0, (rows, width))),
        xa=_f32(rng.normal(size=(T, C))),
        xb=_f32(rng.normal(size=(3, 5, C))),
        xw=_f32(rng.normal(size=(2, 7, 5, C))),
        xp=_f32(rng.normal(size=(2, 7, 5, 6))),
        xr=_f32(rng.normal(size=(2, 7, 5, C))),
        pos=_f32(rng.normal(size=(7, 5, C))),
        grid=_f32(rng.normal(size=(C, 6, 9))),
        win=_f32(rng.normal(size=(C, 3, 3))),
        pos_bkg=_f32(rng.normal(size=(C, 4, 5))),
        xm=_f32(rng.normal(size=(2, 6, 4, C // 2))),
        w_qkv_ms=rng.normal(0.0, (C // 2) ** -0.5, (3 * C, C // 2)),  # a stage change: C / 2 -> C
        b_qkv_ms=_f32(rng.normal(0.0, 0.1, 3 * C)),
        w_proj_ms=rng.normal(0.0, C**-0.5, (C, C)),
        b_proj_ms=_f32(rng.normal(0.0, 0.1, C)),
        w_qkv=rng.normal(0.0, C**-0.5, (3 * C, C)),
        b_qkv=_f32(rng.normal(0.0, 0.1, 3 * C)),
        w_proj=rng.normal(0.0, C**-0.5, (C, C)),
        b_proj=_f32(rng.normal(0.0, 0.1, C)),
        xu=_f32(rng.normal(size=(2, 3, 5, 7))),
        xc=_f32(rng.normal(size=(2, 4, 9, 11))),
        bc=_f32(rng.normal(0.0, 0.1, 6)),
    )
    for name, (o, cin, k, _, _, _) in CONVS.items():
        c["w_" + name] = rng.normal(0.0, (cin * k * k) ** -0.5, (o, cin, k, k))
    for name, (per, k, _, _, _, _) in TCONVS.items():
        c["w_" + name] = rng.normal(0.0, 0.3, (4, per, k, k))
    c["heads"] = heads
    return c


SOFTMAX_SCALE = 0.7
WINDOW = 3  # nn_window_partition on 2 x 7 x 5 grids: padded to 9 x 6, six windows a grid
# Hiera's MultiScaleAttention on 2 x 6 x 4 grids, 8 -> 16 channels: with q pooled 2 x 2 (a stage
# change) and without
MULTISCALE = {"multiscale_pooled": 2, "multiscale": 0}
# nn_upsample_bilinear: (size, align_corners) of 5 x 7 planes: up by non-integer factors, and down
UPSAMPLES = {"upsample": ((11, 16), False), "upsample_ac": ((11, 16), True), "downsample": ((3, 4), False)}
# nn_conv2d on 4 x 9 x 11 inputs: (out channels, in channels a group, kernel, stride, padding, groups):
# a 3x3 with a bias, SAM's 7x7 stride-4 patch embedding, a depthwise 7x7, a 1x1 in two groups
CONVS = {
    "conv3": (6, 4, 3, 1, 1, 1),
    "conv_patch": (6, 4, 7, 4, 3, 1),
    "conv_depthwise": (4, 1, 7, 1, 3, 4),
    "conv_grouped": (6, 2, 1, 1, 0, 2),
}
# nn_conv_transpose2d on 4 x 9 x 11 inputs: (out channels a group, kernel, stride, padding, output
# padding, groups): SAM's mask decoder's 2x2 stride 2, and a 3x3 stride 2 in two groups
TCONVS = {"tconv_up2": (3, 2, 2, 0, 0, 1), "tconv_grouped": (2, 3, 2, 1, 1, 2)}


def run_layers(dev, c):
    """Every layer once, recorded as one sequence; their outputs as numpy arrays."""
    made = []

    def t(a):
        made.append(nn.Tensor.from_numpy(dev, a))
        return made[-1]

    def hw(w):
        made.append(nn.HalfWeight(dev, w))
        return made[-1]

    try:
        rec = dev.recorder("test.nn")
        outs = dict(
            linear=nn.linear(rec, t(c["x"]), hw(c["w"]), t(c["b"])),
            linear_nobias=nn.linear(rec, t(c["x"]), hw(c["w"])),
            layer_norm=nn.layer_norm(rec, t(c["xn"]), t(c["g"]), t(c["beta"])),
            gelu=nn.gelu(rec, t(c["xg"])),
            softmax=nn.softmax(rec, t(c["xs"]), SOFTMAX_SCALE),
            attention=nn.multi_head_attention(
                rec, t(c["xa"]), hw(c["w_qkv"]), t(c["b_qkv"]), hw(c["w_proj"]), t(c["b_proj"]), c["heads"]
            ),
            attention_batched=nn.multi_head_attention(
                rec, t(c["xb"]), hw(c["w_qkv"]), t(c["b_qkv"]), hw(c["w_proj"]), t(c["b_proj"]), c["heads"]
            ),
            windowed=nn.windowed_attention(
                rec, t(c["xw"]), WINDOW, hw(c["w_qkv"]), t(c["b_qkv"]), hw(c["w_proj"]), t(c["b_proj"]), c["heads"]
            ),
            partition=nn.window_partition(rec, t(c["xw"]), WINDOW),
            max_pool=nn.max_pool2d(rec, t(c["xp"]), 2),
            **{
                "bicubic_" + name: nn.upsample_bicubic(rec, t(c["xu"]), size, ac)
                for name, (size, ac) in UPSAMPLES.items()
            },
            nearest_up=nn.upsample_nearest(rec, t(c["xu"]), (10, 14)),
            nearest_odd=nn.upsample_nearest(rec, t(c["xu"]), (11, 16)),
            add_residual=nn.add(rec, t(c["xw"]), t(c["xr"])),
            add_batch=nn.add(rec, t(c["xw"]), t(c["pos"])),
            add_tiled=nn.add(rec, t(c["grid"]), t(c["win"])),
            transpose=nn.transpose(rec, t(c["grid"])),
            pos_embed=nn.hiera_pos_embed(rec, t(c["pos_bkg"]), t(c["win"]), (6, 9)),
            max_pool_slice=nn.max_pool2d(rec, t(c["xp"]), 3, channels=3, offset=2),
            **{
                name: nn.multiscale_attention(
                    rec,
                    t(c["xm"]),
                    hw(c["w_qkv_ms"]),
                    t(c["b_qkv_ms"]),
                    hw(c["w_proj_ms"]),
                    t(c["b_proj_ms"]),
                    c["heads"],
                    q_stride,
                )  # fmt: skip
                for name, q_stride in MULTISCALE.items()
            },
            unpartition=nn.window_unpartition(rec, t(ref.window_partition(c["xw"], WINDOW)), WINDOW, (7, 5)),
            **{name: nn.upsample_bilinear(rec, t(c["xu"]), size, ac) for name, (size, ac) in UPSAMPLES.items()},
            **{
                name: nn.conv2d(
                    rec,
                    t(c["xc"]),
                    hw(c["w_" + name].reshape(o, -1)),
                    k,
                    t(c["bc"]) if name == "conv3" else None,
                    stride,
                    pad,
                    groups,
                )  # fmt: skip
                for name, (o, _, k, stride, pad, groups) in CONVS.items()
            },
            **{
                name: nn.conv_transpose2d(
                    rec,
                    t(c["xc"]),
                    hw(nn.conv_transpose_weight(c["w_" + name], groups)),
                    k,
                    None,
                    stride,
                    pad,
                    opad,
                    groups,
                )  # fmt: skip
                for name, (_, k, stride, pad, opad, groups) in TCONVS.items()
            },
        )
        made.extend(outs.values())
        rec.finish().run()
        return {k: v.numpy().astype(np.float64) for k, v in outs.items()}
    finally:
        for m in made:
            m.free()


def expected(c):
    """name -> (reference, bound) pairs; linear twice: against the fp16-rounded weights
    (the f32 sum's bound alone) and against the exact ones (plus fp16's rounding)."""
    w16 = ref.half(c["w"])
    args = (c["xa"], ref.half(c["w_qkv"]), c["b_qkv"], ref.half(c["w_proj"]), c["b_proj"], c["heads"])
    ms_args = (ref.half(c["w_qkv_ms"]), c["b_qkv_ms"], ref.half(c["w_proj_ms"]), c["b_proj_ms"], c["heads"])
    return dict(
        linear=[
            (ref.linear(c["x"], w16, c["b"]), ref.linear_bound(c["x"], c["w"], c["b"])),
            (ref.linear(c["x"], c["w"], c["b"]), ref.linear_bound(c["x"], c["w"], c["b"], exact_weights=True)),
        ],
        linear_nobias=[(ref.linear(c["x"], w16), ref.linear_bound(c["x"], c["w"]))],
        layer_norm=[(ref.layer_norm(c["xn"], c["g"], c["beta"]), ref.layer_norm_bound(c["xn"], c["g"], c["beta"]))],
        gelu=[(ref.gelu(c["xg"]), ref.gelu_bound(c["xg"]))],
        softmax=[(ref.softmax(c["xs"], SOFTMAX_SCALE), ref.softmax_bound(c["xs"], SOFTMAX_SCALE))],
        attention=[
            (ref.multi_head_attention(*args), ref.multi_head_attention_bound(c["xa"], *args[1:])),
        ],
        attention_batched=[
            (ref.multi_head_attention(c["xb"], *args[1:]), ref.multi_head_attention_bound(c["xb"], *args[1:])),
        ],
        windowed=[
            (
                ref.windowed_attention(c["xw"], WINDOW, *args[1:]),
                ref.windowed_attention_bound(c["xw"], WINDOW, *args[1:]),
            )
        ],
        **{
            name: [
                (
                    ref.multiscale_attention(c["xm"], *ms_args, q_stride),
                    ref.multiscale_attention_bound(c["xm"], c["w_qkv_ms"], *ms_args[1:], q_stride),
                )
            ]
            for name, q_stride in MULTISCALE.items()
        },
        max_pool=[(ref.max_pool2d(c["xp"], 2), np.zeros((2, 3, 2, 6)))],  # exact
        **{
            "bicubic_" + name: [
                (ref.upsample_bicubic(c["xu"], size, ac), ref.upsample_bicubic_bound(c["xu"], size, ac))
            ]
            for name, (size, ac) in UPSAMPLES.items()
        },
        # one f32 add, a copy: exact
        nearest_up=[(np.repeat(np.repeat(c["xu"], 2, -2), 2, -1), np.zeros((2, 3, 10, 14)))],
        nearest_odd=[(ref.upsample_nearest(c["xu"], (11, 16)), np.zeros((2, 3, 11, 16)))],
        add_residual=[(ref.add(c["xw"], c["xr"]), np.zeros(c["xw"].shape))],
        add_batch=[(ref.add(c["xw"], c["pos"][None]), np.zeros(c["xw"].shape))],
        add_tiled=[(ref.add(c["grid"], c["win"]), np.zeros(c["grid"].shape))],
        transpose=[(c["grid"].transpose(0, 2, 1), np.zeros((16, 9, 6)))],
        pos_embed=[
            (
                ref.hiera_pos_embed(c["pos_bkg"], c["win"], (6, 9)),
                ref.hiera_pos_embed_bound(c["pos_bkg"], c["win"], (6, 9)),
            )
        ],
        max_pool_slice=[(ref.max_pool2d(c["xp"][..., 2:5], 3), np.zeros((2, 2, 1, 3)))],
        # a copy: exact
        partition=[(ref.window_partition(c["xw"], WINDOW), np.zeros((12, WINDOW, WINDOW, c["xw"].shape[-1])))],
        unpartition=[(c["xw"], np.zeros(c["xw"].shape))],
        **{
            name: [(ref.upsample_bilinear(c["xu"], size, ac), ref.upsample_bilinear_bound(c["xu"], size, ac))]
            for name, (size, ac) in UPSAMPLES.items()
        },
        **{name: [_conv_expected(c, name, *spec)] for name, spec in CONVS.items()},
        **{name: [_tconv_expected(c, name, *spec)] for name, spec in TCONVS.items()},
    )


def _tconv_expected(c, name, per, k, stride, pad, opad, groups):
    args = (None, (stride, stride), (pad, pad), (opad, opad), groups)
    w = c["w_" + name]
    return ref.conv_transpose2d(c["xc"], ref.half(w), *args), ref.conv_transpose2d_bound(c["xc"], w, *args)


def _conv_expected(c, name, o, cin, k, stride, pad, groups):
    args = (c["bc"] if name == "conv3" else None, (stride, stride), (pad, pad), groups)
    return ref.conv2d(c["xc"], ref.half(c["w_" + name]), *args), ref.conv2d_bound(c["xc"], c["w_" + name], *args)


def test_layers_match_the_reference_within_their_float_bounds(backend):
    c = _case()
    got = run_layers(backend, c)
    for name, pairs in expected(c).items():
        for i, (want, bound) in enumerate(pairs):
            assert_near(got[name], want, bound, 0.0, "%s %d" % (name, i))


def test_softmax_rows_sum_to_one_and_survive_large_logits(backend):
    """Stability: logits of +-1e4 (exp would overflow without subtracting the row's largest);
    a row's sum within its bound's sum."""
    x = _f32(np.array([[1e4, 1e4 - 1.0, -1e4, 0.0], [-3e4, -3e4, -3e4, -3e4]]))
    t = nn.Tensor.from_numpy(backend, x)
    try:
        rec = backend.recorder("test.nn.softmax")
        y = nn.softmax(rec, t)
        rec.finish().run()
        got = y.numpy().astype(np.float64)
        y.free()
    finally:
        t.free()
    want, bound = ref.softmax(x), ref.softmax_bound(x)
    assert_near(got, want, bound, 0.0, "softmax large")
    assert np.all(np.abs(got.sum(-1) - 1.0) <= bound.sum(-1) + 4 * ref.U)


def test_bilinear_is_torchs(device):
    """torch's documented outputs: F.interpolate([[1, 2]] as 1x2, size 1x4, bilinear,
    align_corners False) is [1, 1.25, 1.75, 2] (source points -0.25 clamped, 0.25, 0.75,
    1.25 clamped); align_corners True, size 1x3: [1, 1.5, 2]; and a plane linear in x and
    y (which bilinear interpolation reproduces) at a non-integer factor, on the kernel."""
    x = np.array([[[1.0, 2.0]]])
    assert ref.upsample_bilinear(x, (1, 4)).ravel().tolist() == [1.0, 1.25, 1.75, 2.0]
    assert ref.upsample_bilinear(x, (1, 3), align_corners=True).ravel().tolist() == [1.0, 1.5, 2.0]
    h, w, oh, ow = 6, 9, 13, 20
    plane = 0.5 + 0.25 * np.arange(h)[:, None] - 0.125 * np.arange(w)[None, :]
    t = nn.Tensor.from_numpy(device, plane[None])
    try:
        rec = device.recorder("test.nn.bilinear")
        y = nn.upsample_bilinear(rec, t, (oh, ow), align_corners=True)
        rec.finish().run()
        sy, sx = np.arange(oh) * (h - 1) / (oh - 1), np.arange(ow) * (w - 1) / (ow - 1)
        want = 0.5 + 0.25 * sy[:, None] - 0.125 * sx[None, :]
        bound = ref.upsample_bilinear_bound(plane[None], (oh, ow), True)[0]
        assert np.all(np.abs(y.numpy()[0] - want) <= bound)
        y.free()
    finally:
        t.free()


def test_conv2d_is_torchs_cross_correlation(device):
    """torch's convolution is a cross-correlation: a 3x3 kernel with 1 at row 0, column 2
    and padding 1 gives y[i, j] = x[i - 1, j + 1] (zero outside), in the reference and the
    kernel (exact: one fp16-exact product a pixel)."""
    x = np.random.default_rng(4).normal(size=(1, 1, 5, 6)).astype(np.float32)
    w = np.zeros((1, 1, 3, 3))
    w[0, 0, 0, 2] = 1.0
    want = np.zeros_like(x)
    want[0, 0, 1:, :-1] = x[0, 0, :-1, 1:]
    assert np.array_equal(ref.conv2d(x, w, padding=(1, 1)), want)
    xt, wt = nn.Tensor.from_numpy(device, x), nn.HalfWeight(device, w.reshape(1, -1))
    try:
        rec = device.recorder("test.nn.conv")
        y = nn.conv2d(rec, xt, wt, 3, padding=1)
        rec.finish().run()
        assert np.array_equal(y.numpy(), want)
        y.free()
    finally:
        xt.free()
        wt.free()


def test_conv_transpose2d_spreads_each_pixel_over_its_kernel():
    """The reference's definition on an analytic case: a 2x2 stride-2 transposed convolution
    of one channel puts each input pixel's 2x2 block x w side by side (SAM's upscaling), so
    a weight of ones doubles the image in each direction by repetition."""
    x = np.arange(6.0).reshape(1, 1, 2, 3)
    y = ref.conv_transpose2d(x, np.ones((1, 1, 2, 2)), stride=(2, 2))
    assert np.array_equal(y[0, 0], np.repeat(np.repeat(x[0, 0], 2, 0), 2, 1))
    w = np.arange(8.0).reshape(2, 1, 2, 2)  # [in 2, out 1, 2, 2]
    m = nn.conv_transpose_weight(w)  # [out 1, in 2 x 2 x 2] in the order (in, row, column)
    assert m.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_conv2d_of_a_centred_one_is_the_input(device):
    """A 3x3 kernel with 1 at its centre (exact in fp16), padding 1, stride 1: y = x, bit for
    bit; stride 2 keeps every other pixel of each row and column."""
    x = np.random.default_rng(3).normal(size=(1, 2, 5, 6)).astype(np.float32)
    w = np.zeros((2, 1, 3, 3))
    w[:, 0, 1, 1] = 1.0
    xt, wt = nn.Tensor.from_numpy(device, x), nn.HalfWeight(device, w.reshape(2, -1))
    try:
        rec = device.recorder("test.nn.conv")
        same = nn.conv2d(rec, xt, wt, 3, padding=1, groups=2)
        strided = nn.conv2d(rec, xt, wt, 3, stride=2, padding=1, groups=2)
        rec.finish().run()
        assert np.array_equal(same.numpy(), x)
        assert np.array_equal(strided.numpy(), x[:, :, ::2, ::2])
        same.free()
        strided.free()
    finally:
        xt.free()
        wt.free()


def test_window_partition_is_hieras_layout(device):
    """The kernel on a grid of its own coordinates: window k = (b nh + a) nw + c holds grid rows
    a w .. a w + w - 1 and columns c w .. (Hiera's view, permute (0, 1, 3, 2, 4, 5), view), the
    padding zeros; unpartition puts every element back. And a window covering the whole grid
    is global attention over it."""
    B, H, W, w = 2, 5, 7, 3
    grid = np.zeros((B, H, W, 3))
    grid[..., 0] = np.arange(B)[:, None, None] + 1
    grid[..., 1] = np.arange(H)[None, :, None] + 1
    grid[..., 2] = np.arange(W)[None, None, :] + 1
    x = nn.Tensor.from_numpy(device, grid)
    rec = device.recorder("test.windows")
    win = nn.window_partition(rec, x, w)
    back = nn.window_unpartition(rec, win, w, (H, W))
    rec.finish().run()
    got = win.numpy()
    nh, nw = 2, 3
    assert got.shape == (B * nh * nw, w, w, 3)
    for k in range(B * nh * nw):
        b, a, c = k // (nh * nw), (k // nw) % nh, k % nw
        for i in range(w):
            for j in range(w):
                y, xx = a * w + i, c * w + j
                want = [b + 1, y + 1, xx + 1] if y < H and xx < W else [0, 0, 0]
                assert list(got[k, i, j]) == want, (k, i, j)
    np.testing.assert_array_equal(back.numpy(), grid)
    for tensor in (x, win, back):
        tensor.free()
    c = _case()
    xg = c["xw"][:, :3, :3]  # one 3 x 3 window a grid
    args = (ref.half(c["w_qkv"]), c["b_qkv"], ref.half(c["w_proj"]), c["b_proj"], c["heads"])
    np.testing.assert_allclose(
        ref.windowed_attention(xg, 3, *args),
        ref.multi_head_attention(xg.reshape(2, 9, -1), *args).reshape(xg.shape),
        atol=1e-12,
    )


def test_multiscale_attention_is_hieras():
    """The reference of Hiera's MultiScaleAttention: unpooled, it is multi-head attention over
    the flattened grid; pooled, its queries are the 2 x 2 maxima of q (an odd row or column
    dropped, as MaxPool2d's floor), so its output grid is halved and each output token is
    the attention of its pooled query over every key."""
    c = _case()
    x = c["xm"]
    args = (ref.half(c["w_qkv_ms"]), c["b_qkv_ms"], ref.half(c["w_proj_ms"]), c["b_proj_ms"], c["heads"])
    B, H, W, _ = x.shape
    flat = ref.multi_head_attention(x.reshape(B, H * W, -1), *args).reshape(B, H, W, -1)
    np.testing.assert_allclose(ref.multiscale_attention(x, *args, 0), flat, atol=1e-12)
    pooled = ref.multiscale_attention(x, *args, 2)
    assert pooled.shape == (B, H // 2, W // 2, 16)
    grid = np.arange(2 * 5 * 3 * 2, dtype=np.float64).reshape(2, 5, 3, 2)
    np.testing.assert_array_equal(ref.max_pool2d(grid, 2), grid[:, 1:4:2, 1:2:2])  # increasing: the corner


def test_bicubic_is_keys_with_torchs_source_index():
    """torch's bicubic by hand: two pixels [0, 1] to four (align_corners False): the first
    output's source is (0 + 0.5) 2 / 4 - 0.5 = -0.25, floor -1, t = 0.75; the taps -2, -1, 0, 1
    clamp to pixels 0, 0, 0, 1 with Keys' weights (A = -0.75) far(1.75), near(0.75),
    near(0.25), far(1.25): the second pixel's weight far(1.25) = -27/256 is the output. The
    weights sum to 1 (a constant stays), an unchanged size is the identity, and the kernel
    is not linear-exact (A = -0.5 would be)."""
    y = ref.upsample_bicubic(np.array([[0.0, 1.0]]), (1, 4))
    assert y[0, 0] == pytest.approx(-27 / 256, abs=1e-15)
    np.testing.assert_allclose(y[0], 1 - y[0, ::-1], atol=1e-15)  # symmetric about the middle
    x = np.random.default_rng(0).normal(size=(2, 5, 7))
    np.testing.assert_allclose(ref.upsample_bicubic(x, (5, 7)), x, atol=1e-14)
    np.testing.assert_allclose(ref.upsample_bicubic(np.ones((1, 4, 6)), (9, 13)), 1.0, atol=1e-14)


def test_pos_sine_is_sam2s_encoding(backend):
    """nn_pos_sine against the float64 reference within its bound (Vulkan's 2^-11 for sin and
    cos dominates it, so it stays out of the tightness test above); measured on lavapipe:
    a few 1e-7. The reference's layout by hand: channel 0 is sin of the row's t, channel 1
    the cos of the same t (dim_t pairs), the second half the columns."""
    rec = backend.recorder("test.pos_sine")
    y = nn.pos_sine(rec, 16, (5, 7))
    rec.finish().run()
    got = y.numpy().astype(np.float64)
    y.free()
    want, bound = ref.pos_sine(16, (5, 7)), ref.pos_sine_bound(16, (5, 7))
    assert_near(got, want, bound, 0.0, "nn_pos_sine")
    assert np.abs(got - want).max() < 1e-5  # what lavapipe's sin and cos reach
    t = np.arange(1, 6) / (5 + 1e-6) * 2 * np.pi
    np.testing.assert_allclose(want[0, :, 3], np.sin(t), atol=1e-15)
    np.testing.assert_allclose(want[1, :, 3], np.cos(t), atol=1e-15)
    t = np.arange(1, 8) / (7 + 1e-6) * 2 * np.pi
    np.testing.assert_allclose(want[8, 2], np.sin(t), atol=1e-15)


def test_pack_half_is_numpys_fp16_two_per_word():
    w = np.array([[1.0, -2.0, 0.5], [65504.0, 2.0**-24, 3.0]])
    words = nn.pack_half(w)
    assert words.shape == (2, 2) and words.dtype == np.uint32
    halves = np.stack([words & 0xFFFF, words >> 16], -1).reshape(2, 4).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(halves[:, :3], w.astype(np.float16))
    assert np.all(halves[:, 3] == 0)


def test_the_bounds_are_tight_enough_to_mean_something():
    """Each layer's largest bound is below 2e-4 of its largest output (a few hundred f32 ulps;
    fp16 weights would be 2^-11 ~ 5e-4): a kernel with a dropped term, fp16 activations or
    a wrong erf would exceed them."""
    c = _case()
    for name, pairs in expected(c).items():
        want, bound = pairs[0]
        rel = bound.max() / np.abs(want).max()
        assert rel < 2e-4, (name, rel)


@pytest.mark.cuda
def test_layers_agree_between_vulkan_and_cuda(backends):
    """Both backends' outputs within twice the reference bound of each other (each is within
    the bound of the reference)."""
    vk, cu = backends
    c = _case(1)
    a, b = run_layers(vk, c), run_layers(cu, c)
    for name, pairs in expected(c).items():
        assert_near(a[name], b[name], 2 * pairs[0][1], 0.0, "nn %s vulkan-cuda" % name)
    if REPORT:
        print("nn: Vulkan and CUDA agree")


PROFILE_CODE = """
import os, sys; sys.path.insert(0, 'tests')
import test_nn as t  # its conftest import turns SS_PROFILE off: on again
os.environ['SS_PROFILE'] = '1'
from spirula.backends import open_device
t.run_layers(open_device(sys.argv[1]), t._case())
"""
NN_KERNELS = {
    "nn_linear": 12,
    "nn_layer_norm": 1,
    "nn_gelu": 1,
    "nn_softmax": 6,
    "nn_matmul": 10,
    "nn_window_partition": 4,
    "nn_max_pool2d": 3,
    "nn_upsample_bicubic": 4,
    "nn_add": 4,
    "nn_transpose": 2,
    "nn_upsample_nearest": 2,
    "nn_upsample_bilinear": 3,
    "nn_conv2d": 4,
    "nn_conv_transpose2d": 2,
}


def _profile_rows(backend_name):
    return profile_rows(PROFILE_CODE, backend_name, ROOT)


def test_profiler_rows_name_the_nn_kernels():
    """One row per kernel under its name: linear twice plus two in each of the five
    attentions, softmax once plus one in each, their two products each, the window kernel
    twice alone and twice in the windowed attention, the pool twice alone and once in the
    pooled attention, the bicubic resize, the add and the transpose each once more in the
    position embedding."""
    rows = _profile_rows("vulkan")
    for name, count in NN_KERNELS.items():
        assert rows.get(name) == count, (name, rows.get(name))


@pytest.mark.cuda
def test_profiler_rows_on_cuda_are_vulkans(cuda):
    assert _profile_rows("cuda") == _profile_rows("vulkan")
