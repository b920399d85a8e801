"""ACE-Step 1 (v1 3.5B; ACE Studio / StepFun 2025): text-to-music with a linear-attention DiT over
the music DCAE's `[B, 8, 16, T]` latent, conditioned on UMT5-base text states, lyric tokens (a
Conformer lyric encoder inside the network) and a speaker vector. ACE-Step 1.5 is a different
network (`families/ace_step15/`).

Modules: `dit.py` (`AceStepConfig`, `AceStepTransformer`: ComfyUI's `ACEStepTransformer2DModel`),
`lyric_encoder.py` (the Conformer), `conditions.py` (ComfyUI's `model_base.ACEStep.extra_conds`),
`latent_format.py` (`ACEAudio`), `supported_models.py` (`ACEStep`).

As ComfyUI has it (`supported_models.ACEStep`, `model_base.ACEStep`, `model_detection`):

- detected by `genre_embedder.weight` under `model.diffusion_model.` in the all-in-one
  `ace_step_v1_3.5b.safetensors`, bare in split files; widths and depths read from the weights
  (ComfyUI reads none: its `unet_config` is `{"audio_model": "ace"}`);
- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and ComfyUI's default
  multiplier 1000 (the network embeds sigma x 1000);
- the music DCAE + vocoder VAE under `vae.` (`comfy_core/models/music_dcae.py`, `music_vocoder.py`,
  its patcher `comfy_core/patching/music_dcae_vae.py`), UMT5-base under `text_encoders.umt5base.`;
- bf16 / fp32, memory factor 0.5.

The text set: `clip.py` (UMT5-base and the lyric tokens: ComfyUI's lyric tokenizer over ACE-Step's
BPE vocabulary, `comfy_core/text_encoders/ace_lyrics.py`).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.models.vae import VAEConfigError

PREFIX = "model.diffusion_model."
MARKER = "genre_embedder.weight"  # ComfyUI's model_detection key
LYRIC_MARKER = "lyric_embs.weight"
ACE_SHIFT = 3.0


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.ace_step.dit import AceStepConfig

    return AceStepConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    return {"audio_model": "ace", "in_channels": config.in_channels, "hidden_size": config.width}


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ace_step.dit import AceStepTransformer

    return AceStepTransformer(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ace_step.dit import AceStepConfigError

    return (AceStepConfigError,)


def ace_architecture() -> Architecture:
    return Architecture(name="ace", markers=(MARKER, LYRIC_MARKER), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


class AceStepComponents:
    """What the loader builds for ACE-Step 1 besides the defaults: the network, the music DCAE +
    vocoder VAE under `vae.` (`comfy_core/models/music_dcae.py`) and its audio patcher."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.music_dcae import MusicDCAEConfig, MusicDCAEConfigError
        from comfy_core.models.music_vocoder import VocoderConfigError

        try:
            return MusicDCAEConfig.detect_from_weights(tensors, prefix)
        except (MusicDCAEConfigError, VocoderConfigError) as exc:
            raise VAEConfigError(str(exc)) from None

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.music_dcae import MusicDCAE

        return MusicDCAE(config)

    def vae_patcher(self, module: Any, load_device: Any, offload_device: Any) -> Any:
        from comfy_core.patching.music_dcae_vae import MusicDCAEVaePatcher

        return MusicDCAEVaePatcher(module, load_device, offload_device)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)


def definition() -> Family:
    from comfy_core.families.ace_step import supported_models
    from comfy_core.families.ace_step.clip import ACE_TEXT_ENCODERS
    from comfy_core.families.ace_step.conditions import AceStepConditions
    from comfy_core.families.ace_step.latent_format import SAMPLES_PER_COLUMN, ace_latent_format

    latent = ace_latent_format()
    return Family(
        name="ace_step",
        display_name="ACE-Step 1",
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + LYRIC_MARKER),
                            unet=(("audio_model", "ace"),), diffusion_model=(("audio_model", "ace"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=ACE_SHIFT, multiplier=1000.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=SAMPLES_PER_COLUMN),
        vae_prefix="vae.",
        conditioning=AceStepConditions(),
        components=AceStepComponents(),
        architecture=ace_architecture(),
        text_encoders=ACE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.ACEStep,
        comfy_model_class="ACEStep",
    )


__all__ = ["ACE_SHIFT", "AceStepComponents", "ace_architecture", "definition"]
