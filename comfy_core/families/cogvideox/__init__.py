"""CogVideoX (Zhipu AI / THUDM, 2024) and the networks built on it (CogVideoX 1.5, CogVideoX-Fun
V1.5, Netflix's VOID video inpainting): the CogVideoX DiT (`dit.py`, ComfyUI's layout), T5-XXL
(`clip.py`), the latent format, the sampling policy and the family values.

As today's ComfyUI's `supported_models.CogVideoX_T2V` / `model_base.CogVideoX` have it:

- sampling: ComfyUI's V_PREDICTION_DDPM (`sampling.py`: the network takes the variance-preserving
  sample unscaled and predicts v) on the 1000-step scaled-linear DDPM table (0.00085 .. 0.012)
  rescaled to zero terminal SNR (the diffusers CogVideoX schedulers' `rescale_betas_zero_snr`);
  the network gets the DDPM timestep;
- latents: 16 channels at 8x / 4x from the CogVideoX VAE (`models/cogvideox_vae.py`), scale 0.7 for
  the 5B class (this family), 1.15258426 for the 2B (`definition_2b`, width 1920);
- conditioning (`conditions.py`): extra input channels from `concat_latent_image` (I2V, VOID's 32
  mask + masked-video channels), `ofs` for 1.5 I2V;
- text: T5-XXL alone, 226-token minimum (CLIPLoader type "cogvideox").

Files: ComfyUI's names under `model.diffusion_model.` (single files) or bare (UNETLoader:
`void_pass1.safetensors`, `void_pass2.safetensors`); diffusers' names are converted (`keys.py`).
Detected by `time_embedding_linear_1.weight` + `patch_embed.text_proj.weight` (ComfyUI's names).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.cogvideox import supported_models
from comfy_core.families.cogvideox.clip import COGVIDEOX_TEXT_ENCODERS
from comfy_core.families.cogvideox.conditions import CogVideoXConditions
from comfy_core.families.cogvideox.latent_format import SCALE_2B, SCALE_5B, cogvideox_latent_format

PREFIX = "model.diffusion_model."
MARKER = "time_embedding_linear_1.weight"
TEXT_PROJ = "patch_embed.text_proj.weight"
WIDTH_2B = 1920


def _detect(tensors: Mapping[str, Any], prefix: str, metadata: Mapping[str, str] | None = None) -> Any:
    from comfy_core.families.cogvideox.dit import CogVideoXConfig

    return CogVideoXConfig.detect_from_weights(tensors, prefix, metadata)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "cogvideox"
    facts["size_class"] = "2b" if config.inner_dim == WIDTH_2B else "5b"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.cogvideox.dit import CogVideoXTransformer

    return CogVideoXTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.cogvideox.dit import CogVideoXConfigError

    return (CogVideoXConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.cogvideox.keys import is_diffusers_cogvideox

    return is_diffusers_cogvideox(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.cogvideox.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def cogvideox_architecture() -> Architecture:
    return Architecture(name="cogvideox", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_embed_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(), detect_with_metadata=_detect)


class CogVideoXComponents:
    """What the loader builds for CogVideoX besides the defaults: the network, the CogVideoX VAE
    under `vae.` and the denoiser on the zero-terminal-SNR table (whatever the file's markers)."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.cogvideox_vae import CogVideoXVAEConfig

        return CogVideoXVAEConfig.detect_from_weights(tensors, prefix)

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.cogvideox_vae import CogVideoXVAE

        return CogVideoXVAE(config)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        from comfy_core.families.cogvideox.sampling import CogVideoXModelSampling

        policy = family.sampling
        return DiffusionModel(unet, CogVideoXModelSampling(policy.linear_start, policy.linear_end, policy.timesteps),
                              family.latent_format, family=family)


def _family(name: str, display: str, size_class: str, scale: float) -> Family:
    latent = cogvideox_latent_format(scale)
    return Family(
        name=name,
        display_name=display,
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + TEXT_PROJ),
                            unet=(("image_model", "cogvideox"), ("size_class", size_class))),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="v", schedule="discrete", linear_start=0.00085, linear_end=0.012,
                                default_sampler="euler", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=CogVideoXConditions(),
        components=CogVideoXComponents(),
        architecture=cogvideox_architecture(),
        text_encoders=COGVIDEOX_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.CogVideoX_T2V,
        comfy_model_class="CogVideoX",
    )


def definition() -> Family:
    """CogVideoX 5B, 1.5, CogVideoX-Fun V1.5 and VOID (latent scale 0.7)."""
    return _family("cogvideox", "CogVideoX (5B class, VOID)", "5b", SCALE_5B)


def definition_2b() -> Family:
    """CogVideoX 2B (width 1920, latent scale 1.15258426)."""
    return _family("cogvideox_2b", "CogVideoX 2B", "2b", SCALE_2B)


__all__ = ["MARKER", "cogvideox_architecture", "definition", "definition_2b"]
