"""Lumina-Image 2.0 (Alpha-VLLM 2025): a 2.6B NextDiT (comfy_core/families/zimage/nextdit.py, which
Z-Image's family owns and this one composes: 26 layers of 2304 wide, 24 query heads of 96 sharing
8 key/value heads, 2 noise and 2 context refiner blocks, no pad tokens), conditioned on Gemma 2
2B's states (2304 wide); Flux.1's 16-channel latents (scale 0.3611, shift 0.1159) and
autoencoder, 2x2 patches.

As today's ComfyUI's `supported_models.Lumina2` / `model_base.Lumina2` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 6 and multiplier 1 (the
  network gets sigma; ModelSamplingAuraFlow sets the shift);
- conditioning: as Z-Image's (`NextDiTConditions`: `num_tokens`, the attention mask when it masks
  anything, neither applied by the network);
- what the weights cannot show (ComfyUI's model_detection for a 2304-wide NextDiT): RoPE over
  (index, row, col) with 32 / 32 / 32 channels of a 96-channel head (thirds for other widths),
  axis lengths 300 / 512 / 512, base 10000, timestep scale 1; SiLU before each modulation linear
  (`adaLN_modulation.1`), the timestep embedding min(width, 1024) wide.

The text encoder is Gemma 2 2B (clip.py: CLIPLoader type "lumina2" with a Gemma file; a Qwen3-4B
file under that type is Z-Image's set). NewBie (a pooled-text projection) and OmniGen2 are other networks.

Files: ComfyUI's (and Alpha-VLLM's) names under `model.diffusion_model.` in single files (the VAE
under `vae.`), bare in split files, or diffusers' `Lumina2Transformer2DModel` names (converted,
keys.py). Detected from names and shapes: `cap_embedder.1.weight` with Lumina 2's modulation
(`layers.N.adaLN_modulation.1`).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.lumina2.clip import LUMINA2_TEXT_ENCODERS
from comfy_core.families.zimage import CAP_EMBEDDER, COMFY_MARKER, NextDiTConditions, nextdit_errors, nextdit_facts
from comfy_core.families.zimage import supported_models

LUMINA2_AXES_LENS = (300, 512, 512)
LUMINA2_ROPE_THETA = 10000.0
LUMINA2_TIME_SCALE = 1.0
LUMINA2_SHIFT = 6.0


def lumina2_axes(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per axis (index, row, col): Lumina 2's 96-channel heads split 32 / 32 / 32,
    other widths in thirds."""
    if head_dim % 6:
        raise ValueError(f"Lumina 2: a head of {head_dim} channels cannot be split in three even RoPE axes")
    return head_dim // 3, head_dim // 3, head_dim // 3


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.zimage.nextdit import NextDiTConfig, NextDiTConfigError

    if prefix + "layers.0.adaLN_modulation.1.weight" not in tensors:
        raise NextDiTConfigError("NextDiT: not Lumina 2's modulation (no layers.0.adaLN_modulation.1)")
    return NextDiTConfig.detect_from_weights(tensors, prefix, axes_split=lumina2_axes, axes_lens=LUMINA2_AXES_LENS,
                                             rope_theta=LUMINA2_ROPE_THETA, time_scale=LUMINA2_TIME_SCALE,
                                             pad_multiple=32)


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.lumina2.keys import lora_key_map
    from comfy_core.families.zimage.nextdit import NextDiT

    return NextDiT(config, operations=operations, lora_keys=lora_key_map)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.lumina2.keys import is_diffusers_lumina2

    return is_diffusers_lumina2(names)


def _from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from comfy_core.families.lumina2.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def lumina2_architecture() -> Architecture:
    return Architecture(name="lumina2", markers=(COMFY_MARKER,), detect=_detect, facts=nextdit_facts, build=_build,
                        errors=nextdit_errors(), context_width=lambda config: config.cap_feat_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="lumina2",
        display_name="Lumina-Image 2.0",
        signature=Signature(required_prefixes=("model.diffusion_model." + CAP_EMBEDDER,),
                            unet=(("image_model", "lumina2"), ("z_image_modulation", False))),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=LUMINA2_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=NextDiTConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=lumina2_architecture(),
        text_encoders=LUMINA2_TEXT_ENCODERS,  # Gemma 2 2B (clip.py)
        inference_dtypes=("bf16", "fp32"),  # ComfyUI's supported_models.Lumina2
        supported_model=supported_models.Lumina2,
        comfy_model_class="Lumina2",
    )
