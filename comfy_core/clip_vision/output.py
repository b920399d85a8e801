"""`ClipVisionOutput`: what CLIPVisionEncode returns (CLIP_VISION_OUTPUT), ComfyUI's shape.

As ComfyUI's `comfy/clip_vision.py: Output`, the values are attributes that can also be read and
written by key (`output.image_embeds`, `output["image_embeds"]`), so node packs that use either
form work: `last_hidden_state` `[B, T, W]`, `image_embeds` (`[B, P]` for CLIP, `[B, T, W]` for
SigLIP), `penultimate_hidden_states` `[B, T, W]` (or None), `mm_projected` (or None), and for
SigLIP `all_hidden_states` `[B, L, T, W]`. No torch import here.
"""
from __future__ import annotations

from typing import Any


class ClipVisionOutput:
    """Attribute bag readable and writable by key."""

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def keys(self) -> list[str]:
        return list(vars(self))

    def __repr__(self) -> str:
        parts = []
        for key, value in vars(self).items():
            shape = getattr(value, "shape", None)
            parts.append(f"{key}={list(shape) if shape is not None else value!r}")
        return f"ClipVisionOutput({', '.join(parts)})"
