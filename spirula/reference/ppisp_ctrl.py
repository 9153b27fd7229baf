"""PPISP's controller, float64 reference of shaders/ppisp_ctrl_fwd.comp, ppisp_ctrl_mlp.comp
and ppisp_ctrl_bwd.comp (docs/design.md §2.8, "PPISP's controller"). Written from the
network nv-tlabs/ppisp's ``_PPISPController`` describes (Apache-2.0; read, not copied): one
network per camera that predicts a view's exposure and 8 colour latents from its render
[H,W,3] (detached: the render gets no gradient):

1. a 1x1 convolution 3 -> 16 per pixel, the max over each 3x3 cell (stride 3, floor: the
   cells are H // 3 x W // 3; ties keep the first pixel in row-major order), ReLU;
2. 1x1 convolutions 16 -> 32, ReLU, 32 -> 64 (no ReLU): 64 features per cell;
3. torch's adaptive average pool to 5 x 5: bin (i, j) holds the cell rows floor(i h / 5)
   to ceil((i + 1) h / 5) - 1 and the columns alike (bins overlap where h or w is no
   multiple of 5), flattened channel-major (c x 25 + 5 i + j), then the prior exposure
   (0: no EXIF): 1,601 inputs;
4. an MLP 1,601 -> 128, ReLU, 2 x (128 -> 128, ReLU), and the two heads 128 -> 1
   (exposure) and 128 -> 8 (colour latents), stored as one 9 x 128 layer (exposure row
   first): out = (exposure, colour[8]).

The weights of one camera are one flat vector (:data:`LAYOUT`: torch's [out, in] per layer,
then its bias) of :data:`CTRL_SIZE` floats; torch's default init (:func:`ctrl_init`).
"""

from __future__ import annotations

import math

import numpy as np

CELL = 3  # the max pool's size and stride
GRID = 5  # the adaptive pool's bins per axis
C1, C2, C3 = 16, 32, 64  # the convolutions' channels
N_IN = C3 * GRID * GRID + 1  # 1,601: the pooled features and the prior exposure
HIDDEN = 128
N_OUT = 9  # exposure, colour[8]
# (name, out, in): the layers in storage order, each [out, in] then bias [out]
LAYERS = (
    ("conv1", C1, 3),
    ("conv2", C2, C1),
    ("conv3", C3, C2),
    ("fc1", HIDDEN, N_IN),
    ("fc2", HIDDEN, HIDDEN),
    ("fc3", HIDDEN, HIDDEN),
    ("head", N_OUT, HIDDEN),
)


def _layout():
    out, o = {}, 0
    for name, n_out, n_in in LAYERS:
        out[name] = (o, n_out, n_in)
        o += n_out * n_in + n_out
    return out, o


LAYOUT, CTRL_SIZE = _layout()  # name -> (offset, out, in); 241,961 floats a camera
CONV_SIZE = LAYOUT["fc1"][0]  # 2,720: the convolutions' weights and biases


def unpack(w) -> dict:
    """name -> (weight [out, in], bias [out]) of one camera's flat vector."""
    w = np.asarray(w)
    return {k: (w[o : o + n * m].reshape(n, m), w[o + n * m : o + n * m + n]) for k, (o, n, m) in LAYOUT.items()}


def ctrl_init(rng, n_cameras: int = 1) -> np.ndarray:
    """torch's default init of nn.Conv2d and nn.Linear: weights and biases uniform in
    +-1 / sqrt(fan_in) (kaiming_uniform with a = sqrt(5)); [n_cameras, CTRL_SIZE]."""
    out = np.zeros((n_cameras, CTRL_SIZE))
    for c in range(n_cameras):
        for _, (o, n, m) in LAYOUT.items():
            bound = 1.0 / math.sqrt(m)
            out[c, o : o + n * m + n] = rng.uniform(-bound, bound, n * m + n)
    return out


