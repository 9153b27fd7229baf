"""End-to-end shape tests of ``spirula mesh`` (issue 14, item 8) through the real pipeline:
splats sampled on an analytic surface (tests/mesh_cases.py: sphere, box, torus), flat discs
tangent to it coloured by a linear colour field, fused on the GPU (fuse_splats on lavapipe,
virtual cameras), then marching cubes, cleanup and colour must give back that surface,
closed, in the splats' colours.

Sizes: 48^3 voxels, 24 views of 64 x 64 pixels, ~4-5k splats a shape, one fused volume per
shape for the module. A pixel's footprint on the surface is then about one voxel (the
cameras stand 2.5 bounding radii away, the image spans the bounding sphere), so the
voxel size h is the one length the fused surface is resolved to.

Tolerances (h: voxel size; measured figures in docs/mesh.md):

- bias: the fused surface lies *outside* the true one, never inside on average: the median
  depth of a pixel is the depth of the mean of the splat where transmittance crosses 0.5,
  and splats are blended in order of their means' depth, so among the discs a pixel crosses
  the nearest-to-the-camera mean wins; and a voxel reads the depth of the pixel it projects
  into (nearest pixel, not interpolated). Both make the surface nearer every camera, i.e.
  outward for a closed shape seen from outside, each by at most about half a pixel's
  footprint times the slope: mean outward offset in [0, h].
- Chamfer, both ways: the largest distance is that bias (<= h) plus the error of marching
  cubes' linear interpolation of a fused distance that is not exactly linear across one
  cube, at most half a cube's diagonal, sqrt(3) h / 2.
- normal consistency: neighbouring vertices (h apart) off by up to h/2 relative to each
  other tilt a face by atan(1/2): the mean cosine between the face normals and the true
  normal at least cos(atan(1/2)) = 0.894 (the box: faces more than 2h from an edge, where
  marching cubes rounds the edge by design).
- colour: splat_colour_fn mixes the splats within ~2 tangential sigmas (2 sigma_t) of a
  point, and the vertex is up to the Chamfer bound off the surface: the linear field
  (COLOUR_GRADIENT per unit per channel) changes by at most COLOUR_GRADIENT times their sum,
  plus half an 8-bit step; a texture adds the nearest-texel lookup (a texel's world size).
"""

import numpy as np
import pytest
import trimesh
from mesh_cases import COLOUR_GRADIENT, Box, Sphere, Torus, colour_field

from spirula.mesh.cameras import fibonacci_directions, scene_bounds, sphere_cameras, splat_support
from spirula.mesh.colour import bake_texture, colour_vertices, splat_colour_fn
from spirula.mesh.fuse import fuse_splats
from spirula.mesh.surface import clean_mesh, extract_surface, simplify_mesh
from spirula.reference.projection import SH_C0

RES, VIEWS, SIZE = 48, 24, 64
SPACING = 0.04  # splat spacing on the box and the torus (the sphere: its Fibonacci spacing)
SIGMA_T, THIN, OPACITY = 0.7, 0.05, 0.9  # tangential sigma and thickness in spacings; opacity


def disc_quats(normals):
    """[N,4] wxyz quaternions turning +z onto each unit normal: a disc tangent to the surface."""
    n = np.asarray(normals, np.float64)
    q = np.stack([1.0 + n[:, 2], -n[:, 1], n[:, 0], np.zeros(len(n))], 1)
    q[n[:, 2] < -1 + 1e-9] = [0.0, 1.0, 0.0, 0.0]
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def sphere_points(shape, n=4000):
    d = fibonacci_directions(n)
    return shape.c + shape.r * d, d, np.sqrt(shape.area / n)


def box_points(shape, spacing=SPACING):
    """A grid of about ``spacing`` on each face (cell centres), the face normal."""
    pts, nrm = [], []
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        nb, nc = (int(np.ceil(2 * shape.h[i] / spacing)) for i in (b, c))
        gb = ((np.arange(nb) + 0.5) / nb * 2 - 1) * shape.h[b]
        gc = ((np.arange(nc) + 0.5) / nc * 2 - 1) * shape.h[c]
        u, v = (x.ravel() for x in np.meshgrid(gb, gc, indexing="ij"))
        for sign in (-1.0, 1.0):
            p, n = np.zeros((len(u), 3)), np.zeros((len(u), 3))
            p[:, a], p[:, b], p[:, c], n[:, a] = sign * shape.h[a], u, v, sign
            pts.append(p + shape.c), nrm.append(n)
    return np.concatenate(pts), np.concatenate(nrm), spacing


