"""Colour for a mesh: per-vertex colours or a baked texture (docs/mesh.md, "Colour").

Both ask a ``colour_fn(points [M,3] f64, normals [M,3] f64) -> rgb [M,3]``
(linear 0..1, clipped) for the colour of the surface at world points with
unit outward normals. Two come with the module: :func:`splat_colour_fn` (the
nearby splats' base colour) and :func:`volume_colour_fn` (the fused volume's
colour grid, trilinear).

Texture: :func:`bake_texture` unwraps the mesh into a UV atlas (xatlas),
rasterizes every triangle in UV space to find the world point and normal of
each texel centre (texels up to ``RING`` texels outside a chart take its
nearest point, so bilinear taps at a chart's rim stay on that chart),
colours those, then fills every other texel with the colour of the nearest
set one, so mip-maps never pull in black from outside the charts.

Both draw a progress bar (spirula/progress.py): colouring a texture of
millions of texels from the splats takes minutes on a few cores.

Texture convention (glTF, and trimesh's ``TextureVisuals``): image row 0 is
the top; texel ``(row y, column x)`` of a ``H x W`` image has its centre at
``uv = ((x + 0.5) / W, 1 - (y + 0.5) / H)``.
"""

from __future__ import annotations

import numpy as np

from spirula.data.scene import quats_to_rotmats
from spirula.progress import Bar
from spirula.render.rasterizer import SH_C0  # base colour = 0.5 + SH_C0 * f_dc

TEXEL_CHUNK = 1 << 22  # texel candidates per batch in bake_texture (bounds memory at ~200 MB)
COLOUR_CHUNK = 1 << 16  # points per colour_fn call: the progress bar moves that often
# Texels up to RING texels outside a triangle take the colour of its nearest point,
# so every bilinear tap of a point in a chart (<= sqrt(2) texels away) holds that
# chart's colour. xatlas packs charts ATLAS_PADDING texels apart in an atlas that
# may come out up to ~15% larger than asked (then scaled into the texture): still
# more than two rings apart, so no texel is in reach of two charts.
RING = 1.5
ATLAS_PADDING = 5


def colour_vertices(mesh, colour_fn, progress: bool = True):
    """A copy of ``mesh`` with ``visual.vertex_colors [V,4] uint8`` from
    ``colour_fn`` at its vertices (vertex normals); a progress bar unless not ``progress``."""
    import trimesh

    points, normals = np.asarray(mesh.vertices, np.float64), np.asarray(mesh.vertex_normals, np.float64)
    with Bar(len(points), "colouring vertices", unit="vertex") if progress else _NoBar() as bar:
        rgb = _colour(colour_fn, points, normals, bar)
    out = trimesh.Trimesh(vertices=mesh.vertices, faces=mesh.faces, process=False)
    out.visual = trimesh.visual.ColorVisuals(out, vertex_colors=_rgba8(rgb))
    return out


def atlas(mesh, size: int):
    """UV-unwrap ``mesh`` with xatlas for a ``size x size`` texture.

    Returns ``(vmapping [V'] int, faces [F,3] int, uv [V',2] f64 in [0,1],
    mapped [F] bool)``: vertex ``v'`` of the unwrapped mesh is original vertex
    ``vmapping[v']`` (vertices on chart seams are split); faces not ``mapped``
    have zero area and no texels (their uv: see below)."""
    import xatlas

    at = xatlas.Atlas()
    at.add_mesh(np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.uint32))
    pack = xatlas.PackOptions()
    pack.resolution = int(size)
    pack.padding = ATLAS_PADDING
    pack.bilinear = True
    at.generate(pack_options=pack)
    vmapping, faces, uv = at[0]
    vmapping, faces, uv = vmapping.astype(np.int64), faces.astype(np.int64), uv.astype(np.float64)
    # xatlas leaves faces of zero area unmapped (uv 0, 0): invisible, but a vertex
    # colour read from the texture (PLY export) would be wrong there, so their
    # vertices take the uv of the nearest mapped vertex (the same point, when one exists)
    e = uv[faces[:, 1:]] - uv[faces[:, :1]]
    mapped = np.abs(e[:, 0, 0] * e[:, 1, 1] - e[:, 0, 1] * e[:, 1, 0]) > 0
    good = np.zeros(len(uv), bool)
    good[faces[mapped]] = True
    bad = np.flatnonzero(~good)
    if len(bad) and good.any():
        from scipy.spatial import cKDTree

        pos = np.asarray(mesh.vertices, np.float64)[vmapping]
        ids = np.flatnonzero(good)
        _, nearest = cKDTree(pos[ids]).query(pos[bad])
        uv[bad] = uv[ids[nearest]]
    return vmapping, faces, uv, mapped


