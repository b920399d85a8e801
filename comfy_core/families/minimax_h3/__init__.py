"""MiniMax H3: a single-stream joint audio-video DiT (ComfyUI's `supported_models.MiniMaxH3` /
`model_base.MiniMaxH3`, `comfy/ldm/minimax/model.py`).

Modules: `layout.py` (the packed sequence: segments, position grids, patchify, the shift maps and
the PDD head weights), `dit.py` (`MiniMaxH3Config`, `MiniMaxH3Model`) with its layers in
`blocks.py`, `conditions.py` (the payload the nodes' conditioning becomes, the audio part's latent
scale, denoise masks), `sampling.py` (`AVFlowModelSampling`: ComfyUI's `ModelSamplingAV`),
`latent_format.py` (`MiniMaxH3AV`), `supported_models.py`, `clip.py` (CLIPLoader type "minimax":
Qwen3-VL-32B's layer-50 states with the H3 presentation and per-token modality tags). The video and
audio VAEs live beside them (`video_vae.py`, `audio_vae.py`, registered as VAE kinds on import).

The family: detected by `audio_patch_proj.weight` + `video_patch_proj.weight` under
`model.diffusion_model.` (its files are diffusion models alone: UNETLoader); widths, depths, heads,
the time embedding's form (the curve table of distilled files), VSA gates and the PDD head bank
from the weights; rectified flow with shift 12 (audio 3), timestep sigma x 1000; the nested
[video 24 ch at 16x, stereo audio 32 ch at 40 Hz] latent, sampled packed; bf16 / fp32.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature

PREFIX = "model.diffusion_model."
MARKER = "audio_patch_proj.weight"
SHIFT_VIDEO = 12.0
SHIFT_AUDIO = 3.0


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.minimax_h3.dit import MiniMaxH3Config

    return MiniMaxH3Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "minimax_h3"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.minimax_h3.dit import MiniMaxH3Model

    return MiniMaxH3Model.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.minimax_h3.dit import MiniMaxH3ConfigError

    return (MiniMaxH3ConfigError,)


def minimax_h3_architecture() -> Architecture:
    return Architecture(name="minimax_h3", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.hidden_size,
                        comfy_config=lambda config: config.comfy_unet_config())


class MiniMaxH3Components:
    """The DiT and the model with its audio-video sampling; the files hold no VAE (VAELoader's)."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)

    def vae_config(self, tensors: Mapping[str, Any], prefix: str) -> Any:
        from comfy_core.families.minimax_h3.dit import MiniMaxH3ConfigError

        raise MiniMaxH3ConfigError("MiniMax H3: its VAEs come in their own files (VAELoader)")

    def build_vae(self, config: Any) -> Any:
        return self.vae_config({}, "")

    def build_model(self, unet: Any, family: Family, prediction: str, zsnr: bool) -> Any:
        from comfy_core.families.minimax_h3.sampling import AVFlowModelSampling
        from comfy_core.models.diffusion import DiffusionModel

        sampling = AVFlowModelSampling(shift=SHIFT_VIDEO, audio_shift=SHIFT_AUDIO, multiplier=1000)
        return DiffusionModel(unet, sampling, family.latent_format, family=family)


def text_encoders() -> Any:
    from comfy_core.families.minimax_h3.clip import MINIMAX_H3_TEXT_ENCODERS

    return MINIMAX_H3_TEXT_ENCODERS


def definition() -> Family:
    # The VAE modules register their state-dict kinds for VAELoader (comfy_core.patching.vae.STATE_DICT_KINDS)
    from comfy_core.families.minimax_h3 import audio_vae, video_vae  # noqa: F401
    from comfy_core.families.minimax_h3 import supported_models
    from comfy_core.families.minimax_h3.conditions import MiniMaxH3Conditions
    from comfy_core.families.minimax_h3.latent_format import SPATIAL, minimax_h3_latent_format

    latent = minimax_h3_latent_format()
    return Family(
        name="minimax_h3",
        display_name="MiniMax H3",
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + "video_patch_proj.weight"),
                            unet=(("image_model", "minimax_h3"),), diffusion_model=(("image_model", "minimax_h3"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=SHIFT_VIDEO, multiplier=1000.0,
                                default_sampler="res_multistep", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=SPATIAL),
        vae_prefix="vae.",
        conditioning=MiniMaxH3Conditions(),
        components=MiniMaxH3Components(),
        architecture=minimax_h3_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.MiniMaxH3,
        comfy_model_class="MiniMaxH3",
    )
