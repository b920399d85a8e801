"""Input checks shared by the built-in nodes: each returns the usable value or raises
`NodeInputError` naming the input. One place, so every node accepts and refuses the same things
(ComfyUI's wire conventions: IMAGE `[B,H,W,C]`, MASK `[B,H,W]`, LATENT `{"samples": [B,C,h,w]}`,
CONDITIONING a list of `[tensor, dict]`)."""
from __future__ import annotations

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


def mask_batch(mask: Any, input_name: str = "mask") -> "torch.Tensor":
    """A MASK as `[B, H, W]` (a single `[H, W]` mask becomes a batch of one, as ComfyUI reshapes it)."""
    if not _is_tensor(mask) or mask.ndim not in (2, 3) or 0 in mask.shape:
        raise NodeInputError(input_name, "a MASK tensor [B, H, W] or [H, W]", describe(mask))
    return mask.reshape(-1, mask.shape[-2], mask.shape[-1])


def latent(value: Any, input_name: str = "samples") -> "torch.Tensor":
    """`value["samples"]` of a LATENT whose samples are `[B, C, h, w]` (or `[B, C, t, h, w]` video)."""
    if not isinstance(value, dict) or not _is_tensor(value.get("samples")):
        raise NodeInputError(input_name, "a LATENT ({'samples': tensor})", describe(value))
    samples = value["samples"]
    if samples.ndim not in (4, 5):
        raise NodeInputError(input_name, "LATENT samples [B, C, h, w]", describe(samples))
    return samples


def conditioning(value: Any, input_name: str = "conditioning") -> list:
    """A CONDITIONING: a list of `[tensor, dict]` pairs."""
    if not isinstance(value, list) or not all(
            isinstance(entry, (list, tuple)) and len(entry) >= 2 and _is_tensor(entry[0]) and isinstance(entry[1], dict)
            for entry in value):
        raise NodeInputError(input_name, "a CONDITIONING (a list of [tensor, dict])", describe(value))
    return value


def clip(value: Any, input_name: str = "clip") -> Any:
    """A CLIP object (None: the checkpoint had no text encoder)."""
    if value is None:
        raise NodeInputError(input_name, "a CLIP object", "None (if it comes from a checkpoint loader, the "
                                                          "checkpoint has no text encoder)")
    if not (hasattr(value, "tokenize") and hasattr(value, "encode_from_tokens")):
        raise NodeInputError(input_name, "a CLIP object", describe(value))
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
