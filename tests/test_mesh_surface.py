"""spirula/mesh/surface.py and colour.py on analytic TSDF volumes (tests/mesh_cases.py):
a sphere, a box and a torus mesh to their surface (Chamfer distance, normals,
watertight, outward winding), cleanup drops a floater, decimation meets its
target, and vertex colours and baked textures match a colour field.

Grids are 40^3 over [-1.2, 1.2]^3: voxel size h = 0.06, small shapes mesh in
well under a second each."""

import numpy as np
import pytest
from mesh_cases import COLOUR_GRADIENT, Box, Sphere, Torus, colour_field, mesh_distance, tsdf_volume

from spirula.errors import SpirulaError
from spirula.mesh.colour import bake_texture, colour_vertices, dilate, splat_colour_fn, volume_colour_fn
from spirula.mesh.surface import MIN_COMPONENT_FRACTION, clean_mesh, extract_surface, simplify_mesh

F32 = 1e-6  # float32 storage of TSDF values <= 3h = 0.18: rounding ~1e-8, kept with margin


@pytest.fixture(scope="module")
def meshes():
    out = {}
    for shape in (Sphere(), Box(), Torus()):
        vol = tsdf_volume(shape, colour=colour_field)
        out[type(shape).__name__] = (shape, vol, clean_mesh(extract_surface(vol)))
    return out


def smooth_bound(h, rho):
    """Largest distance between a smooth surface (curvature radius >= rho)
    and its marching-cubes mesh from an exact SDF sampled at spacing h.

    A vertex interpolates the SDF linearly along a cube edge: the SDF there is
    off by at most h^2/8 * |f''| <= h^2 / (8 rho), and |SDF| is the distance.
    A triangle lies in one cube, so its smallest enclosing circle has radius
    <= sqrt(3) h / 2; with its corners on the surface it bows from it by at
    most that radius^2 / (2 rho) = 3 h^2 / (8 rho). Sum: h^2 / (2 rho)."""
    return h * h / (2 * rho) + F32


@pytest.mark.parametrize("name", ["Sphere", "Torus"])
def test_smooth_shapes_mesh_to_their_surface(meshes, name):
    shape, vol, mesh = meshes[name]
    h = vol.voxel_size
    rng = np.random.default_rng(1)
    bound = smooth_bound(h, shape.min_curvature_radius)
    on_mesh = mesh.sample(4000, seed=2)
    assert np.abs(shape.sdf(on_mesh)).max() <= bound  # mesh -> surface
    assert mesh_distance(mesh, shape.sample(300, rng)).max() <= bound  # surface -> mesh
    # A triangle spans <= sqrt(3) h; the true normal turns by <= sqrt(3) h / rho
    # across it, and the face normal lies within that cone.
    dots = np.sum(mesh.face_normals * shape.normal(mesh.triangles_center), axis=1)
    assert dots.min() >= np.cos(np.sqrt(3) * h / shape.min_curvature_radius)


def test_box_meshes_to_its_surface(meshes):
    shape, vol, mesh = meshes["Box"]
    h = vol.voxel_size
    # Edges and corners are cut by marching cubes, but every triangle lies in a
    # cube of side h that holds a zero crossing: within its diagonal of the surface.
    assert np.abs(shape.sdf(mesh.sample(4000, seed=2))).max() <= np.sqrt(3) * h
    assert mesh_distance(mesh, shape.sample(300, np.random.default_rng(1))).max() <= np.sqrt(3) * h
    # Away from the edges (further than a cube diagonal) the SDF is linear, so
    # interpolation is exact: the faces lie on the box's faces, normals exact.
    centres = mesh.triangles_center
    flat = shape.edge_distance(centres) > np.sqrt(3) * h
    assert flat.mean() > 0.5
    assert np.abs(shape.sdf(centres[flat])).max() <= F32
    dots = np.sum(mesh.face_normals[flat] * shape.normal(centres[flat]), axis=1)
    assert dots.min() >= 1 - 1e-6


