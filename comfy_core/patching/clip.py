"""`ClipPatcher`: the patcher over the text-encoder module set (children `clip_l`, `clip_h`, `clip_g`).

The CLIP wire object (`comfy_core.text_encoders`) holds one as `.patcher` and runs its encoders
inside `with clip.patcher.applied() as encoders:`, so LoRA weight patches reach them.
"""
from __future__ import annotations

from torch import nn

from comfy_core.patching.patcher import Patcher


class ClipPatcher(Patcher):
    """Patcher for the text encoders. `model` is the encoder set; parameter names start with the slot."""

    def encoder_slots(self) -> list[str]:
        """Names of the encoder children present (`clip_l`, `clip_g`, ...), in module order."""
        return [name for name, child in self.model.named_children() if isinstance(child, nn.Module)]
