"""LatentCutToBatch (ComfyUI's nodes_latent.py, 2026): a latent cut along x, y or t into chunks
that become batch entries, batch-major, with a remainder dropped."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.latent_cut_to_batch import cut_to_batch, latent_cut_to_batch
from tests.nodes.workflow_2026 import Runner, node


def test_time_axis_of_a_video_latent_becomes_the_batch():
    video = torch.arange(2 * 1 * 6 * 1 * 1, dtype=torch.float32).reshape(2, 1, 6, 1, 1)  # [B, C, T, H, W]
    cut = cut_to_batch(video, "t", 2)
    assert cut.shape == (6, 1, 2, 1, 1)
    assert cut.flatten().tolist() == video.flatten().tolist()  # first entry's chunks, then the next's
    assert torch.equal(cut[1], video[0, :, 2:4])


def test_remainder_is_dropped_and_a_long_slice_takes_the_axis():
    image = torch.rand(1, 4, 8, 10)  # [B, C, H, W]
    assert cut_to_batch(image, "x", 3).shape == (3, 4, 8, 3)  # 10 -> 9, three chunks
    assert torch.equal(cut_to_batch(image, "x", 3)[2], image[0, :, :, 6:9])
    assert cut_to_batch(image, "y", 20).shape == (1, 4, 8, 10)
    assert cut_to_batch(image, "t", 2) is image  # t of a 4-D latent is the channel axis: unchanged


def test_node_keeps_the_other_keys_and_checks_inputs():
    latent = {"samples": torch.rand(1, 4, 8, 8), "noise_mask": torch.ones(1, 8, 8)}
    (out,) = latent_cut_to_batch(latent, "y", 4)
    assert out["samples"].shape == (2, 4, 4, 8) and out["noise_mask"] is latent["noise_mask"]
    assert latent_cut_to_batch(latent, "t", 1)[0] is latent
    with pytest.raises(NodeInputError, match="dim"):
        latent_cut_to_batch(latent, "z", 1)


async def test_in_a_prompt(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"l": node("EmptyLatentImage", width=64, height=32, batch_size=1),
              "c": node("LatentCutToBatch", samples=["l", 0], dim="x", slice_size=4),
              "out": node("PreviewAny", source=["c", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
