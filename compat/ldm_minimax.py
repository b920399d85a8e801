"""ComfyUI's `comfy.ldm.minimax.model` schedule helpers (behaviour of today's ComfyUI
`comfy/ldm/minimax/model.py`): MiniMax H3 runs its audio on a flow schedule shifted differently from
the video's. `time_shift_sigma` (ours, comfy_core/families/minimax_h3/layout.py) maps a sigma of the
`from_shift` schedule to the `to_shift` one at the same base-grid point; `time_shift_slope` is that
map's derivative d(sigma_to)/d(sigma_from)."""
from __future__ import annotations

from typing import Any


def time_shift_slope(sigma: Any, from_shift: float, to_shift: float) -> Any:
    """d sigma_to / d sigma_from: with base b = sigma / (f + sigma (1 - f)),
    t (1 + (f - 1) b)^2 / (f (1 + (t - 1) b)^2)."""
    base = sigma / (from_shift + sigma * (1.0 - from_shift))
    return (to_shift * (1.0 + (from_shift - 1.0) * base) ** 2) / (from_shift * (1.0 + (to_shift - 1.0) * base) ** 2)


__all__ = ["time_shift_slope"]
