"""Latent arithmetic and batch nodes of ComfyUI's comfy_extras/nodes_latent.py (0.3.64):
LatentAdd, LatentSubtract, LatentMultiply, LatentInterpolate, LatentConcat, LatentCut,
LatentBatch, LatentBatchSeedBehavior.

ComfyUI's names, sockets and semantics, written here; the maths is in
comfy_core/latent/arithmetic.py. Every node returns a copy of its first LATENT's dict with new
`samples`, so `noise_mask`, `batch_index` and other keys are carried along as in ComfyUI.
When a second latent's size differs from the first's it is resized to it (bilinear, centre
crop) and, where ComfyUI does, cut or tiled to its batch; channel or frame counts that still
differ are refused naming the input (ComfyUI fails inside torch there).

ComfyUI declares these nodes without a display name (V3 schema), so its editor shows the node
names; here they show the same names, through NodeSpec's default.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from graph.native import MAX_RESOLUTION, Combo, Float, Input, Int, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

MODULE = "comfy_extras.nodes_latent"
CONCAT_DIMS = ["x", "-x", "y", "-y", "t", "-t"]
CUT_DIMS = ["x", "y", "t"]
SEED_BEHAVIORS = ["random", "fixed"]


def _number(value: Any, input_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise NodeInputError(input_name, "a FLOAT", repr(value))
    return value


def _fitted(first: torch.Tensor, second: torch.Tensor, input_name: str, repeat_batch: bool = True) -> torch.Tensor:
    """`second` resized (and batch-fitted) to `first`; a channel or frame mismatch is refused."""
    from comfy_core.latent.arithmetic import fit_to

    mismatch = second.ndim != first.ndim or second.shape[1:-2] != first.shape[1:-2]
    if mismatch:
        raise NodeInputError(input_name, f"LATENT samples of shape [B, {', '.join(map(str, first.shape[1:-2]))}, h, w] "
                                         "like the first latent", describe(second))
    return fit_to(second, first.shape, repeat_batch=repeat_batch)


def _with_samples(latent: dict, samples: torch.Tensor) -> dict:
    out = dict(latent)
    out["samples"] = samples
    return out


@node("LatentAdd", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT")], outputs=[Output("LATENT")])
def latent_add(samples1: dict, samples2: dict) -> tuple[dict]:
    """samples1 + samples2 (samples2 fitted to samples1's size and batch)."""
    first = checks.latent(samples1, "samples1")
    second = _fitted(first, checks.latent(samples2, "samples2"), "samples2")
    return (_with_samples(samples1, first + second),)


@node("LatentSubtract", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT")], outputs=[Output("LATENT")])
def latent_subtract(samples1: dict, samples2: dict) -> tuple[dict]:
    """samples1 - samples2 (samples2 fitted to samples1's size and batch)."""
    first = checks.latent(samples1, "samples1")
    second = _fitted(first, checks.latent(samples2, "samples2"), "samples2")
    return (_with_samples(samples1, first - second),)


@node("LatentMultiply", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples", "LATENT"), Float("multiplier", default=1.0, min=-10.0, max=10.0, step=0.01)],
      outputs=[Output("LATENT")])
def latent_multiply(samples: dict, multiplier: float) -> tuple[dict]:
    """samples * multiplier."""
    latent = checks.latent(samples, "samples")
    return (_with_samples(samples, latent * _number(multiplier, "multiplier")),)


@node("LatentInterpolate", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT"),
              Float("ratio", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("LATENT")])
def latent_interpolate(samples1: dict, samples2: dict, ratio: float) -> tuple[dict]:
    """Per latent pixel, the channel vectors' directions blended by `ratio` (1: samples1) and
    their lengths blended linearly (comfy_core.latent.arithmetic.interpolate)."""
    from comfy_core.latent.arithmetic import interpolate

    first = checks.latent(samples1, "samples1")
    second = _fitted(first, checks.latent(samples2, "samples2"), "samples2")
    return (_with_samples(samples1, interpolate(first, second, _number(ratio, "ratio"))),)


@node("LatentConcat", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT"), Combo("dim", CONCAT_DIMS)],
      outputs=[Output("LATENT")])
def latent_concat(samples1: dict, samples2: dict, dim: str) -> tuple[dict]:
    """samples1 and samples2 joined along x (width), y (height) or t (frames; on image latents
    the channel axis, as ComfyUI); "-" puts samples2 first. samples2 is cut or tiled to
    samples1's batch; the other axes must agree."""
    from comfy_core.latent.arithmetic import AXES_FROM_END, concat

    first = checks.latent(samples1, "samples1")
    second = checks.latent(samples2, "samples2")
    dim = checks.choice(dim, CONCAT_DIMS, "dim")
    axis = first.ndim - AXES_FROM_END[dim.lstrip("-")]
    others = [i for i in range(1, first.ndim) if i != axis]
    if second.ndim != first.ndim or any(second.shape[i] != first.shape[i] for i in others):
        raise NodeInputError("samples2", f"LATENT samples matching samples1 {list(first.shape)} on every axis but "
                                         f"{dim.lstrip('-')} and the batch", describe(second))
    return (_with_samples(samples1, concat(first, second, dim)),)


@node("LatentCut", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples", "LATENT"), Combo("dim", CUT_DIMS),
              Int("index", default=0, min=-MAX_RESOLUTION, max=MAX_RESOLUTION, step=1),
              Int("amount", default=1, min=1, max=MAX_RESOLUTION, step=1)],
      outputs=[Output("LATENT")])
def latent_cut(samples: dict, dim: str, index: int, amount: int) -> tuple[dict]:
    """`amount` entries along x, y or t from `index` (negative: counted from the end), clamped
    to the latent (comfy_core.latent.arithmetic.cut)."""
    from comfy_core.latent.arithmetic import cut

    latent = checks.latent(samples, "samples")
    dim = checks.choice(dim, CUT_DIMS, "dim")
    if isinstance(index, bool) or not isinstance(index, int):
        raise NodeInputError("index", "an int", repr(index))
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        raise NodeInputError("amount", "an int >= 1", repr(amount))
    return (_with_samples(samples, cut(latent, dim, index, amount)),)


@node("LatentBatch", display_name=None, category="latent/batch", python_module=MODULE,
      inputs=[Input("samples1", "LATENT"), Input("samples2", "LATENT")], outputs=[Output("LATENT")])
def latent_batch(samples1: dict, samples2: dict) -> tuple[dict]:
    """samples1's items followed by samples2's (resized to samples1's size). `batch_index` lists
    both inputs' noise indices (their own, or 0..B-1 each), so each item keeps the noise it had;
    samples1's other keys (a noise mask) are kept, as ComfyUI."""
    import torch

    first = checks.latent(samples1, "samples1")
    second = _fitted(first, checks.latent(samples2, "samples2"), "samples2", repeat_batch=False)
    out = _with_samples(samples1, torch.cat((first, second), dim=0))
    out["batch_index"] = (list(samples1.get("batch_index", range(first.shape[0])))
                          + list(samples2.get("batch_index", range(second.shape[0]))))
    return (out,)


@node("LatentBatchSeedBehavior", display_name=None, category="latent/advanced", python_module=MODULE,
      inputs=[Input("samples", "LATENT"), Combo("seed_behavior", SEED_BEHAVIORS, default="fixed")],
      outputs=[Output("LATENT")])
def latent_batch_seed_behavior(samples: dict, seed_behavior: str) -> tuple[dict]:
    """"fixed": every item gets the first item's noise index (the same noise for the whole batch);
    "random": the noise indices are dropped, so the items get consecutive noise again."""
    latent = checks.latent(samples, "samples")
    out = dict(samples)
    if checks.choice(seed_behavior, SEED_BEHAVIORS, "seed_behavior") == "random":
        out.pop("batch_index", None)
    else:
        first = list(samples.get("batch_index", [0]))[0]
        out["batch_index"] = [first] * latent.shape[0]
    return (out,)
