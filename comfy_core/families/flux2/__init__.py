"""Flux.2 (Black Forest Labs, November 2025: FLUX.2 dev, 32B; January 2026: FLUX.2 Klein 4B / 9B):
the rectified-flow transformer of comfy_core/families/flux2/dit.py (global modulation, SwiGLU, no
biases, 4-axis RoPE), on 128-channel latents (the new 32-channel autoencoder in 2x2 patches,
normalised; latent_format.py), conditioned on an LLM's stacked hidden states: Mistral Small 3
(24B, layers 10 / 20 / 30 -> 15360 wide) for dev, Qwen3 4B / 8B (layers 9 / 18 / 27) for Klein.

As today's ComfyUI's `supported_models.Flux2` / `model_base.Flux2` have it:

- sampling: model type FLUX (Flux's exponential time shift), shift 2.02 (Flux2Scheduler and
  ModelSamplingFlux re-derive it from the resolution);
- conditioning: Flux's (`guidance`, reference latents), with the text states padded at the
  front with zeros to 512 tokens; no pooled vector; no extra input channels;
- files: ComfyUI / BFL names under `model.diffusion_model.` in single files, bare in split files
  (`flux2-dev.safetensors`, `flux-2-klein-4b.safetensors`), or diffusers' `Flux2Transformer2DModel`
  names (converted: keys.py).

Two families share this package: `flux2` (dev: a guidance embedding) and `flux2.klein` (Klein:
none); detected from `double_stream_modulation_img.lin` (the global modulation Flux.1 lacks).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux2 import supported_models
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_conditions import FluxConditions

MARKER = "double_stream_modulation_img.lin.weight"
FLUX2_TEXT_TOKENS = 512  # model_base.Flux2: the context is front-padded with zeros to this length


class Flux2Conditions(FluxConditions):
    """Flux.2's model inputs (ComfyUI's `model_base.Flux2.extra_conds`): Flux's guidance and reference
    latents, and the text states front-padded with zero tokens to 512 (`c_crossattn`)."""

    name = "flux2"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        cross_attn = kwargs.get("cross_attn")
        if cross_attn is not None and cross_attn.shape[1] < FLUX2_TEXT_TOKENS:
            pad = FLUX2_TEXT_TOKENS - cross_attn.shape[1]
            out["c_crossattn"] = torch.nn.functional.pad(cross_attn, (0, 0, pad, 0))  # [B, 512, W]
        return out


class Flux2Components:
    """The loader's parts for Flux.2 single files: the family's network and denoiser as every DiT's,
    and the Flux.2 autoencoder (`comfy_core.models.flux2_vae`: the latent statistics under `vae.bn.`)."""

    def build_unet(self, config: Any) -> Any:
        return _build(config)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.flux2_vae import Flux2VAEConfig
        from comfy_core.models.vae import VAEConfig

        return Flux2VAEConfig(VAEConfig.detect_from_weights(tensors, prefix))

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.flux2_vae import Flux2AutoencoderKL

        return Flux2AutoencoderKL(config)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.flux2.dit import Flux2Config

    return Flux2Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "flux2"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.flux2.dit import Flux2Transformer

    return (Flux2Transformer.from_config(config) if operations is None
            else Flux2Transformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.flux2.dit import Flux2ConfigError
    from comfy_core.families.flux2.keys import Flux2KeyError

    return (Flux2ConfigError, Flux2KeyError)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.flux2.keys import is_diffusers_flux2

    return is_diffusers_flux2(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.flux2.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def flux2_architecture() -> Architecture:
    return Architecture(name="flux2", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        self_attention_hook="attn1_output_patch")


def flux2_family(name: str, display_name: str, guidance: bool, text_encoders: Any = None) -> Family:
    """A Flux.2 family: dev (`guidance` True) or Klein (False); they differ in the guidance
    embedding and their text encoders."""
    latent = Flux2LatentFormat()
    return Family(
        name=name,
        display_name=display_name,
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "flux2"), ("guidance_embed", guidance)),
                            diffusion_model=(("guidance_embed", guidance),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=supported_models.FLUX2_SHIFT,
                                multiplier=1.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=Flux2Conditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        components=Flux2Components(),
        architecture=flux2_architecture(),
        text_encoders=text_encoders,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.Flux2ModelConfig,
        comfy_model_class="Flux2",
    )


def definition() -> Family:
    """FLUX.2 dev: its Mistral Small 3 encoder set (clip.py; the tokenizer is the file's tekken data)."""
    from comfy_core.families.flux2.clip import DEV_TEXT_ENCODERS

    return flux2_family("flux2", "Flux.2 dev", guidance=True, text_encoders=DEV_TEXT_ENCODERS)
