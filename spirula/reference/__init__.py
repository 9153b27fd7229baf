"""Independent float64 numpy reference of the 3D Gaussian Splatting rasterizer.

Written from the maths (gsplat 1.5.3 conventions, except MAX_ALPHA = 0.99), not
from any GPU code, so the Vulkan kernels can be checked against it:

- ``projection``: 3D Gaussians -> 2D means, conics, depths, radii, SH colours (+ backward);
- ``intersect``: tile boxes, sorted (camera, tile, depth, Gaussian) intersections;
- ``rasterize``: per-pixel front-to-back alpha compositing (+ backward);
- ``render``: the three composed, forward and backward;
- ``loss``, ``adam``, ``densify``: the loss, the optimizer step, density control.

Everything is computed in float64; float32 inputs are upcast.
"""