@pytest.mark.parametrize("name", ["Sphere", "Box", "Torus"])
def test_closed_shapes_are_watertight_and_wound_outwards(meshes, name):
    shape, vol, mesh = meshes[name]
    assert mesh.is_watertight and mesh.is_winding_consistent
    assert mesh.volume > 0  # counter-clockwise seen from outside
    # one surface of the right topology: genus 1 for the torus, 0 otherwise
    assert mesh.body_count == 1
    assert mesh.euler_number == (0 if name == "Torus" else 2)


def test_unobserved_voxels_make_no_surface():
    vol = tsdf_volume(Sphere())
    full = extract_surface(vol)
    vol.weight[:, :, : vol.weight.shape[2] // 2] = 0  # the lower half never seen
    half = extract_surface(vol)
    assert not half.is_watertight
    # only the observed half is meshed, nothing along the boundary with unobserved space
    assert half.vertices[:, 2].min() >= vol.origin[2] + (vol.weight.shape[2] // 2 + 0.5) * vol.voxel_size - F32
    assert 0.3 < half.area / full.area < 0.55


@pytest.mark.parametrize("what", ["unobserved", "no_crossing", "nan"])
def test_a_volume_without_surface_fails_with_one_line(what):
    vol = tsdf_volume(Sphere())
    if what == "unobserved":
        vol.weight[:] = 0
    elif what == "no_crossing":
        vol.tsdf[:] = 0.1
    else:
        vol.tsdf[3, 4, 5] = np.nan
    with pytest.raises(SpirulaError) as e:
        extract_surface(vol)
    assert "\n" not in str(e.value)


def test_cleanup_removes_a_floater_and_keeps_a_second_object():
    class Union:
        def __init__(self, *shapes):
            self.shapes = shapes

        def sdf(self, p):
            return np.min([s.sdf(p) for s in self.shapes], axis=0)

    main, other = Sphere(0.45, (-0.5, 0, 0)), Sphere(0.3, (0.6, 0.2, 0))  # other: 44% of main's area
    floater = Sphere(0.07, (0.6, -0.7, 0.6))  # a blob ~2 voxels across: 2.4% of main's area
    assert (floater.r / main.r) ** 2 < MIN_COMPONENT_FRACTION < (other.r / main.r) ** 2
    raw = extract_surface(tsdf_volume(Union(main, other, floater)))
    assert len(raw.split(only_watertight=False)) == 3
    clean = clean_mesh(raw)
    parts = clean.split(only_watertight=False)
    assert len(parts) == 2
    assert np.abs(floater.sdf(clean.vertices)).min() > 0.1  # nothing left of the floater
    assert all(p.is_watertight for p in parts)


def test_cleanup_merges_duplicate_vertices_and_drops_degenerate_faces():
    import trimesh

    m = trimesh.creation.icosphere(subdivisions=2)
    v, f = m.vertices[m.faces].reshape(-1, 3), np.arange(3 * len(m.faces)).reshape(-1, 3)  # every face its own vertices
    v = np.vstack([v, v[:1]])
    f = np.vstack([f, [[0, 0, 1]], [[0, len(v) - 1, 1]]])  # two degenerate faces (a repeated, a duplicated vertex)
    clean = clean_mesh(trimesh.Trimesh(v, f, process=False))
    assert len(clean.faces) == len(m.faces) and len(clean.vertices) == len(m.vertices)
    assert clean.is_watertight


@pytest.mark.parametrize("target", [500, 2000])
def test_simplify_reaches_the_face_target(meshes, target):
    shape, vol, mesh = meshes["Sphere"]
    small = simplify_mesh(mesh, target)
    # quadric collapse removes 2 faces per edge collapse and stops at the target:
    # within 2% (fast-simplification may stop a few collapses short on a closed mesh)
    assert abs(len(small.faces) - target) <= max(0.02 * target, 4)
    assert small.is_watertight
    assert np.abs(shape.sdf(small.vertices)).max() < 0.5 * vol.voxel_size  # still the sphere
    assert simplify_mesh(mesh, 10 * len(mesh.faces)) is mesh


def test_vertex_colours_match_the_colour_field(meshes):
    _, vol, mesh = meshes["Sphere"]
    coloured = colour_vertices(mesh, lambda p, n: colour_field(p))
    got = coloured.visual.vertex_colors[:, :3] / 255.0
    assert np.abs(got - colour_field(mesh.vertices)).max() <= 0.5 / 255 + F32  # 8-bit rounding


def test_volume_colour_is_trilinear_in_the_voxel_centre_grid(meshes):
    _, vol, mesh = meshes["Torus"]
    # a linear field sampled at voxel centres interpolates exactly (float32 storage)
    got = volume_colour_fn(vol)(mesh.vertices, mesh.vertex_normals)
    assert np.abs(got - colour_field(mesh.vertices)).max() <= 1e-6


def bilinear(image, uv):
    """Sample an RGB uint8 image at uv like a glTF viewer (texel centres at +0.5, v up), in 0..1."""
    img = np.asarray(image, np.float64) / 255.0
    H, W = img.shape[:2]
    x = uv[:, 0] * W - 0.5
    y = (1 - uv[:, 1]) * H - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]

    def at(yy, xx):
        return img[np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1)]

    return (at(y0, x0) * (1 - fx) * (1 - fy) + at(y0, x0 + 1) * fx * (1 - fy) + at(y0 + 1, x0) * (1 - fx) * fy) + at(
        y0 + 1, x0 + 1
    ) * fx * fy


