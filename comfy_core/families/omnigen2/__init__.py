"""OmniGen2 (VectorSpaceLab 2025): a 4B Lumina-style DiT with a reference-image stream
(comfy_core/families/omnigen2/dit.py: 32 layers of 2520 wide, 21 query heads of 120 sharing 7
key/value heads, 2 refiner blocks per stream), conditioned on Qwen2.5-VL-3B's states (2048 wide,
`clip.py`); Flux.1's 16-channel latents (scale 0.3611, shift 0.1159) and autoencoder, 2x2 patches.

As today's ComfyUI's `supported_models.Omnigen2` / `model_base.Omnigen2` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 2.6 and multiplier 1
  (the network gets sigma);
- conditioning: the text states as the context; `num_tokens` (the attention mask's sum, at least 1,
  else the context length) and the mask when it masks anything (`NextDiTConditions`); the edit
  templates' `reference_latents` (ReferenceLatent), each brought into model space, as `ref_latents`
  (one entry per reference, tiled to the batch by the cond batching);
- text encoders: the Qwen2.5-VL-3B set, loaded by CLIPLoader type "omnigen2";
- what the weights cannot show (ComfyUI's model_detection, which fixes every size for the released
  model): RoPE base 10000 over (index, row, col) with a third of the head each (40 / 40 / 40),
  axis lengths 1024 / 1664 / 1664, timestep scale 1000, 2x2 patches; widths, heads, depths are
  read from the weights here, so tiny files load.

Files: ComfyUI's names under `model.diffusion_model.` in single files (Qwen2.5-VL-3B under
`text_encoders.qwen25_3b.transformer.`, the VAE under `vae.`), bare in split files
(`omnigen2_fp16.safetensors`). Detected from names and shapes: ComfyUI's marker
`time_caption_embed.timestep_embedder.linear_1.bias` with `ref_image_patch_embedder.weight`
(diffusers' Lumina 2 layout shares the first, not the second).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.omnigen2 import supported_models
from comfy_core.families.omnigen2.clip import OMNIGEN2_TEXT_ENCODERS
from comfy_core.families.zimage import NextDiTConditions

MARKER = "time_caption_embed.timestep_embedder.linear_1.bias"  # ComfyUI's model_detection key
REF_EMBEDDER = "ref_image_patch_embedder.weight"
OMNIGEN2_SHIFT = 2.6


class OmniGen2Conditions(NextDiTConditions):
    """ComfyUI's `model_base.Omnigen2.extra_conds`: `num_tokens` and the attention mask as the NextDiT
    families have them, and the reference latents in model space as `ref_latents`."""

    name = "omnigen2"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        references = kwargs.get("reference_latents")
        if references is not None:
            out["ref_latents"] = [model.process_latent_in(latent) for latent in references]
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.omnigen2.dit import OmniGen2Config, OmniGen2ConfigError

    if prefix + REF_EMBEDDER not in tensors:
        raise OmniGen2ConfigError(f"OmniGen2: no {prefix}{REF_EMBEDDER}")
    return OmniGen2Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "omnigen2"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.omnigen2.dit import OmniGen2Transformer

    return OmniGen2Transformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.omnigen2.dit import OmniGen2ConfigError

    return (OmniGen2ConfigError,)


def omnigen2_architecture() -> Architecture:
    return Architecture(name="omnigen2", markers=(REF_EMBEDDER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_feat_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="omnigen2",
        display_name="OmniGen2",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,
                                               "model.diffusion_model." + REF_EMBEDDER),
                            unet=(("image_model", "omnigen2"),)),
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=OMNIGEN2_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=OmniGen2Conditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=omnigen2_architecture(),
        text_encoders=OMNIGEN2_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),  # ComfyUI adds fp16 where the device has extended fp16 support
        supported_model=supported_models.Omnigen2,
        comfy_model_class="Omnigen2",
    )


__all__ = ["OMNIGEN2_SHIFT", "OmniGen2Conditions", "definition", "omnigen2_architecture"]
