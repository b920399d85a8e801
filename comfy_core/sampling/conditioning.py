"""Turning CONDITIONING lists into the entries the sampler batches, as ComfyUI prepares them.

CONDITIONING is a list of `[tensor [B, tokens, width], dict]`. Before sampling each entry becomes a
dict (a copy of its options) with:

- `model_conds`: `{"c_crossattn": tensor, "y": tensor, "c_concat": tensor, ...}` (y only when the
  model has a label embedding, e.g. SDXL's pooled text + size embedding or unCLIP's image
  embedding from `DiffusionModel.encode_adm`; c_concat only for models with extra input channels,
  inpainting and instruct-pix2pix, from `DiffusionModel.concat_cond`, or an entry's
  `noise_concat`; further keys from `DiffusionModel.extra_inputs`: Flux's `guidance` `[1]`,
  `ref_latents` (a list of latents), `ref_latents_method` (a constant)). All receive the entry's
  options plus `noise`, `device`, `latent_image`, `denoise_mask` and `seed`, as ComfyUI's
  `extra_conds` does;
- `area` resolved to latent units `(h, w, y, x)` and `mask` resized to the latent `[B, h, w]`
  (`set_area_to_bounds` turns a mask into its bounding box);
- `timestep_start` / `timestep_end` as sigmas from `start_percent` / `end_percent`;
- `uuid` (so hooks and packs can tell entries apart).

Then every positive area entry gets a negative twin with the same area (and vice versa), so the
two predictions cover the same pixels. GLIGEN: the positive entries' `gligen` values are given to
negative entries without one (ComfyUI's `apply_empty_x_to_equal_area`), and every entry with
`gligen` gets its own `patches = {"middle_patch": [...]}` (the grounding model's gated
self-attention, with the boxes in the entry's latent area), so such entries run in batches of
their own, as in ComfyUI. Follows ComfyUI `comfy/samplers.py` (process_conds and
helpers) and `comfy/sampler_helpers.py: convert_cond`; see `shared/reference/samplers.md` section 6.
"""
from __future__ import annotations

import math
import uuid
from typing import Any, Callable

import torch
import torch.nn.functional as F

from comfy_core.models.model_sampling import ModelSampling

# Options of a conditioning entry that feed the label embedding (encode_adm): SDXL's, and unCLIP's.
ADM_KEYS = ("pooled_output", "width", "height", "crop_w", "crop_h", "target_width", "target_height",
            "aesthetic_score", "unclip_conditioning", "unclip_noise_augment_merge")


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


def resolve_area_and_mask(entry: dict, latent_hw: tuple[int, int] | None, device: torch.device) -> dict:
    """Percentage areas -> latent units; masks -> `[B, h, w]` at the latent size (bilinear).
    `latent_hw` None: a packed nested latent `[B, 1, N]`, which has no grid to place either on."""
    if latent_hw is None:
        if "area" in entry or "mask" in entry:
            raise ConditioningError("a conditioning area or mask needs a latent with height and width; a packed "
                                    "nested (audio-video) latent has none")
        return entry
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
                       prompt_type: str = "positive", concat_cond: Callable[..., Any] | None = None,
                       extra: dict[str, Any] | None = None, extra_inputs: Callable[..., Any] | None = None) -> dict:
    """Fill `model_conds`: `c_crossattn` from the text tensor (`crossattn_controlnet` from the
    ControlNets' own text, when the entry has one), `y` from the model's label
    embedding, `c_concat` from its concatenated inputs, and the model's further inputs
    (`extra_inputs`: Flux's guidance and reference latents, ...).

    The model functions get the entry's options with `noise` (= `latent`, the run's noise),
    `device`, width/height (default: the latent size times 8), `prompt_type` ("positive" /
    "negative": the SDXL refiner's default aesthetic score depends on it) and the keys of `extra`
    the entry does not set (`latent_image`, `denoise_mask`, `seed`), as ComfyUI passes them.
    """
    model_conds = dict(entry.get("model_conds", {}))
    if "cross_attn" in entry:
        model_conds["c_crossattn"] = entry["cross_attn"]
    if entry.get("cross_attn_controlnet") is not None:
        # the text the ControlNets get instead of the model's (CLIPTextEncodeControlnet), every model
        model_conds["crossattn_controlnet"] = entry["cross_attn_controlnet"]
    params = dict(entry)
    params["device"] = latent.device
    params["noise"] = latent
    # ComfyUI gives no default width to a latent without a width axis (a packed nested latent)
    params.setdefault("width", latent.shape[3] * 8 if latent.ndim >= 4 else None)
    params.setdefault("height", latent.shape[2] * 8)
    params.setdefault("prompt_type", prompt_type)
    for key, value in (extra or {}).items():
        params.setdefault(key, value)
    if concat_cond is not None:
        c_concat = concat_cond(**params)
        if c_concat is not None:
            model_conds["c_concat"] = c_concat
    if encode_adm is not None:
        y = encode_adm(**params)
        if y is not None:
            model_conds["y"] = y
    if extra_inputs is not None:
        model_conds.update(extra_inputs(**params))
    if entry.get("noise_concat") is not None:
        model_conds["c_concat"] = entry["noise_concat"]
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
                  encode_adm: Callable[..., Any] | None, *, concat_cond: Callable[..., Any] | None = None,
                  latent_image: torch.Tensor | None = None, denoise_mask: torch.Tensor | None = None,
                  seed: int | None = None, extra_inputs: Callable[..., Any] | None = None,
                  latent_shapes: list | None = None) -> dict[str, list[dict]]:
    """All preparation steps, on copies: {"positive": [...], "negative": [...]} -> ready entries.

    `latent` is the run's noise; `latent_image` the latent being sampled (model space) and
    `denoise_mask` the prepared noise mask, which inpainting models read (`concat_cond`).
    `latent_shapes`: the parts' shapes of a packed nested latent `[B, 1, N]`, given to the model
    functions as ComfyUI's `process_conds` gives them (the model unpacks its input with them)."""
    hw = (latent.shape[2], latent.shape[3]) if latent.ndim >= 4 else None
    extra = {"latent_image": latent_image, "denoise_mask": denoise_mask, "seed": seed}
    if latent_shapes is not None:
        extra["latent_shapes"] = latent_shapes
    out: dict[str, list[dict]] = {}
    for key, entries in conds.items():
        prepared = []
        for e in entries:
            e = resolve_area_and_mask(e, hw, latent.device)
            e = resolve_timestep_range(e, model_sampling)
            e = encode_model_conds(e, latent, encode_adm, key, concat_cond, extra, extra_inputs)
            prepared.append(e)
        out[key] = prepared
    for key in out:
        for e in list(out[key]):
            for other in out:
                if other != key:
                    add_same_area_twin(out[other], e)
    if "positive" in out:
        for key in out:
            if key != "positive":
                fill_from_positive(out["positive"], out[key], "gligen")
    for key in out:
        out[key] = [gligen_patches(e, latent) if e.get("gligen") is not None else e for e in out[key]]
    return out


