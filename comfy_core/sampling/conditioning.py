"""Turning CONDITIONING lists into the entries the sampler batches, as ComfyUI prepares them.

CONDITIONING is a list of `[tensor [B, tokens, width], dict]`. Before sampling each entry becomes a
dict (a copy of its options) with:

- `model_conds`: `{"c_crossattn": tensor, "y": tensor}` (y only when the model has a label
  embedding, e.g. SDXL's pooled text + size embedding from `DiffusionModel.encode_adm`);
- `area` resolved to latent units `(h, w, y, x)` and `mask` resized to the latent `[B, h, w]`
  (`set_area_to_bounds` turns a mask into its bounding box);
- `timestep_start` / `timestep_end` as sigmas from `start_percent` / `end_percent`;
- `uuid` (so hooks and packs can tell entries apart).

Then every positive area entry gets a negative twin with the same area (and vice versa), so the
two predictions cover the same pixels. Follows ComfyUI `comfy/samplers.py` (process_conds and
helpers) and `comfy/sampler_helpers.py: convert_cond`; see `shared/reference/samplers.md` section 6.
"""
from __future__ import annotations

import math
import uuid
from typing import Any, Callable

import torch
import torch.nn.functional as F

from comfy_core.sampling.model_sampling import ModelSampling

# Options of a conditioning entry that feed SDXL's label embedding (encode_adm).
ADM_KEYS = ("pooled_output", "width", "height", "crop_w", "crop_h", "target_width", "target_height",
            "aesthetic_score")


class ConditioningError(ValueError):
    """A CONDITIONING input that is not a list of [tensor, dict] pairs, or has bad options."""


def convert_cond(cond: Any, name: str) -> list[dict]:
    """CONDITIONING `[[tensor, dict], ...]` -> entry dicts (`cross_attn`, `model_conds`, `uuid`)."""
    if not isinstance(cond, (list, tuple)):
        raise ConditioningError(f"{name}: expected CONDITIONING (a list of [tensor, dict]), got {type(cond).__name__}")
    out = []
    for i, item in enumerate(cond):
        if not isinstance(item, (list, tuple)) or len(item) < 2 or not isinstance(item[1], dict):
            raise ConditioningError(f"{name}[{i}]: expected [tensor, dict], got {type(item).__name__}")
        tensor, options = item[0], item[1]
        if tensor is not None and (not isinstance(tensor, torch.Tensor) or tensor.ndim != 3):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ConditioningError(f"{name}[{i}]: expected a [batch, tokens, width] tensor, got {shape}")
        entry = dict(options)
        if tensor is not None:
            entry["cross_attn"] = tensor
        entry["model_conds"] = dict(entry.get("model_conds", {}))
        entry["uuid"] = uuid.uuid4()
        out.append(entry)
    return out


def resolve_area_and_mask(entry: dict, latent_hw: tuple[int, int], device: torch.device) -> dict:
    """Percentage areas -> latent units; masks -> `[B, h, w]` at the latent size (bilinear)."""
    h, w = latent_hw
    if "area" in entry:
        area = entry["area"]
        if len(area) and area[0] == "percentage":
            entry = dict(entry)
            entry["area"] = (max(1, round(area[1] * h)), max(1, round(area[2] * w)),
                             round(area[3] * h), round(area[4] * w))
        elif len(area) != 4:
            raise ConditioningError(f"conditioning area must be (h, w, y, x) or ('percentage', h, w, y, x), got {area!r}")
    if "mask" in entry:
        mask = torch.as_tensor(entry["mask"]).to(device=device)
        entry = dict(entry)
        if mask.ndim == 2:
            mask = mask.unsqueeze(0)
        if mask.ndim != 3:
            raise ConditioningError(f"conditioning mask must be [h, w] or [B, h, w], got {tuple(mask.shape)}")
        if tuple(mask.shape[1:]) != (h, w):
            mask = F.interpolate(mask.unsqueeze(1).float(), size=(h, w), mode="bilinear", align_corners=False).squeeze(1)
        if entry.get("set_area_to_bounds", False):
            entry["area"] = _mask_bounds_area(mask)
        entry["mask"] = mask
    return entry