def rasterize_uv(uv: np.ndarray, faces: np.ndarray, size: int, ring: float = RING):
    """The texels within ``ring`` texels of a triangle, for every triangle of a UV layout.

    uv: [V,2] in [0,1]; faces: [F,3]. Yields batches ``(face [M] int64,
    bary [M,3] f64, dist [M] f64, row [M] int64, col [M] int64, n_faces)``:
    ``bary`` are the barycentrics of the point of the triangle nearest to the
    texel centre, ``dist`` its distance in texels (0 inside); the batches
    cover the faces in order, ``n_faces`` of them each. A texel near several
    triangles comes once per triangle: keep the nearest."""
    px = np.empty_like(uv)
    px[:, 0] = uv[:, 0] * size - 0.5  # texel-centre coordinates: centre of column x is x
    px[:, 1] = (1.0 - uv[:, 1]) * size - 0.5
    tri = px[faces]  # [F,3,2]
    lo = np.clip(np.ceil(tri.min(axis=1) - ring), 0, size - 1).astype(np.int64)
    hi = np.clip(np.floor(tri.max(axis=1) + ring), 0, size - 1).astype(np.int64)
    w = np.maximum(hi[:, 0] - lo[:, 0] + 1, 0)
    h = np.maximum(hi[:, 1] - lo[:, 1] + 1, 0)
    count = w * h
    e1, e2 = tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]
    orient = np.sign(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])  # 0 for a degenerate triangle: never rejected early
    ends = np.cumsum(count)
    start = 0
    while start < len(faces):
        # faces [start, stop) give at most TEXEL_CHUNK candidates (at least one face)
        base = ends[start - 1] if start else 0
        stop = max(int(np.searchsorted(ends, base + TEXEL_CHUNK, side="right")), start + 1)
        f = np.arange(start, stop)
        n = count[f]
        fid = np.repeat(f, n)
        local = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        col = lo[fid, 0] + local % w[fid]
        row = lo[fid, 1] + local // w[fid]
        # cheap first: a texel further than ring from one of the triangle's edge lines is out
        q = np.stack([col, row], axis=1).astype(np.float64)
        t = tri[fid]
        keep = np.ones(len(q), bool)
        for i in range(3):
            a, e = t[:, i], t[:, (i + 1) % 3] - t[:, i]
            side = (e[:, 0] * (q[:, 1] - a[:, 1]) - e[:, 1] * (q[:, 0] - a[:, 0])) * orient[fid]
            keep &= side >= -ring * np.maximum(np.hypot(e[:, 0], e[:, 1]), 1e-30)
        fid, q, t, row, col = fid[keep], q[keep], t[keep], row[keep], col[keep]
        bary, dist = _closest_on_triangle(q, t)
        near = dist <= ring
        yield fid[near], bary[near], dist[near], row[near], col[near], stop - start
        start = stop


