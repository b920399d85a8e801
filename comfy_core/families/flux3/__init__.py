"""FLUX 3 Image (Black Forest Labs, 2026: "FLUX 3 Image Klein", base and step-distilled): the
three-mode rectified-flow transformer of comfy_core/families/flux3/dit.py on Flux.2's 128-channel
latents (the templates load `flux2-vae.safetensors`), conditioned on Qwen3-VL 4B's stacked hidden
states (CLIPLoader type "flux3"; the text side is comfy_core/text_encoders' Qwen3-VL tower).

- sampling: rectified flow with BFL's constant shift 6.93, multiplier 1 (diffusers' FLUX.3
  recipe; supported_models.py); the distilled checkpoint is a flow map that also embeds the
  timestep each step jumps to (the next sigma of the run's schedule);
- conditioning: the text states as they come (no pooled vector, no guidance embedding), reference
  latents (ReferenceLatent / ReferenceMultiLatent) as the reference-image mode, the k-th at l = -k;
- files: ComfyUI / BFL names under `model.diffusion_model.` in single files, bare in split files
  (`flux3-image-klein-*.safetensors`, bf16 or ComfyUI's int8 ConvRot), or diffusers'
  `Flux3Transformer2DModel` names (converted: keys.py); detected from
  `early_stream_modulations.image.lin` (the per-mode modulation Flux.2 lacks).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux2 import Flux2Components
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.families.flux3 import supported_models
from comfy_core.families.flux3.clip import FLUX3_TEXT_ENCODERS
from comfy_core.models.model_conditions import FluxConditions

MARKER = "early_stream_modulations.image.lin.weight"


class Flux3Conditions(FluxConditions):
    """FLUX 3's model inputs: Flux's reference latents (and guidance, which the network ignores); the
    text states unpadded; no pooled vector; no extra input channels."""

    name = "flux3"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None

    def encode_adm(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        return None


class Flux3Components(Flux2Components):
    """The loader's parts: Flux.2's (its autoencoder for a single file's `vae.`, the denoiser of every
    DiT) with the FLUX 3 network."""

    def build_unet(self, config: Any) -> Any:
        return _build(config)


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.flux3.dit import Flux3Config

    return Flux3Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "flux3"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.flux3.dit import Flux3Transformer

    return (Flux3Transformer.from_config(config) if operations is None
            else Flux3Transformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.flux3.dit import Flux3ConfigError
    from comfy_core.families.flux3.keys import Flux3KeyError

    return (Flux3ConfigError, Flux3KeyError)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.flux3.keys import is_diffusers_flux3

    return is_diffusers_flux3(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.flux3.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def flux3_architecture() -> Architecture:
    return Architecture(name="flux3", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_in_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    """FLUX 3 Image (base and distilled: the flow map is a network fact, `Flux3Config.flow_map`)."""
    latent = Flux2LatentFormat()
    return Family(
        name="flux3",
        display_name="FLUX 3 Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "flux3"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.FLUX3_SHIFT,
                                multiplier=1.0, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=Flux3Conditions(),
        components=Flux3Components(),
        architecture=flux3_architecture(),
        text_encoders=FLUX3_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.Flux3ModelConfig,
        comfy_model_class="Flux3",
    )
