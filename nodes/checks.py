"""Input checks shared by the built-in nodes: each returns the usable value or raises
`NodeInputError` naming the input. One place, so every node accepts and refuses the same things
(ComfyUI's wire conventions: IMAGE `[B,H,W,C]`, MASK `[B,H,W]`, LATENT `{"samples": [B,C,h,w]}`,
CONDITIONING a list of `[tensor, dict]`)."""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def image_batch(images: Any, input_name: str = "images") -> "torch.Tensor":
    """An IMAGE batch `[B, H, W, C]` with C in 1, 3, 4 and B, H, W > 0."""
    if not _is_tensor(images):
        raise NodeInputError(input_name, "an IMAGE tensor [B, H, W, C]", describe(images))
    if images.ndim != 4 or images.shape[-1] not in (1, 3, 4) or 0 in images.shape:
        raise NodeInputError(input_name, "an IMAGE tensor [B, H, W, C] with C = 1, 3 or 4", describe(images))
    return images


_MASK_SHAPES = {2: "[H, W]", 3: "[B, H, W]", 4: "[B, 1, H, W]"}
_LATENT_SHAPES = {3: "[B, C, t] (audio)", 4: "[B, C, h, w]", 5: "[B, C, t, h, w]"}


def _shapes(names: dict[int, str], ndims: "tuple[int, ...]") -> str:
    return " or ".join(names[n] for n in ndims)


def mask_batch(mask: Any, input_name: str = "mask", *, ndims: "tuple[int, ...]" = (3, 2)) -> "torch.Tensor":
    """A MASK as `[B, H, W]` (a single `[H, W]` mask becomes a batch of one, as ComfyUI reshapes
    it). `ndims=(3, 2, 4)` also takes the `[B, 1, H, W]` masks that the nodes which reshape any
    mask as ComfyUI does (SetLatentNoiseMask, VAEEncodeForInpaint) accept."""
    if not _is_tensor(mask) or mask.ndim not in ndims or 0 in mask.shape:
        raise NodeInputError(input_name, f"a MASK tensor {_shapes(_MASK_SHAPES, ndims)}", describe(mask))
    return mask.reshape(-1, mask.shape[-2], mask.shape[-1])


def sampled_latent_ndims(model: Any) -> "tuple[int, ...]":
    """The latent ranks a sampler takes for `model`: `[B, C, t]` for an audio model (a latent
    format with one latent dimension, Stable Audio), else image / video latents."""
    try:
        latent_format = model.get_model_object("latent_format")
    except (AttributeError, KeyError, TypeError):  # a pack's model object without one: image / video ranks
        return (4, 5)
    return (3,) if getattr(latent_format, "latent_dimensions", 2) == 1 else (4, 5)


def latent(value: Any, input_name: str = "samples", *, ndims: "tuple[int, ...]" = (4, 5),
           nested: bool = False) -> Any:
    """`value["samples"]` of a LATENT whose samples are `[B, C, h, w]` (or `[B, C, t, h, w]` video);
    `ndims=(4,)` for the nodes that only handle image latents. `nested=True` (the samplers, the
    audio-video nodes) also takes a nested LATENT, whose samples are a NestedTensor of tensors
    (LTX-2's [video, audio], comfy_core/latent/nested.py), returned as it is."""
    samples = value.get("samples") if isinstance(value, dict) else None
    if nested and getattr(samples, "is_nested", False) is True and callable(getattr(samples, "unbind", None)):
        parts = samples.unbind()
        if not parts or not all(_is_tensor(part) for part in parts):
            raise NodeInputError(input_name, "a nested LATENT (samples: a NestedTensor of tensors)", describe(samples))
        return samples
    if not isinstance(value, dict) or not _is_tensor(value.get("samples")):
        raise NodeInputError(input_name, "a LATENT ({'samples': tensor})", describe(value))
    samples = value["samples"]
    if samples.ndim not in ndims:
        raise NodeInputError(input_name, f"LATENT samples {_shapes(_LATENT_SHAPES, ndims)}", describe(samples))
    return samples


