"""Fibo 2.0 (Bria 2026; Dev and the step + CFG distilled Edit Turbo, text-to-image and editing): an
8B single-stream DiT of Z-Image's blocks (`dit.py`: 3584 wide, 28 heads of 128, 44 blocks, five of
them also cross-attending to the text, a Perceiver squeezing the text into gist tokens, 3-axis RoPE
base 256) over Flux.2's 128-channel latents one token per latent pixel, conditioned on six bundles
of RMS-normalised Qwen3-VL 4B hidden states (`clip.py`); prompts and sizes as its pipeline prepares
them (`prompt.py`).

Read from diffusers' `BriaFibo2Transformer2DModel` / `BriaFibo2Pipeline` (0.42; ComfyUI's own Fibo 2.0
files are not stored anywhere we could read, so ComfyUI's names and classes are unverified):

- sampling: model type FLUX, ModelSamplingFlux with shift 1.15 (the pipeline's exponential shift at
  the trained ~1 MP), multiplier 1 (the network gets sigma; it scales it by 1000); the templates:
  50 steps cfg 5 (Dev) or 4 steps cfg 1 (Edit Turbo), euler / simple;
- latents: Flux.2's format (`flux2/latent_format.py`: the Flux.2 VAE's normalised 2x2 patches, the
  features in the (channel, dy, dx) order diffusers' network patches them in);
- conditioning: the bundles as the context (`c_crossattn`), the images to edit as `reference_latents`
  (model space) -> `ref_latents`, and the token mask as `attention_mask`, always (a run's gist count
  follows its text length, so conditionings of different lengths are never batched by repetition);
- text encoders: Qwen3-VL 4B, loaded by CLIPLoader type "fibo2" (TextGenerate runs on such a CLIP);
- inference in bf16, fp16 or fp32.

Files: diffusers' module names (bare in split files, `fibo2_dev_int8_convrot.safetensors` int8 ConvRot
kept as stored by the generic quantised loading, comfy_core/weights/quant_registry.py; under
`model.diffusion_model.` in single files). Detected from `perceiver.latent_queries`; widths, heads
(q-norm width), depths, injection blocks, text width and gist queries from the shapes.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.fibo2 import supported_models
from comfy_core.families.fibo2.clip import FIBO2_TEXT_ENCODERS
from comfy_core.families.flux2.latent_format import Flux2LatentFormat
from comfy_core.models.model_conditions import ReferenceLatentConditions

MARKER = "perceiver.latent_queries"
IMAGE_MODEL = "fibo2"


class Fibo2Conditions(ReferenceLatentConditions):
    """Reference latents in model space as `ref_latents`; the text's token mask as `attention_mask`
    (all true when the conditioning carries none)."""

    name = "fibo2"
    pass_method = False
    pass_mask = True

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        text = kwargs.get("cross_attn")
        if "attention_mask" not in out and isinstance(text, torch.Tensor) and text.ndim == 3:
            out["attention_mask"] = torch.ones(1, text.shape[1], dtype=torch.bool, device=text.device)
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.fibo2.dit import Fibo2Config

    return Fibo2Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["injection_layers"] = list(config.injection_layers)
    facts["image_model"] = IMAGE_MODEL
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.fibo2.dit import Fibo2Transformer

    return Fibo2Transformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.fibo2.dit import Fibo2ConfigError

    return (Fibo2ConfigError,)


def fibo2_architecture() -> Architecture:
    return Architecture(name="fibo2", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_width,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = Flux2LatentFormat()
    return Family(
        name="fibo2",
        display_name="Fibo 2.0",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", IMAGE_MODEL),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=supported_models.FIBO2_SHIFT,
                                multiplier=supported_models.FIBO2_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=16),
        vae_prefix="vae.",
        conditioning=Fibo2Conditions(),
        architecture=fibo2_architecture(),
        text_encoders=FIBO2_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.Fibo2,
        comfy_model_class="Fibo2",
    )


__all__ = ["IMAGE_MODEL", "MARKER", "Fibo2Conditions", "definition", "fibo2_architecture"]
