"""Spirula: a Vulkan-first 3D Gaussian Splatting trainer.

The GPU runtime lives in :mod:`spirula.runtime` (devices, buffers, kernels,
recorded sequences, the profiler).
"""
__version__ = "0.1.0"

__all__ = ["__version__"]