def bins(n: int):
    """torch's adaptive pool bins of ``n`` rows into GRID: [(start, end)]."""
    return [((i * n) // GRID, -(-((i + 1) * n) // GRID)) for i in range(GRID)]


def ctrl_fwd(rgb, w) -> dict:
    """The network on ``rgb`` [H,W,3] with one camera's weights ``w``: its intermediates
    (z1 [h,w,9,16] the first convolution per pixel of each cell, argmax [h,w,16], a1
    [h,w,16], z2/a2 [h,w,32], feat [h,w,64], x0 [1601], h1..h3 [128]) and ``out`` [9]."""
    p = unpack(w)
    rgb = np.asarray(rgb, np.float64)
    H, W, _ = rgb.shape
    h, wd = H // CELL, W // CELL
    px = rgb[: h * CELL, : wd * CELL].reshape(h, CELL, wd, CELL, 3).transpose(0, 2, 1, 3, 4).reshape(h, wd, 9, 3)
    W1, b1 = p["conv1"]
    z1 = px @ W1.T + b1  # [h, w, 9, 16]
    arg = z1.argmax(axis=2)  # the first maximum
    m = z1.max(axis=2)
    a1 = np.maximum(m, 0.0)
    W2, b2 = p["conv2"]
    z2 = a1 @ W2.T + b2
    a2 = np.maximum(z2, 0.0)
    W3, b3 = p["conv3"]
    feat = a2 @ W3.T + b3  # [h, w, 64]
    x0 = np.zeros(N_IN)
    rb, cb = bins(h), bins(wd)
    for i, (r0, r1) in enumerate(rb):
        for j, (c0, c1) in enumerate(cb):
            x0[np.arange(C3) * 25 + GRID * i + j] = feat[r0:r1, c0:c1].mean(axis=(0, 1))
    acts = [x0]
    for name in ("fc1", "fc2", "fc3"):
        Wk, bk = p[name]
        acts.append(np.maximum(Wk @ acts[-1] + bk, 0.0))
    Wh, bh = p["head"]
    out = Wh @ acts[-1] + bh
    return dict(px=px, z1=z1, argmax=arg, m=m, a1=a1, z2=z2, a2=a2, feat=feat, x0=x0, h1=acts[1], h2=acts[2],
                h3=acts[3], out=out)  # fmt: skip


def ctrl_bwd(rgb, w, grad_out) -> dict:
    """The VJP of :func:`ctrl_fwd`'s ``out`` for ``grad_out`` [9]: ``grads`` [CTRL_SIZE]
    (one camera's weights, :data:`LAYOUT`), ``x0`` [1601] (dL/d the MLP's input) and
    ``feat`` [h,w,64] (dL/d the features)."""
    f = ctrl_fwd(rgb, w)
    p = unpack(w)
    g = np.zeros(CTRL_SIZE)
    gp = unpack(g)  # views into g

    def put(name, gw, gb):
        gp[name][0][...] = gw
        gp[name][1][...] = gb

    dz = np.asarray(grad_out, np.float64)
    acts = [f["x0"], f["h1"], f["h2"], f["h3"]]
    for k, name in zip((3, 2, 1, 0), ("head", "fc3", "fc2", "fc1")):
        put(name, np.outer(dz, acts[k]), dz)
        dx = p[name][0].T @ dz
        dz = dx * (acts[k] > 0) if k > 0 else dx
    dx0 = dz
    h, wd = f["feat"].shape[:2]
    dfeat = np.zeros((h, wd, C3))
    rb, cb = bins(h), bins(wd)
    for i, (r0, r1) in enumerate(rb):
        for j, (c0, c1) in enumerate(cb):
            dfeat[r0:r1, c0:c1] += dx0[np.arange(C3) * 25 + GRID * i + j] / ((r1 - r0) * (c1 - c0))
    put("conv3", np.einsum("yxo,yxi->oi", dfeat, f["a2"]), dfeat.sum(axis=(0, 1)))
    dz2 = (dfeat @ p["conv3"][0]) * (f["a2"] > 0)
    put("conv2", np.einsum("yxo,yxi->oi", dz2, f["a1"]), dz2.sum(axis=(0, 1)))
    dm = (dz2 @ p["conv2"][0]) * (f["m"] > 0)  # [h, w, 16]
    # the max routes each channel's gradient to its argmax pixel
    xa = np.take_along_axis(f["px"], f["argmax"][..., None], axis=2)  # [h, w, 16, 3]
    put("conv1", np.einsum("yxo,yxoi->oi", dm, xa), dm.sum(axis=(0, 1)))
    return dict(grads=g, x0=dx0, feat=dfeat)


def ctrl_case(H=20, W=26, seed=0):
    """A small case: render [H,W,3] in [0, 1], weights of one camera (torch's init), a
    cotangent [9]. Inputs away from ties: a random render has no equal maxima."""
    rng = np.random.default_rng(seed)
    return rng.uniform(0.0, 1.0, (H, W, 3)), ctrl_init(rng)[0], rng.normal(0.0, 1.0, N_OUT)
