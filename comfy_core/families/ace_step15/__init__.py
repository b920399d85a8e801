"""ACE-Step 1.5 (ACE Studio / StepFun 2026): text-to-music with a 5 Hz language model that plans the
song as FSQ audio codes and a DiT that renders the 48 kHz stereo latent from them, the caption,
the lyrics and a timbre reference. Turbo (8 steps, no CFG), base / SFT, and the XL networks
(a 2560-wide DiT over a 2048-wide condition encoder) are one family here, as in ComfyUI.

Modules: `network.py` (`AceStep15Config`, `AceStep15Model`: DiT, condition encoder, tokenizer,
detokenizer, FSQ), `layers.py` (blocks), `conditions.py` (ComfyUI's `model_base.ACEStep15.
extra_conds`), `silence.py` (the silence latent), `clip.py` (the Qwen3 0.6B + LM text-encoder set,
DualCLIPLoader type "ace", ComfyUI's prompt formats), `lm_codes.py` (the LM's audio-code sampling),
`latent_format.py` (`ACEAudio15`), `supported_models.py` (`ACEStep15`).

As today's ComfyUI has it (`supported_models.ACEStep15`, `model_base.ACEStep15`):

- detected by ComfyUI's marker `encoder.lyric_encoder.layers.0.input_layernorm.weight` (with the
  1.5 network's `detokenizer.special_tokens`) under `model.diffusion_model.` in single files, bare
  in split ones (`acestep_v1.5_turbo.safetensors`, `acestep_v1.5_xl_*.safetensors`); every width
  and depth read from the weights (`audio_model` "ace1.5");
- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and multiplier 1 (the
  network scales sigma by 1000 itself); the templates add ModelSamplingAuraFlow(3);
- latents `[B, 64, T]` at 25 frames a second (EmptyAceStep1.5LatentAudio), scale 1;
- text encoders under `text_encoders.qwen3_06b.transformer.` and `text_encoders.qwen3_2b` /
  `qwen3_4b.transformer.` in ComfyUI's all-in-one checkpoint; the VAE under `vae.`;
- bf16 / fp32, memory factor 4.7.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature

PREFIX = "model.diffusion_model."
MARKER = "encoder.lyric_encoder.layers.0.input_layernorm.weight"  # ComfyUI's model_detection key
DETOKENIZER = "detokenizer.special_tokens"
ACE15_SHIFT = 3.0


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.ace_step15.network import AceStep15Config

    return AceStep15Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    return {"audio_model": "ace1.5", "in_channels": config.in_channels, "hidden_size": config.dit.width}


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ace_step15.network import AceStep15Model

    return AceStep15Model(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ace_step15.network import AceStep15ConfigError

    return (AceStep15ConfigError,)


def ace15_architecture() -> Architecture:
    return Architecture(name="ace1.5", markers=(MARKER, DETOKENIZER), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.text_dim,
                        comfy_config=lambda config: config.comfy_unet_config())


class AceStep15Components:
    """What the single-file loader builds for ACE-Step 1.5 besides the defaults: the network, the
    Oobleck VAE under `vae.` (48 kHz, `comfy_core/models/oobleck_vae.py`) and its audio patcher."""

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

        return DiffusionModel(unet, family.sampling.model_sampling(prediction, zsnr), family.latent_format,
                              family=family)


def definition() -> Family:
    from comfy_core.families.ace_step15 import supported_models
    from comfy_core.families.ace_step15.clip import ACE15_TEXT_ENCODERS
    from comfy_core.families.ace_step15.conditions import AceStep15Conditions
    from comfy_core.families.ace_step15.latent_format import SAMPLES_PER_FRAME, ace15_latent_format

    latent = ace15_latent_format()
    return Family(
        name="ace_step15",
        display_name="ACE-Step 1.5",
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + DETOKENIZER),
                            unet=(("audio_model", "ace1.5"),), diffusion_model=(("audio_model", "ace1.5"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=ACE15_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=SAMPLES_PER_FRAME),
        vae_prefix="vae.",
        conditioning=AceStep15Conditions(),
        components=AceStep15Components(),
        architecture=ace15_architecture(),
        text_encoders=ACE15_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.ACEStep15,
        comfy_model_class="ACEStep15",
    )


__all__ = ["ACE15_SHIFT", "ace15_architecture", "definition"]
