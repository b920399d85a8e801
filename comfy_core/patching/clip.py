"""`ClipPatcher`: the patcher over the text-encoder module set (children `clip_l`, `clip_h`, `clip_g`).

The CLIP wire object (`comfy_core.text_encoders`) holds one as `.patcher` and runs its encoders
inside `with clip.patcher.applied() as encoders:`, so LoRA weight patches reach them.

It is a `ModelPatcher`, as ComfyUI's `CLIP.patcher` is a `comfy.model_patcher.ModelPatcher`
(comfy/sd.py): packs treat it as one, e.g. ComfyUI-GGUF's CLIP loaders re-class it with
`GGUFModelPatcher.clone(clip.patcher)`, which needs the ModelPatcher members (wrappers,
callbacks, attachments, ...) and leaves a patcher of the pack's class, not this one. Code that
needs the encoder slots therefore reads them with `encoder_slots(patcher)`, which works on any
patcher over a text-encoder set.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from comfy_core.patching.model import ModelPatcher


def encoder_slots(patcher: Any) -> list[str]:
    """Names of the encoder children of `patcher.model` (`clip_l`, `clip_g`, ...), in module order."""
    return [name for name, child in patcher.model.named_children() if isinstance(child, nn.Module)]


class ClipPatcher(ModelPatcher):
    """Patcher for the text encoders. `model` is the encoder set; parameter names start with the slot."""

    # The memory manager keeps text encoders on the CPU in lowvram / novram (ComfyUI's
    # `text_encoder_device()`); it asks this flag rather than knowing the patcher classes.
    is_text_encoder = True
    # A host may build it as its own subclass too (ModelPatcher `_take_host_class`).
    _host_replaceable = True

    def encoder_slots(self) -> list[str]:
        """Names of the encoder children present (`clip_l`, `clip_g`, ...), in module order."""
        return encoder_slots(self)
