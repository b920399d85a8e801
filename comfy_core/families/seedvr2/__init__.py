"""SeedVR2 (ByteDance-Seed, 2025): one-step video / image restoration and upscaling, 3B and 7B, as
today's ComfyUI runs it (`comfy/ldm/seedvr/model.py`, `supported_models.SeedVR2`,
`model_base.SeedVR2`, `comfy_extras/nodes_seedvr.py`).

- network: the NaDiT (`dit.py`): dual-stream window-attention transformer over 1x2x2 patches of
  [noisy latent, condition latent, ones mask], its text a fixed embedding stored in the file
  (`positive_conditioning` 58 x 5120, `negative_conditioning` 64 x 5120);
- sampling: model type FLOW (ComfyUI's CONST), ModelSamplingDiscreteFlow shift 1, multiplier 1000;
  the templates take one euler step at cfg 1 from sigma 1 (the velocity `noise - x0`);
- conditioning (`SeedVR2Conditions`, ComfyUI's `model_base.SeedVR2.extra_conds`): the `condition`
  a SeedVR2Conditioning entry carries (`[B, 17, T, h, w]`: the input's latent plus a ones channel)
  goes to the network as is; the context is the file's positive / negative embedding, which
  SeedVR2Conditioning reads off the model;
- latents: 16 channels, 8x / 4x, from the causal video VAE (`comfy_core/models/seedvr2_vae.py`,
  built by VAELoader from ComfyUI's marker `decoder.up_blocks.2.upsamplers.0.upscale_conv.weight`),
  which applies the scaling factor 0.9152 itself (latent format scale 1);
- no text encoder.

Files: ComfyUI's names, bare in split files (`seedvr2_3b_int8_convrot.safetensors`,
`seedvr2_7b_int8_convrot.safetensors` in diffusion_models/, the int8 ConvRot layers read by the
generic quantised-weight loader), under `model.diffusion_model.` in a single file. Detected from
`vid_in.proj.weight` with `emb_in.proj_in.weight` and the text buffers' neighbour `txt_in.weight`.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.seedvr2 import supported_models
from comfy_core.families.seedvr2.latent_format import SeedVR2LatentFormat
from comfy_core.models.model_conditions import ModelConditions

MARKER = "vid_in.proj.weight"
SECOND_MARKER = "emb_in.proj_in.weight"


class SeedVR2Conditions(ModelConditions):
    """ComfyUI's `model_base.SeedVR2.extra_conds`: the entry's `condition` latent, as it is
    (batched like any regular condition: repeated to the batch)."""

    name = "seedvr2"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        condition = kwargs.get("condition")
        return {} if condition is None else {"condition": condition}


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.seedvr2.dit import SeedVR2Config, SeedVR2ConfigError

    if prefix + SECOND_MARKER not in tensors:
        raise SeedVR2ConfigError(f"SeedVR2: no {prefix}{SECOND_MARKER} (not a NaDiT)")
    return SeedVR2Config.detect_from_weights(tensors, prefix)


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.seedvr2.dit import SeedVR2DiT

    return SeedVR2DiT(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.seedvr2.dit import SeedVR2ConfigError

    return (SeedVR2ConfigError,)


def seedvr2_architecture() -> Architecture:
    return Architecture(name="seedvr2", markers=(MARKER,), detect=_detect, facts=lambda config: config.facts(),
                        build=_build, errors=_errors(), context_width=lambda config: config.txt_in_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = SeedVR2LatentFormat()
    return Family(
        name="seedvr2",
        display_name="SeedVR2",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,
                                               "model.diffusion_model." + SECOND_MARKER),
                            unet=(("image_model", "seedvr2"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.SEEDVR2_SHIFT,
                                multiplier=supported_models.SEEDVR2_MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=SeedVR2Conditions(),
        architecture=seedvr2_architecture(),
        text_encoders=None,
        inference_dtypes=("bf16", "fp16", "fp32"),
        supported_model=supported_models.SeedVR2,
        comfy_model_class="SeedVR2",
    )


__all__ = ["MARKER", "SeedVR2Conditions", "definition", "seedvr2_architecture"]
