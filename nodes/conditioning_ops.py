"""Conditioning operations with ComfyUI's names, inputs, outputs and semantics (`nodes.py`):
ConditioningSetMask, ConditioningConcat, ConditioningAverage, ConditioningZeroOut,
ConditioningSetTimestepRange, ConditioningSetAreaPercentage, ConditioningSetAreaStrength.

The "set" nodes only write options into every entry's dict (a copy: inputs are never mutated);
the sampler reads them when it prepares the conditioning (comfy_core/sampling/conditioning.py
resolves `mask`, `set_area_to_bounds`, percentage `area`, `start_percent`/`end_percent`;
cond_batch.py weights by `strength` and `mask_strength`). Concat, Average and ZeroOut compute
new tensors. Display names are ComfyUI's; ConditioningAverage has none there (its mapping key
carries a trailing space), so it shows its node name, as in ComfyUI.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graph.native import Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

SET_COND_AREA = ["default", "mask bounds"]


def _conditioning(value: Any, input_name: str, *, non_empty: bool = False) -> list:
    """`value` if it is CONDITIONING whose tensors are tokens [B, T, W], else a NodeInputError."""
    return checks.conditioning(value, input_name, tokens=True, non_empty=non_empty)


def _strength(value: Any, input_name: str = "strength") -> float:
    # No upper bound beyond the widget's: a linked strength above 10 still works in ComfyUI.
    # A negative one would make the sampler's weight sums cancel (division by ~0).
    return checks.number(value, input_name, 0.0)


def _set_values(conditioning: list, values: dict) -> list:
    from comfy_core.text_encoders.conditioning import set_values

    return set_values(conditioning, values)


def _first_from(conditioning_from: list) -> torch.Tensor:
    """The first entry's tensor: ComfyUI applies only that one (and warns when there are more)."""
    if len(conditioning_from) > 1:
        import logging

        logging.getLogger(__name__).warning(
            "conditioning_from has %d entries; only the first is applied to conditioning_to",
            len(conditioning_from))
    return conditioning_from[0][0]


def _check_widths(to: torch.Tensor, source: torch.Tensor, index: int) -> None:
    if to.shape[2] != source.shape[2]:
        raise NodeInputError("conditioning_from", f"width {to.shape[2]} (as conditioning_to entry {index})",
                             f"width {source.shape[2]}")


# --- mask, area, strength, timestep range: options for the sampler ----------------------------

