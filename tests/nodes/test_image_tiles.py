"""PrimitiveBoundingBox, SplitImageToTileList, ImageMergeTileList (ComfyUI's nodes_images.py, 2026)
and CropByBBoxes (its nodes_sdpose.py): grids and crops checked against numpy computations
written here independently, and the nodes wired in prompts as the editor sends them."""
from __future__ import annotations


import numpy as np
import pytest
import torch

from nodes.environment import Environment, host_env
from nodes.errors import NodeInputError
from nodes.image_tiles import (crop_by_bboxes, image_merge_tile_list, primitive_bounding_box,
                               split_image_to_tile_list, tile_grid)
from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def env(tmp_path):
    environment = Environment.rooted_at(tmp_path)
    environment.ensure_dirs()
    token = host_env.set(environment)
    yield environment
    host_env.reset(token)


def test_primitive_bounding_box_is_the_box_dict():
    assert primitive_bounding_box(3, 4, 50, 60) == ({"x": 3, "y": 4, "width": 50, "height": 60},)


def test_tile_grid_steps_by_tile_minus_overlap_and_moves_the_last_tile_inside():
    # 2500 wide, 1024 tiles, 128 overlap: stride 896, the third tile pulled back to end at 2500.
    xs = sorted({(x0, x1) for x0, _, x1, _ in tile_grid(2500, 1000, 1024, 1024, 128)})
    assert xs == [(0, 1024), (896, 1920), (1476, 2500)]
    # Higher than a tile is never needed: one row spanning the image.
    assert {(y0, y1) for _, y0, _, y1 in tile_grid(2500, 1000, 1024, 1024, 128)} == {(0, 1000)}
    # Overlap above 3/4 of the tile: the stride stays a quarter tile (64 / 4 = 16).
    assert [c[0] for c in tile_grid(112, 64, 64, 64, 60)] == [0, 16, 32, 48]
    # Row by row: x runs fastest.
    grid = tile_grid(150, 100, 64, 64, 16)
    assert grid == [(0, 0, 64, 64), (48, 0, 112, 64), (86, 0, 150, 64),
                    (0, 36, 64, 100), (48, 36, 112, 100), (86, 36, 150, 100)]


def test_split_gives_every_window_of_the_whole_batch():
    image = torch.rand(2, 100, 150, 3)
    (tiles,) = split_image_to_tile_list(image, 64, 64, 16)
    assert isinstance(tiles, list) and len(tiles) == 6
    as_np = image.numpy()
    for tile, (x0, y0, x1, y1) in zip(tiles, tile_grid(150, 100, 64, 64, 16)):
        assert tile.shape == (2, 64, 64, 3)
        np.testing.assert_array_equal(tile.numpy(), as_np[:, y0:y1, x0:x1, :])


@pytest.mark.parametrize("overlap", [0, 16, 40])
def test_split_then_merge_gives_the_image_back(overlap):
    image = torch.rand(2, 100, 150, 4)
    (tiles,) = split_image_to_tile_list(image, 64, 72, overlap)
    (merged,) = image_merge_tile_list(tiles, [150], [100], [overlap])
    assert merged.shape == image.shape
    assert torch.allclose(merged, image, atol=1e-5)


def _numpy_merge(tiles: list[np.ndarray], width: int, height: int, overlap: int) -> np.ndarray:
    """The sine-window blend, computed pixel-row by pixel-row with numpy."""
    b, th, tw, c = tiles[0].shape
    if overlap > 0:
        wy = np.maximum(np.sin(np.pi * np.arange(th) / (th - 1)), 1e-5)
        wx = np.maximum(np.sin(np.pi * np.arange(tw) / (tw - 1)), 1e-5)
    else:
        wy, wx = np.ones(th), np.ones(tw)
    acc = np.zeros((b, height, width, c))
    wsum = np.zeros((height, width))
    for tile, (x0, y0, x1, y1) in zip(tiles, tile_grid(width, height, tw, th, overlap)):
        for r in range(y1 - y0):
            weights = wy[r] * wx[: x1 - x0]
            acc[:, y0 + r, x0:x1, :] += tile[:, r, : x1 - x0, :] * weights[None, :, None]
            wsum[y0 + r, x0:x1] += weights
    wsum[wsum == 0] = 1.0
    return acc / wsum[None, :, :, None]


