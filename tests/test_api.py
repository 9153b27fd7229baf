"""The public API: every name in spirula.__all__ exists and is documented."""

import spirula


def test_every_public_name_resolves_and_has_a_docstring():
    assert isinstance(spirula.__all__, list)
    for name in spirula.__all__:
        obj = getattr(spirula, name)
        if name != "__version__":
            assert obj.__doc__ and len(obj.__doc__.strip()) > 20, name


def test_rasterization_is_the_numpy_entry_point():
    from spirula.render import api

    assert spirula.rasterization is api.rasterization
    assert "[C,H,W,3]" in spirula.rasterization.__doc__
    assert "means2d_absgrad" in spirula.rasterization_backward.__doc__


def test_embedding_app_can_hand_over_its_own_manager():
    """Another Kompute app passes its kp.Manager; Spirula renders with it and the
    app reads the rendered buffer's tensor directly."""
    import kp
    import numpy as np

    mgr = kp.Manager()
    dev = spirula.open_device("vulkan", manager=mgr)
    assert isinstance(dev, spirula.Device) and dev.mgr is mgr
    from render_cases import random_scene

    s = random_scene(n=20, cameras=1, sh_degree=0)
    colors, _, _, meta = spirula.rasterization(**s, device=dev)
    raster = meta["_context"].raster
    assert raster.out_colors.tensor.size() * 4 >= colors.nbytes  # a kp.Tensor the app can bind
    assert np.isfinite(colors).all()
