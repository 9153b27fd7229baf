"""A small neural-network runtime on Spirula's kernels (issue 41): the layers of SAM-family
models as recorded dispatches, so that a whole forward pass is one sequence
(``rec = device.recorder(...)``, the layers, ``rec.finish().run()``) and every layer has its
row in SS_PROFILE under its kernel's name. No torch or onnxruntime at inference time.

Activations are float32 :class:`Tensor` s (row-major, a pool buffer and a shape); the weights
of :func:`linear` are fp16 (:class:`HalfWeight`: two per word, each row padded to whole
words), the sums float32. The float64 references are spirula/reference/nn.py; the kernels
shaders/nn_*.comp (docs/design.md §3.3).

Each layer allocates its output from the device's pool unless ``out`` is given; the caller
frees what it no longer needs (``Tensor.free``), or keeps the buffers of a recorded sequence
to run it again.
"""

from __future__ import annotations

import math

import numpy as np

from spirula.runtime.buffers import Buffer
from spirula.runtime.sequence import Threads


class Tensor:
    """A float32 row-major array on the device: ``buffer`` (a pool Buffer) and ``shape``."""

    def __init__(self, device, buffer: Buffer, shape):
        self.device, self.buffer, self.shape = device, buffer, tuple(int(s) for s in shape)
        self.scratch = []  # intermediates a composed layer recorded into (freed with this)

    @classmethod
    def empty(cls, device, shape, name: str = "nn.tensor") -> Tensor:
        shape = tuple(int(s) for s in shape)
        return cls(device, device.pool.alloc(name, (max(1, math.prod(shape)),), np.float32), shape)

    @classmethod
    def from_numpy(cls, device, array, name: str = "nn.tensor") -> Tensor:
        array = np.ascontiguousarray(array, np.float32)
        t = cls.empty(device, array.shape, name)
        device.upload(t.buffer, array.reshape(-1) if array.size else np.zeros(1, np.float32))
        return t

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def numpy(self) -> np.ndarray:
        return self.device.readback(self.buffer)[: self.size].reshape(self.shape)

    def free(self):
        for t in self.scratch:
            t.free()
        self.scratch = []
        if self.buffer.alive:
            self.device.pool.free(self.buffer)


class HalfWeight:
    """A [out, in] weight matrix in fp16 (rounded to nearest, ties to even, on the host), two
    per word, low half first, each row padded to whole words with a zero half."""

    def __init__(self, device, w, name: str = "nn.weight"):
        w = np.asarray(w, np.float32)
        if w.ndim != 2:
            raise ValueError("a linear weight is [out, in], got shape %s" % (w.shape,))
        self.device, self.n_out, self.n_in = device, int(w.shape[0]), int(w.shape[1])
        self.buffer = device.pool.alloc(name, (max(1, self.n_out * self.words),), np.uint32)
        device.upload(self.buffer, pack_half(w).reshape(-1))

    @property
    def words(self) -> int:
        return (self.n_in + 1) // 2

    def free(self):
        if self.buffer.alive:
            self.device.pool.free(self.buffer)


