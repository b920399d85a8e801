"""MiniMax Music 3 (MiniMax 2026): text-to-music. An autoregressive stage (a Qwen3-8B-shaped LM
writing one semantic audio code per 40 ms, an RVQ depth decoder writing seven residual codes) turns
a caption and lyrics into per-frame states; a flow-matching DiT renders the 44.1 kHz stereo latent
from them; the DAV decodes it.

Modules: `dit.py` (`MiniMaxMusic3Config`, `MiniMaxMusic3Model`: the DiT with the condition encoder
folded in, windows over long latents), `ar.py` (`MiniMaxMusic3AR`: the AR stage and its
generation), `prompt.py` (the caption / lyrics prompt), `clip.py` (the AR stage as a CLIP object,
loaded whole by CLIPLoader, type "minimax" in the template), `dav.py` (the DAV decoder and its
VAE object, VAELoader), `latent_format.py`, `supported_models.py`. Nodes: nodes/minimax_music3_nodes.py
(MiniMaxMusic3TextEncode, EmptyMiniMaxMusic3LatentAudio).

As today's ComfyUI has it (`supported_models` / `model_base.MiniMaxMusic3`,
`comfy/ldm/minimax_music/*`, `comfy/text_encoders/minimax_music.py`):

- detected by ComfyUI's keys `cond_layer_logits` + `diffusion_transformer.transformer.project_in.
  weight`, bare in its split files (`minimax_music3_dit_{fp16,fp32,int8_convrot}.safetensors`,
  UNETLoader; int8 ConvRot layers kept as stored by the generic quantised loading), under
  `model.diffusion_model.` in single files; widths and depths from the weights, heads of 64;
- sampling: model type FLOW (CONST), shift 1, multiplier 1; the network runs on `1 - sigma` and
  negates its output (ComfyUI's `process_timestep`); the template: 30 steps euler / simple, cfg 1.7;
- conditioning: the text encoder's per-frame states as the context, the entry's
  `conditioning_scale` (`MiniMaxMusic3Conditions`; ConditioningZeroOut's negative zeroes it);
- latents `[B, 128, T]`, 512 samples a frame at 44.1 kHz (EmptyMiniMaxMusic3LatentAudio);
- inference in fp16, bf16 or fp32.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.models.model_conditions import ModelConditions

PREFIX = "model.diffusion_model."
MARKER = "cond_layer_logits"
TRANSFORMER_MARKER = "diffusion_transformer.transformer.project_in.weight"


class MiniMaxMusic3Conditions(ModelConditions):
    """ComfyUI's `model_base.MiniMaxMusic3.extra_conds`: the entry's `conditioning_scale` `[B, 1, 1]`
    (1 when the entry has none)."""

    name = "minimax_music3"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        import torch

        scale = kwargs.get("conditioning_scale")
        if scale is None:
            cross_attn = kwargs.get("cross_attn")
            rows = 1 if cross_attn is None else cross_attn.shape[0]
            scale = torch.ones((rows, 1, 1))
        return {"conditioning_scale": scale}


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.minimax_music3.dit import MiniMaxMusic3Config

    return MiniMaxMusic3Config.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["audio_model"] = "minimax_music3"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.minimax_music3.dit import MiniMaxMusic3Model

    return MiniMaxMusic3Model(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.minimax_music3.dit import MiniMaxMusic3ConfigError

    return (MiniMaxMusic3ConfigError,)


def minimax_music3_architecture() -> Architecture:
    return Architecture(name="minimax_music3", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_features,
                        comfy_config=lambda config: config.comfy_unet_config())


def text_encoders() -> Any:
    """The AR stage's set, loaded whole from its file by CLIPLoader (`clip.py`)."""
    import dataclasses

    from comfy_core.families.minimax_music3.clip import (MINIMAX_MUSIC3_TEXT_ENCODERS,
                                                         holds_minimax_music3_text_encoder,
                                                         load_minimax_music3_text_encoder)

    return dataclasses.replace(MINIMAX_MUSIC3_TEXT_ENCODERS,
                               whole_files=((holds_minimax_music3_text_encoder, load_minimax_music3_text_encoder),))


def definition() -> Family:
    # The DAV module registers its state-dict kind for VAELoader (comfy_core.patching.vae.STATE_DICT_KINDS)
    from comfy_core.families.minimax_music3 import dav  # noqa: F401
    from comfy_core.families.minimax_music3 import supported_models
    from comfy_core.families.minimax_music3.latent_format import SAMPLES_PER_FRAME, minimax_music3_latent_format

    latent = minimax_music3_latent_format()
    return Family(
        name="minimax_music3",
        display_name="MiniMax Music 3",
        signature=Signature(required_prefixes=(PREFIX + MARKER, PREFIX + TRANSFORMER_MARKER),
                            unet=(("audio_model", "minimax_music3"),),
                            diffusion_model=(("audio_model", "minimax_music3"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.SHIFT,
                                multiplier=supported_models.MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=SAMPLES_PER_FRAME),
        vae_prefix="vae.",
        conditioning=MiniMaxMusic3Conditions(),
        architecture=minimax_music3_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("fp16", "bf16", "fp32"),
        supported_model=supported_models.MiniMaxMusic3,
        comfy_model_class="MiniMaxMusic3",
    )


__all__ = ["MiniMaxMusic3Conditions", "definition", "minimax_music3_architecture"]