def _mask_bounds_area(mask: torch.Tensor) -> tuple[int, int, int, int]:
    """Bounding box (h, w, y, x) of the non-zero union of a mask batch, at least 8x8."""
    bounds = mask.abs().amax(dim=0)  # [h, w]
    ys, xs = torch.where(bounds != 0)
    if ys.numel() == 0:
        return (8, 8, 0, 0)  # all-zero mask: the smallest area, a no-op anyway
    y0, y1, x0, x1 = int(ys.min()), int(ys.max()), int(xs.min()), int(xs.max())
    return (max(8, y1 - y0 + 1), max(8, x1 - x0 + 1), y0, x0)


def resolve_timestep_range(entry: dict, model_sampling: ModelSampling) -> dict:
    """`start_percent`/`end_percent` -> `timestep_start`/`timestep_end` sigmas (ComfyUI's names)."""
    start = end = None
    if "clip_start_percent" in entry:
        start = model_sampling.percent_to_sigma(max(entry["clip_start_percent"], entry.get("start_percent", 0.0)))
        end = model_sampling.percent_to_sigma(min(entry["clip_end_percent"], entry.get("end_percent", 1.0)))
    else:
        if "start_percent" in entry:
            start = model_sampling.percent_to_sigma(entry["start_percent"])
        if "end_percent" in entry:
            end = model_sampling.percent_to_sigma(entry["end_percent"])
    if start is None and end is None:
        return entry
    entry = dict(entry)
    if start is not None:
        entry["timestep_start"] = start
    if end is not None:
        entry["timestep_end"] = end
    return entry


def encode_model_conds(entry: dict, latent: torch.Tensor, encode_adm: Callable[..., Any] | None,
                       prompt_type: str = "positive") -> dict:
    """Fill `model_conds`: `c_crossattn` from the text tensor and `y` from the model's label embedding.

    Width/height default to the latent size times 8 and `prompt_type` is "positive"/"negative"
    (the SDXL refiner's default aesthetic score depends on it), as ComfyUI passes them.
    """
    model_conds = dict(entry.get("model_conds", {}))
    if "cross_attn" in entry:
        model_conds["c_crossattn"] = entry["cross_attn"]
    if encode_adm is not None:
        params = {k: entry[k] for k in ADM_KEYS if k in entry}
        params.setdefault("width", latent.shape[3] * 8)
        params.setdefault("height", latent.shape[2] * 8)
        params.setdefault("prompt_type", entry.get("prompt_type", prompt_type))
        y = encode_adm(**params)
        if y is not None:
            model_conds["y"] = y
    entry = dict(entry)
    entry["model_conds"] = model_conds
    return entry


def _area_inside(a: tuple, outer: tuple) -> bool:
    """True when area `a` (h, w, y, x) lies within `outer`."""
    return a[2] >= outer[2] and a[3] >= outer[3] and a[0] + a[2] <= outer[0] + outer[2] and a[1] + a[3] <= outer[1] + outer[3]


def add_same_area_twin(entries: list[dict], entry: dict) -> None:
    """Give `entries` an entry over `entry`'s area (copying the smallest enclosing one's model
    conds) unless one with exactly that area exists (ComfyUI `create_cond_with_same_area_if_none`)."""
    if "area" not in entry:
        return
    area = tuple(entry["area"])
    smallest = None
    for other in entries:
        if "area" in other:
            if _area_inside(area, tuple(other["area"])):
                if smallest is None or "area" not in smallest:
                    smallest = other
                elif math.prod(smallest["area"][:2]) > math.prod(other["area"][:2]):
                    smallest = other
        elif smallest is None:
            smallest = other
    if smallest is None or ("area" in smallest and tuple(smallest["area"]) == area):
        return
    twin = dict(entry)
    twin["model_conds"] = dict(smallest["model_conds"])
    entries.append(twin)


def prepare_conds(conds: dict[str, list[dict]], latent: torch.Tensor, model_sampling: ModelSampling,
                  encode_adm: Callable[..., Any] | None) -> dict[str, list[dict]]:
    """All preparation steps, on copies: {"positive": [...], "negative": [...]} -> ready entries."""
    hw = (latent.shape[2], latent.shape[3])
    out: dict[str, list[dict]] = {}
    for key, entries in conds.items():
        prepared = []
        for e in entries:
            e = resolve_area_and_mask(e, hw, latent.device)
            e = resolve_timestep_range(e, model_sampling)
            e = encode_model_conds(e, latent, encode_adm, key)
            prepared.append(e)
        out[key] = prepared
    for key in out:
        for e in list(out[key]):
            for other in out:
                if other != key:
                    add_same_area_twin(out[other], e)
    return out