def torus_points(shape, spacing=SPACING):
    """Rings around the tube of about ``spacing`` apart, points along each ``spacing`` apart."""
    nv = int(np.ceil(2 * np.pi * shape.r / spacing))
    pts = []
    for i, v in enumerate((np.arange(nv) + 0.5) / nv * 2 * np.pi):
        rr = shape.R + shape.r * np.cos(v)
        nu = int(np.ceil(2 * np.pi * rr / spacing))
        u = (np.arange(nu) + 0.5 * (i % 2)) / nu * 2 * np.pi
        pts.append(np.stack([rr * np.cos(u), rr * np.sin(u), np.full(nu, shape.r * np.sin(v))], 1))
    p = np.concatenate(pts) + shape.c
    return p, shape.normal(p), spacing


def disc_splats(points, normals, spacing):
    """read_splat_ply's dict: flat discs (sigma SIGMA_T spacings, THIN of that thick) tangent
    to the surface, coloured by colour_field at their means."""
    n, s = len(points), SIGMA_T * spacing
    return dict(
        means=np.asarray(points, np.float64),
        quats=disc_quats(normals),
        log_scales=np.log(np.tile([s, s, THIN * s], (n, 1))),
        opacity_logits=np.full(n, np.log(OPACITY / (1 - OPACITY))),
        sh_coeffs=((colour_field(points) - 0.5) / SH_C0)[:, None, :],
    )


def support_of(splats):
    return splat_support(np.exp(splats["log_scales"]), 1 / (1 + np.exp(-splats["opacity_logits"])))


def fused(device, splats):
    cams = sphere_cameras(splats["means"], n=VIEWS, size=SIZE, support=support_of(splats))
    return fuse_splats(device, splats, cams, resolution=RES, progress=False)


def distance_to(mesh, points):
    """[P] upper bounds of the distances from points to the mesh: to the nearest of 200k
    points sampled on it (~0.005 apart here; an upper bound keeps the test conservative;
    trimesh's exact query takes seconds)."""
    from scipy.spatial import cKDTree

    dense = np.concatenate([mesh.vertices, mesh.sample(200_000, seed=3)])
    return cKDTree(dense).query(points)[0]


SHAPES = {"sphere": (Sphere(), sphere_points), "box": (Box(), box_points), "torus": (Torus(), torus_points)}


@pytest.fixture(scope="module")
def meshed(device):
    """{name: (shape, splats, spacing, volume, clean mesh)}, fused lazily, once each."""
    cache = {}

    def get(name):
        if name not in cache:
            shape, sampler = SHAPES[name]
            points, normals, spacing = sampler(shape)
            splats = disc_splats(points, normals, spacing)
            vol = fused(device, splats)
            cache[name] = (shape, splats, spacing, vol, clean_mesh(extract_surface(vol)))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(SHAPES))
def test_splats_on_a_shape_mesh_to_that_shape(meshed, name):
    shape, splats, spacing, vol, mesh = meshed(name)
    h = vol.voxel_size
    assert max(vol.tsdf.shape) == RES
    # closed, one piece, wound outwards
    assert mesh.is_watertight and mesh.body_count == 1 and mesh.volume > 0
    on_mesh = mesh.sample(4000, seed=2)
    signed = shape.sdf(on_mesh)
    assert 0 <= signed.mean() <= h  # the outward bias of median depth (module docstring)
    bound = h + np.sqrt(3) / 2 * h
    assert np.abs(signed).max() <= bound  # mesh -> surface
    assert distance_to(mesh, shape.sample(2000, np.random.default_rng(1))).max() <= bound  # surface -> mesh
    faces = np.ones(len(mesh.faces), bool)
    if isinstance(shape, Box):
        faces = shape.edge_distance(mesh.triangles_center) > 2 * h
    dots = np.sum(mesh.face_normals * shape.normal(mesh.triangles_center), axis=1)[faces]
    assert dots.mean() >= np.cos(np.arctan(0.5))


@pytest.fixture(scope="module")
def baked(meshed):
    """The fused sphere decimated to 2000 faces (--simplify: xatlas stays well under a
    second) with a 128^2 texture baked from the splats."""
    shape, splats, spacing, vol, mesh = meshed("sphere")
    small = simplify_mesh(mesh, 2000)
    return small, bake_texture(small, splat_colour_fn(splats), size=128)


def colour_bound(shape, spacing, points):
    """[P]: how far the splats' colour at ``points`` may be from the field there: the
    splats mixed reach 2 SIGMA_T spacings along the surface, and a point off the surface by
    |sdf| takes the colour of the surface below it."""
    return COLOUR_GRADIENT * (2 * SIGMA_T * spacing + np.abs(shape.sdf(points))) + 0.5 / 255


