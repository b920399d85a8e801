"""GetLatentSize (today's ComfyUI, comfy_extras/nodes_images.py): width, height, frames and batch
size of image, video and nested latents, and the progress text it shows on itself."""
from __future__ import annotations

import struct

import pytest
import torch

from comfy_core.latent.nested import NestedTensor
from nodes.errors import NodeInputError
from nodes.latent_info import get_latent_size
from tests.nodes.workflow_2026 import Runner, node


def test_image_latent_has_one_frame():
    assert get_latent_size({"samples": torch.zeros(3, 4, 40, 24)}) == (24, 40, 1, 3)


def test_video_latent_counts_its_frames():
    assert get_latent_size({"samples": torch.zeros(2, 16, 21, 60, 104)}) == (104, 60, 21, 2)


def test_nested_latent_measures_its_first_part():
    nested = NestedTensor([torch.zeros(1, 128, 5, 16, 24), torch.zeros(1, 8, 30, 16)])
    assert get_latent_size({"samples": nested}) == (24, 16, 5, 1)


def test_refuses_what_is_not_a_latent():
    with pytest.raises(NodeInputError, match="'latent'"):
        get_latent_size({"samples": torch.zeros(4, 8)})
    with pytest.raises(NodeInputError, match="'latent'"):
        get_latent_size(torch.zeros(1, 4, 8, 8))


def _texts(events) -> list[tuple[str, str]]:
    out = []
    for event in events:
        if event.type == 3:
            (length,) = struct.unpack(">I", event.data[:4])
            out.append((event.data[4:4 + length].decode(), event.data[4 + length:].decode()))
    return out


async def test_in_a_workflow_with_its_progress_text(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"lat": node("EmptyLTXVLatentVideo", width=256, height=128, length=17, batch_size=2),
              "size": node("GetLatentSize", latent=["lat", 0]),
              "out": node("PreviewAny", source=["size", 2])}
    checked = await runner.validate(prompt)
    assert checked.ok, checked.node_errors
    events = []
    out = await runner.executor.execute(prompt, "p", outputs=checked.outputs, sink=events.append)
    assert out.status == "success", out.error
    assert out.ui_outputs["out"] == {"text": ["3"]}  # (17 - 1) / 8 + 1 latent frames
    assert _texts(events) == [("size", "width: 8, height: 4\n frames: 3, batch size: 2")]
