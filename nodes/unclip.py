"""unCLIP nodes with ComfyUI 0.3.64's names, sockets and semantics (`nodes.py`):
unCLIPCheckpointLoader, unCLIPConditioning.

unCLIPCheckpointLoader loads a checkpoint as CheckpointLoaderSimple does and also the image
encoder the file carries where its family keeps one (`Family.clip_vision_prefix`: SD2.1 unCLIP's
`embedder.model.visual.*`); CLIP_VISION is None for families without one, as in ComfyUI.
unCLIPConditioning appends `{"clip_vision_output", "strength", "noise_augmentation"}` to every
entry's `unclip_conditioning` list; the model turns the list into its label-embedding input when
sampling (noise-augmented image embeddings, comfy_core/models/unclip.py).
"""
from __future__ import annotations

import math
import numbers
from typing import Any

from graph.native import Combo, Float, Input, Output, node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.loaders import _default_attention, _embedding_lookup, _files, _options, _track
from nodes.environment import model_file

# torch is imported inside the functions that run: registering these nodes and rendering
# /object_info must not import it (server start-up).


@node("unCLIPCheckpointLoader", category="loaders", display_name="unCLIPCheckpointLoader",
      inputs=[Combo("ckpt_name", _files("checkpoints"))],
      outputs=[Output("MODEL"), Output("CLIP"), Output("VAE"), Output("CLIP_VISION")])
def unclip_checkpoint_loader(ckpt_name: str) -> tuple[Any, Any, Any, Any]:
    """MODEL, CLIP, VAE and the checkpoint's own CLIP vision encoder (None when it has none)."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.clip_vision.load import clip_vision_from_checkpoint, detect_clip_vision
    from comfy_core.loading import load_checkpoint
    from nodes.clip_vision import _text_dtype

    path = model_file("checkpoints", ckpt_name, "ckpt_name")
    options = _options()
    model, clip, vae = load_checkpoint(path, options)
    _default_attention(model, vae)
    _embedding_lookup(clip)
    prefix = getattr(model.model.family, "clip_vision_prefix", None)
    clip_vision = None
    if prefix is not None:
        with CheckpointFile(path) as checkpoint:
            config = detect_clip_vision(checkpoint, (prefix,))
            if config is not None:
                clip_vision = clip_vision_from_checkpoint(checkpoint, config, _text_dtype(), mmap=options.mmap)
    _track(model, clip, vae, clip_vision)
    return model, clip, vae, clip_vision


def _clip_vision_output(value: Any) -> Any:
    import torch

    embeds = getattr(value, "image_embeds", None)
    if not isinstance(embeds, torch.Tensor) or embeds.ndim != 2:
        raise NodeInputError("clip_vision_output", "a CLIP_VISION_OUTPUT with image_embeds [B, P] (from "
                                                   "CLIPVisionEncode on a CLIP model)", describe(embeds if embeds is not None else value))
    return value


def _number(value: Any, input_name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or not low <= value <= high:
        raise NodeInputError(input_name, f"a FLOAT in {low}..{high}", repr(value))
    return float(value)


@node("unCLIPConditioning", category="conditioning", display_name="unCLIPConditioning",
      inputs=[Input("conditioning", "CONDITIONING"), Input("clip_vision_output", "CLIP_VISION_OUTPUT"),
              Float("strength", default=1.0, min=-10.0, max=10.0, step=0.01),
              Float("noise_augmentation", default=0.0, min=0.0, max=1.0, step=0.01)],
      outputs=[Output("CONDITIONING")])
def unclip_conditioning(conditioning: list, clip_vision_output: Any, strength: float,
                        noise_augmentation: float) -> tuple[list]:
    """Add an image prompt to each entry (several add up: their embeddings are summed); strength
    0 returns the conditioning unchanged, as ComfyUI."""
    conditioning = checks.conditioning(conditioning, "conditioning")
    clip_vision_output = _clip_vision_output(clip_vision_output)
    # No bound beyond ComfyUI's widget on a linked strength: it only scales the embedding.
    strength = _number(strength, "strength", -math.inf, math.inf)
    noise_augmentation = _number(noise_augmentation, "noise_augmentation", 0.0, 1.0)
    if strength == 0:
        return (conditioning,)
    added = {"clip_vision_output": clip_vision_output, "strength": strength, "noise_augmentation": noise_augmentation}
    out = []
    for tensor, options in conditioning:
        updated = dict(options)
        updated["unclip_conditioning"] = list(options.get("unclip_conditioning") or []) + [added]
        out.append([tensor, updated])
    return (out,)
