"""NewBie-Image (NewBie-AI 2025; Exp0.1): a 3.5B NextDiT (comfy_core/families/newbie/dit.py: Lumina 2's
network from comfy_core/families/zimage/nextdit.py, 36 layers of 2304 wide, 24 query heads of 96
sharing 8 key/value heads, 2 noise and 2 context refiner blocks, no pad tokens) conditioned on
Gemma 3 4B's token states (2560 wide) and Jina CLIP v2's pooled text (1024 wide), mixed into the
modulation; Flux.1's 16-channel latents and autoencoder (`ae.safetensors`), 2x2 patches.

As today's ComfyUI has it (no class of its own: `model_detection` reads a 2304-wide NextDiT with
`clip_text_pooled_proj.0.weight` as Lumina 2 plus `clip_text_dim`; `supported_models.Lumina2`,
`model_base.Lumina2`):

- sampling: model type FLOW (CONST), shift 6, multiplier 1 (the template's ModelSamplingAuraFlow
  sets 6 again); what weights cannot show is Lumina 2's (RoPE 32 / 32 / 32 of a 96-channel head,
  axis lengths 300 / 512 / 512, base 10000, timestep scale 1);
- conditioning: Lumina 2's (`num_tokens`, the attention mask when it masks anything) plus the
  conditioning's `pooled_output` as `clip_text_pooled`;
- text encoders: DualCLIPLoader type "newbie" with Gemma 3 4B and Jina CLIP v2 (clip.py).

Files: ComfyUI's names, bare in split files (`NewBie-Image-Exp0.1-bf16.safetensors`) or under
`model.diffusion_model.`; detected from `cap_embedder.1.weight` with Lumina 2's modulation and the
pooled-text projection (`clip_text_pooled_proj.0.weight`), which Lumina 2's detection refuses.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.lumina2 import (LUMINA2_AXES_LENS, LUMINA2_ROPE_THETA, LUMINA2_SHIFT, LUMINA2_TIME_SCALE,
                                         lumina2_axes)
from comfy_core.families.newbie.clip import NEWBIE_TEXT_ENCODERS
from comfy_core.families.zimage import CAP_EMBEDDER, NextDiTConditions, nextdit_errors, nextdit_facts
from comfy_core.families.zimage import supported_models

NEWBIE_MARKER = "clip_text_pooled_proj.0.weight"


class NewBieConditions(NextDiTConditions):
    """Lumina 2's model inputs plus the pooled text (ComfyUI's `model_base.Lumina2.extra_conds`:
    `pooled_output` as `clip_text_pooled`)."""

    name = "newbie"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        pooled = kwargs.get("pooled_output")
        if pooled is not None:
            out["clip_text_pooled"] = pooled
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.newbie.dit import NewBieConfig
    from comfy_core.families.zimage.nextdit import NextDiTConfigError

    if prefix + "layers.0.adaLN_modulation.1.weight" not in tensors:
        raise NextDiTConfigError("NewBie: not Lumina 2's modulation (no layers.0.adaLN_modulation.1)")
    return NewBieConfig.detect_newbie(tensors, prefix, axes_split=lumina2_axes, axes_lens=LUMINA2_AXES_LENS,
                                      rope_theta=LUMINA2_ROPE_THETA, time_scale=LUMINA2_TIME_SCALE, pad_multiple=32)


def newbie_facts(config: Any) -> dict[str, Any]:
    facts = nextdit_facts(config)
    facts["pooled_text"] = True
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.lumina2.keys import lora_key_map
    from comfy_core.families.newbie.dit import NewBieNextDiT

    return NewBieNextDiT(config, operations=operations, lora_keys=lora_key_map)


def newbie_architecture() -> Architecture:
    return Architecture(name="newbie", markers=(NEWBIE_MARKER,), detect=_detect, facts=newbie_facts, build=_build,
                        errors=nextdit_errors(), context_width=lambda config: config.cap_feat_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="newbie",
        display_name="NewBie-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + CAP_EMBEDDER,
                                               "model.diffusion_model." + NEWBIE_MARKER),
                            unet=(("image_model", "lumina2"), ("z_image_modulation", False), ("pooled_text", True))),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=LUMINA2_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=NewBieConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=newbie_architecture(),
        text_encoders=NEWBIE_TEXT_ENCODERS,  # Gemma 3 4B + Jina CLIP v2 (clip.py)
        inference_dtypes=("bf16", "fp32"),  # ComfyUI's supported_models.Lumina2
        supported_model=supported_models.Lumina2,
        comfy_model_class="Lumina2",
    )
