"""`latent_preview.prepare_callback` for packs that run their own sampling loop.

Imports no torch (tensors only pass through the callback): packs import `latent_preview` at
start-up, before the server answers /object_info, and start-up stays torch-free.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import torch


def prepare_callback(model: Any, steps: int, x0_output_dict: dict | None = None
                     ) -> Callable[[int, torch.Tensor, torch.Tensor, int], None]:
    """A `callback(step, x0, x, total_steps)` reporting progress and a live preview to the running
    node (the built-in KSampler's own callback); `x0_output_dict["x0"]` receives the last x0."""
    from nodes.sampling import progress_callback

    report = progress_callback(model)

    def callback(step: int, x0: torch.Tensor, x: torch.Tensor, total_steps: int) -> None:
        if x0_output_dict is not None:
            x0_output_dict["x0"] = x0
        if report is not None:
            report(step, x0, x, total_steps)

    return callback
