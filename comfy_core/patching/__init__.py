"""Reversible patchers: a shared base module plus patches kept as data, applied only in use.

    patched = patcher.clone()
    patched.add_patches({"diffusion_model.out.2.weight": delta})      # recorded, not applied
    patched.set_attention_backend("sub_quadratic", query_chunk_size=512)
    with patched.applied() as module:                                  # applied here ...
        module(...)
    # ... and every original tensor and attribute is back, bit-exactly, whatever ended the block.

`signature()` identifies the base module and the patch set (it feeds cache keys).
"""
from __future__ import annotations

from comfy_core.patching.clip import ClipPatcher
from comfy_core.patching.errors import (
    ObjectPatchError,
    PatchConflictError,
    PatchDataError,
    PatchError,
)
from comfy_core.patching.model import ModelPatcher
from comfy_core.patching.model_weight import ModelWeight
from comfy_core.patching.patcher import ATTENTION_BACKEND, ATTENTION_OPTIONS, Patcher
from comfy_core.patching.state import PatchStats
from comfy_core.patching.vae import VaePatcher
from comfy_core.patching.audio_vae import AudioVaePatcher  # after vae: registers its state-dict kind there
from comfy_core.patching.oobleck_vae import OobleckVaePatcher  # noqa: F401 -- after audio_vae: registers its kind
from comfy_core.patching.sa3_vae import SA3VaePatcher  # noqa: F401 -- after audio_vae: registers its kind
from comfy_core.patching.music_dcae_vae import MusicDCAEVaePatcher  # noqa: F401 -- after audio_vae: registers its kind
from comfy_core.weights.entries import Offset, PatchEntry, WeightAdapter, calculate_weight

__all__ = [
    "ATTENTION_BACKEND", "ATTENTION_OPTIONS", "ClipPatcher", "ModelPatcher", "ModelWeight", "ObjectPatchError",
    "Offset", "PatchConflictError", "PatchDataError", "PatchEntry", "PatchError", "PatchStats",
    "AudioVaePatcher", "Patcher", "VaePatcher", "WeightAdapter", "calculate_weight",
]
