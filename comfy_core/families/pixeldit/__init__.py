"""PixelDiT (NVIDIA; the 1.3B 1024-pixel text-to-image model) and PiD, its pixel diffusion decoder
(one package, as ComfyUI's `comfy/ldm/pixeldit/`): a dual-level DiT in pixel space (`dit.py`:
MMDiT patch blocks over `[text, image]`, PiT pixel blocks conditioned per pixel), conditioned on
Gemma 2 2B's final normed states with PixelDiT's prompt preamble (`clip.py`, CLIPLoader type
"pixeldit").

As today's ComfyUI's `supported_models` / `model_base.PixelDiTT2I` / `model_base.PiD` have them:

- sampling: model type FLOW, ModelSamplingDiscreteFlow multiplier 1000, shift 4 (PixelDiT) or 1.5
  (PiD);
- latent: the image itself (3 channels in -1..1, scale 1: Chroma Radiance's format,
  `chroma/latent_format.py`), EmptyChromaRadianceLatentImage and the "pixel_space" VAE;
- conditioning: the text states, the token mask as `attention_mask` (passed, not applied); PiD
  also `lq_latent` (the source latent in its model space, set by PiDConditioning) and
  `degrade_sigma`;
- inference in bf16 or fp32.

Files: ComfyUI's names (`pixel_embedder.*`, `s_embedder.*`, `y_embedder.*`, `y_pos_embedding`,
`patch_blocks.N.*`, `pixel_blocks.N.*`, `final_layer.*`; PiD's `lq_proj.*`) bare in split files,
under `model.diffusion_model.` in single files; PiD v1.5's single pixel adaLN table per block
(`pixel_blocks.N.adaLN_modulation.0`) is split into ComfyUI's two (`dit.split_pixel_adaln`).
Detected from names and shapes: `pixel_embedder.proj.weight` with `y_pos_embedding` (PixelDiT),
plus `lq_proj.latent_proj.0.weight` (PiD).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.chroma.latent_format import ChromaRadianceLatentFormat
from comfy_core.families.pixeldit import supported_models
from comfy_core.families.pixeldit.clip import PIXELDIT_TEXT_ENCODERS
from comfy_core.models.model_conditions import ModelConditions

NATIVE_MARKER = "pixel_blocks.0.adaLN_modulation_msa.weight"  # ComfyUI's layout
RELEASE_MARKER = "pixel_blocks.0.adaLN_modulation.0.weight"  # PiD v1.5's single table
EMBEDDER = "pixel_embedder.proj.weight"
LQ_PREFIX = "lq_proj."
UNET = "model.diffusion_model."


class PixelDiTConditions(ModelConditions):
    """ComfyUI's `model_base.PixelDiTT2I.extra_conds`: the token mask as `attention_mask`."""

    name = "pixeldit"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        mask = kwargs.get("attention_mask")
        return {} if mask is None else {"attention_mask": mask}


class PiDConditions(PixelDiTConditions):
    """ComfyUI's `model_base.PiD.extra_conds`: also `lq_latent` (as PiDConditioning set it) and
    `degrade_sigma` (a `[1]` tensor, batched with the rest)."""

    name = "pid"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        if kwargs.get("lq_latent") is not None:
            out["lq_latent"] = kwargs["lq_latent"]
        sigma = kwargs.get("degrade_sigma")
        if sigma is not None:
            out["degrade_sigma"] = torch.as_tensor(sigma, dtype=torch.float32).reshape(-1)
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.pixeldit.dit import PixelDiTConfig

    return PixelDiTConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    return {"image_model": config.image_model, "patch_size": config.patch_size, "hidden_size": config.hidden_size}


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.pixeldit.pid import build_network

    return build_network(config, operations=operations)


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.pixeldit.dit import PixelDiTConfigError

    return (PixelDiTConfigError,)


def _is_release(names: Any) -> bool:
    return EMBEDDER in names and RELEASE_MARKER in names


def _from_release(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from comfy_core.families.pixeldit.dit import split_pixel_adaln

    return split_pixel_adaln(state)


def pixeldit_architecture() -> Architecture:
    return Architecture(name="pixeldit", markers=(NATIVE_MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.txt_embed_dim,
                        is_diffusers=_is_release, from_diffusers=_from_release,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = ChromaRadianceLatentFormat()
    return Family(
        name="pixeldit",
        display_name="PixelDiT",
        signature=Signature(required_prefixes=(UNET + EMBEDDER, UNET + "y_pos_embedding"),
                            forbidden_prefixes=(UNET + LQ_PREFIX,), unet=(("image_model", "pixeldit"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.PIXELDIT_SHIFT,
                                multiplier=supported_models.MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=3, downscale=1),
        vae_prefix="vae.",
        conditioning=PixelDiTConditions(),
        architecture=pixeldit_architecture(),
        text_encoders=PIXELDIT_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.PixelDiT,
        comfy_model_class="PixelDiTT2I",
    )


def pid_definition() -> Family:
    """PiD, the pixel diffusion decoder: PixelDiT's network with the latent branch."""
    latent = ChromaRadianceLatentFormat()
    return Family(
        name="pid",
        display_name="PiD (pixel diffusion decoder)",
        signature=Signature(required_prefixes=(UNET + EMBEDDER, UNET + LQ_PREFIX), unet=(("image_model", "pid"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=supported_models.PID_SHIFT,
                                multiplier=supported_models.MULTIPLIER, default_scheduler="simple"),
        geometry=Geometry(latent_channels=3, downscale=1),
        vae_prefix="vae.",
        conditioning=PiDConditions(),
        architecture=pixeldit_architecture(),
        text_encoders=PIXELDIT_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.PiD,
        comfy_model_class="PiD",
    )


__all__ = ["PiDConditions", "PixelDiTConditions", "definition", "pid_definition", "pixeldit_architecture"]
