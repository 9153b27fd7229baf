"""From a fused TSDF volume to a clean triangle mesh (docs/mesh.md, "Surface").

:func:`extract_surface` runs marching cubes (scikit-image) on the observed
voxels, :func:`clean_mesh` keeps the large connected components and drops
floaters (trimesh), :func:`simplify_mesh` decimates to a face budget
(fast-simplification: quadric edge collapse).

The volume (``spirula.mesh.fuse.FusedVolume``, or anything with these fields):
``tsdf [X,Y,Z] f32`` signed distance, positive outside (free space), negative
inside, truncated; ``weight [X,Y,Z] f32``, 0 where no view observed the
voxel; ``origin [3]`` and ``voxel_size`` with voxel ``(i,j,k)``'s centre at
``origin + (ijk + 0.5) * voxel_size`` (world units, the splats' frame).
"""

from __future__ import annotations

import numpy as np

from spirula.errors import SpirulaError

# clean_mesh: components with less than this fraction of the largest one's
# area are floaters. Splat floaters fuse to blobs a few voxels across: at the
# default resolution (docs/mesh.md) that is well under 1% of the area of a
# surface spanning the scene, while a second real object of the scene's
# scale (a vase beside a table) has several percent and is kept.
MIN_COMPONENT_FRACTION = 0.05


def observed_cubes(weight: np.ndarray) -> np.ndarray:
    """[X,Y,Z] bool: voxels whose marching cube (the voxel and its +1
    neighbours along each axis, 8 corners) was observed by some view.

    Only those cubes produce triangles, so the boundary between observed and
    never-observed space (where the TSDF holds no information) makes none."""
    m = np.asarray(weight) > 0
    cube = np.zeros_like(m)
    c = m[:-1, :-1, :-1].copy()
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                c &= m[dx : m.shape[0] - 1 + dx, dy : m.shape[1] - 1 + dy, dz : m.shape[2] - 1 + dz]
    cube[:-1, :-1, :-1] = c
    return cube


def extract_surface(volume):
    """The zero level set of ``volume.tsdf`` over observed voxels.

    Returns a ``trimesh.Trimesh``: vertices ``[V,3] f64`` in world units,
    faces ``[F,3] int64`` wound counter-clockwise seen from outside, so face
    normals point out of the solid (towards positive TSDF) and a closed
    surface has positive volume. Raises SpirulaError when there is no surface
    (no sign change among observed voxels, or nothing observed).
    """
    import trimesh
    from skimage.measure import marching_cubes

    tsdf = np.asarray(volume.tsdf, dtype=np.float32)
    weight = np.asarray(volume.weight, dtype=np.float32)
    if tsdf.ndim != 3 or min(tsdf.shape) < 2 or weight.shape != tsdf.shape:
        raise SpirulaError("mesh: TSDF volume %s with weights %s: need [X,Y,Z] >= 2 each" % (tsdf.shape, weight.shape))
    mask = observed_cubes(weight)
    seen = weight > 0
    if not mask.any() or not np.isfinite(tsdf[seen]).all():
        raise SpirulaError("mesh: the fused volume has no observed (finite) voxels: nothing to mesh")
    lo, hi = tsdf[seen].min(), tsdf[seen].max()
    if not (lo < 0 < hi):
        raise SpirulaError("mesh: no surface: the TSDF of the observed voxels never changes sign (%g .. %g)" % (lo, hi))
    h = float(volume.voxel_size)
    # never-observed voxels hold no distance: a finite stand-in, their cubes' triangles dropped below
    vol = np.where(seen, tsdf, hi)
    # with gradient_direction="descent" scikit-image's triangles are counter-clockwise seen
    # from the side of larger values, the exterior here (tests: closed shapes have volume > 0)
    verts, faces, _, _ = marching_cubes(vol, level=0.0, gradient_direction="descent")
    # A triangle lies in the cube it was made in, so its centroid names that cube. (Not
    # scikit-image's mask=: it tests a corner other than the cube's own in 0.26.)
    cube = np.floor(verts[faces].mean(axis=1)).astype(np.int64)
    np.clip(cube, 0, np.array(mask.shape) - 1, out=cube)
    faces = faces[mask[cube[:, 0], cube[:, 1], cube[:, 2]]]
    if len(faces) == 0:
        raise SpirulaError("mesh: no surface: marching cubes found no triangle in the observed voxels")
    used, faces = np.unique(faces, return_inverse=True)
    faces = faces.reshape(-1, 3)
    verts = verts[used] * h + np.asarray(volume.origin, dtype=np.float64) + 0.5 * h  # voxel centres
    return trimesh.Trimesh(vertices=verts, faces=faces, process=False)


def clean_mesh(mesh, min_fraction: float = MIN_COMPONENT_FRACTION):
    """Merge duplicate vertices, drop degenerate and duplicate faces, and keep
    the connected components whose area is at least ``min_fraction`` of the
    largest one's (always the largest). Returns a new ``trimesh.Trimesh``."""
    import trimesh

    m = trimesh.Trimesh(vertices=mesh.vertices, faces=mesh.faces, process=False)
    m.merge_vertices()
    m.update_faces(m.nondegenerate_faces(height=1e-12 * max(m.scale, 1e-30)))
    m.update_faces(m.unique_faces())
    m.remove_unreferenced_vertices()
    if len(m.faces) == 0:
        raise SpirulaError("mesh: no surface left after removing degenerate triangles")
    labels = trimesh.graph.connected_component_labels(m.face_adjacency, node_count=len(m.faces))
    area = np.bincount(labels, weights=m.area_faces)
    keep = area >= min_fraction * area.max()
    keep[np.argmax(area)] = True
    m.update_faces(keep[labels])
    m.remove_unreferenced_vertices()
    return m


def simplify_mesh(mesh, target_faces: int):
    """Decimate to about ``target_faces`` faces (quadric edge collapse,
    fast-simplification); a mesh already that small comes back unchanged.
    Returns a new ``trimesh.Trimesh`` (vertex attributes are not kept: colour
    after simplifying)."""
    import fast_simplification
    import trimesh

    target_faces = int(target_faces)
    if target_faces < 4:
        raise SpirulaError("mesh: --simplify %d: need at least 4 faces" % target_faces)
    if len(mesh.faces) <= target_faces:
        return mesh
    verts, faces = fast_simplification.simplify(
        np.asarray(mesh.vertices, dtype=np.float32), np.asarray(mesh.faces, dtype=np.int32), target_count=target_faces
    )
    out = trimesh.Trimesh(vertices=verts.astype(np.float64), faces=faces, process=False)
    out.update_faces(out.nondegenerate_faces())
    out.remove_unreferenced_vertices()
    return out