def fill_from_positive(positive: list[dict], other: list[dict], name: str) -> None:
    """Give `other`'s full-latent entries the positive's `name` values when none of them has one
    (in place; ComfyUI's `apply_empty_x_to_equal_area`): value i goes to the (i mod n)-th of
    the n full-latent entries, so with more values than entries the last one per entry wins."""
    values = [e[name] for e in positive if "area" not in e and e.get(name) is not None]
    if any("area" not in e and e.get(name) is not None for e in other):
        return
    without = [(e, i) for i, e in enumerate(other) if "area" not in e]
    if not without:
        return
    for i, value in enumerate(values):
        entry, index = without[i % len(without)]
        other[index] = {**entry, name: value}


def gligen_patches(entry: dict, latent: torch.Tensor) -> dict:
    """`entry` with `patches["middle_patch"]` running its GLIGEN model (ComfyUI's
    `get_area_and_mult`): `("position", model, params)` grounds the boxes, any other kind runs
    the model with no objects. Boxes are relative to the entry's latent area."""
    kind, model = entry["gligen"][0], entry["gligen"][1]
    shape = list(latent.shape)
    if "area" in entry:
        h, w, y0, x0 = (int(v) for v in entry["area"])
        shape[2], shape[3] = min(latent.shape[2] - y0, h), min(latent.shape[3] - x0, w)
    module = getattr(model, "model", model)
    if kind == "position":
        patch = module.set_position(tuple(shape), entry["gligen"][2], latent.device)
    else:
        patch = module.set_empty(tuple(shape), latent.device)
    patches = {k: list(v) for k, v in (entry.get("patches") or {}).items()}
    patches["middle_patch"] = [patch]
    return {**entry, "patches": patches}


def cond_patchers(conds: dict[str, list[Any]] | list[Any]) -> list[Any]:
    """The model objects conditioning entries carry that must be on the sampling device while the
    run is on (ComfyUI's `get_models_from_cond` for "gligen"), each once."""
    lists = conds.values() if isinstance(conds, dict) else [conds]
    found: list[Any] = []
    for entries in lists:
        for e in entries or ():
            options = e[1] if isinstance(e, (list, tuple)) else e
            gligen = options.get("gligen") if isinstance(options, dict) else None
            if gligen is not None and hasattr(gligen[1], "applied") and not any(gligen[1] is f for f in found):
                found.append(gligen[1])
    return found


def prepare_control(conds: dict[str, list[dict]], model: Any) -> None:
    """Get the entries' ControlNets ready for a run on `model` (the patched diffusion model), in
    place, after `prepare_conds`: each `control` (and its chain) maps its percent range to sigmas
    with the model's `percent_to_sigma` and takes the model's sampling (ComfyUI's
    `pre_run_control`); then the positive entries marked `control_apply_to_uncond` (the old
    ControlNetApply) lend their ControlNets to the other lists' full-latent entries that have
    none (`apply_empty_x_to_equal_area`)."""
    percent_to_sigma = model.model_sampling.percent_to_sigma
    for entries in conds.values():
        for e in entries:
            if e.get("control") is not None:
                e["control"].pre_run(model, percent_to_sigma)
    if "positive" in conds:
        lenders = [e for e in conds["positive"] if e.get("control_apply_to_uncond", False) is True]
        for key in conds:
            if key != "positive":
                fill_from_positive(lenders, conds[key], "control")


def cleanup_control(conds: dict[str, list[dict]]) -> None:
    """After a run: every distinct ControlNet drops what it prepared (ComfyUI's `cleanup_models`)."""
    seen: set[int] = set()
    for entries in conds.values():
        for e in entries:
            control = e.get("control")
            if control is not None and id(control) not in seen:
                seen.add(id(control))
                control.cleanup()
