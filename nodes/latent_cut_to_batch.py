"""LatentCutToBatch of ComfyUI's comfy_extras/nodes_latent.py (2026), declared as ComfyUI's V3
schema renders it (graph/v3_schema.py); behaviour read from that file, written here.

The latent is cut along x (width), y (height) or t (frames) into chunks of `slice_size` and the
chunks become batch entries: `[B, C, T, H, W]` cut along t into slices of s gives
`[B*T/s, C, s, H, W]`, batch-major (all of the first entry's chunks, then the next's). A length
that is not a multiple of `slice_size` is truncated to one; a `slice_size` longer than the axis
takes the whole axis. An axis counted from the end that lands on the batch or channel axis (t of
a 4-D image latent) leaves the latent as it is. The other keys of the LATENT dict are kept.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Combo, Int, Output, Socket, v3_node
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_latent"
DIMS = ["t", "x", "y"]
AXIS_FROM_END = {"x": 1, "y": 2, "t": 3}


def cut_to_batch(samples: "Any", dim: str, slice_size: int) -> "Any":
    """`samples` `[B, C, ..., H, W]` with the chosen axis cut into batch entries of `slice_size`."""
    axis = samples.ndim - AXIS_FROM_END[dim]
    if axis < 2:
        return samples
    moved = samples.movedim(axis, 1)  # [B, L, ...]
    length = moved.shape[1]
    if length < slice_size:
        slice_size = length
    elif length % slice_size:
        moved = moved[:, :length // slice_size * slice_size]
    return moved.reshape([-1, slice_size, *moved.shape[2:]]).movedim(1, axis)


@v3_node("LatentCutToBatch", category="model/latent/advanced", python_module=MODULE,
         search_aliases=["slice to batch", "split latent", "tile latent"],
         inputs=[Socket("samples", "LATENT"), Combo("dim", DIMS),
                 Int("slice_size", default=1, min=1, max=MAX_RESOLUTION, step=1)],
         outputs=[Output("LATENT")])
def latent_cut_to_batch(samples: Any, dim: str, slice_size: int) -> tuple[dict]:
    import torch

    if not isinstance(samples, dict) or not isinstance(samples.get("samples"), torch.Tensor):
        raise NodeInputError("samples", "a LATENT {'samples': tensor}", describe(samples))
    if dim not in DIMS:
        raise NodeInputError("dim", f"one of {DIMS}", repr(dim))
    if isinstance(slice_size, bool) or not isinstance(slice_size, int) or slice_size < 1:
        raise NodeInputError("slice_size", "an int >= 1", repr(slice_size))
    cut = cut_to_batch(samples["samples"], dim, slice_size)
    if cut is samples["samples"]:
        return (samples,)
    return ({**samples, "samples": cut},)
