"""Wan-Move's nodes (nodes/wan_move_nodes.py, comfy_core/latent/wan_move.py) against the equations
of ComfyUI's comfy_extras/nodes_wanmove.py, on tiny tensors with the expected values composed
here: the generated paths (line, Bezier, easing, the perpendicular spread), the coordinates
parser, concatenation, the latent cells of the tracks, the feature move, the drawing, and the
conditioning WanMoveTrackToVideo writes. Their /object_info entries are
tests/nodes/test_object_info_2026.py's (tests/data/object_info_2026/)."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.latent.wan_move import PALETTE, latent_track_positions, move_features
from nodes import wan_move_nodes as wm
from nodes.errors import NodeInputError
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def _track(path: list[list[list[float]]], visible: list[list[bool]] | None = None) -> dict:
    p = torch.tensor(path, dtype=torch.float32)
    v = torch.ones(p.shape[:2], dtype=torch.bool) if visible is None else torch.tensor(visible)
    return {"track_path": p, "track_visibility": v}


def _generate(**overrides) -> tuple:
    args = dict(width=32, height=16, start_x=0.0, start_y=0.0, end_x=1.0, end_y=0.5, num_frames=3, num_tracks=2,
                track_spread=0.1, bezier=False, mid_x=0.5, mid_y=0.5, interpolation="linear")
    args.update(overrides)
    return wm.generate_tracks(**args)


# -- GenerateTracks -------------------------------------------------------------------------------

def test_generated_tracks_follow_the_line_spread_along_its_normal():
    tracks, length = _generate()
    assert length == 3
    path = tracks["track_path"]
    assert path.shape == (3, 2, 2) and path.dtype == torch.float32
    assert tracks["track_visibility"].dtype == torch.bool and tracks["track_visibility"].all()
    # P0 = (0, 0), P2 = (32, 8); tangent (32, 8); unit normal (-8, 32) / |t|; neighbours 0.1 * 48 / 2 apart.
    norm = math.hypot(32, 8)
    normal = (-8 / norm, 32 / norm)
    for f, s in enumerate((0.0, 0.5, 1.0)):
        centre = (32 * s, 8 * s)
        for k, offset in enumerate((-1.2, 1.2)):
            want = [centre[0] + normal[0] * offset, centre[1] + normal[1] * offset]
            assert path[f, k].tolist() == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("interpolation, s", [("linear", 0.5), ("ease_in", 0.25), ("ease_out", 0.75),
                                              ("ease_in_out", 0.5), ("constant", 0.0)])
def test_interpolation_eases_progress_along_the_path(interpolation, s):
    path = _generate(interpolation=interpolation, num_tracks=1)[0]["track_path"]
    assert path[1, 0].tolist() == pytest.approx([32 * s, 8 * s], abs=1e-5)
    assert path[2, 0].tolist() == pytest.approx([0.0, 0.0] if interpolation == "constant" else [32.0, 8.0], abs=1e-5)


def test_bezier_path_bends_towards_the_mid_point_and_spreads_across_its_tangent():
    # P0 = (0, 0), P1 = (0, 16), P2 = (32, 16): at s = 1/2 the point is P0/4 + P1/2 + P2/4 = (8, 12), the
    # tangent 2 (1-s)(P1 - P0) + 2 s (P2 - P1) = (32, 16), so the unit normal is (-16, 32) / |(32, 16)|.
    path = _generate(end_x=1.0, end_y=1.0, mid_x=0.0, mid_y=1.0, bezier=True, num_tracks=3,
                     track_spread=0.25)[0]["track_path"]
    step = 0.25 * 48 / 2
    norm = math.hypot(32, 16)
    for k, offset in enumerate((-step, 0.0, step)):
        assert path[1, k].tolist() == pytest.approx([8 - 16 / norm * offset, 12 + 32 / norm * offset], abs=1e-4)
    # At the start the tangent is 2 (P1 - P0) = (0, 32): the tracks spread along -x.
    assert path[0, 0].tolist() == pytest.approx([step, 0.0], abs=1e-5)


def test_a_path_that_does_not_move_spreads_its_tracks_horizontally():
    path = _generate(end_x=0.0, end_y=0.0, num_tracks=2, track_spread=0.5)[0]["track_path"]
    assert path[:, 0].tolist() == [[-6.0, 0.0]] * 3 and path[:, 1].tolist() == [[6.0, 0.0]] * 3  # 0.5 * 48 / 2 apart


def test_track_mask_marks_the_visible_frames_of_every_track():
    mask = torch.ones(3, 2, 2)
    mask[1] = 0.0
    mask[2, 0, 0] = 0.0  # any positive value keeps a frame visible
    tracks, _ = _generate(track_mask=mask)
    assert tracks["track_visibility"].tolist() == [[True, True], [False, False], [True, True]]
    with pytest.raises(NodeInputError, match="track_mask"):
        _generate(track_mask=torch.ones(2, 2, 2))  # one mask frame per track frame


def test_generate_tracks_refuses_bad_input():
    with pytest.raises(NodeInputError, match="interpolation"):
        _generate(interpolation="cubic")
    with pytest.raises(NodeInputError, match="start_x"):
        _generate(start_x=1.5)


# -- WanMoveTracksFromCoords / WanMoveConcatTrack -------------------------------------------------------

def test_tracks_from_coords_reads_one_track_or_many():
    tracks, length = wm.wan_move_tracks_from_coords("[{'x': 1, 'y': 2}, {'x': 3, 'y': 4.5}]")
    assert length == 2 and tracks["track_path"].tolist() == [[[1.0, 2.0]], [[3.0, 4.5]]]
    assert tracks["track_visibility"].tolist() == [[True], [True]]
    text = '[[{"x": 1, "y": 2}, {"x": 3, "y": 4}], [{"x": 5, "y": 6}, {"x": 7, "y": 8}, {"x": 9, "y": 9}]]'
    tracks, length = wm.wan_move_tracks_from_coords(text)  # the first track's length rules; longer ones are cut
    assert length == 2 and tracks["track_path"].tolist() == [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]
    mask = torch.tensor([[[0.0]], [[0.3]]])
    assert wm.wan_move_tracks_from_coords(text, mask)[0]["track_visibility"].tolist() == [[False, False], [True, True]]


@pytest.mark.parametrize("text", ["[]", "not json", '{"x": 1}', '[[{"x": 1, "y": 1}, {"x": 2, "y": 2}], [{"x": 1, "y": 1}]]',
                                  '[[[{"x": 1, "y": 1}]], [[{"x": 1, "y": 1}]]]'])
def test_tracks_from_coords_refuses_what_is_not_one_set_of_tracks(text):
    with pytest.raises(NodeInputError, match="track_coords"):
        wm.wan_move_tracks_from_coords(text)


def test_concat_puts_the_tracks_side_by_side():
    a = _track([[[1, 1]], [[2, 2]]], [[True], [False]])
    b = _track([[[5, 5], [6, 6]], [[7, 7], [8, 8]]], [[False, True], [True, True]])
    (out,) = wm.wan_move_concat_track(a, b)
    assert out["track_path"].tolist() == [[[1, 1], [5, 5], [6, 6]], [[2, 2], [7, 7], [8, 8]]]
    assert out["track_visibility"].tolist() == [[True, False, True], [False, True, True]]
    assert wm.wan_move_concat_track(a)[0] is a
    with pytest.raises(NodeInputError, match="tracks_2"):
        wm.wan_move_concat_track(a, _track([[[1, 1]]]))
    with pytest.raises(NodeInputError, match="tracks_1"):
        wm.wan_move_concat_track({"track_path": torch.zeros(2, 3)}, b)


# -- latent cells and the feature move ----------------------------------------------------------------

def test_latent_positions_sample_every_fourth_frame_in_8_pixel_cells():
    path = torch.zeros(5, 4, 2)
    path[0] = torch.tensor([[3.0, 9.0], [15.9, 0.0], [16.0, 2.0], [-0.5, 3.0]])
    path[4] = torch.tensor([[15.9, 0.0], [8.0, 15.0], [1.0, 1.0], [2.0, 2.0]])
    visible = torch.ones(5, 4, dtype=torch.bool)
    visible[4, 1] = False
    cells = latent_track_positions(path, visible, width=16, height=16)
    assert cells.shape == (4, 2, 2) and cells.dtype == torch.long
    assert cells[:, 0].tolist() == [[1, 0], [0, 1], [-1, -1], [-1, -1]]  # (row, col); outside the frame: -1
    assert cells[:, 1].tolist() == [[0, 1], [-1, -1], [0, 0], [0, 0]]  # hidden: -1


def test_move_features_blends_the_start_cell_into_each_later_cell():
    latent = torch.arange(24, dtype=torch.float32).reshape(1, 2, 3, 2, 2)
    positions = torch.tensor([
        [[0, 0], [1, 1], [-1, -1]],  # cell (0, 0) into frame 1 at (1, 1); hidden in frame 2
        [[0, 1], [1, 1], [0, 0]],    # lands on (1, 1) of frame 1 too: the later track wins
        [[-1, -1], [-1, -1], [1, 0]],  # hidden at frame 0: its source is the last row and column
    ])
    out = move_features(latent, positions, strength=0.25)
    want = latent.clone()

    def blended(frame, row, col, src_row, src_col):
        dst, src = latent[0, :, frame, row, col], latent[0, :, 0, src_row, src_col]
        return dst + (src - dst) * 0.25

    want[0, :, 1, 1, 1] = blended(1, 1, 1, 0, 1)
    want[0, :, 2, 0, 0] = blended(2, 0, 0, 0, 1)
    want[0, :, 2, 1, 0] = blended(2, 1, 0, 1, 1)
    assert torch.equal(out, want)
    assert torch.equal(latent, torch.arange(24, dtype=torch.float32).reshape(1, 2, 3, 2, 2))  # input untouched


# -- WanMoveVisualizeTracks ----------------------------------------------------------------------------

def _blend(colour: int, alpha: int, under: float) -> int:
    a = alpha / 255.0
    return int(colour * a + under * (1 - a))


def test_visualize_draws_circles_then_fading_trails():
    image = torch.full((1, 12, 12, 3), 0.4)  # one start image, repeated for each of the 2 track frames
    tracks = _track([[[2, 2]], [[8, 2]]])
    (out,) = wm.wan_move_visualize_tracks(image, line_resolution=24, circle_size=1, opacity=0.5, line_width=1,
                                          tracks=tracks)
    assert out.shape == (2, 12, 12, 3) and out.dtype == torch.float32
    grey = int(0.4 * 255)
    colour = PALETTE[0]
    px = (out * 255).round().to(torch.int64)
    # Frame 0: a circle of alpha int(255 * 0.5) at (2, 2), nothing far from it, no trail (one point).
    assert px[0, 2, 2].tolist() == [_blend(c, 127, grey) for c in colour]
    assert px[0, 10, 10].tolist() == [grey] * 3 and px[0, 2, 6].tolist() == [grey] * 3
    # Frame 1: the trail walks from (8, 2) back to (2, 2) in 6 one-pixel steps; step i paints (8 - i, 2)
    # and (9 - i, 2) with alpha int(255 (1 - i/6) 0.5), so pixel (6, 2) keeps step 3's (i = 3 and 2 paint
    # it; 3 is later) and (3, 2) step 5's.
    for x, i in ((6, 3), (5, 4), (3, 5)):
        assert px[1, 2, x].tolist() == [_blend(c, int(255 * (1 - i / 6) * 0.5), grey) for c in colour], x
    assert px[1, 2, 2].tolist() == [grey] * 3 and px[1, 9, 9].tolist() == [grey] * 3


def test_visualize_skips_hidden_points_and_passes_images_through_without_tracks():
    image = torch.full((2, 8, 8, 3), 0.2)
    tracks = _track([[[4, 4]], [[4, 4]]], [[False], [True]])
    (out,) = wm.wan_move_visualize_tracks(image, 24, 1, 1.0, 1, tracks=tracks)
    assert torch.equal(out[0], torch.full((8, 8, 3), int(0.2 * 255) / 255.0))
    assert (out[1, 4, 4] * 255).round().tolist() == [float(c) for c in PALETTE[0]]
    assert wm.wan_move_visualize_tracks(image, 24, 1, 1.0, 1)[0] is image
    with pytest.raises(NodeInputError, match="images"):
        wm.wan_move_visualize_tracks(torch.zeros(3, 8, 8, 3), 24, 1, 1.0, 1, tracks=tracks)


# -- WanMoveTrackToVideo -------------------------------------------------------------------------------

def _to_video(vae, tracks, strength=0.5, batch_size=1, width=32, height=16, start=None):
    start = frames(1, height, width, seed=3) if start is None else start
    return wm.wan_move_track_to_video(cond(1.0), cond(2.0), vae, strength, width, height, 5, batch_size, start,
                                      tracks=tracks)


def test_track_to_video_moves_the_start_features_into_both_conditionings():
    vae = FakeVideoVAE()
    # 5 frames -> latent frames 0 and 1 (video frames 0 and 4); 32 x 16 -> a 2 x 4 latent.
    tracks = _track([[[3, 3]], [[0, 0]], [[0, 0]], [[0, 0]], [[27, 12]]])
    positive, negative, latent = _to_video(vae, tracks)
    assert torch.equal(latent["samples"], torch.zeros(1, 16, 2, 2, 4))
    video = vae.calls[0]
    assert video.shape == (5, 16, 32, 3) and torch.all(video[1:] == 0.5)
    base = vae.latent_of(video)
    want = base.clone()
    want[:, :, 1, 1, 3] = base[:, :, 1, 1, 3] + (base[:, :, 0, 0, 0] - base[:, :, 1, 1, 3]) * 0.5
    mask = torch.ones(1, 1, 2, 2, 4)
    mask[:, :, 0] = 0.0
    for entry in (positive[0][1], negative[0][1]):
        assert torch.allclose(entry["concat_latent_image"], want) and torch.equal(entry["concat_mask"], mask)
    assert positive[0][1]["keep"] == 1.0 and negative[0][1]["keep"] == 2.0
    # strength 0 (or no tracks) leaves WanImageToVideo's conditioning; a batch shares the one latent.
    for pos, _, _ in (_to_video(vae, tracks, strength=0.0), _to_video(vae, None)):
        assert torch.allclose(pos[0][1]["concat_latent_image"], base)
    pos, _, lat = _to_video(vae, tracks, batch_size=2)
    assert lat["samples"].shape[0] == 2 and torch.allclose(pos[0][1]["concat_latent_image"], want)


def test_track_to_video_refuses_tracks_it_cannot_place():
    vae = FakeVideoVAE()
    with pytest.raises(NodeInputError, match="width"):
        _to_video(vae, _track([[[3, 3]]] * 5), width=20)
    with pytest.raises(NodeInputError, match="tracks"):
        _to_video(vae, {"track_path": torch.zeros(5, 1, 2), "track_visibility": torch.ones(4, 1)})
    with pytest.raises(NodeInputError, match="length"):
        wm.wan_move_track_to_video(cond(), cond(), vae, 1.0, 32, 16, 6, 1, frames(1), tracks=None)
