"""LTX-2 (Lightricks' joint audio-video model): the network and its text path, kept apart from
LTX-Video 0.9 (`families/ltxv/`) because nearly everything a family holds differs: detection
(`audio_adaln_single` present; layout switches read from the file's `config` metadata), the
config (two streams, 6- or 9-row tables, RoPE layout and precision), the latent (ComfyUI's nested
video + audio latent, `latent_formats.LTXAV`), the text encoder (Gemma 3 with a feature projection
and two connectors instead of T5-XXL) and the conditioning. It reuses 0.9's shared pieces (RMS
norm, timestep embedder) from `families/ltxv/dit.py`.

Modules: `dit.py` (`LTXAVConfig`, `LTXAVModel`), `layers.py`, `latent.py` (positions, audio patchify,
ComfyUI's latent packing), `conditions.py`, `rope.py` (interleaved / split RoPE, float64
grid, middle positions), `connector.py` (`Embeddings1DConnector`), `text.py` (the Gemma feature
projection, and LTX-2.3's per-stream one), `keys.py` (diffusers' names), `encoders.py` (the text
path: Gemma 3 + projection + connectors, LTXAVTextEncoderLoader), `gemma4_text.py` (LTX-2.5's one-file
text encoder: Gemma 4 12B + its per-stream projection, loaded whole by CLIPLoader through the encoder
set's `whole_files`, and the Gemma 4 path of LTXAVTextEncoderLoader), `ltxav_loader.py`
(LTXAVTextEncoderLoader's entry point: Gemma 3 or Gemma 4 by the file), `latent_format.py` (ComfyUI's `LTXAV`), `supported_models.py` (ComfyUI's
`supported_models.LTXAV`).

LTX-2.5 (split files: UNETLoader's DiT, VAELoader's video and audio VAEs, CLIPLoader's Gemma 4) runs
on the same network (its DiT is LTX-2.3's layout with the keyframe position table); its video VAE
`ltx-2.5-video-vae` has a diffusion decoder (`comfy_core/models/ltx_diffusion_vae.py`, built by the
VAE loader from ComfyUI's marker `decoder.conv_in_x_t.weight`).

The family (ComfyUI's `supported_models.LTXAV` / `model_base.LTXAV`): detected by
`audio_adaln_single` under `model.diffusion_model.` (LTX-Video 0.9 forbids `audio_patchify_proj.`),
its config completed by the file's `config` metadata (`Architecture.detect_with_metadata`);
LTX-Video's sampling (rectified flow, ModelSamplingFlux's shift 2.37 inherited from `LTXV`,
multiplier 1: the network scales sigma by 1000 itself), bf16 / fp32, memory factor 0.077; the
video VAE under `vae.` read as LTX-Video's (`models/ltxv_vae.py`); no text encoder inside its files
(the text path is LTXAVTextEncoderLoader's: a Gemma 3 file plus this checkpoint), so a single
file gives no CLIP, as in ComfyUI; diffusers' `LTX2VideoTransformer3DModel` names converted.
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.ltxv import LTXV_SHIFT, LTXVComponents

PREFIX = "model.diffusion_model."
MARKER = "audio_adaln_single.linear.weight"


def _detect(tensors: Mapping[str, Any], prefix: str, metadata: Mapping[str, str] | None = None) -> Any:
    from comfy_core.families.ltx2.dit import LTXAVConfig

    return LTXAVConfig.detect_from_weights(tensors, prefix, metadata)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = {k: v for k, v in dataclasses.asdict(config).items() if k != "connector"}
    facts["image_model"] = "ltxav"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.ltx2.dit import LTXAVModel

    return LTXAVModel.from_config(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.ltx2.dit import LTXAVConfigError

    return (LTXAVConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.ltx2.keys import is_diffusers_ltx2

    return is_diffusers_ltx2(names)


def _from_diffusers(state: Mapping[str, Any]) -> dict[str, Any]:
    from comfy_core.families.ltx2.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def ltxav_architecture() -> Architecture:
    return Architecture(name="ltxav", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.context_width,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config(),
                        detect_with_metadata=_detect)


class LTXAVComponents(LTXVComponents):
    """LTX-Video's single-file builders (the causal video VAE under `vae.`) with LTX-2's network."""

    def build_unet(self, config: Any, operations: Any = None) -> Any:
        return _build(config, operations)


def text_encoders() -> Any:
    """LTX-2's encoder set (Gemma 3 + the checkpoint's projection, LTXAVTextEncoderLoader's), which
    also loads LTX-2.5's one-file text encoder (Gemma 4 12B + its projection) whole, for CLIPLoader."""
    import dataclasses

    from comfy_core.families.ltx2.encoders import LTXAV_TEXT_ENCODERS
    from comfy_core.families.ltx2.gemma4_text import holds_ltx25_text_encoder, load_ltx25_text_encoder

    return dataclasses.replace(LTXAV_TEXT_ENCODERS,
                               whole_files=((holds_ltx25_text_encoder, load_ltx25_text_encoder),))


def definition() -> Family:
    from comfy_core.families.ltx2 import supported_models
    from comfy_core.families.ltx2.conditions import LTXAVConditions
    from comfy_core.families.ltx2.latent_format import ltxav_latent_format

    latent = ltxav_latent_format()
    return Family(
        name="ltxav",
        display_name="LTX-2",
        # LTX-Video 0.9's network reads an LTX-2 diffusion model too (its single files forbid
        # `audio_patchify_proj.`, split files are told apart by facts): this fact says more.
        signature=Signature(required_prefixes=(PREFIX + MARKER,), unet=(("image_model", "ltxav"),),
                            diffusion_model=(("image_model", "ltxav"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flux", shift=LTXV_SHIFT, multiplier=1.0,
                                default_sampler="euler", default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=32),
        vae_prefix="vae.",
        conditioning=LTXAVConditions(),
        components=LTXAVComponents(),
        architecture=ltxav_architecture(),
        text_encoders=text_encoders(),
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.LTXAV,
        comfy_model_class="LTXAV",
    )
