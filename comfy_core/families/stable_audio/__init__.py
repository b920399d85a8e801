"""Stable Audio Open 1.0 (Stability AI): the audio DiT architecture (markers, detection, builder, the
diffusers conversion, ComfyUI's unet_config), the T5-base encoder set, the seconds conditioning,
the Oobleck VAE, the latent format, the sampling policy and the family value.

ComfyUI's `supported_models.StableAudio` / `model_base.StableAudio1`: continuous-time
v-prediction (`ModelSamplingContinuousV`, sigmas 0.03 .. 500, timestep `atan(sigma) 2 / pi`),
64-channel 1-D latents of 2048 samples at 44.1 kHz from the Oobleck VAE
(`comfy_core/models/oobleck_vae.py`, under `pretransform.model.`), the seconds embedders under
`conditioner.conditioners.seconds_start.` / `seconds_total.` (`conditioner.py`), the DiT under
`model.model.` (marker `transformer.rotary_pos_emb.inv_freq`, as ComfyUI's detection). The T5-base
encoder is a separate file (CLIPLoader type "stable_audio", `clip.py`).
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.stable_audio import supported_models
from comfy_core.families.stable_audio.conditioner import START, TOTAL, StableAudioConditions
from comfy_core.families.stable_audio.latent_format import StableAudio1

PREFIX = "model.model."
MARKER = "transformer.rotary_pos_emb.inv_freq"
VAE_PREFIX = "pretransform.model."
SIGMA_MIN, SIGMA_MAX = 0.03, 500.0  # ComfyUI's StableAudio sampling_settings


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.stable_audio.dit import StableAudioDiTConfig

    return StableAudioDiTConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["audio_model"] = "dit1.0"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.stable_audio.dit import StableAudioDiT

    return StableAudioDiT.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.stable_audio.dit import StableAudioConfigError

    return (StableAudioConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.stable_audio.keys import is_diffusers_stable_audio

    return is_diffusers_stable_audio(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.stable_audio.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def stable_audio_architecture() -> Architecture:
    return Architecture(name="stable_audio", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.cond_token_dim or None,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


class StableAudioComponents:
    """What the single-file loader builds for Stable Audio besides the defaults: the Oobleck VAE
    (and its patcher), the continuous-v model sampling, and the seconds embedders read from the
    file (`attach`)."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.models.oobleck_vae import OobleckConfig, OobleckConfigError
        from comfy_core.models.vae import VAEConfigError

        try:
            return OobleckConfig.detect_from_weights(tensors, prefix)
        except OobleckConfigError as exc:
            raise VAEConfigError(str(exc)) from None

    def build_vae(self, config: Any) -> Any:
        from comfy_core.models.oobleck_vae import OobleckVAE

        return OobleckVAE(config)

    def vae_patcher(self, module: Any, load_device: Any, offload_device: Any) -> Any:
        from comfy_core.patching.oobleck_vae import OobleckVaePatcher

        return OobleckVaePatcher(module, load_device, offload_device)

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.models.diffusion import DiffusionModel
        from comfy_core.models.model_sampling import ContinuousVModelSampling

        return DiffusionModel(unet, ContinuousVModelSampling("v", SIGMA_MIN, SIGMA_MAX, 1.0), family.latent_format,
                              family=family)

    def attach(self, model: Any, read: Any, names: Any) -> None:
        """The seconds embedders (ComfyUI's `seconds_start_embedder` / `seconds_total_embedder`
        attributes of the model), from the file's `conditioner.conditioners.*` tensors;
        `read(name)` gives a tensor."""
        from comfy_core.families.stable_audio.conditioner import seconds_embedders

        state = {name: read(name) for name in names if name.startswith((START, TOTAL))}
        for name, embedder in seconds_embedders(state).items():
            setattr(model, f"{name}_embedder", embedder)


def text_encoders() -> Any:
    from comfy_core.families.stable_audio.clip import STABLE_AUDIO_TEXT_ENCODERS

    return STABLE_AUDIO_TEXT_ENCODERS


def definition() -> Family:
    latent = StableAudio1()
    return Family(
        name="stable_audio",
        display_name="Stable Audio Open",
        signature=Signature(required_prefixes=(PREFIX + MARKER, START, TOTAL),
                            unet=(("audio_model", "dit1.0"), ("global_cond_type", "prepend"))),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="v", default_sampler="dpmpp_3m_sde_gpu", default_scheduler="exponential"),
        geometry=Geometry(latent_channels=latent.channels, downscale=2048),
        unet_prefix=PREFIX,
        vae_prefix=VAE_PREFIX,
        conditioning=StableAudioConditions(),
        components=StableAudioComponents(),
        architecture=stable_audio_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=supported_models.StableAudio,
        comfy_model_class="StableAudio1",
    )