def _closest_on_triangle(p: np.ndarray, tri: np.ndarray):
    """Barycentrics [M,3] of the point of 2D triangle tri [M,3,2] nearest to p [M,2], and the distance [M]."""
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    det = (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * (b[:, 1] - a[:, 1])
    ok = np.abs(det) > 1e-12
    det = np.where(ok, det, 1.0)
    dx, dy = p[:, 0] - a[:, 0], p[:, 1] - a[:, 1]
    l1 = (dx * (c[:, 1] - a[:, 1]) - (c[:, 0] - a[:, 0]) * dy) / det
    l2 = ((b[:, 0] - a[:, 0]) * dy - dx * (b[:, 1] - a[:, 1])) / det
    bary = np.stack([1.0 - l1 - l2, l1, l2], axis=1)
    dist = np.zeros(len(p))
    out = np.flatnonzero(~(ok & (bary >= 0).all(axis=1)))  # outside (or degenerate): the nearest edge point
    if len(out) == 0:
        return bary, dist
    po, to = p[out], tri[out]
    best_d = np.full(len(out), np.inf)
    best_b = np.zeros((len(out), 3))
    rows = np.arange(len(out))
    for i in range(3):  # a degenerate triangle is its edges
        j = (i + 1) % 3
        a, e = to[:, i], to[:, j] - to[:, i]
        t = np.clip(np.einsum("md,md->m", po - a, e) / np.maximum(np.einsum("md,md->m", e, e), 1e-30), 0.0, 1.0)
        r = a + t[:, None] * e - po
        d = np.sqrt(r[:, 0] * r[:, 0] + r[:, 1] * r[:, 1])
        better = d < best_d
        best_d[better] = d[better]
        best_b[better] = 0.0
        best_b[rows[better], i] = 1.0 - t[better]
        best_b[rows[better], j] = t[better]
    bary[out], dist[out] = best_b, best_d
    return bary, dist


def dilate(image: np.ndarray, covered: np.ndarray) -> np.ndarray:
    """Every texel outside ``covered [H,W] bool`` takes the colour of the
    nearest covered texel (Euclidean, scipy's distance transform), so no
    filter footprint or mip level reaches an unset texel. image: [H,W,C]."""
    from scipy import ndimage

    if covered.all() or not covered.any():
        return image
    _, (iy, ix) = ndimage.distance_transform_edt(~covered, return_indices=True)
    return image[iy, ix]


def bake_texture(mesh, colour_fn, size: int = 2048, progress: bool = True):
    """A textured copy of ``mesh``: xatlas UVs, a ``size x size`` RGB texture
    with ``colour_fn`` at every texel centre inside a triangle (interpolated
    vertex normals), dilated across chart borders.

    Returns a ``trimesh.Trimesh`` whose ``visual`` is a ``TextureVisuals``
    (``uv [V',2]``, ``material.image`` a PIL RGB image); seams split vertices.
    A progress bar by faces coloured, unless not ``progress``."""
    with Bar(len(mesh.faces), "colouring texture", unit="face") if progress else _NoBar() as bar:
        return _bake(mesh, colour_fn, size, bar)


def _bake(mesh, colour_fn, size: int, bar):
    import trimesh
    from PIL import Image

    vmapping, faces, uv, mapped = atlas(mesh, size)  # xatlas: no progress of its own
    verts = np.asarray(mesh.vertices, np.float64)[vmapping]
    normals = np.asarray(mesh.vertex_normals, np.float64)[vmapping]
    image = np.zeros((size, size, 3), np.float32)
    nearest = np.full((size, size), np.inf)  # distance in texels to the triangle that set the texel
    painted = np.flatnonzero(mapped)
    done = len(faces) - len(painted)  # faces xatlas left unmapped paint nothing
    for fid, bary, dist, row, col, n_faces in rasterize_uv(uv, faces[painted], size):
        fid = painted[fid]
        order = np.argsort(-dist, kind="stable")  # the nearest triangle writes last
        fid, bary, dist, row, col = fid[order], bary[order], dist[order], row[order], col[order]
        closer = dist < nearest[row, col]
        fid, bary, dist, row, col = fid[closer], bary[closer], dist[closer], row[closer], col[closer]
        corners = faces[fid]
        p = np.einsum("mk,mkd->md", bary, verts[corners])
        n = np.einsum("mk,mkd->md", bary, normals[corners])
        n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)
        # the bar moves by this batch's faces, in step with its texels coloured
        image[row, col] = _colour(colour_fn, p, n, bar, start=done, faces=n_faces)
        nearest[row, col] = dist
        done += n_faces
        bar.update_to(done)
    image = dilate(image, np.isfinite(nearest))
    texture = Image.fromarray(np.round(image * 255.0).astype(np.uint8), "RGB")
    out = trimesh.Trimesh(vertices=verts, faces=faces, process=False)
    material = trimesh.visual.material.PBRMaterial(
        baseColorTexture=texture, baseColorFactor=[255, 255, 255, 255], metallicFactor=0.0, roughnessFactor=1.0
    )
    out.visual = trimesh.visual.TextureVisuals(uv=uv, material=material)
    return out


