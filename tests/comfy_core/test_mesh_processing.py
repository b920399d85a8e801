"""comfy_core/mesh/normals.py, holes.py, decimate.py: smooth and crease normals, hole filling
and QEM decimation, checked against independent computations (symmetry, closed-form area and
volume, the distance to the surface a mesh samples)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.mesh.decimate import QEMConfig, qem_simplify
from comfy_core.mesh.holes import fill_holes
from comfy_core.mesh.normals import crease_split_normals, smooth_vertex_normals
from comfy_core.mesh.topology import euler_characteristic, is_closed, signed_volume, surface_area, weld_vertices
from tests.comfy_core.test_mesh_topology import cube, octahedron, soup


def icosphere(subdivisions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A unit sphere: an icosahedron subdivided, vertices pushed onto the sphere."""
    t = (1 + 5 ** 0.5) / 2
    v = [[-1, t, 0], [1, t, 0], [-1, -t, 0], [1, -t, 0], [0, -1, t], [0, 1, t], [0, -1, -t], [0, 1, -t],
         [t, 0, -1], [t, 0, 1], [-t, 0, -1], [-t, 0, 1]]
    f = [[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9], [5, 11, 4], [11, 10, 2], [10, 7, 6],
         [7, 1, 8], [3, 9, 4], [3, 4, 2], [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11], [6, 2, 10],
         [8, 6, 7], [9, 8, 1]]
    v = [[float(c) for c in p] for p in v]
    for _ in range(subdivisions):
        middle: dict = {}

        def mid(a, b):
            key = (min(a, b), max(a, b))
            if key not in middle:
                v.append([(v[a][i] + v[b][i]) / 2 for i in range(3)])
                middle[key] = len(v) - 1
            return middle[key]

        f = [g for a, b, c in f for g in ([a, mid(a, b), mid(c, a)], [b, mid(b, c), mid(a, b)],
                                          [c, mid(c, a), mid(b, c)], [mid(a, b), mid(b, c), mid(c, a)])]
    pts = torch.tensor(v, dtype=torch.float32)
    return pts / pts.norm(dim=1, keepdim=True), torch.tensor(f)