@pytest.mark.parametrize("name", ["Sphere", "Torus"])
def test_texture_matches_the_colour_field(meshes, name):
    _, vol, mesh = meshes[name]
    size = 256
    tex = bake_texture(mesh, lambda p, n: colour_field(p), size=size)
    image = tex.visual.material.baseColorTexture
    uv, faces = tex.visual.uv, tex.faces
    assert image.size == (size, size)
    assert abs(tex.area - mesh.area) <= 1e-9 * mesh.area  # the same surface, seams split
    # xatlas leaves faces of (near) zero area unmapped: they show nothing; their
    # vertices share the uv of the nearest mapped vertex (degenerate in UV or not)
    e_uv = (uv[faces[:, 1:]] - uv[faces[:, :1]]) * size  # [F,2,2] edges in texels
    from spirula.mesh.colour import atlas

    mapped = atlas(mesh, size)[3]
    assert (np.abs(np.linalg.det(e_uv[mapped])) > 0).all()
    assert tex.area_faces[~mapped].sum() <= 1e-6 * tex.area
    # stretch: world length of one texel in each face (largest singular value of texel -> world)
    e_w = tex.vertices[faces[:, 1:]] - tex.vertices[faces[:, :1]]
    stretch = np.zeros(len(faces))
    jac = np.einsum("fki,fkj->fij", np.linalg.inv(e_uv[mapped]), e_w[mapped])
    stretch[mapped] = np.linalg.norm(jac, axis=(1, 2), ord=2)
    corner = np.zeros(len(uv))
    np.maximum.at(corner, faces.ravel(), np.repeat(stretch, 3))
    near = corner[faces].max(axis=1)  # the largest stretch of the face and the faces around it
    # A bilinear tap is a texel centre <= sqrt(2) texels from the sample; it holds
    # the field at the nearest point of a triangle, <= sqrt(2) texels from the
    # centre (RING covers that): 2 sqrt(2) texels of the chart away, through the
    # faces around. The field changes by COLOUR_GRADIENT per world unit per channel;
    # plus 8-bit rounding.
    rng = np.random.default_rng(4)
    bary = rng.dirichlet([1, 1, 1], size=int(mapped.sum()))
    at_uv = np.einsum("fk,fkd->fd", bary, uv[faces[mapped]])
    want = colour_field(np.einsum("fk,fkd->fd", bary, tex.vertices[faces[mapped]]))
    err = np.abs(bilinear(image, at_uv) - want).max(axis=1)
    assert (err <= COLOUR_GRADIENT * 2 * np.sqrt(2) * near[mapped] + 0.5 / 255).all()
    assert np.median(err) <= 0.5 / 255 + COLOUR_GRADIENT * np.median(near)  # typical: under a texel
    # dilation: no texel is left black, every one holds a colour of the field's range over the grid
    assert np.asarray(image).min() >= np.floor((0.5 - 0.4 * 1.2) * 255)