@pytest.mark.parametrize("overlap", [0, 24])
def test_merge_blends_tiles_with_the_sine_window(overlap):
    # Each tile a different constant, so the blend weights show in the result.
    grid = tile_grid(150, 100, 64, 64, overlap)
    tiles = [torch.full((1, 64, 64, 3), float(i + 1)) for i in range(len(grid))]
    (merged,) = image_merge_tile_list(tiles, [150], [100], [overlap])
    expected = _numpy_merge([t.double().numpy() for t in tiles], 150, 100, overlap)
    np.testing.assert_allclose(merged.numpy(), expected, rtol=1e-5, atol=1e-5)
    if overlap:  # a pixel inside two tiles' overlap is strictly between their values
        value = float(merged[0, 10, 50, 0])
        assert 1.0 < value < 2.0


def test_merge_leaves_uncovered_pixels_black_and_ignores_extra_tiles():
    tiles = [torch.ones(1, 64, 64, 3)] * 9
    (merged,) = image_merge_tile_list(tiles[:1], [100], [64], [0])  # one tile for a two-tile grid
    assert torch.equal(merged[:, :, :64], torch.ones(1, 64, 64, 3))
    assert torch.equal(merged[:, :, 64:], torch.zeros(1, 64, 36, 3))
    (full,) = image_merge_tile_list(tiles, [100], [64], [0])
    assert torch.equal(full, torch.ones(1, 64, 100, 3))
    with pytest.raises(NodeInputError, match="image_list"):
        image_merge_tile_list([], [64], [64], [0])


async def test_split_runs_its_consumer_per_tile_and_merge_takes_the_list(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=150, height=100, batch_size=1, color=0x336699),
              "split": node("SplitImageToTileList", image=["img", 0], tile_width=64, tile_height=64, overlap=16),
              "tile_size": node("GetImageSize", image=["split", 0]),
              "tiles": node("PreviewAny", source=["tile_size", 0]),
              "merge": node("ImageMergeTileList", image_list=["split", 0], final_width=150, final_height=100,
                            overlap=16),
              "size": node("GetImageSize", image=["merge", 0]),
              "out": node("PreviewAny", source=["size", 1])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["tiles"] == {"text": ["64"] * 6}
    assert runner.ran.count("tile_size") == 6 and runner.ran.count("merge") == 1
    assert out.ui_outputs["out"] == {"text": ["100"]}