def grid(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A flat n x n-cell square [0, 1]² at z = 0, two triangles a cell, wound +z."""
    xs = torch.linspace(0, 1, n + 1)
    yy, xx = torch.meshgrid(xs, xs, indexing="ij")
    v = torch.stack([xx.reshape(-1), yy.reshape(-1), torch.zeros((n + 1) ** 2)], 1)
    faces = []
    for r in range(n):
        for c in range(n):
            a = r * (n + 1) + c
            faces += [[a, a + 1, a + n + 2], [a, a + n + 2, a + n + 1]]
    return v, torch.tensor(faces)


# -- normals -----------------------------------------------------------------------------------

def test_a_flat_square_has_straight_up_normals():
    v, f = grid(3)
    assert torch.allclose(smooth_vertex_normals(v, f), torch.tensor([0.0, 0, 1]).expand(16, 3))


def test_octahedron_normals_point_at_its_vertices():
    v, f = octahedron()  # four equal faces around every vertex: the average is the vertex direction
    assert torch.allclose(smooth_vertex_normals(v, f), v, atol=1e-6)


def test_seam_copies_share_one_normal_when_welded():
    v, f = soup(*octahedron())
    welded = smooth_vertex_normals(v, f)
    assert torch.allclose(welded, v, atol=1e-6)  # every copy gets its position's smooth normal
    flat = smooth_vertex_normals(v, f, weld=False)  # each copy keeps its own face's normal
    face_n = torch.nn.functional.normalize(torch.linalg.cross(v[1::3] - v[0::3], v[2::3] - v[0::3]), dim=1)
    assert torch.allclose(flat[0::3], face_n, atol=1e-6)


def test_crease_split_keeps_a_cube_hard():
    v, f = cube()
    nv, nf, nn, remap = crease_split_normals(v, f, 30.0)
    assert nv.shape[0] == 24  # every corner split into its three sides
    assert torch.equal(nv, v[remap])
    assert torch.allclose(nn.abs().sum(1), torch.ones(24))  # axis-aligned unit normals
    face_n = torch.nn.functional.normalize(
        torch.linalg.cross(nv[nf[:, 1]] - nv[nf[:, 0]], nv[nf[:, 2]] - nv[nf[:, 0]]), dim=1)
    for k in range(3):
        assert torch.allclose(nn[nf[:, k]], face_n, atol=1e-6)  # each corner carries its face's normal
    same, _, normals, _ = crease_split_normals(v, f, 179.0)  # 90-degree edges are under 179: one group
    assert same.shape[0] == 8
    assert torch.allclose(normals.abs(), torch.full((8, 3), 1 / math.sqrt(3)), atol=0.25)


# -- holes -------------------------------------------------------------------------------------

def test_a_square_hole_is_fanned_shut():
    v, f = cube()
    open_cube = f[2:]  # the -z side removed
    assert euler_characteristic(8, open_cube) == 1
    nv, nf, _ = fill_holes(v, open_cube, max_perimeter=10.0)
    assert nv.shape[0] == 8 and nf.shape[0] == 12  # four boundary vertices: fanned, no new vertex
    assert euler_characteristic(8, nf) == 2 and is_closed(nf, 8)
    assert signed_volume(nv, nf) == pytest.approx(8.0)  # the new faces wind outward like the rest


def drum(sides: int, radius: float = 1.0, height: float = 1.0, top: bool = True):
    """A closed prism over a regular polygon (outward), the top cap optional."""
    ang = torch.arange(sides) * 2 * math.pi / sides
    ring = torch.stack([radius * torch.cos(ang), radius * torch.sin(ang)], 1)
    v = torch.cat([torch.cat([ring, torch.zeros(sides, 1)], 1), torch.cat([ring, torch.full((sides, 1), height)], 1),
                   torch.tensor([[0.0, 0, 0], [0, 0, height]])])
    bottom, upper = 2 * sides, 2 * sides + 1
    faces = []
    for i in range(sides):
        j = (i + 1) % sides
        faces += [[i, j, sides + j], [i, sides + j, sides + i], [bottom, j, i]]
        if top:
            faces.append([upper, sides + i, sides + j])
    return v, torch.tensor(faces)


def test_a_large_hole_gets_a_centre_vertex_and_colours():
    closed_v, closed_f = drum(12, top=True)
    open_v, open_f = drum(12, top=False)
    open_v = open_v[:-1]  # the unused top centre goes
    colors = torch.rand(open_v.shape[0], 3)
    nv, nf, nc = fill_holes(open_v, open_f, max_perimeter=100.0, colors=colors)
    assert nv.shape[0] == open_v.shape[0] + 1 and nf.shape[0] == open_f.shape[0] + 12
    assert torch.allclose(nv[-1], torch.tensor([0.0, 0, 1]), atol=1e-6)  # the mean of the 12-gon
    assert torch.allclose(nc[-1], colors[12:24].mean(0), atol=1e-6)
    assert is_closed(nf, nv.shape[0]) and euler_characteristic(nv.shape[0], nf) == 2
    assert signed_volume(nv, nf) == pytest.approx(signed_volume(closed_v, closed_f), rel=1e-5)
    assert signed_volume(nv, nf) == pytest.approx(3.0, rel=1e-5)  # 12-gon area 3 r², height 1


def test_holes_over_the_limits_stay_open():
    v, f = drum(12, top=False)
    v = v[:-1]
    perimeter = 12 * 2 * math.sin(math.pi / 12)
    assert fill_holes(v, f, max_perimeter=perimeter * 0.99)[1].shape[0] == f.shape[0]
    assert fill_holes(v, f, max_perimeter=100.0, max_verts=11)[1].shape[0] == f.shape[0]
    assert fill_holes(v, f, max_perimeter=perimeter * 1.01)[1].shape[0] == f.shape[0] + 12


def test_fill_holes_pre_welds_a_soup():
    v, f = cube()
    sv, sf = soup(v, f[2:])
    nv, nf, _ = fill_holes(sv, sf, max_perimeter=10.0)
    assert nv.shape[0] == 8 and is_closed(nf, 8)
    unwelded = fill_holes(sv, sf, max_perimeter=10.0, weld_epsilon_rel=0.0)[1]
    # unwelded, every face is its own 3-vertex loop and gets a back face (why ComfyUI pre-welds)
    assert unwelded.shape[0] == 2 * sf.shape[0]
    assert torch.equal(unwelded[sf.shape[0]:].sort(1).values, sf.sort(1).values)


# -- decimation --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["midpoint", "qem"])
def test_decimated_sphere_meets_the_target_and_stays_on_the_sphere(mode):
    v, f = icosphere(2)  # 320 faces
    nv, nf, _ = qem_simplify(v, f, 100, config=QEMConfig(placement_mode=mode))
    assert 80 <= nf.shape[0] <= 100
    assert nv.dtype == v.dtype and nf.dtype == f.dtype
    radius = nv.norm(dim=1)
    assert float((radius - 1).abs().max()) < 0.05  # collapsed vertices sit near the surface
    # the faces' centres stay within the chord depth of 100 triangles on a unit sphere
    centres = nv[nf].mean(1).norm(dim=1)
    assert float(centres.min()) > 0.8
    assert is_closed(nf, nv.shape[0]) and euler_characteristic(nv.shape[0], nf) == 2
    # inscribed: under the sphere's volume, above the icosahedron's (20 faces, 2.536)
    assert signed_volume(*icosphere(0)) < signed_volume(nv, nf) < 4 / 3 * math.pi


def test_decimating_a_flat_grid_keeps_it_flat_and_square():
    v, f = grid(8)  # 128 faces
    nv, nf, _ = qem_simplify(v, f, 30)
    assert nf.shape[0] <= 30
    assert float(nv[:, 2].abs().max()) < 1e-6  # in the plane
    assert surface_area(nv, nf) == pytest.approx(1.0, abs=1e-5)  # no fold, no gap: the square's area
    corners = {(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)}
    assert corners <= {(round(float(x), 6), round(float(y), 6)) for x, y, _ in nv.tolist()}


def test_decimation_carries_colours_and_skips_small_meshes():
    v, f = icosphere(1)  # 80 faces
    colors = torch.tensor([0.2, 0.4, 0.6]).expand(v.shape[0], 3).clone()
    nv, nf, nc = qem_simplify(v, f, 40, colors=colors)
    assert nf.shape[0] <= 40 and nc.shape == (nv.shape[0], 3)
    assert torch.allclose(nc, torch.tensor([0.2, 0.4, 0.6]).expand_as(nc), atol=1e-6)
    same_v, same_f, _ = qem_simplify(v, f, 500)
    assert same_f.shape[0] == 80 and same_v.shape[0] == v.shape[0]


def test_decimation_welds_an_unwelded_input_first():
    v, f = soup(*icosphere(1))
    nv, nf, _ = qem_simplify(v, f, 60)
    assert nf.shape[0] <= 60 and is_closed(nf, nv.shape[0])
    assert weld_vertices(nv, nf)[3] == 0  # output stays welded


# -- remeshing ---------------------------------------------------------------------------------

def _remesh(v, f, **options):
    from comfy_core.mesh.remesh import remesh

    res = options.pop("resolution", 32)
    options.setdefault("drop_inverted_components", False)
    options.setdefault("drop_enclosed_components", False)
    return remesh(v, f, resolution=res, scale=(res + 3.0) / res, center=torch.zeros(3), **options)


def test_closest_point_on_triangles_matches_brute_force():
    from comfy_core.mesh.remesh import closest_on_triangles

    gen = torch.Generator().manual_seed(0)
    tris = torch.rand(200, 3, 3, generator=gen, dtype=torch.float64)
    points = torch.rand(200, 3, generator=gen, dtype=torch.float64) * 2 - 0.5
    got = closest_on_triangles(points, tris)
    # brute force: the nearest of a dense barycentric sampling of each triangle
    s = torch.linspace(0, 1, 201, dtype=torch.float64)
    uu, vv = torch.meshgrid(s, s, indexing="ij")
    keep = (uu + vv) <= 1
    bary = torch.stack([1 - uu[keep] - vv[keep], uu[keep], vv[keep]], 1)
    samples = torch.einsum("sk,nkc->nsc", bary, tris)
    best = (samples - points[:, None]).norm(dim=-1).min(1).values
    assert torch.all((got - points).norm(dim=-1) <= best + 1e-12)
    assert torch.allclose((got - points).norm(dim=-1), best, atol=5e-3)


def test_sdf_remesh_of_a_sphere_is_closed_and_on_the_sphere():
    v, f = icosphere(2)
    v = v * 0.3
    nv, nf, _ = _remesh(v, f, sign_mode="sdf", qef=False)
    cell = (32 + 3.0) / 32 / 32
    radius = nv.norm(dim=1)
    assert float((radius - 0.3).abs().max()) < 0.5 * cell  # on the polyhedron the input is
    assert is_closed(nf, nv.shape[0]) and euler_characteristic(nv.shape[0], nf) == 2
    assert signed_volume(nv, nf) == pytest.approx(signed_volume(v, f), rel=0.03)


def test_udf_remesh_gives_two_offset_shells_and_the_inner_one_can_go():
    v, f = icosphere(2)
    v = v * 0.3
    nv, nf, _ = _remesh(v, f, sign_mode="udf", qef=False)
    eps = (32 + 3.0) / 32 / 32  # band 1: one cell
    assert euler_characteristic(nv.shape[0], nf) == 4  # two spheres
    radius = nv.norm(dim=1)
    outer, inner = radius > 0.3, radius < 0.3
    assert float(radius[outer].mean()) == pytest.approx(0.3 + eps, abs=0.3 * eps)
    assert float(radius[inner].mean()) == pytest.approx(0.3 - eps, abs=0.3 * eps)
    from comfy_core.mesh.remesh import filter_components

    for inverted, enclosed in ((True, False), (False, True)):
        kept = filter_components(nv, nf, 0.01, inverted, enclosed)
        assert kept.shape[0] < nf.shape[0] and float(nv[kept.reshape(-1)].norm(dim=1).min()) > 0.3
    assert filter_components(nv, nf, 0.0, False, False).shape[0] == nf.shape[0]
    assert filter_components(nv, nf, 0.99, False, False).shape[0] < nf.shape[0]  # the smaller shell is under 99%


def test_qef_keeps_a_cube_sharp_and_colours_follow():
    v, f = cube(0.5)
    colors = (v + 0.25) * 2  # a colour ramp: red along x
    nv, nf, nc = _remesh(v, f, sign_mode="sdf", qef=True, colors=colors)
    assert is_closed(nf, nv.shape[0]) and signed_volume(nv, nf) == pytest.approx(0.125, rel=1e-3)
    corner = torch.tensor([0.25, 0.25, 0.25])
    assert float((nv - corner).norm(dim=1).min()) < 1e-3  # a vertex on the corner
    rounded, _, _ = _remesh(v, f, sign_mode="sdf", qef=False)
    assert float((rounded - corner).norm(dim=1).min()) > 5e-3  # crossings' centroids cut it
    assert torch.allclose(nc, (nv.clamp(-0.25, 0.25) + 0.25) * 2, atol=0.05)  # linear colours reproduce


def test_remesh_smoothing_poles_and_refusals():
    from comfy_core.mesh.remesh import cluster_decimate, fix_poles, taubin_smooth

    v, f = icosphere(2)
    v = v * 0.3
    nv, nf, _ = _remesh(v, f, sign_mode="sdf", qef=False, smooth_iters=2)
    assert is_closed(nf, nv.shape[0])
    flat, flat_f = grid(4)
    assert torch.equal(taubin_smooth(flat, flat_f, 3)[:, 2], torch.zeros(25))  # a plane stays a plane
    tv, tf = octahedron()
    assert fix_poles(tv, tf)[0].shape[0] == 6  # valence 4 everywhere: nothing to do
    pv, pf, _ = fix_poles(*cube())  # corners 1 and 7 of this triangulation have valence 3, but not side by side
    assert pv.shape[0] == 8
    sphere_v, sphere_f = icosphere(3)
    cv, cf, _ = cluster_decimate(sphere_v, sphere_f, target_verts=50)  # at least 1000 cells: 10 a side
    assert cv.shape[0] < sphere_v.shape[0] * 0.6 and cf.shape[0] > 0
    assert float((cv.norm(dim=1) - 1).abs().max()) < 0.2  # cell means stay near the sphere
    with pytest.raises(NotImplementedError, match="solid"):
        _remesh(v, f, sign_mode="solid")
    with pytest.raises(NotImplementedError, match="Manifold"):
        _remesh(v, f, sign_mode="sdf", manifold=True)
