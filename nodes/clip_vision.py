"""CLIP vision and style model nodes with ComfyUI 0.3.64's names, sockets and semantics (`nodes.py`):
CLIPVisionLoader, CLIPVisionEncode, StyleModelLoader, StyleModelApply.

Files come from the `clip_vision` and `style_models` model folders. The work is in
`comfy_core.clip_vision` (detection, loading, preprocessing, the encoder) and
`comfy_core.style_models` (T2I-Adapter style and Flux Redux models, the apply maths); these
nodes resolve names and check inputs. Wire types: CLIP_VISION (`comfy_core.clip_vision.ClipVision`),
CLIP_VISION_OUTPUT (`ClipVisionOutput`), STYLE_MODEL (`comfy_core.style_models.style_model.StyleModel`).
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Mapping

from graph.native import Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes.environment import current_env, model_file, model_files
from nodes.errors import NodeInputError, describe

if TYPE_CHECKING:
    import torch

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).

CROP_METHODS = ["center", "none"]
STRENGTH_TYPES = ["multiply", "attn_bias"]  # comfy_core.style_models.apply.STRENGTH_TYPES


_files = model_files  # the loader combos' live options



def _text_dtype() -> torch.dtype:
    """The storage dtype of encoders: the environment's dtype policy for text encoders (ComfyUI
    stores CLIP vision weights in its text-encoder dtype), float16 by default, as there."""
    import torch

    from comfy_core.checkpoint.dtype import TEXT, DtypePolicy

    env = current_env()
    policy = env.dtype_policy
    if isinstance(policy, DtypePolicy):
        return policy.dtype_for(TEXT)
    names = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if isinstance(policy, Mapping) and policy.get(TEXT) in names:
        return names[policy[TEXT]]
    device = getattr(env.memory, "device", None)
    return DtypePolicy(device=str(device) if device is not None else "cpu").dtype_for(TEXT)


def _clip_vision(value: Any, input_name: str = "clip_vision") -> Any:
    if not callable(getattr(value, "encode_image", None)):
        raise NodeInputError(input_name, "a CLIP_VISION model (from CLIPVisionLoader)", describe(value))
    return value


def _clip_vision_output(value: Any, input_name: str = "clip_vision_output") -> Any:
    import torch

    tokens = getattr(value, "last_hidden_state", None)
    if not isinstance(tokens, torch.Tensor) or tokens.ndim != 3:
        raise NodeInputError(input_name, "a CLIP_VISION_OUTPUT (from CLIPVisionEncode)", describe(value))
    return value


@node("CLIPVisionLoader", category="loaders", display_name="Load CLIP Vision",
      inputs=[Combo("clip_name", _files("clip_vision"))], outputs=[Output("CLIP_VISION")])
def load_clip(clip_name: str) -> tuple[Any]:
    """A CLIP vision model file (CLIP ViT-L/H/bigG or SigLIP, hf or OpenCLIP keys) -> CLIP_VISION."""
    from comfy_core.clip_vision.load import load_clip_vision

    env = current_env()
    clip_vision = load_clip_vision(model_file("clip_vision", clip_name, "clip_name"), _text_dtype(),
                                   mmap=getattr(env, "mmap", True))
    if env.memory is not None:
        env.memory.track(clip_vision.patcher)
    return (clip_vision,)


@node("CLIPVisionEncode", category="conditioning", display_name="CLIP Vision Encode",
      inputs=[Input("clip_vision", "CLIP_VISION"), Input("image", "IMAGE"), Combo("crop", CROP_METHODS)],
      outputs=[Output("CLIP_VISION_OUTPUT")])
def encode(clip_vision: Any, image: torch.Tensor, crop: str) -> tuple[Any]:
    """Encode an image batch; "center" resizes the shortest side and crops the centre square,
    "none" squashes the whole image to the model's square input."""
    clip_vision = _clip_vision(clip_vision)
    image = checks.image_batch(image, "image")
    crop = checks.choice(crop, CROP_METHODS, "crop")
    return (clip_vision.encode_image(image, crop=crop == "center"),)


@node("StyleModelLoader", category="loaders", display_name="Load Style Model",
      inputs=[Combo("style_model_name", _files("style_models"))], outputs=[Output("STYLE_MODEL")])
def load_style_model(style_model_name: str) -> tuple[Any]:
    """A T2I-Adapter style model or a Flux Redux file -> STYLE_MODEL."""
    from comfy_core.style_models.style_model import load_style_model as load

    return (load(model_file("style_models", style_model_name, "style_model_name"), mmap=getattr(current_env(), "mmap", True)),)


@node("StyleModelApply", category="conditioning/style_model", display_name="Apply Style Model",
      inputs=[Input("conditioning", "CONDITIONING"), Input("style_model", "STYLE_MODEL"),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT"),
              Float("strength", default=1.0, min=0.0, max=10.0, step=0.001),
              Combo("strength_type", STRENGTH_TYPES)],
      outputs=[Output("CONDITIONING")])
def apply_stylemodel(conditioning: list, style_model: Any, clip_vision_output: Any, strength: float,
                     strength_type: str) -> tuple[list]:
    """Append the style model's image tokens to every conditioning entry, scaled by `strength`
    ("multiply") or weighted by an attention bias log(strength) ("attn_bias", for models that
    read `attention_mask`); see comfy_core/style_models/apply.py."""
    from comfy_core.style_models.apply import apply_style

    conditioning = checks.conditioning(conditioning, "conditioning")
    if not callable(getattr(style_model, "get_cond", None)):
        raise NodeInputError("style_model", "a STYLE_MODEL (from StyleModelLoader)", describe(style_model))
    clip_vision_output = _clip_vision_output(clip_vision_output)
    if (isinstance(strength, bool) or not isinstance(strength, numbers.Real) or math.isnan(strength)
            or strength < 0):
        raise NodeInputError("strength", "a FLOAT >= 0", repr(strength))
    strength_type = checks.choice(strength_type, STRENGTH_TYPES, "strength_type")
    try:
        cond = style_model.get_cond(clip_vision_output)
    except ValueError as exc:
        raise NodeInputError("clip_vision_output", "tokens the style model accepts", str(exc)) from None
    width = cond.shape[-1]
    for index, (text, _options) in enumerate(conditioning):
        if text.ndim != 3 or text.shape[-1] != width:
            raise NodeInputError("conditioning", f"entries [B, T, {width}] (the style model's context width)",
                                 f"entry {index}: {describe(text)}")
        if text.shape[0] != 1:
            # The style tokens form one batch row; ComfyUI's concatenation fails for other batches too.
            raise NodeInputError("conditioning", "entries of batch size 1", f"entry {index}: {describe(text)}")
    return (apply_style(conditioning, cond, float(strength), strength_type),)
