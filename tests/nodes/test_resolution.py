"""ResolutionSelector (ComfyUI's nodes_resolution.py, 2026): width and height for an aspect
ratio and a megapixel budget, rounded to the nearest multiple."""
from __future__ import annotations

import pytest

from nodes.errors import NodeInputError
from nodes.resolution import ASPECT_RATIOS, resolution_selector
from tests.nodes.workflow_2026 import Runner, node


@pytest.mark.parametrize("ratio, megapixels, multiple, size", [
    ("1:1 (Square)", 1.0, 8, (1024, 1024)), ("16:9 (Widescreen)", 1.0, 8, (1368, 768)),
    ("9:16 (Portrait Widescreen)", 1.0, 64, (768, 1344)), ("3:2 (Photo)", 0.25, 8, (624, 416)),
])
def test_sizes(ratio, megapixels, multiple, size):
    assert resolution_selector(ratio, megapixels, multiple) == size


def test_every_ratio_keeps_its_proportion():
    for ratio, (w, h) in ASPECT_RATIOS.items():
        width, height = resolution_selector(ratio, 2.0, 8)
        assert width % 8 == 0 and height % 8 == 0 and abs(width / height - w / h) < 0.02


def test_an_unknown_ratio_is_an_error():
    with pytest.raises(NodeInputError):
        resolution_selector("5:4", 1.0, 8)


async def test_in_a_workflow_without_the_preview_widget(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"r": node("ResolutionSelector", aspect_ratio="4:3 (Standard)", megapixels=1.0, multiple=8),
              "w": node("PreviewAny", source=["r", 0]), "h": node("PreviewAny", source=["r", 1])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["w"] == {"text": ["1184"]} and out.ui_outputs["h"] == {"text": ["888"]}
