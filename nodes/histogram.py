"""ImageHistogram and CurveEditor of ComfyUI's 2026 curve nodes (comfy_extras, the extension that
registers `CurveEditor` and `ImageHistogram`), declared as ComfyUI's V3 schema renders them
(graph/v3_schema.py); behaviour read from that file, written here.

* ImageHistogram: 256-bin histograms of the batch's first image, as lists of ints: per channel
  (pixels to uint8 by `clip(255 * x)` truncation), `rgb` the integer mean of the three channel
  histograms (Photoshop's RGB composite), `luminance` of the ITU-R BT.709 luma
  (0.2126 R + 0.7152 G + 0.0722 B).
* CurveEditor: the editor's curve widget (`{"points": [[x, y], ...], "interpolation": ...}`) as a
  CURVE value; a linked histogram is echoed to the editor (`ui.histogram`) to draw behind the
  curve. The CURVE value can be evaluated (`Curve.evaluate`), monotone cubic (Fritsch-Carlson,
  "Monotone piecewise cubic interpolation", SIAM J. Numer. Anal. 1980) or linear.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from graph.v3_schema import Output, Socket, Widget, v3_node
from nodes.errors import NodeInputError, describe

DEFAULT_CURVE = {"points": [[0.0, 0.0], [1.0, 1.0]], "interpolation": "monotone_cubic"}
INTERPOLATIONS = ("monotone_cubic", "linear")


def histograms(image: Any) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(rgb, luminance, red, green, blue) 256-bin histograms of `image[0]` ([H, W, C], C >= 3)."""
    import numpy as np

    pixels = image[0].detach().cpu().float().numpy()  # [H, W, C]
    as_uint8 = np.clip(pixels * 255, 0, 255).astype(np.uint8)

    def bins(values: Any) -> Any:
        return np.bincount(values.ravel(), minlength=256)[:256]

    red, green, blue = (bins(as_uint8[:, :, c]) for c in range(3))
    rgb = (red + green + blue) // 3
    luma = 0.2126 * pixels[:, :, 0] + 0.7152 * pixels[:, :, 1] + 0.0722 * pixels[:, :, 2]
    luminance = bins(np.clip(luma * 255, 0, 255).astype(np.uint8))
    return rgb.tolist(), luminance.tolist(), red.tolist(), green.tolist(), blue.tolist()


@v3_node("ImageHistogram", display_name="Image Histogram", category="utils", python_module="comfy_extras.nodes_curve",
         inputs=[Socket("image", "IMAGE")],
         outputs=[Output("HISTOGRAM", "rgb"), Output("HISTOGRAM", "luminance"), Output("HISTOGRAM", "red"),
                  Output("HISTOGRAM", "green"), Output("HISTOGRAM", "blue")])
def image_histogram(image: Any) -> tuple[list[int], ...]:
    import torch

    if not isinstance(image, torch.Tensor) or image.ndim != 4 or image.shape[-1] < 3 or image.shape[0] == 0:
        raise NodeInputError("image", "an IMAGE [B,H,W,C] with at least 3 channels", describe(image))
    return histograms(image)


@dataclass(frozen=True)
class Curve:
    """A tone curve: control points (x ascending, in 0..1) and how to interpolate between them."""

    points: tuple[tuple[float, float], ...]
    interpolation: str = "monotone_cubic"

    @classmethod
    def from_raw(cls, raw: Any) -> "Curve":
        """The editor's value (`{"points", "interpolation"}`, or a bare list of points)."""
        if isinstance(raw, Curve):
            return raw
        if isinstance(raw, (list, tuple)):
            raw = {"points": raw}
        if not isinstance(raw, dict):
            raise NodeInputError("curve", "a curve {points: [[x, y], ...], interpolation}", describe(raw))
        interpolation = raw.get("interpolation", "monotone_cubic")
        if interpolation not in INTERPOLATIONS:
            raise NodeInputError("curve", f"interpolation one of {list(INTERPOLATIONS)}", repr(interpolation))
        try:
            points = sorted((float(p[0]), float(p[1])) for p in raw.get("points", ()))
        except (TypeError, ValueError, IndexError):
            raise NodeInputError("curve", "points as [x, y] pairs", repr(raw.get("points"))) from None
        if len(points) < 2:
            raise NodeInputError("curve", "at least two points", repr(points))
        return cls(tuple(points), interpolation)

    def _slopes(self) -> list[float]:
        """Fritsch-Carlson tangents: secant means, zeroed at extrema, limited to keep monotone."""
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        n = len(xs)
        secants = [(ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i]) if xs[i + 1] > xs[i] else 0.0 for i in range(n - 1)]
        tangents = [secants[0], *[(secants[i - 1] + secants[i]) / 2 for i in range(1, n - 1)], secants[-1]]
        for i in range(n - 1):
            if secants[i] == 0.0:
                tangents[i] = tangents[i + 1] = 0.0
                continue
            a, b = tangents[i] / secants[i], tangents[i + 1] / secants[i]
            if a < 0 or b < 0:  # an extremum inside the interval: flatten there
                tangents[i] = max(tangents[i], 0.0) if secants[i] > 0 else min(tangents[i], 0.0)
                tangents[i + 1] = max(tangents[i + 1], 0.0) if secants[i] > 0 else min(tangents[i + 1], 0.0)
                a, b = tangents[i] / secants[i], tangents[i + 1] / secants[i]
            if a * a + b * b > 9.0:
                scale = 3.0 / (a * a + b * b) ** 0.5
                tangents[i], tangents[i + 1] = scale * a * secants[i], scale * b * secants[i]
        return tangents

    def evaluate(self, x: float) -> float:
        """The curve at `x` (held flat outside the first and last points)."""
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = bisect_right(xs, x) - 1
        span = xs[i + 1] - xs[i]
        t = (x - xs[i]) / span if span > 0 else 0.0
        if self.interpolation == "linear":
            return ys[i] + t * (ys[i + 1] - ys[i])
        m = self._slopes()
        h00, h10 = 2 * t ** 3 - 3 * t ** 2 + 1, t ** 3 - 2 * t ** 2 + t
        h01, h11 = -2 * t ** 3 + 3 * t ** 2, t ** 3 - t ** 2
        return h00 * ys[i] + h10 * span * m[i] + h01 * ys[i + 1] + h11 * span * m[i + 1]


@v3_node("CurveEditor", display_name="Curve Editor", category="utils", python_module="comfy_extras.nodes_curve",
         inputs=[Widget("curve", "CURVE", default=DEFAULT_CURVE), Socket("histogram", "HISTOGRAM", optional=True)],
         outputs=[Output("CURVE", "curve")])
def curve_editor(curve: Any = None, histogram: Any = None) -> Any:
    """The curve as a CURVE value; the histogram, when linked, shown in the editor."""
    result = Curve.from_raw(curve if curve is not None else DEFAULT_CURVE)
    if histogram is None:
        return (result,)
    return {"result": (result,), "ui": {"histogram": list(histogram)}}
