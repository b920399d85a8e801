"""RebatchLatents (ComfyUI's nodes_rebatch.py): runs of same-size latents regrouped into batches,
noise indices counted across inputs, masks tiled and dropped when all ones, typed errors; and
RebatchImages declared in ComfyUI's module."""
from __future__ import annotations

import pytest
import torch

from graph.native import spec_of
from nodes.errors import NodeInputError
from nodes.image import rebatch_images
from nodes.rebatch import rebatch_latents


def _items(batch: int, start: float, height: int = 8, width: int = 8) -> torch.Tensor:
    """Item i is filled with start + i, so every output item says where it came from."""
    return (start + torch.arange(float(batch)))[:, None, None, None].expand(batch, 4, height, width).clone()


def _inputs() -> list[dict]:
    mask = torch.zeros(1, 1, 64, 64)
    return [
        {"samples": _items(3, 0)},
        {"samples": _items(2, 3), "noise_mask": mask, "batch_index": [10, 11], "other": "dropped"},
        {"samples": _items(1, 5, 6, 8)},
        {"samples": _items(4, 6, 6, 8)},
    ]


def _values(latent: dict) -> list[float]:
    return latent["samples"][:, 0, 0, 0].tolist()


def test_runs_of_one_size_are_cut_into_batches():
    out = rebatch_latents(_inputs(), [2])[0]
    assert [_values(o) for o in out] == [[0, 1], [2, 3], [4], [5, 6], [7, 8], [9]]
    # Own indices where given (10, 11), else positions counted across all inputs before.
    assert [o["batch_index"] for o in out] == [[0, 1], [2, 10], [11], [5, 6], [7, 8], [9]]
    assert all(set(o) <= {"samples", "noise_mask", "batch_index"} for o in out)


def test_masks_are_tiled_per_input_and_dropped_when_all_ones():
    out = rebatch_latents(_inputs(), [2])[0]
    assert "noise_mask" not in out[0] and "noise_mask" not in out[3]
    assert torch.equal(out[1]["noise_mask"][:, 0, 0, 0], torch.tensor([1.0, 0.0]))  # ones, then the given mask
    assert torch.equal(out[2]["noise_mask"], torch.zeros(1, 1, 64, 64))  # the one-item mask tiled to both items


def test_a_large_batch_size_keeps_each_run_whole():
    out = rebatch_latents(_inputs(), [10])[0]
    assert [_values(o) for o in out] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_masks_of_different_sizes_in_one_run_are_refused():
    inputs = [{"samples": _items(1, 0)}, {"samples": _items(1, 1), "noise_mask": torch.zeros(1, 1, 32, 32)}]
    with pytest.raises(NodeInputError) as info:
        rebatch_latents(inputs, [2])
    assert info.value.input_name == "latents"
    with pytest.raises(NodeInputError) as info:
        rebatch_latents([{"samples": _items(1, 0)}], [0])
    assert info.value.input_name == "batch_size"


def test_rebatch_images_is_declared_in_comfyuis_module():
    assert spec_of(rebatch_images).python_module == "comfy_extras.nodes_rebatch"
    assert spec_of(rebatch_latents).python_module == "comfy_extras.nodes_rebatch"