def splat_colour_fn(splats: dict, k: int = 16):
    """colour_fn from splats: at each point the base colour (SH DC, view
    independent) of its ``k`` nearest splats, weighted by opacity times the
    splat's Gaussian falloff ``exp(-d^T Sigma^-1 d / 2)`` at the point; where
    every weight underflows, the nearest splat's colour.

    splats: ``means [N,3]``, ``quats [N,4]`` wxyz, ``log_scales [N,3]``,
    ``opacity_logits [N]``, ``sh_coeffs [N,K,3]`` (spirula.data.read_splat_ply)."""
    from scipy.spatial import cKDTree

    means = np.asarray(splats["means"], np.float64)
    base = np.clip(0.5 + SH_C0 * np.asarray(splats["sh_coeffs"], np.float64)[:, 0, :], 0.0, 1.0)
    alpha = 1.0 / (1.0 + np.exp(-np.asarray(splats["opacity_logits"], np.float64)))
    rot = quats_to_rotmats(splats["quats"])  # [N,3,3], columns are the splat's axes
    inv_scale = np.exp(-np.asarray(splats["log_scales"], np.float64))
    tree = cKDTree(means)
    k = min(int(k), len(means))

    def colour(points, normals):
        out = np.empty((len(points), 3))
        for s in range(0, len(points), 1 << 16):
            p = points[s : s + (1 << 16)]
            _, idx = tree.query(p, k=k, workers=-1)  # every core: the query is most of the time
            idx = idx.reshape(len(p), k)
            d = p[:, None, :] - means[idx]  # [m,k,3]
            local = np.einsum("mkji,mkj->mki", rot[idx], d) * inv_scale[idx]  # in the splat's axes, in sigmas
            w = alpha[idx] * np.exp(-0.5 * np.einsum("mki,mki->mk", local, local))
            total = w.sum(axis=1)
            mix = np.einsum("mk,mkc->mc", w, base[idx]) / np.maximum(total, 1e-300)[:, None]
            out[s : s + len(p)] = np.where((total > 1e-12)[:, None], mix, base[idx[:, 0]])
        return out

    return colour


def volume_colour_fn(volume):
    """colour_fn from the fused volume's ``color [X,Y,Z,3]``: trilinear in
    the voxel-centre grid, weighted by ``weight`` so never-observed voxels
    (colour 0) do not darken the result; black where no corner was observed."""
    from scipy import ndimage

    color = np.asarray(volume.color, np.float64)
    seen = (np.asarray(volume.weight) > 0).astype(np.float64)
    origin = np.asarray(volume.origin, np.float64)
    h = float(volume.voxel_size)

    def colour(points, normals):
        coords = ((np.asarray(points, np.float64) - origin) / h - 0.5).T  # voxel index space
        w = ndimage.map_coordinates(seen, coords, order=1, mode="nearest")
        rgb = np.stack(
            [ndimage.map_coordinates(color[..., c] * seen, coords, order=1, mode="nearest") for c in range(3)], axis=1
        )
        return rgb / np.maximum(w, 1e-12)[:, None]

    return colour


def _colour(colour_fn, points, normals, bar, start: int = 0, faces: int | None = None) -> np.ndarray:
    """``colour_fn`` at ``points`` in calls of COLOUR_CHUNK, checked and clipped;
    ``bar`` moves to ``start`` plus the share done of ``faces`` (None: the points themselves)."""
    out = np.empty((len(points), 3))
    for s in range(0, len(points), COLOUR_CHUNK):
        e = min(s + COLOUR_CHUNK, len(points))
        out[s:e] = _rgb(colour_fn(points[s:e], normals[s:e]), e - s)
        bar.update_to(start + (e if faces is None else faces * e // len(points)))
    return out


class _NoBar:
    def update_to(self, n, total=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def _rgb(rgb, m: int) -> np.ndarray:
    rgb = np.asarray(rgb, np.float64)
    if rgb.shape != (m, 3):
        raise ValueError("colour_fn returned shape %s, expected (%d, 3)" % (rgb.shape, m))
    return np.clip(np.nan_to_num(rgb, nan=0.0), 0.0, 1.0)


def _rgba8(rgb: np.ndarray) -> np.ndarray:
    out = np.full((len(rgb), 4), 255, np.uint8)
    out[:, :3] = np.round(rgb * 255.0)
    return out