def _block_mean(region: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Area downscale by an integer factor: the mean of each block, `[h, w, C]` -> `[C, out_h, out_w]`."""
    h, w, c = region.shape
    blocks = region.reshape(out_h, h // out_h, out_w, w // out_w, c)
    return blocks.mean(axis=(1, 3)).transpose(2, 0, 1)


def test_crop_by_bboxes_stretches_the_union_of_a_frames_boxes(env):
    image = torch.rand(2, 32, 40, 3)
    boxes = [[{"x": 8, "y": 4, "width": 8, "height": 8}, {"x": 16, "y": 8, "width": 8, "height": 12}],
             [{"x": 0, "y": 0, "width": 40, "height": 32}]]
    out = crop_by_bboxes(image, boxes, 4, 4, 0, "stretch")
    crops = out["result"][0]
    assert crops.shape == (2, 4, 4, 3)
    # Frame 0: union x 8..24, y 4..20 (16 x 16) -> 4 x 4 blocks; frame 1: the whole 40 x 32 image
    # -> 10 x 8 blocks. Compare as [C, h, w].
    np.testing.assert_allclose(crops[0].permute(2, 0, 1).numpy(), _block_mean(image[0, 4:20, 8:24].numpy(), 4, 4),
                               atol=1e-6)
    np.testing.assert_allclose(crops[1].permute(2, 0, 1).numpy(), _block_mean(image[1].numpy(), 4, 4), atol=1e-6)
    ui = out["ui"]
    assert ui["input_bboxes"] == boxes[0]
    preview = ui["source_images"]
    assert len(preview) == 1 and preview[0]["type"] == "temp"
    assert (env.temp_dir / preview[0]["subfolder"] / preview[0]["filename"]).is_file()


def test_crop_by_bboxes_pads_to_keep_the_aspect_ratio(env):
    image = torch.rand(1, 16, 16, 3)
    box = {"x": 0, "y": 4, "width": 16, "height": 8}  # 2:1 into a square: 8 x 4, rows 2..6
    crops = crop_by_bboxes(image, box, 8, 8, 0, "pad")["result"][0]
    assert crops.shape == (1, 8, 8, 3)
    np.testing.assert_allclose(crops[0, 2:6].permute(2, 0, 1).numpy(), _block_mean(image[0, 4:12].numpy(), 4, 8),
                               atol=1e-6)
    assert float(crops[0, :2].abs().sum()) == 0.0 and float(crops[0, 6:].abs().sum()) == 0.0


def test_crop_by_bboxes_padding_clamps_and_later_frames_reuse_the_last_boxes(env):
    image = torch.rand(3, 20, 20, 3)
    # One frame's boxes for three images; padding 6 around 2..8 reaches past the top-left corner.
    boxes = [[{"x": 2, "y": 2, "width": 6, "height": 6}]]
    crops = crop_by_bboxes(image, boxes, 7, 7, 6, "stretch")["result"][0]
    assert crops.shape == (3, 7, 7, 3)  # region 0..14 x 0..14 -> 2 x 2 blocks each
    for i in range(3):
        np.testing.assert_allclose(crops[i].permute(2, 0, 1).numpy(), _block_mean(image[i, 0:14, 0:14].numpy(), 7, 7),
                                   atol=1e-6)


def test_crop_by_bboxes_skips_frames_without_boxes_and_falls_back_for_empty_boxes(env):
    image = torch.rand(2, 20, 30, 3)
    # Frame 0 has no boxes (no crop); frame 1's box lies outside the image: the fallback square,
    # int(20 * 0.3) = 6 wide, centred (x 12..18), at y int(20 * 0.1) = 2..8.
    crops = crop_by_bboxes(image, [[], [{"x": 50, "y": 50, "width": 5, "height": 5}]], 3, 3, 0,
                           "stretch")["result"][0]
    assert crops.shape == (1, 3, 3, 3)
    np.testing.assert_allclose(crops[0].permute(2, 0, 1).numpy(), _block_mean(image[1, 2:8, 12:18].numpy(), 3, 3),
                               atol=1e-6)
    # No boxes at all: the input comes back; an empty box list too (without a preview).
    assert torch.equal(crop_by_bboxes(image, [[], []], 3, 3, 0, "stretch")["result"][0], image)
    assert crop_by_bboxes(image, [], 3, 3, 0, "stretch") == (image,)
    with pytest.raises(NodeInputError, match="bboxes"):
        crop_by_bboxes(image, "0,0,4,4", 3, 3, 0, "stretch")
    with pytest.raises(NodeInputError, match="keep_aspect"):
        crop_by_bboxes(image, [], 3, 3, 0, "fit")


async def test_bounding_box_primitive_feeds_crop_by_bboxes(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=128, height=96, batch_size=2, color=0xFF0000),
              "box": node("PrimitiveBoundingBox", x=16, y=8, width=64, height=32),
              "crop": node("CropByBBoxes", image=["img", 0], bboxes=["box", 0], output_width=64, output_height=128,
                           padding=0, keep_aspect="pad"),
              "size": node("GetImageSize", image=["crop", 0]),
              "out": node("PreviewAny", source=["size", 2])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["2"]}
    assert out.ui_outputs["crop"]["input_bboxes"] == [{"x": 16, "y": 8, "width": 64, "height": 32}]
    assert len(out.ui_outputs["crop"]["source_images"]) == 1


def test_packs_call_them_as_comfyuis_v3_classes(comfy_nodes, env):
    from comfy_extras.nodes_images import ImageMergeTileList, PrimitiveBoundingBox, SplitImageToTileList
    from comfy_extras.nodes_sdpose import CropByBBoxes

    assert PrimitiveBoundingBox.execute(1, 2, 30, 40).result == ({"x": 1, "y": 2, "width": 30, "height": 40},)
    image = torch.rand(1, 100, 150, 3)
    tiles = SplitImageToTileList.execute(image, 64, 64, 16).result[0]
    assert len(tiles) == 6
    merged = ImageMergeTileList.execute(tiles, [150], [100], [16]).result[0]
    assert torch.allclose(merged, image, atol=1e-5)
    crops = CropByBBoxes.execute(image, {"x": 0, "y": 0, "width": 64, "height": 64}, 8, 8, 0).result[0]
    np.testing.assert_allclose(crops[0].permute(2, 0, 1).numpy(), _block_mean(image[0, :64, :64].numpy(), 8, 8),
                               atol=1e-6)
