"""The loss curve LossGraphNode shows (today's ComfyUI's comfy_extras/nodes_train.py,
`LossGraphNode.execute`): an 840x520 white canvas, a 40-pixel margin left and below for the axes,
the losses min-max scaled to the 800x480 plot and joined by a blue line (step i at
`x = 40 + int(i / n * 800)`, a loss l at `y = 480 - int(scaled(l) * 480)`), black axes, the labels
"Loss" and "Steps" and the largest and smallest loss written at the top and bottom of the y axis.
Written here; a run whose losses are all equal draws a flat line at the bottom (ComfyUI divides by
zero there).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

WIDTH, HEIGHT, MARGIN = 800, 480, 40
CURVE = (0, 0, 255)


def loss_points(losses: Sequence[float]) -> list[tuple[int, int]]:
    """The curve's vertices in canvas pixels, one per loss."""
    low, high = min(losses), max(losses)
    span = high - low
    n = len(losses)
    points = []
    for i, value in enumerate(losses):
        scaled = (value - low) / span if span > 0 else 0.0
        x = MARGIN if i == 0 else MARGIN + int(i / n * WIDTH)
        points.append((x, HEIGHT - int(scaled * HEIGHT)))
    return points


def draw_loss_graph(losses: Sequence[float]) -> torch.Tensor:
    """The graph as an IMAGE `[1, 520, 840, 3]` in 0..1."""
    values = [float(v) for v in losses]
    if not values:
        raise ValueError("loss: the loss map holds no loss values")
    image = Image.new("RGB", (WIDTH + MARGIN, HEIGHT + MARGIN), "white")
    draw = ImageDraw.Draw(image)
    points = loss_points(values)
    for start, end in zip(points, points[1:]):
        draw.line([start, end], fill=CURVE, width=2)
    draw.line([(MARGIN, 0), (MARGIN, HEIGHT)], fill="black", width=2)
    draw.line([(MARGIN, HEIGHT), (WIDTH + MARGIN, HEIGHT)], fill="black", width=2)
    font = ImageFont.load_default()
    draw.text((5, HEIGHT // 2), "Loss", font=font, fill="black")
    draw.text((WIDTH // 2, HEIGHT + 10), "Steps", font=font, fill="black")
    draw.text((MARGIN - 30, 0), f"{max(values):.2f}", font=font, fill="black")
    draw.text((MARGIN - 30, HEIGHT - 10), f"{min(values):.2f}", font=font, fill="black")
    pixels = np.asarray(image, dtype=np.float32) / 255.0  # [H, W, 3]
    return torch.from_numpy(pixels)[None]