@node("ConditioningSetMask", category="conditioning", display_name="Conditioning (Set Mask)",
      inputs=[Input("conditioning", "CONDITIONING"), Input("mask", "MASK"),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01),
              Combo("set_cond_area", SET_COND_AREA)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_mask(conditioning: list, mask: torch.Tensor, set_cond_area: str, strength: float) -> tuple[list]:
    """Limit each entry to `mask` (resized to the latent when sampling), weighted by `strength`;
    "mask bounds" also crops the model input to the mask's bounding box.

    The parameters are in ComfyUI's method order (`append(conditioning, mask, set_cond_area,
    strength)`), not the sockets' order, so packs calling `nodes.ConditioningSetMask().append`
    positionally get what they meant."""
    conditioning = _conditioning(conditioning, "conditioning")
    mask = checks.mask_batch(mask)  # [B, H, W]
    checks.choice(set_cond_area, SET_COND_AREA, "set_cond_area")
    strength = _strength(strength)
    return (_set_values(conditioning, {"mask": mask, "set_area_to_bounds": set_cond_area != "default",
                                       "mask_strength": strength}),)


@node("ConditioningSetAreaPercentage", category="conditioning",
      display_name="Conditioning (Set Area with Percentage)",
      inputs=[Input("conditioning", "CONDITIONING"),
              Float("width", default=1.0, min=0, max=1.0, step=0.01),
              Float("height", default=1.0, min=0, max=1.0, step=0.01),
              Float("x", default=0, min=0, max=1.0, step=0.01),
              Float("y", default=0, min=0, max=1.0, step=0.01),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_area_percentage(conditioning: list, width: float, height: float, x: float, y: float,
                                     strength: float) -> tuple[list]:
    """ConditioningSetArea in fractions of the latent: the sampler resolves
    `("percentage", h, w, y, x)` against the latent it samples (any resolution)."""
    conditioning = _conditioning(conditioning, "conditioning")
    fractions = {key: checks.number(value, key, 0.0, 1.0)
                 for key, value in (("width", width), ("height", height), ("x", x), ("y", y))}
    area = ("percentage", fractions["height"], fractions["width"], fractions["y"], fractions["x"])
    return (_set_values(conditioning, {"area": area, "strength": _strength(strength),
                                       "set_area_to_bounds": False}),)


@node("ConditioningSetAreaStrength", category="conditioning",
      inputs=[Input("conditioning", "CONDITIONING"),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_area_strength(conditioning: list, strength: float) -> tuple[list]:
    """The weight of each entry where entries overlap (area, mask or the whole latent)."""
    conditioning = _conditioning(conditioning, "conditioning")
    return (_set_values(conditioning, {"strength": _strength(strength)}),)


@node("ConditioningSetTimestepRange", category="advanced/conditioning",
      inputs=[Input("conditioning", "CONDITIONING"),
              Float("start", default=0.0, min=0.0, max=1.0, step=0.001),
              Float("end", default=1.0, min=0.0, max=1.0, step=0.001)],
      outputs=[Output("CONDITIONING")])
def conditioning_set_timestep_range(conditioning: list, start: float, end: float) -> tuple[list]:
    """Entries apply only between `start` and `end`, fractions of the sampling run (0 is the
    noisiest step); the sampler converts them to sigmas with the model's schedule."""
    conditioning = _conditioning(conditioning, "conditioning")
    return (_set_values(conditioning, {"start_percent": checks.number(start, "start", 0.0, 1.0),
                                       "end_percent": checks.number(end, "end", 0.0, 1.0)}),)


# --- new tensors --------------------------------------------------------------------------------

@node("ConditioningConcat", category="conditioning", display_name="Conditioning (Concat)",
      inputs=[Input("conditioning_to", "CONDITIONING"), Input("conditioning_from", "CONDITIONING")],
      outputs=[Output("CONDITIONING")])
def conditioning_concat(conditioning_to: list, conditioning_from: list) -> tuple[list]:
    """Append the first `conditioning_from` tensor's tokens to every `conditioning_to` entry
    (options, pooled output included, stay `conditioning_to`'s)."""
    import torch

    conditioning_to = _conditioning(conditioning_to, "conditioning_to")
    source = _first_from(_conditioning(conditioning_from, "conditioning_from", non_empty=True))
    out = []
    for index, (cond, options) in enumerate(conditioning_to):
        _check_widths(cond, source, index)
        if cond.shape[0] != source.shape[0]:
            raise NodeInputError("conditioning_from", f"batch {cond.shape[0]} (as conditioning_to entry {index})",
                                 f"batch {source.shape[0]}")
        out.append([torch.cat((cond, source.to(cond)), dim=1), dict(options)])  # [B, T_to + T_from, W]
    return (out,)


def average_tokens(to: torch.Tensor, source: torch.Tensor, to_strength: float) -> torch.Tensor:
    """`to * s + source * (1 - s)` over `to`'s tokens: `source` cut to `to`'s length, or padded
    with zero tokens when shorter (ComfyUI's ConditioningAverage)."""
    import torch

    source = source[:, :to.shape[1]].to(to)  # [b, <=T, W]
    if source.shape[1] < to.shape[1]:
        pad = torch.zeros((source.shape[0], to.shape[1] - source.shape[1], to.shape[2]), dtype=to.dtype,
                          device=to.device)
        source = torch.cat([source, pad], dim=1)  # [b, T, W]
    return to * to_strength + source * (1.0 - to_strength)


@node("ConditioningAverage", category="conditioning",
      inputs=[Input("conditioning_to", "CONDITIONING"), Input("conditioning_from", "CONDITIONING"),
              Float("conditioning_to_strength", default=1.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def conditioning_average(conditioning_to: list, conditioning_from: list,
                         conditioning_to_strength: float) -> tuple[list]:
    """Blend every `conditioning_to` entry with the first `conditioning_from` entry:
    `to * s + from * (1 - s)` on the tokens and on the pooled outputs (an entry without a pooled
    output takes `conditioning_from`'s)."""
    conditioning_to = _conditioning(conditioning_to, "conditioning_to")
    conditioning_from = _conditioning(conditioning_from, "conditioning_from", non_empty=True)
    strength = checks.number(conditioning_to_strength, "conditioning_to_strength", 0.0, 1.0)
    source = _first_from(conditioning_from)
    pooled_from = conditioning_from[0][1].get("pooled_output")
    out = []
    for index, (cond, options) in enumerate(conditioning_to):
        _check_widths(cond, source, index)
        if cond.shape[0] != source.shape[0] and 1 not in (cond.shape[0], source.shape[0]):
            raise NodeInputError("conditioning_from", f"batch 1 or {cond.shape[0]} (as conditioning_to entry {index})",
                                 f"batch {source.shape[0]}")
        pooled_to = options.get("pooled_output", pooled_from)
        updated = dict(options)
        if pooled_from is not None and pooled_to is not None:
            updated["pooled_output"] = pooled_to * strength + pooled_from.to(pooled_to) * (1.0 - strength)
        elif pooled_from is not None:
            updated["pooled_output"] = pooled_from
        out.append([average_tokens(cond, source, strength), updated])
    return (out,)


# Option tensors ConditioningZeroOut zeroes with the tokens: the pooled text (SDXL's label
# embedding) and, as ComfyUI, the lyrics conditioning of audio models and MiniMax Music 3's
# `conditioning_scale` (its negative sees a zero condition).
ZEROED_OPTIONS = ("pooled_output", "conditioning_lyrics", "conditioning_scale")


@node("ConditioningZeroOut", category="advanced/conditioning",
      inputs=[Input("conditioning", "CONDITIONING")], outputs=[Output("CONDITIONING")])
def conditioning_zero_out(conditioning: list) -> tuple[list]:
    """Every entry's tokens (and pooled output) set to zeros of the same shape, options kept:
    the usual SDXL/SD3 "empty" negative."""
    import torch

    conditioning = _conditioning(conditioning, "conditioning")
    out = []
    for cond, options in conditioning:
        updated = dict(options)
        for key in ZEROED_OPTIONS:
            if isinstance(updated.get(key), torch.Tensor):
                updated[key] = torch.zeros_like(updated[key])
        out.append([torch.zeros_like(cond), updated])
    return (out,)
