"""SD2.1 unCLIP (Stability's `sd21-unclip-l` and `sd21-unclip-h`, after Ramesh et al. 2022,
"Hierarchical Text-Conditional Image Generation with CLIP Latents"): the SD2 UNet (OpenCLIP-H
text, linear projections, 64-channel heads) with a label embedding fed a noise-augmented CLIP
image embedding and the embedding of its noise level (`adm_in_channels` = 2 x the image
embedding width: 1536 for the ViT-L model, 2048 for ViT-H). The file also carries the image
encoder (`embedder.model.visual.*`, OpenCLIP layout, returned by unCLIPCheckpointLoader) and the
noise augmentor's schedule buffers (`noise_augmentor.*`), which ComfyUI does not read: its
augmentor is rebuilt from the squared-cosine schedule with identity statistics, and so is ours
(comfy_core/models/unclip.py).

Detected as ComfyUI does (`supported_models.SD21UnclipL/H`): an SD2 UNet with a label
embedding; the embedding width is read from the weights, so one definition covers L and H.
The prediction type follows SD2's rule (the 768 unCLIP models predict v).
"""
from __future__ import annotations

import dataclasses

from comfy_core.families import sd2
from comfy_core.families.base import Family
from comfy_core.families.sd2 import supported_models
from comfy_core.models.model_conditions import UnclipConditions


def definition() -> Family:
    base = sd2.definition()
    return dataclasses.replace(
        base, name="sd21_unclip", display_name="Stable Diffusion 2.1 unCLIP",
        signature=dataclasses.replace(
            base.signature, unet=tuple((k, True if k == "has_adm" else v) for k, v in base.signature.unet),
            # alone (a split file) it must not pass for the SDXL refiner, the other 4-level ADM UNet
            diffusion_model=(("levels", 4), ("attention_at_first_level", True))),
        conditioning=UnclipConditions(), clip_vision_prefix="embedder.model.visual.",
        supported_model=supported_models.SD21UnclipH,
        comfy_model_class="SD21UNCLIP",
    )
