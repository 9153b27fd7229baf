"""Spirula: a Vulkan-first 3D Gaussian Splatting trainer.

Public API:

- :func:`rasterization` / :func:`rasterization_backward`: render N Gaussians
  into C images on the GPU from numpy arrays, and back-propagate image
  gradients to every input (gsplat's conventions);
- :func:`open_device` (``"vulkan"`` or ``"cuda"``) / :func:`get_device`: the
  GPU; :class:`Device` is the Vulkan one (a Kompute manager: pass your own
  ``kp.Manager`` to share it);
- :class:`Renderer`: embed the renderer in a host program (its own
  ``kp.Manager``): set the splats once, render many frames, the image a
  Kompute tensor the host binds (docs/embedding.md);
- :func:`load_dataset`: COLMAP, Blender/NeRF-synthetic and nerfstudio scenes;
- :class:`TrainConfig` / :class:`Trainer`: training on the GPU.

The layers below, lowest first (docs/architecture.md, "Layers"):
:mod:`spirula.contract` (each kernel's contract, read from its shader),
:mod:`spirula.runtime` (the device interface, buffers, recorded sequences,
the profiler), :mod:`spirula.backends` (the Vulkan and CUDA devices),
:mod:`spirula.data`, :mod:`spirula.render` (projection, sort,
rasterization) and :mod:`spirula.train`.
"""

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "rasterization",
    "rasterization_backward",
    "open_device",
    "Device",
    "get_device",
    "Renderer",
    "load_dataset",
    "TrainConfig",
    "Trainer",
]


def __getattr__(name):
    # Imported on first use: `import spirula` stays cheap and needs no GPU.
    if name in ("rasterization", "rasterization_backward"):
        from spirula.render import api

        return getattr(api, name)
    if name in ("open_device", "get_device"):
        from spirula import backends

        return getattr(backends, name)
    if name == "Device":
        from spirula.backends.vulkan import VulkanDevice

        return VulkanDevice
    if name == "Renderer":
        from spirula.render.renderer import Renderer

        return Renderer
    if name == "load_dataset":
        from spirula.data import load_dataset

        return load_dataset
    if name == "TrainConfig":
        from spirula.train.config import TrainConfig

        return TrainConfig
    if name == "Trainer":
        from spirula.train.trainer import Trainer

        return Trainer
    raise AttributeError("module 'spirula' has no attribute %r" % name)
