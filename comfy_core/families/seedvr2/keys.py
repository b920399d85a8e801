"""SeedVR2's LoRA spellings: ComfyUI's generic forms of the network's own names
(`diffusion_model.<module>`, kohya's `lora_unet_<module with _>`); no diffusers layout exists."""
from __future__ import annotations

from typing import Any, Iterable

from comfy_core.families.lora_keys import native_key_map


def lora_key_map(names: Iterable[str]) -> dict[str, Any]:
    """LoRA layer name -> target tensor name, for the network's `names` (`diffusion_model.*`)."""
    return native_key_map(list(names))


__all__ = ["lora_key_map"]
