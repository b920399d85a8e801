"""ImageHistogram and CurveEditor (ComfyUI's 2026 curve nodes): 256-bin histograms of the first
image, and the editor's curve as a CURVE value that can be evaluated."""
from __future__ import annotations

import pytest
import torch

from nodes.errors import NodeInputError
from nodes.histogram import Curve, curve_editor, image_histogram
from tests.nodes.workflow_2026 import Runner, node


def test_channel_histograms_truncate_and_rgb_is_their_integer_mean():
    image = torch.zeros(2, 2, 2, 3)
    image[0, 0, 0] = torch.tensor([1.0, 0.5, 0.0])  # 255, 127 (truncated), 0
    image[1] = 1.0  # the second image is ignored
    rgb, luminance, red, green, blue = image_histogram(image)
    assert all(len(h) == 256 for h in (rgb, luminance, red, green, blue))
    assert red[255] == 1 and red[0] == 3 and green[127] == 1 and blue[0] == 4
    assert rgb[0] == (3 + 3 + 4) // 3 and rgb[255] == 0
    # BT.709 luma of (1, .5, 0): 0.2126 + 0.3576 = 0.5702 -> 145
    assert luminance[145] == 1 and luminance[0] == 3 and sum(luminance) == 4


def test_histogram_checks_its_input():
    with pytest.raises(NodeInputError, match="image"):
        image_histogram(torch.zeros(1, 2, 2, 1))


def test_curve_editor_passes_the_curve_and_shows_a_histogram():
    (curve,) = curve_editor({"points": [[0, 0], [0.5, 0.8], [1, 1]], "interpolation": "linear"})
    assert curve.points == ((0.0, 0.0), (0.5, 0.8), (1.0, 1.0)) and curve.evaluate(0.25) == pytest.approx(0.4)
    shown = curve_editor(None, [1, 2, 3])
    assert shown["ui"] == {"histogram": [1, 2, 3]} and shown["result"][0].points == ((0.0, 0.0), (1.0, 1.0))
    with pytest.raises(NodeInputError, match="curve"):
        curve_editor({"points": [[0, 0]]})


def test_monotone_cubic_stays_monotone_and_passes_through_the_points():
    curve = Curve.from_raw({"points": [[0, 0], [0.3, 0.6], [0.35, 0.62], [1, 1]]})
    xs = [i / 100 for i in range(101)]
    ys = [curve.evaluate(x) for x in xs]
    assert all(b >= a - 1e-12 for a, b in zip(ys, ys[1:]))
    assert curve.evaluate(0.3) == pytest.approx(0.6) and curve.evaluate(-1) == 0.0 and curve.evaluate(2) == 1.0


async def test_histogram_into_the_curve_editor(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"img": node("EmptyImage", width=4, height=4, batch_size=1, color=0),
              "h": node("ImageHistogram", image=["img", 0]),
              "c": node("CurveEditor", curve={"points": [[0, 0], [1, 1]], "interpolation": "monotone_cubic"},
                        histogram=["h", 1]),
              "out": node("PreviewAny", source=["c", 0])}  # CurveEditor is no output node
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert out.ui_outputs["c"]["histogram"][0] == 16
