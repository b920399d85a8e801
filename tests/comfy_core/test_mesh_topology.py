"""comfy_core/mesh/topology.py, batch.py, transform.py, file3d.py: welding, cleaning, area /
volume / Euler characteristic, batch packing, rotations, the File3D value, each against an
independent computation (scipy's convex hull and rotations, hand counts)."""
from __future__ import annotations

from io import BytesIO

import pytest
import torch
from scipy.spatial import ConvexHull
from scipy.spatial.transform import Rotation

from comfy_core.mesh.batch import pack_variable
from comfy_core.mesh.file3d import File3D
from comfy_core.mesh.topology import (boundary_edges, collapse_slivers, connected_labels, drop_degenerate_faces,
                                      drop_duplicate_faces, drop_small_components, drop_unused_vertices,
                                      euler_characteristic, is_closed, signed_volume, surface_area, weld_vertices)
from comfy_core.mesh.transform import euler_xyz_matrix, quaternion_matrix, rotate

CUBE_V = [[-1, -1, -1], [1, -1, -1], [1, 1, -1], [-1, 1, -1], [-1, -1, 1], [1, -1, 1], [1, 1, 1], [-1, 1, 1]]
CUBE_F = [[0, 2, 1], [0, 3, 2], [4, 5, 6], [4, 6, 7], [0, 1, 5], [0, 5, 4],
          [2, 3, 7], [2, 7, 6], [1, 2, 6], [1, 6, 5], [0, 4, 7], [0, 7, 3]]  # outward, -z face first


def cube(side: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A closed, outward-wound cube of the given side centred at the origin (12 triangles)."""
    return torch.tensor(CUBE_V, dtype=torch.float32) * (side / 2), torch.tensor(CUBE_F, dtype=torch.int64)


def soup(vertices: torch.Tensor, faces: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every face with its own three vertices (an unwelded mesh)."""
    return vertices[faces.reshape(-1)], torch.arange(faces.numel()).view(-1, 3)


def octahedron() -> tuple[torch.Tensor, torch.Tensor]:
    v = torch.tensor([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], dtype=torch.float32)
    f = torch.tensor([[0, 2, 4], [2, 1, 4], [1, 3, 4], [3, 0, 4], [2, 0, 5], [1, 2, 5], [3, 1, 5], [0, 3, 5]])
    return v, f


def test_cube_area_volume_match_the_convex_hull():
    v, f = cube(2.0)
    hull = ConvexHull(v.numpy())
    assert surface_area(v, f) == pytest.approx(hull.area) == pytest.approx(24.0)
    assert signed_volume(v, f) == pytest.approx(hull.volume) == pytest.approx(8.0)
    assert signed_volume(v, f.flip(1)) == pytest.approx(-8.0)  # inward winding


def test_euler_characteristic_and_closedness():
    v, f = cube()
    assert euler_characteristic(8, f) == 2 and is_closed(f, 8)
    assert euler_characteristic(8, f[2:]) == 1 and not is_closed(f[2:], 8)  # one side open: a disc
    assert sorted(map(tuple, boundary_edges(f[2:], 8).tolist())) == [(0, 1), (0, 3), (1, 2), (2, 3)]


def test_welding_a_triangle_soup_restores_the_cube():
    v, f = soup(*cube())
    assert v.shape[0] == 36
    wv, wf, _, merged = weld_vertices(v, f)
    assert (wv.shape[0], merged) == (8, 28)
    assert euler_characteristic(wv.shape[0], wf) == 2 and is_closed(wf, 8)
    assert signed_volume(wv, wf) == pytest.approx(8.0)


def test_welding_an_exact_duplicate_vertex_set_halves_the_vertices_and_averages_colours():
    v, f = cube()
    doubled = torch.cat([v, v])
    faces = torch.cat([f, f + 8])
    colors = torch.cat([torch.zeros(8, 3), torch.ones(8, 3)])
    wv, wf, wc, merged = weld_vertices(doubled, faces, colors=colors)
    assert wv.shape[0] == 8 == doubled.shape[0] // 2 and merged == 8
    assert torch.allclose(wc, torch.full((8, 3), 0.5))
    assert torch.equal(wf[:12], wf[12:])  # both copies now use the same vertices


def test_weld_tolerance_relative_and_absolute():
    v = torch.tensor([[0.0, 0, 0], [1e-3, 0, 0], [10.0, 0, 0]])
    f = torch.tensor([[0, 1, 2]])
    assert weld_vertices(v, f)[3] == 0  # 1e-5 x diagonal 10 = 1e-4 < 1e-3
    wv, wf, _, merged = weld_vertices(v, f, epsilon_rel=1e-3)  # cell 1e-2: 0 and 1e-3 meet
    assert merged == 1 and wv.shape[0] == 2
    assert torch.allclose(wv[0], torch.tensor([5e-4, 0, 0]))
    assert wf.tolist() == [[0, 0, 1]]  # the degenerate face stays, as ComfyUI's does
    assert weld_vertices(v, f, epsilon=1e-2)[3] == 1
    assert weld_vertices(v, f, epsilon=0.0)[3] == 0  # a non-positive absolute epsilon welds nothing


def test_cleaning_helpers():
    v, f = cube()
    with_bad = torch.cat([f, torch.tensor([[0, 0, 1], [0, 1, 2]]), f[:1].flip(1)])
    assert drop_degenerate_faces(v, with_bad).shape[0] == 14
    assert drop_duplicate_faces(torch.cat([f, f[:1].flip(1)])).shape[0] == 12
    extra = torch.cat([v, torch.tensor([[5.0, 5, 5]])])
    nv, nf, _ = drop_unused_vertices(extra, f + 0)
    assert nv.shape[0] == 8 and torch.equal(nf, f)
    far = torch.cat([v, v + 10])
    both = torch.cat([f, f[:3] + 8])
    assert drop_small_components(far, both, 8).shape[0] == 12  # the 3-face piece goes
    assert drop_small_components(far, f[:3], 8).shape[0] == 3  # never every component
    assert connected_labels(torch.tensor([[3, 1], [1, 2]]), 5).tolist() == [0, 1, 1, 1, 4]


def test_slivers_are_collapsed():
    v = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0.5, 1e-4, 0], [0.5, 1, 0]])
    f = torch.tensor([[0, 1, 2], [0, 2, 3], [2, 1, 3]])
    out = collapse_slivers(v, f, min_angle_deg=0.5, max_aspect_ratio=100.0)
    assert out.shape[0] == 1  # the needle goes and takes its two neighbours' shared vertex


