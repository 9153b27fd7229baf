"""pack_rgba8 (shaders/pack_rgba8.comp): float RGB -> RGBA8 words on the GPU, equal to
spirula/render/video.py to_uint8 bit for bit (round half to even, NaN -> 0), and
RenderResult.rgb8() equal to to_uint8(render(...).numpy()); the kernel on each backend."""

import numpy as np
from view_cases import activated, blob_params

from spirula.reference.pack import pack_rgba8, rgb8_case
from spirula.reference.pack import to_uint8 as reference_to_uint8
from spirula.render.pack import record_pack_rgba8, rgb8_view
from spirula.render.renderer import Renderer
from spirula.render.video import to_uint8
from spirula.view.camera import Camera


def _gpu_pack(device, rgb, src_offset=0, count=None):
    flat = np.ascontiguousarray(rgb, np.float32).reshape(-1, 3)
    count = flat.shape[0] - src_offset if count is None else count
    src = device.pool.alloc("test.rgb", flat.shape, np.float32)
    dst = device.pool.alloc("test.packed", (count,), np.uint32)
    try:
        device.upload(src, flat)
        record_pack_rgba8(device.recorder("test.pack"), src, dst, count, src_offset).finish().run()
        return device.readback(dst)
    finally:
        device.pool.free(src)
        device.pool.free(dst)


def test_case_holds_exact_ties():
    x = rgb8_case().reshape(-1)
    prod = x[np.isfinite(x)] * np.float32(255)
    assert ((prod - np.floor(prod)) == 0.5).sum() >= 50  # the round-half-even branch is exercised


def test_pack_rgba8_equals_to_uint8(backend):
    rgb = rgb8_case(37, 61, seed=1)
    got = _gpu_pack(backend, rgb).reshape(37, 61)
    want = pack_rgba8(rgb)
    assert got.dtype == np.uint32 and np.array_equal(got, want), int((got != want).sum())
    finite = np.isfinite(rgb).all(-1)
    assert np.array_equal(rgb8_view(got)[finite], to_uint8(rgb[finite]))
    assert (got >> 24 == 255).all()


def test_pack_rgba8_source_offset(backend):
    rgb = rgb8_case(40, 60, seed=2)
    got = _gpu_pack(backend, rgb, src_offset=700, count=1000)
    assert np.array_equal(got, pack_rgba8(rgb.reshape(-1, 3)[700:1700]))


def test_pack_rgba8_grid_stride(backend):
    """8 workgroups of 256 threads for 3,975 pixels: the grid-stride loop runs twice."""
    from kernel_cases import run_kernel

    rgb = rgb8_case(53, 75, seed=4).reshape(-1, 3)
    n = rgb.shape[0]
    out = run_kernel(
        backend, "pack_rgba8", (8,), {"rgb": rgb}, {"packed": ((n,), np.uint32)}, push=dict(src_offset=0, count=n)
    )
    assert np.array_equal(out["packed"], pack_rgba8(rgb))


def test_render_result_rgb8_equals_to_uint8_of_numpy(device):
    params = blob_params(seed=5)
    r = Renderer(device=device, background=[0.9, 0.2, 0.4]).set_splats(**activated(params), sh_degree=1)
    camera = Camera.fit(params["means"])
    try:
        for w, h in ((77, 45), (77, 45), (40, 30)):  # a size change reallocates the packed buffer
            camera.orbit(0.3, 0.05)
            out = r.render(camera.viewmat(), camera.K(w, h), w, h)
            got = out.rgb8()
            assert got.shape == (h, w, 3) and got.dtype == np.uint8
            assert np.array_equal(got, to_uint8(out.numpy()))
    finally:
        r.close()


def test_the_references_rounding_is_the_videos_to_uint8():
    rgb = rgb8_case(37, 61, seed=4)
    finite = np.isfinite(rgb)
    assert np.array_equal(reference_to_uint8(rgb[finite]), to_uint8(rgb[finite]))
