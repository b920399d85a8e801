"""Anima (circlestone-labs 2026; base v1.0, preview): a 2B text-to-image model, NVIDIA's
Cosmos-Predict2 DiT (comfy_core/families/anima/dit.py: 28 blocks of 2048 wide, 16 heads of 128,
AdaLN-LoRA 256, 3-D RoPE) with an LLM adapter in front of its cross-attention (`adapter.py`: 6
blocks that read Qwen3-0.6B's states at the prompt's T5 token ids, `clip.py`); the 16-channel
latents of the Qwen-Image / Wan 2.1 VAE (`comfy_core/models/wan_vae*.py`), 8x down, 2x2 patches.

As today's ComfyUI's `supported_models.Anima` / `model_base.Anima` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and multiplier 1 (the
  network gets sigma);
- latents: Wan 2.1's format (per-channel mean / std, 3-D latents `[B, 16, 1, h, w]`);
- conditioning: the Qwen3 states run through the network's LLM adapter at the conditioning's
  `t5xxl_ids`, times its `t5xxl_weights`, zero-padded to 512 tokens, become the context
  (`AnimaConditions`, ComfyUI's `extra_conds` at inference); without T5 ids the states pass as
  they are; no pooled vector, no extra input channels;
- text encoders: the Qwen3-0.6B set, loaded by CLIPLoader type "stable_diffusion";
- inference in bf16, fp16 (the residual stream kept in float32) or fp32.

Files: ComfyUI's names bare in split files (`anima-base-v1.0.safetensors`, under
`model.diffusion_model.` in single files; the original release's files hold the same names under
`net.`, read too).
Detected from names and shapes: Cosmos-Predict2's `blocks.0.mlp.layer1.weight` with the adapter's
`llm_adapter.blocks.0.cross_attn.q_proj.weight` (ComfyUI's test); widths, depth, MLP and LoRA
widths, the adapter's layout from the weights; 16 heads (40 at width 5120) and the RoPE
extrapolation ratios by ComfyUI's rule. Plain Cosmos-Predict2 (no adapter) is not a family here.
LoRA spellings: `keys.py`. Anima LLLite (a ModelPatchLoader patch):
`comfy_core/model_patches/anima_lllite.py`.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.anima import supported_models
from comfy_core.families.anima.clip import ANIMA_TEXT_ENCODERS
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.wan.latent_format import wan21_latent_format
from comfy_core.models.model_conditions import ModelConditions

MARKER = "llm_adapter.blocks.0.cross_attn.q_proj.weight"
DIT_MARKER = "blocks.0.mlp.layer1.weight"
ANIMA_SHIFT = 3.0
ORIGINAL_PREFIX = "net."


class AnimaConditions(ModelConditions):
    """ComfyUI's `model_base.Anima.extra_conds` at inference: the context is the network's
    `preprocess_text_embeds(cross_attn, t5xxl_ids, t5xxl_weights)` in the model's dtype."""

    name = "anima"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        cross_attn = kwargs.get("cross_attn")
        ids = kwargs.get("t5xxl_ids")
        network = getattr(model, "diffusion_model", None)
        if cross_attn is None or ids is None or not hasattr(network, "preprocess_text_embeds"):
            return {}
        dtype = getattr(model, "manual_cast_dtype", None) or model.get_dtype()
        device = kwargs.get("device") or cross_attn.device
        weights = kwargs.get("t5xxl_weights")
        ids = torch.as_tensor(ids)
        ids = ids[None] if ids.ndim == 1 else ids  # [1, M]
        if weights is not None:
            weights = torch.as_tensor(weights)
            weights = (weights[None] if weights.ndim == 1 else weights)[..., None].to(device=device, dtype=dtype)
        with torch.no_grad():
            context = network.preprocess_text_embeds(cross_attn.to(device=device, dtype=dtype), ids.to(device),
                                                     t5xxl_weights=weights)
        return {"c_crossattn": context}


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.anima.dit import AnimaConfig, AnimaConfigError

    if prefix + DIT_MARKER not in tensors:
        raise AnimaConfigError(f"Anima: no {prefix}{DIT_MARKER} (not a Cosmos-Predict2 network)")
    return AnimaConfig.detect_from_weights(tensors, prefix)


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.anima.dit import AnimaDiT

    return AnimaDiT(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.anima.dit import AnimaConfigError

    return (AnimaConfigError,)


def _is_original(names: Any) -> bool:
    """The original release's layout: ComfyUI's names under `net.` (read through the loader's
    other-layout hook; the names are otherwise the same)."""
    return ORIGINAL_PREFIX + MARKER in names


def _from_original(state: Mapping[str, Any]) -> dict[str, Any]:
    return {k[len(ORIGINAL_PREFIX):]: v for k, v in state.items() if k.startswith(ORIGINAL_PREFIX)}


def anima_architecture() -> Architecture:
    return Architecture(name="anima", markers=(MARKER,), detect=_detect, facts=lambda config: config.facts(),
                        build=_build, errors=_errors(), context_width=lambda config: config.crossattn_emb_channels,
                        is_diffusers=_is_original, from_diffusers=_from_original,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = wan21_latent_format()
    return Family(
        name="anima",
        display_name="Anima",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "anima"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=ANIMA_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=AnimaConditions(),
        architecture=anima_architecture(),
        text_encoders=ANIMA_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.Anima,
        comfy_model_class="Anima",
    )


__all__ = ["ANIMA_SHIFT", "AnimaConditions", "anima_architecture", "definition"]