def pack_half(w) -> np.ndarray:
    """[out, in] floats -> [out, (in + 1) // 2] uint32 words of fp16 pairs (low half first)."""
    w = np.asarray(w, np.float32)
    h = np.zeros((w.shape[0], 2 * ((w.shape[1] + 1) // 2)), np.float16)
    h[:, : w.shape[1]] = w.astype(np.float16)
    u = h.view(np.uint16).astype(np.uint32)
    return u[:, 0::2] | (u[:, 1::2] << 16)


def _rows(x: Tensor) -> tuple:
    width = x.shape[-1]
    return x.size // max(width, 1), width


def _pair(v) -> tuple:
    """An int or (y, x) as (y, x)."""
    return (int(v), int(v)) if np.isscalar(v) else (int(v[0]), int(v[1]))


def _out(rec, out, shape, name) -> Tensor:
    if out is None:
        return Tensor.empty(rec.device, shape, name)
    if tuple(out.shape) != tuple(shape):
        raise ValueError("%s: out has shape %s, expected %s" % (name, out.shape, tuple(shape)))
    return out


def linear(rec, x: Tensor, w: HalfWeight, b: Tensor | None = None, out: Tensor | None = None) -> Tensor:
    """y = x w^T + b over the last axis of x (torch's nn.Linear; kernel nn_linear)."""
    rows, n_in = _rows(x)
    if n_in != w.n_in:
        raise ValueError("linear: x has %d features, the weight takes %d" % (n_in, w.n_in))
    y = _out(rec, out, x.shape[:-1] + (w.n_out,), "nn.linear")
    bias = b.buffer if b is not None else w.buffer  # unread without a bias
    push = dict(rows=rows, n_in=n_in, n_out=w.n_out, has_bias=int(b is not None))
    rec.dispatch("nn_linear", Threads(rows * w.n_out), dict(x=x.buffer, w=w.buffer, bias=bias, y=y.buffer), push=push)
    return y


def _conv(rec, kernel: str, x: Tensor, w: HalfWeight, b, kernel_size, stride, padding, groups: int, size_of, out):
    """nn_conv2d / nn_conv_transpose2d: the shapes checked, the output ``size_of(h, w)`` made,
    the dispatch recorded."""
    (kh, kw), (sy, sx), (py, px) = _pair(kernel_size), _pair(stride), _pair(padding)
    name = kernel[len("nn_") :]
    if len(x.shape) != 4:
        raise ValueError("%s: x is [N, C, H, W], got %s" % (name, x.shape))
    n, c, h, wd = x.shape
    if groups < 1 or c % groups or w.n_out % groups or w.n_in != c // groups * kh * kw:
        raise ValueError(
            "%s: %d input channels in %d groups do not take a [%d, %d] weight of %dx%d kernels"
            % (name, c, groups, w.n_out, w.n_in, kh, kw)
        )
    oh, ow = size_of(h, wd, kh, kw, sy, sx, py, px)
    if oh < 1 or ow < 1:
        raise ValueError(
            "%s: a %dx%d input leaves no output (kernel %dx%d, padding %d, %d)" % (name, h, wd, kh, kw, py, px)
        )
    y = _out(rec, out, (n, w.n_out, oh, ow), "nn." + name)
    push = dict(batch=n, in_c=c, in_h=h, in_w=wd, out_c=w.n_out, out_h=oh, out_w=ow, kh=kh, kw=kw, stride_y=sy,
                stride_x=sx, pad_y=py, pad_x=px, groups=int(groups), has_bias=int(b is not None))  # fmt: skip
    bufs = dict(x=x.buffer, w=w.buffer, bias=b.buffer if b is not None else w.buffer, y=y.buffer)
    rec.dispatch(kernel, Threads(y.size), bufs, push=push)
    return y


def conv2d(rec, x: Tensor, w: HalfWeight, kernel_size, b: Tensor | None = None, stride=1, padding=0, groups: int = 1,
           out: Tensor | None = None) -> Tensor:  # fmt: skip
    """torch's F.conv2d (dilation 1, zero padding) of x [N, C, H, W] with ``w`` the [out_c,
    C / groups, kh, kw] weight as a [out_c, C / groups x kh x kw] :class:`HalfWeight`;
    ``kernel_size``, ``stride``, ``padding``: an int or (y, x) (kernel nn_conv2d)."""

    def size_of(h, wd, kh, kw, sy, sx, py, px):
        return (h + 2 * py - kh) // sy + 1, (wd + 2 * px - kw) // sx + 1

    return _conv(rec, "nn_conv2d", x, w, b, kernel_size, stride, padding, groups, size_of, out)


def conv_transpose_weight(w, groups: int = 1) -> np.ndarray:
    """torch's ConvTranspose2d weight [in_c, out_c / groups, kh, kw] as the [out_c, in_c /
    groups x kh x kw] matrix nn_conv_transpose2d reads (each output channel's row in the
    order input channel, row, column), for a :class:`HalfWeight`."""
    w = np.asarray(w, np.float32)
    c, per, kh, kw = w.shape
    cin = c // groups
    # [groups, cin, per, kh, kw] -> [groups, per, cin, kh, kw] -> [out_c, cin kh kw]
    return w.reshape(groups, cin, per, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * per, cin * kh * kw)


def conv_transpose2d(rec, x: Tensor, w: HalfWeight, kernel_size, b: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, out: Tensor | None = None) -> Tensor:  # fmt: skip
    """torch's F.conv_transpose2d (dilation 1) of x [N, C, H, W]; ``w``: a :class:`HalfWeight`
    of :func:`conv_transpose_weight`; ``kernel_size``, ``stride``, ``padding``,
    ``output_padding``: an int or (y, x) (kernel nn_conv_transpose2d)."""
    ay, ax = _pair(output_padding)

    def size_of(h, wd, kh, kw, sy, sx, py, px):
        return (h - 1) * sy - 2 * py + kh + ay, (wd - 1) * sx - 2 * px + kw + ax

    return _conv(rec, "nn_conv_transpose2d", x, w, b, kernel_size, stride, padding, groups, size_of, out)


def layer_norm(rec, x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5, out: Tensor | None = None) -> Tensor:
    """torch's nn.LayerNorm over the last axis (kernel nn_layer_norm)."""
    rows, width = _rows(x)
    y = _out(rec, out, x.shape, "nn.layer_norm")
    bufs = dict(x=x.buffer, gamma=gamma.buffer, beta=beta.buffer, y=y.buffer)
    rec.dispatch("nn_layer_norm", Threads(rows), bufs, push=dict(rows=rows, width=width, eps=float(eps)))
    return y


def gelu(rec, x: Tensor, out: Tensor | None = None) -> Tensor:
    """torch's nn.GELU() (the erf form; kernel nn_gelu)."""
    y = _out(rec, out, x.shape, "nn.gelu")
    rec.dispatch("nn_gelu", Threads(x.size), dict(x=x.buffer, y=y.buffer), push=dict(count=x.size))
    return y


def upsample_bilinear(rec, x: Tensor, size, align_corners: bool = False, out: Tensor | None = None) -> Tensor:
    """torch's F.interpolate(x, size=size, mode="bilinear", align_corners=align_corners) over
    x's last two axes [..., H, W] -> [..., size[0], size[1]] (kernel nn_upsample_bilinear;
    no antialiasing, as torch's default)."""
    return _resize(rec, "nn_upsample_bilinear", x, size, align_corners, out)


def upsample_bicubic(rec, x: Tensor, size, align_corners: bool = False, out: Tensor | None = None) -> Tensor:
    """torch's F.interpolate(x, size=size, mode="bicubic", align_corners=align_corners) over
    x's last two axes (kernel nn_upsample_bicubic: Keys' A = -0.75, taps clamped into the
    image, no antialiasing): Hiera's position embedding."""
    return _resize(rec, "nn_upsample_bicubic", x, size, align_corners, out)


def upsample_nearest(rec, x: Tensor, size, out: Tensor | None = None) -> Tensor:
    """torch's F.interpolate(x, size=size, mode="nearest") over x's last two axes (kernel
    nn_upsample_nearest: source floor(d in / out), a copy): SAM 2's FPN top-down path."""
    return _resize(rec, "nn_upsample_nearest", x, size, False, out)


def _resize(rec, kernel: str, x: Tensor, size, align_corners: bool, out) -> Tensor:
    if len(x.shape) < 2 or min(x.shape[-2:]) < 1 or min(size) < 1:
        raise ValueError("%s: x [..., H, W] and size (h, w) >= 1, got %s -> %s" % (kernel, x.shape, size))
    out_h, out_w = int(size[0]), int(size[1])
    planes = math.prod(x.shape[:-2])
    y = _out(rec, out, x.shape[:-2] + (out_h, out_w), "nn.upsample")
    push = dict(planes=planes, in_h=x.shape[-2], in_w=x.shape[-1], out_h=out_h, out_w=out_w,
                align_corners=int(bool(align_corners)))  # fmt: skip
    rec.dispatch(kernel, Threads(planes * out_h * out_w), dict(x=x.buffer, y=y.buffer), push=push)
    return y


def _planes(shape) -> tuple:
    """(planes, rows, cols) of a shape: its last two axes and everything before them."""
    shape = (1, 1) + tuple(shape)
    return math.prod(shape[:-2]), shape[-2], shape[-1]


def add(rec, a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """a + b, b repeated to a's shape: a and b viewed as [planes, rows, cols] (their last two
    axes and the rest), each of b's sizes dividing a's (a residual connection: b shaped as a;
    an embedding over a batch: b with 1 plane; a window's embedding tiled over a grid; kernel
    nn_add, one f32 add)."""
    pa, pb = _planes(a.shape), _planes(b.shape)
    if any(m < 1 or n % m for n, m in zip(pa, pb)):
        raise ValueError("add: b %s does not tile a %s (as [planes, rows, cols])" % (b.shape, a.shape))
    y = _out(rec, out, a.shape, "nn.add")
    push = dict(planes=pa[0], rows=pa[1], cols=pa[2], b_planes=pb[0], b_rows=pb[1], b_cols=pb[2])
    rec.dispatch("nn_add", Threads(a.size), dict(a=a.buffer, b=b.buffer, y=y.buffer), push=push)
    return y


def transpose(rec, x: Tensor, out: Tensor | None = None) -> Tensor:
    """x's last two axes swapped, [..., R, S] -> [..., S, R] (kernel nn_transpose): channels-first
    [C, H W] to channels-last [H W, C] and back."""
    if len(x.shape) < 2:
        raise ValueError("transpose: x has fewer than two axes: %s" % (x.shape,))
    planes, rows, cols = _planes(x.shape)
    y = _out(rec, out, x.shape[:-2] + (cols, rows), "nn.transpose")
    rec.dispatch("nn_transpose", Threads(x.size), dict(x=x.buffer, y=y.buffer),
                 push=dict(planes=planes, rows=rows, cols=cols))  # fmt: skip
    return y


def pos_sine(rec, channels: int, size, temperature: float = 10000.0, out: Tensor | None = None) -> Tensor:
    """SAM 2's PositionEmbeddingSine(channels, normalize=True) of a grid of ``size`` (H, W):
    [channels, H, W], the rows' encoding in the first half (kernel nn_pos_sine)."""
    if channels < 2 or channels % 2:
        raise ValueError("pos_sine: channels must be even, got %d" % channels)
    H, W = (int(s) for s in size)
    y = _out(rec, out, (channels, H, W), "nn.pos_sine")
    log2_t = float(np.float32(math.log2(temperature)))
    push = dict(height=H, width=W, half_channels=channels // 2, log2_temperature=log2_t, scale=2 * math.pi)
    rec.dispatch("nn_pos_sine", Threads(y.size), dict(y=y.buffer), push=push)
    return y


def hiera_pos_embed(rec, pos_embed: Tensor, window_embed: Tensor, size) -> Tensor:
    """Hiera's windowed position embedding (SAM 2's _get_pos_embed) for a grid of ``size``
    (H, W): the background embedding ``pos_embed`` [C, h, w] resized bicubically to [C, H, W],
    the window's ``window_embed`` [C, w0, w0] tiled over it (H, W multiples of w0), laid out
    channels-last [H, W, C] to add to the patch embedding. Three dispatches; the
    intermediates hang on the output's ``scratch``."""
    C = pos_embed.shape[0]
    H, W = (int(s) for s in size)
    if window_embed.shape[0] != C or H % window_embed.shape[1] or W % window_embed.shape[2]:
        raise ValueError("hiera_pos_embed: window %s does not tile %s x %d x %d" % (window_embed.shape, C, H, W))
    resized = upsample_bicubic(rec, pos_embed, (H, W))
    summed = add(rec, resized, window_embed)
    y = transpose(rec, Tensor(rec.device, summed.buffer, (C, H * W)))
    y.shape = (H, W, C)
    y.scratch = [resized, summed]
    return y


def softmax(rec, x: Tensor, scale: float = 1.0, out: Tensor | None = None) -> Tensor:
    """softmax(scale x) over the last axis (kernel nn_softmax)."""
    rows, width = _rows(x)
    y = _out(rec, out, x.shape, "nn.softmax")
    rec.dispatch("nn_softmax", Threads(rows), dict(x=x.buffer, y=y.buffer),
                 push=dict(rows=rows, width=width, scale=float(scale)))  # fmt: skip
    return y


def _view(shape, strides=None):
    """The (outer, inner, row, col) strides of a 4D view, row-major unless given."""
    if strides is None:
        strides, s = [], 1
        for n in reversed(shape):
            strides.insert(0, s)
            s *= n
    return tuple(int(s) for s in strides)


def matmul(rec, a: Buffer, b: Buffer, c: Buffer, shape, a_strides=None, b_strides=None, c_strides=None,
           offsets=(0, 0, 0)):  # fmt: skip
    """Batched c = a b over a (outer, inner) batch: shape = (outer, inner, m, n, k); a is read
    at (outer, inner, i, k), b at (outer, inner, k, j), c written at (outer, inner, i, j),
    each from its element offset (``offsets``: a, b, c) through its element strides
    (row-major [outer, inner, m, k], [.., k, n], [.., m, n] unless given): a transposed
    operand is a swap of its last two strides (kernel nn_matmul)."""
    outer, inner, m, n, k = (int(s) for s in shape)
    sa = _view((outer, inner, m, k), a_strides)
    sb = _view((outer, inner, k, n), b_strides)
    sc = _view((outer, inner, m, n), c_strides)
    push = dict(batch=outer * inner, inner_count=inner, m=m, n=n, k=k)
    push.update(a_offset=int(offsets[0]), b_offset=int(offsets[1]), c_offset=int(offsets[2]))
    for prefix, s in (("a", sa), ("b", sb), ("c", sc)):
        push.update({prefix + "_outer": s[0], prefix + "_inner": s[1], prefix + "_row": s[2], prefix + "_col": s[3]})
    rec.dispatch("nn_matmul", Threads(outer * inner * m * n), dict(a=a, b=b, c=c), push=push)


def multi_head_attention(
    rec, x: Tensor, w_qkv: HalfWeight, b_qkv: Tensor | None, w_proj: HalfWeight, b_proj: Tensor | None, heads: int
) -> Tensor:
    """Global self-attention of x [T, C] (SAM's and ViT's), or of each of B sequences x
    [B, T, C] within itself: qkv = linear(x) laid out [B, T, 3, heads, d]; per sequence and
    head softmax(q k^T / sqrt(d)) v, read from qkv through strides (the matmuls' outer batch
    the sequence, inner the head) and written side by side as [B, T, heads, d]; then the
    output projection. Five dispatches. The intermediate tensors must live as long as the
    recorded sequence: they hang on the output's ``scratch`` and its ``free`` frees them."""
    if len(x.shape) not in (2, 3):
        raise ValueError("attention: x is [T, C] or [B, T, C], got shape %s" % (x.shape,))
    B, T, _ = (1,) + x.shape if len(x.shape) == 2 else x.shape
    qkv = linear(rec, x, w_qkv, b_qkv)  # [B, T, 3C]
    return _attend(rec, qkv, None, B, T, T, heads, x.shape[:-1], w_proj, b_proj)


def multiscale_attention(
    rec, x: Tensor, w_qkv: HalfWeight, b_qkv, w_proj: HalfWeight, b_proj, heads: int, q_stride: int = 0
) -> Tensor:
    """Hiera's MultiScaleAttention (SAM 2) of x [B, H, W, C]: qkv = linear(x) (C -> 3 C_out),
    with ``q_stride`` its q max-pooled over q_stride x q_stride tokens in place
    (:func:`max_pool2d` of qkv's first C_out channels), each of the B grids attending within
    itself, [B, H', W', C_out] through the projection. Five dispatches, six with the pool."""
    if len(x.shape) != 4:
        raise ValueError("multiscale attention: x is [B, H, W, C], got shape %s" % (x.shape,))
    B, H, W, _ = x.shape
    qkv = linear(rec, x, w_qkv, b_qkv)  # [B, H, W, 3 C_out]
    q, shape = None, (B, H, W)
    if q_stride:
        q = max_pool2d(rec, qkv, q_stride, channels=qkv.shape[-1] // 3)
        shape = q.shape[:3]
    return _attend(rec, qkv, q, B, H * W, shape[1] * shape[2], heads, shape, w_proj, b_proj)


def _attend(rec, qkv: Tensor, q: Tensor | None, B: int, T: int, Tq: int, heads: int, shape, w_proj, b_proj):
    """The attention of :func:`multi_head_attention` and :func:`multiscale_attention` from qkv
    [B, T, 3 C] (and q [B, Tq, C] when pooled, else qkv's own), into [*shape, C] through
    the projection."""
    C = qkv.shape[-1] // 3
    if C % heads:
        raise ValueError("attention: %d features do not split into %d heads" % (C, heads))
    d = C // heads
    row = 3 * C
    scores = Tensor.empty(rec.device, (B, heads, Tq, T), "nn.attention.scores")
    # k^T at (b, h, c, j) = qkv[b, j, 1, h, c]; q at (b, h, i, c) = qkv[b, i, 0, h, c] or q[b, i, h, c]
    if q is None:
        matmul(rec, qkv.buffer, qkv.buffer, scores.buffer, (B, heads, Tq, T, d),
               a_strides=(T * row, d, row, 1), b_strides=(T * row, d, 1, row), offsets=(0, C, 0))  # fmt: skip
    else:
        matmul(rec, q.buffer, qkv.buffer, scores.buffer, (B, heads, Tq, T, d),
               a_strides=(Tq * C, d, C, 1), b_strides=(T * row, d, 1, row), offsets=(0, C, 0))  # fmt: skip
    probs = softmax(rec, scores, 1.0 / math.sqrt(d))
    heads_out = Tensor.empty(rec.device, tuple(shape) + (C,), "nn.attention.heads")
    # v at (b, h, j, c) = qkv[b, j, 2, h, c]; out at (b, h, i, c) = heads_out[b, i, h, c]
    matmul(rec, probs.buffer, qkv.buffer, heads_out.buffer, (B, heads, Tq, d, T),
           b_strides=(T * row, d, row, 1), c_strides=(Tq * C, d, C, 1), offsets=(0, 2 * C, 0))  # fmt: skip
    y = linear(rec, heads_out, w_proj, b_proj)
    y.scratch = [qkv, scores, probs, heads_out] + ([q] if q is not None else [])
    return y


def max_pool2d(rec, x: Tensor, stride: int, channels: int | None = None, offset: int = 0,
               out: Tensor | None = None) -> Tensor:  # fmt: skip
    """torch's nn.MaxPool2d(kernel_size=stride, stride=stride) over the spatial axes of a
    channels-last x [B, H, W, X] -> [B, H // stride, W // stride, channels] (Hiera's
    do_pool): ``channels`` of each pixel's X floats from ``offset`` on (default all of them;
    kernel nn_max_pool2d)."""
    if len(x.shape) != 4 or stride < 1:
        raise ValueError("max_pool2d: x is [B, H, W, C] and stride >= 1, got %s, %d" % (x.shape, stride))
    B, H, W, X = x.shape
    C = X - offset if channels is None else int(channels)
    if offset < 0 or C < 1 or offset + C > X:
        raise ValueError("max_pool2d: channels %d from %d of %d" % (C, offset, X))
    y = _out(rec, out, (B, H // stride, W // stride, C), "nn.max_pool")
    push = dict(batch=B, height=H, width=W, channels=C, stride=int(stride), in_stride=X, in_offset=int(offset))
    rec.dispatch("nn_max_pool2d", Threads(y.size), dict(x=x.buffer, y=y.buffer), push=push)
    return y


def _windows(x: Tensor, window: int, size=None) -> tuple:
    """(batch, H, W, C, nh, nw) of a window (un)partition (size: the grid's (H, W))."""
    if window < 1:
        raise ValueError("window partition: window %d < 1" % window)
    if size is None:
        if len(x.shape) != 4:
            raise ValueError("window partition: x is [B, H, W, C], got shape %s" % (x.shape,))
        B, H, W, C = x.shape
        return B, H, W, C, -(-H // window), -(-W // window)
    H, W = (int(s) for s in size)
    nh, nw = -(-H // window), -(-W // window)
    if len(x.shape) != 4 or x.shape[1:3] != (window, window) or x.shape[0] % (nh * nw):
        raise ValueError("window unpartition: %s is not windows of %d of a %dx%d grid" % (x.shape, window, H, W))
    return x.shape[0] // (nh * nw), H, W, x.shape[3], nh, nw


def window_partition(rec, x: Tensor, window: int, out: Tensor | None = None) -> Tensor:
    """Hiera's window_partition (SAM 2): x [B, H, W, C] padded with zeros to multiples of
    ``window`` and cut into windows [B nh nw, window, window, C] (kernel nn_window_partition)."""
    B, H, W, C, nh, nw = _windows(x, window)
    y = _out(rec, out, (B * nh * nw, window, window, C), "nn.windows")
    push = dict(batch=B, height=H, width=W, channels=C, window=window, unpartition=0)
    rec.dispatch("nn_window_partition", Threads(y.size), dict(x=x.buffer, y=y.buffer), push=push)
    return y


def window_unpartition(rec, x: Tensor, window: int, size, out: Tensor | None = None) -> Tensor:
    """Hiera's window_unpartition: windows [B nh nw, window, window, C] back to the grid
    [B, H, W, C] of ``size`` (H, W), the padding cropped (kernel nn_window_partition)."""
    B, H, W, C, _, _ = _windows(x, window, size)
    y = _out(rec, out, (B, H, W, C), "nn.grid")
    push = dict(batch=B, height=H, width=W, channels=C, window=window, unpartition=1)
    rec.dispatch("nn_window_partition", Threads(y.size), dict(x=x.buffer, y=y.buffer), push=push)
    return y


def windowed_attention(
    rec, x: Tensor, window: int, w_qkv: HalfWeight, b_qkv, w_proj: HalfWeight, b_proj, heads: int
) -> Tensor:
    """Hiera's windowed self-attention of x [B, H, W, C]: the zero-padded grid cut into windows
    of ``window`` x ``window`` tokens, each attending within itself
    (:func:`multi_head_attention`, the windows its batch), the grid put back. Seven
    dispatches; the intermediates hang on the output's ``scratch``."""
    B, H, W, C = x.shape
    win = window_partition(rec, x, window)
    seqs = Tensor(rec.device, win.buffer, (win.shape[0], window * window, C))  # the same buffer, viewed
    att = multi_head_attention(rec, seqs, w_qkv, b_qkv, w_proj, b_proj, heads)
    grid = window_unpartition(rec, Tensor(rec.device, att.buffer, (win.shape[0], window, window, C)), window, (H, W))
    grid.scratch = [win, att]
    return grid