@pytest.mark.parametrize("name", ["sphere", "torus"])
def test_vertex_colours_are_the_splats_colours(meshed, name):
    shape, splats, spacing, vol, mesh = meshed(name)
    coloured = colour_vertices(mesh, splat_colour_fn(splats))
    err = np.abs(coloured.visual.vertex_colors[:, :3] / 255.0 - colour_field(mesh.vertices)).max(1)
    assert (err <= colour_bound(shape, spacing, mesh.vertices)).all()


def test_texture_colours_are_the_splats_colours(meshed, baked):
    shape, splats, spacing, vol, mesh = meshed("sphere")
    small, tex = baked
    size = 128
    texel = np.sqrt(small.area / (0.5 * size * size))  # world size: the atlas fills at least half the texture
    got = tex.visual.to_color().vertex_colors[:, :3] / 255.0  # trimesh: the nearest texel
    err = np.abs(got - colour_field(tex.vertices)).max(1)
    assert (err <= colour_bound(shape, spacing, tex.vertices) + COLOUR_GRADIENT * np.sqrt(2) * texel).all()


def test_fused_colour_is_the_splats_colour(meshed):
    """The volume's colour grid (--color-from volume) averages, in each voxel of the band,
    the colours of the pixels whose surface point is within the truncation of it: the field
    within the truncation (median; grazing views reach further)."""
    from spirula.mesh.colour import volume_colour_fn

    shape, splats, spacing, vol, mesh = meshed("sphere")
    err = np.abs(volume_colour_fn(vol)(mesh.vertices, mesh.vertex_normals) - colour_field(mesh.vertices))
    assert np.median(err) <= COLOUR_GRADIENT * vol.truncation


def test_fat_splats_fuse_to_a_closed_surface_inside_the_volume(device):
    """Fat round splats (sigma ~ their spacing) fuse about a sigma outside their means: the
    volume's box must hold that (the splats' drawn radius plus the truncation band), or the
    surface is cut open at the box's faces."""
    shape = Sphere()
    n = 1500
    means = shape.sample(n, np.random.default_rng(0))
    sigma = np.sqrt(shape.area / n)
    splats = dict(
        means=means,
        quats=np.tile([1.0, 0, 0, 0], (n, 1)),
        log_scales=np.full((n, 3), np.log(sigma)),
        opacity_logits=np.full(n, 3.0),
        sh_coeffs=((colour_field(means) - 0.5) / SH_C0)[:, None, :],
    )
    cams = sphere_cameras(means, n=12, size=48, support=support_of(splats))
    vol = fuse_splats(device, splats, cams, resolution=32, progress=False)
    mesh = clean_mesh(extract_surface(vol))
    assert mesh.is_watertight and mesh.volume > 0
    # the box leaves at least the truncation band around the surface
    lo, hi = vol.origin, vol.origin + vol.voxel_size * np.array(vol.tsdf.shape)
    assert (mesh.bounds[0] - lo >= vol.truncation).all() and (hi - mesh.bounds[1] >= vol.truncation).all()


@pytest.mark.parametrize("name", list(SHAPES))
def test_virtual_cameras_see_all_that_is_drawn(name):
    """Every corner of the splats' box (their means grown by their drawn radius) projects
    into every virtual camera's image, in front of it."""
    shape, sampler = SHAPES[name]
    splats = disc_splats(*sampler(shape))
    support = support_of(splats)
    lo, hi = scene_bounds(splats["means"], support=support)
    assert (lo < splats["means"].min(0) - support.max() * 0.5).all()  # grown by the discs' radius
    cams = sphere_cameras(splats["means"], n=VIEWS, size=SIZE, support=support)
    corners = np.array([[x, y, z] for x in (lo[0], hi[0]) for y in (lo[1], hi[1]) for z in (lo[2], hi[2])])
    for v, K, (W, H) in zip(cams.viewmats, cams.Ks, cams.sizes):
        pc = corners @ v[:3, :3].T + v[:3, 3]
        assert (pc[:, 2] > 0).all()
        px = pc @ K.T
        px = px[:, :2] / px[:, 2:]
        assert (px >= 0).all() and (px[:, 0] <= W).all() and (px[:, 1] <= H).all()


def test_a_mesh_of_fused_splats_reloads_as_a_closed_glb(baked, tmp_path):
    """The exported GLB of the fused, decimated, textured sphere is the same closed surface
    (vertices split along UV seams merge back) with its texture."""
    from spirula.mesh.export import export_mesh

    small, tex = baked
    export_mesh(tex, tmp_path / "s.glb")
    back = trimesh.load(tmp_path / "s.glb", force="mesh")
    assert back.visual.kind == "texture" and back.visual.material.baseColorTexture.size == (128, 128)
    merged = trimesh.Trimesh(back.vertices, back.faces)  # merges the seams' split vertices
    assert merged.is_watertight and abs(merged.volume - small.volume) <= 1e-5 * small.volume