def test_pack_variable_pads_and_counts():
    v1, f1 = cube()
    v2, f2 = octahedron()
    packed = pack_variable([v1, v2], [f1, f2], colors=[torch.ones(8, 3), torch.zeros(6, 3)])
    assert packed["vertices"].shape == (2, 8, 3) and packed["faces"].shape == (2, 12, 3)
    assert packed["vertex_counts"].tolist() == [8, 6] and packed["face_counts"].tolist() == [12, 8]
    assert packed["vertex_colors"][1, 6:].abs().sum() == 0 and packed["uvs"] is None
    with pytest.raises(ValueError, match="1:1 with vertices"):
        pack_variable([v1], [f1], colors=[torch.ones(7, 3)])


@pytest.mark.parametrize("angles", [(90.0, 0.0, 0.0), (30.0, -45.0, 120.0), (0.0, 0.0, -200.0)])
def test_euler_xyz_is_extrinsic_x_then_y_then_z(angles):
    want = Rotation.from_euler("xyz", angles, degrees=True).as_matrix()
    assert torch.allclose(torch.tensor(euler_xyz_matrix(*angles), dtype=torch.float64), torch.tensor(want), atol=1e-9)
    assert euler_xyz_matrix(0, 0, 0) is None


def test_quaternion_is_normalised_wxyz():
    q = [0.3, -0.2, 0.8, 0.1]  # (w, x, y, z), not unit
    want = Rotation.from_quat([q[1], q[2], q[3], q[0]]).as_matrix()  # scipy is (x, y, z, w)
    assert torch.allclose(torch.tensor(quaternion_matrix(*q), dtype=torch.float64), torch.tensor(want), atol=1e-9)
    assert quaternion_matrix(2.0, 0, 0, 0) is None
    with pytest.raises(ValueError, match="zero magnitude"):
        quaternion_matrix(0, 0, 0, 0)
    turned = rotate(torch.tensor([[1.0, 0, 0]]), euler_xyz_matrix(0, 0, 90))
    assert torch.allclose(turned, torch.tensor([[0.0, 1, 0]]), atol=1e-6)


def test_file3d_in_memory_and_saved(tmp_path):
    f = File3D(BytesIO(b"glTF-bytes"), file_format=".GLB")
    assert f.format == "glb" and not f.is_disk_backed and f.get_bytes() == b"glTF-bytes"
    path = f.save_to(str(tmp_path / "a" / "m.glb"))
    on_disk = File3D(path)
    assert on_disk.is_disk_backed and on_disk.format == "glb" and on_disk.get_data().read() == b"glTF-bytes"