def test_dilation_fills_every_texel_from_the_nearest_covered_one():
    image = np.zeros((5, 6, 3))
    covered = np.zeros((5, 6), bool)
    image[1, 1], covered[1, 1] = (1, 0, 0), True
    image[3, 5], covered[3, 5] = (0, 0, 1), True
    out = dilate(image, covered)
    assert (out[0, 0] == (1, 0, 0)).all() and (out[4, 5] == (0, 0, 1)).all() and (out[3, 4] == (0, 0, 1)).all()
    assert (out.sum(axis=2) == 1).all()


def test_splat_colour_is_the_colour_of_the_nearby_splats(meshes):
    from spirula.reference.projection import SH_C0

    shape, vol, mesh = meshes["Sphere"]
    rng = np.random.default_rng(3)
    n = 6000
    means = shape.sample(n, rng)
    # flat splats tangent to the sphere: normal axis (local z) along the radius
    z = shape.normal(means)
    quats = np.empty((n, 4))
    # rotation taking +z to the normal: axis z x n, half-angle
    axis = np.cross(np.array([0, 0, 1.0]), z)
    half = 0.5 * np.arccos(np.clip(z[:, 2], -1, 1))
    axis /= np.maximum(np.linalg.norm(axis, axis=1, keepdims=True), 1e-12)
    quats[:, 0], quats[:, 1:] = np.cos(half), axis * np.sin(half)[:, None]
    spacing = np.sqrt(shape.area / n)  # 0.037
    splats = dict(
        means=means,
        quats=quats,
        log_scales=np.log(np.tile([spacing, spacing, 0.1 * spacing], (n, 1))),
        opacity_logits=np.full(n, 2.0),
        sh_coeffs=((colour_field(means) - 0.5) / SH_C0)[:, None, :],
    )
    got = splat_colour_fn(splats)(mesh.vertices, mesh.vertex_normals)
    want = colour_field(mesh.vertices)
    # a weighted mean of a linear field is the field at the weighted mean position:
    # the Gaussian weights reach ~2 sigma = 2 spacings, the sampling leaves the mean off
    # centre by a fraction of that; the mesh is h^2/(2R) off the sphere

    assert np.abs(got - want).max() <= COLOUR_GRADIENT * 2 * spacing
    assert np.abs(got - want).mean() <= COLOUR_GRADIENT * 0.5 * spacing


def test_colouring_reports_its_progress(meshes, monkeypatch, capsys):
    """`spirula mesh`'s colour stage takes minutes on a large mesh (millions of
    texels, each coloured from its nearest splats): both colourings show how far
    they are, here as plain lines (stderr is no terminal), the last one at the end."""
    from spirula import progress
    from spirula.mesh import colour

    monkeypatch.setattr(progress, "TRACK_INTERVAL", 0.0)  # a line at every update
    monkeypatch.setattr(colour, "COLOUR_CHUNK", 500)  # several updates on a small mesh
    mesh = meshes["Sphere"][2]
    bake_texture(mesh, lambda p, n: colour_field(p), size=64)
    colour_vertices(mesh, lambda p, n: colour_field(p))
    lines = capsys.readouterr().err.splitlines()
    for what, total in (("texture", len(mesh.faces)), ("vertices", len(mesh.vertices))):
        done = [ln.split()[-1] for ln in lines if ln.startswith("spirula: colouring %s " % what)]
        counts = [int(d.split("/")[0].replace(",", "")) for d in done]
        assert len(counts) > 2 and counts == sorted(counts), lines
        assert done[-1] == f"{total:,}/{total:,}", lines
