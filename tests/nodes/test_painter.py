"""Painter (ComfyUI's nodes_painter.py, 2026): the editor's uploaded strokes (RGBA) composited
over the base image or a coloured canvas; the strokes' alpha is the mask."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tests.nodes.workflow_2026 import Runner, node


@pytest.fixture
def runner(tmp_path) -> Runner:
    return Runner(tmp_path)


def strokes(runner: Runner, size: tuple[int, int] = (64, 64)) -> str:
    rgba = np.zeros((size[1], size[0], 4), np.uint8)
    rgba[:, : size[0] // 2] = (255, 0, 0, 255)  # left half painted red, right half untouched
    folder = runner.env.input_dir / "painter"
    folder.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rgba, "RGBA").save(folder / "strokes.png")
    return "painter/strokes.png"


def painter(mask: str, **inputs) -> dict:
    return node("Painter", mask=mask, width=64, height=64, bg_color="#0000ff", **inputs)


async def run(runner: Runner, prompt: dict) -> dict:
    out = await runner.run({**prompt, "i": node("PreviewAny", source=["p", 0]),
                            "m": node("PreviewAny", source=["p", 1])})
    assert out.status == "success", out.error
    return out.ui_outputs


async def test_strokes_over_a_canvas(runner):
    ui = await run(runner, {"p": painter(strokes(runner))})
    assert len(ui["p"]["images"]) == 1 and ui["p"]["images"][0]["type"] == "temp"
    preview = runner.env.temp_dir / ui["p"]["images"][0]["subfolder"] / ui["p"]["images"][0]["filename"]
    pixels = np.asarray(Image.open(preview))
    assert pixels[10, 5].tolist() == [255, 0, 0] and pixels[10, 60].tolist() == [0, 0, 255]


def test_compositing_and_mask(runner, monkeypatch):
    from nodes import painter as module
    monkeypatch.setattr(module, "current_env", lambda: runner.env)
    name = strokes(runner)
    out = module.painter(name, 64, 64, "#0000ff")
    image, mask = out["result"]
    assert image.shape == (1, 64, 64, 3) and mask.shape == (1, 64, 64)
    assert torch.allclose(image[0, 10, 5], torch.tensor([1.0, 0.0, 0.0]))  # painted
    assert torch.allclose(image[0, 10, 60], torch.tensor([0.0, 0.0, 1.0]))  # background colour
    assert mask[0, 10, 5] == 1.0 and mask[0, 10, 60] == 0.0
    base = torch.full((2, 32, 48, 3), 0.5)
    image, mask = module.painter(name, 64, 64, "#000000", image=base)["result"]
    assert image.shape == (1, 32, 48, 3) and torch.allclose(image[0, 5, 40], torch.tensor([0.5, 0.5, 0.5]))
    image, mask = module.painter("", 64, 128, "#00ff00")["result"]
    assert image.shape == (1, 128, 64, 3) and float(mask.sum()) == 0.0 and image[0, 0, 0, 1] == 1.0


async def test_new_strokes_rerun_the_node(runner):
    name = strokes(runner)
    await run(runner, {"p": painter(name)})
    await run(runner, {"p": painter(name)})
    assert "p" not in runner.ran  # unchanged file: cached
    strokes(runner, size=(32, 32))  # the editor re-uploads under the same name
    await run(runner, {"p": painter(name)})
    assert "p" in runner.ran