def _describe_entry(entry: Any) -> str:
    if isinstance(entry, (list, tuple)):
        return "[" + ", ".join(describe(part) for part in entry) + "]"
    return describe(entry)


def conditioning(value: Any, input_name: str = "conditioning", *, tokens: bool = False,
                 non_empty: bool = False) -> list:
    """A CONDITIONING: a list of `[tensor, dict]` pairs. `tokens`: every tensor is `[B, T, W]`
    (the nodes that compute on the tokens); `non_empty`: at least one entry."""
    expected = f"a CONDITIONING (a list of [tensor{' [B, T, W]' if tokens else ''}, dict])"
    if not isinstance(value, list):
        raise NodeInputError(input_name, expected, describe(value))
    for index, entry in enumerate(value):
        if (not isinstance(entry, (list, tuple)) or len(entry) != 2 or not _is_tensor(entry[0])
                or not isinstance(entry[1], dict) or (tokens and entry[0].ndim != 3)):
            raise NodeInputError(input_name, expected, f"entry {index}: {_describe_entry(entry)}")
    if non_empty and not value:
        raise NodeInputError(input_name, "at least one conditioning entry", "an empty list")
    return value


def clip(value: Any, input_name: str = "clip", *, encoders: bool = False) -> Any:
    """A CLIP object (None: the checkpoint had no text encoder). `encoders`: one of this engine's,
    whose patcher and tokenizer the A1111 prompt encoding works through (comfy_core.prompt)."""
    if value is None:
        raise NodeInputError(input_name, "a CLIP object", "None (if it comes from a checkpoint loader, the "
                                                          "checkpoint has no text encoder)")
    if not (hasattr(value, "tokenize") and hasattr(value, "encode_from_tokens")):
        raise NodeInputError(input_name, "a CLIP object", describe(value))
    if encoders and not (hasattr(value, "patcher") and hasattr(value, "tokenizer")):
        raise NodeInputError(input_name, "a CLIP object of this engine (with a patcher and a tokenizer)",
                             describe(value))
    return value


def model(value: Any, input_name: str = "model") -> Any:
    """A MODEL (a model patcher: it can be cloned and carries the diffusion model)."""
    if not (hasattr(value, "clone") and hasattr(value, "model")):
        raise NodeInputError(input_name, "a MODEL", describe(value))
    return value


def vae(value: Any, input_name: str = "vae") -> Any:
    """A VAE (it can encode and decode)."""
    if value is None:
        raise NodeInputError(input_name, "a VAE", "None (if it comes from a checkpoint loader, the checkpoint has "
                                                  "no VAE: load one with VAELoader)")
    if not (hasattr(value, "encode") and hasattr(value, "decode")):
        raise NodeInputError(input_name, "a VAE", describe(value))
    return value


def choice(value: Any, options: "list | tuple", input_name: str) -> Any:
    """One of a combo's `options` (the validator checks combos in prompts; this covers direct calls)."""
    if value not in options:
        raise NodeInputError(input_name, f"one of {list(options)}", repr(value))
    return value


def text(value: Any, input_name: str = "text") -> str:
    """A STRING."""
    if not isinstance(value, str):
        raise NodeInputError(input_name, "a STRING", describe(value))
    return value


def _bounds(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        return f" in {low}..{high}"
    if low is not None:
        return f" >= {low}"
    return f" <= {high}" if high is not None else ""


def integer(value: Any, input_name: str, low: int | None = None, high: int | None = None) -> int:
    """An INT in `low..high` (either bound may be None). A bool is refused: True on an INT input
    is a wiring mistake, not 1."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
            or (low is not None and value < low) or (high is not None and value > high)):
        raise NodeInputError(input_name, f"an INT{_bounds(low, high)}", repr(value))
    return int(value)


def number(value: Any, input_name: str, low: float | None = None, high: float | None = None) -> float:
    """A FLOAT (an int too) in `low..high` (either bound may be None); NaN and bool are refused."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value)
            or (low is not None and value < low) or (high is not None and value > high)):
        raise NodeInputError(input_name, f"a FLOAT{_bounds(low, high)}", repr(value))
    return value
