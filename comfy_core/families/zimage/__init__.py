"""Z-Image (Tongyi-MAI 2025; Turbo and Base): a 6B single-stream NextDiT (comfy_core/families/zimage/
nextdit.py: 30 layers of 3840 wide, 30 heads of 128, 2 noise and 2 context refiner blocks, learned
pad tokens filling text and image to multiples of 32), conditioned on Qwen3-4B's states (2560 wide,
`comfy_core.families.zimage.clip`); Flux.1's 16-channel latents (scale 0.3611, shift 0.1159)
and autoencoder, 2x2 patches.

As today's ComfyUI's `supported_models.ZImage` / `model_base.Lumina2` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow with shift 3 and multiplier 1 (the
  network gets sigma; ModelSamplingAuraFlow sets the shift);
- conditioning: the text states as the context, `num_tokens` (the unmasked token count, or the
  context length) and the attention mask when it masks anything, which the network does not
  apply; no pooled vector, no extra input channels;
- text encoders: the Qwen3-4B set, loaded by CLIPLoader type "lumina2";
- what the weights cannot show (ComfyUI's model_detection for a 3840-wide NextDiT): RoPE over
  (index, row, col) with 32 / 48 / 48 channels of a 128-channel head (a quarter and three eighths
  each for other head widths, so tiny files load), axis lengths 1536 / 512 / 512, base 256, timestep
  scale 1000, pad multiple 32 when the file holds pad tokens.

Z-Image Omni (ComfyUI's NextDiT with `siglip_feat_dim`): the same network plus `siglip_embedder`
(RMSNorm + linear from SigLIP's width), `siglip_refiner` blocks and `siglip_pad_token`, detected by
`siglip_embedder.0.weight`; TextEncodeZImageOmni's `reference_latents`, their text embeds and
SigLIP states reach it through `ZImageConditions` and `NextDiT.forward_omni` (nextdit.py).

Files: ComfyUI's names under `model.diffusion_model.` in single files (Qwen3-4B under
`text_encoders.qwen3_4b.transformer.`, the VAE under `vae.`), bare in split files
(`z_image_turbo_bf16.safetensors`), or diffusers' / Tongyi-MAI's `ZImageTransformer2DModel` names
(converted: fused q/k/v, keys.py). Detected from names and shapes: `cap_embedder.1.weight` with
Z-Image's modulation (`layers.N.adaLN_modulation.0`, a bare linear from the 256-wide timestep
embedding); Lumina 2's NextDiT has SiLU first (`adaLN_modulation.1`, comfy_core/families/lumina2).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.checkpoint.keys import vae_attention_linear_to_conv
from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.zimage import supported_models
from comfy_core.models.model_conditions import ModelConditions
from comfy_core.families.zimage.clip import ZIMAGE_TEXT_ENCODERS

CAP_EMBEDDER = "cap_embedder.1.weight"
# In ComfyUI's layout only (diffusers and Tongyi-MAI split q/k/v; cap_embedder is named alike in both).
COMFY_MARKER = "noise_refiner.0.attention.qkv.weight"
ZIMAGE_AXES_LENS = (1536, 512, 512)
ZIMAGE_ROPE_THETA = 256.0
ZIMAGE_TIME_SCALE = 1000.0
ZIMAGE_PAD_MULTIPLE = 32
ZIMAGE_SHIFT = 3.0


class NextDiTConditions(ModelConditions):
    """The NextDiT families' model inputs (ComfyUI's `model_base.Lumina2.extra_conds`): the text
    attention mask when it masks any token, `num_tokens` (the mask's sum, at least 1, else the
    context length). Different `num_tokens` keep two entries out of one batch, so contexts of
    different lengths are never repeated to a common length (ComfyUI's CONDRegular context)."""

    name = "nextdit"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = kwargs.get("attention_mask")
        if mask is not None:
            total = int(mask.sum().item())
            if mask.numel() != total:
                out["attention_mask"] = mask
            out["num_tokens"] = max(1, total)
        cross_attn = kwargs.get("cross_attn")
        if cross_attn is not None and "num_tokens" not in out:
            out["num_tokens"] = int(cross_attn.shape[1])
        return out


SIGLIP_PATCH = 16  # ComfyUI's grid of a CLIP vision output: image_sizes' height and width // 16


def siglip_grid(output: Any) -> Any:
    """A CLIP vision output's `last_hidden_state` `[B, T, C]` as the `[B, h, w, C]` grid Z-Image
    Omni reads (ComfyUI's `model_base.Lumina2.extra_conds`: `h, w` = the output's
    `image_sizes[0]` height and width // 16). An output without `image_sizes` (this engine's
    fixed-size SigLIP towers) is taken as a square grid of its T tokens."""
    states = output["last_hidden_state"]
    sizes = output.get("image_sizes") if isinstance(output, dict) else getattr(output, "image_sizes", None)
    if sizes:
        size = sizes[0]
        h, w = int(size[1]) // SIGLIP_PATCH, int(size[2]) // SIGLIP_PATCH
    else:
        side = int(round(states.shape[1] ** 0.5))
        if side * side != states.shape[1]:
            raise ValueError(f"Z-Image Omni: a CLIP vision output of {states.shape[1]} tokens without image_sizes is "
                             "not a square grid")
        h = w = side
    return states.reshape(states.shape[0], h, w, states.shape[-1])


class ZImageConditions(NextDiTConditions):
    """Z-Image's model inputs (ComfyUI's `model_base.Lumina2.extra_conds`): `NextDiTConditions`'
    plus Z-Image Omni's: the conditioning's `clip_vision_outputs` (else the `clip_vision_output`
    of each `unclip_conditioning` entry) as `siglip_feats` (`siglip_grid` of each), its
    `reference_latents` in model space as `ref_latents`, and `reference_latents_text_embeds`
    as `ref_contexts` (lists; TextEncodeZImageOmni sets all three)."""

    name = "zimage"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out = super().extra_conds(model, **kwargs)
        outputs = kwargs.get("clip_vision_outputs")
        if outputs is None:
            outputs = [entry.get("clip_vision_output") for entry in kwargs.get("unclip_conditioning") or ()]
        feats = [siglip_grid(output) for output in outputs or () if output is not None]
        if feats:
            out["siglip_feats"] = feats
        references = kwargs.get("reference_latents")
        if references is not None:
            out["ref_latents"] = [model.process_latent_in(latent) for latent in references]
        texts = kwargs.get("reference_latents_text_embeds")
        if texts is not None:
            out["ref_contexts"] = list(texts)
        return out


def zimage_axes(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per axis (index, row, col): Z-Image's 128-channel heads split 32 / 48 / 48;
    other widths in the same proportions (a quarter, three eighths, three eighths)."""
    if head_dim % 16:
        raise ValueError(f"Z-Image: a head of {head_dim} channels cannot be split 2:3:3 into even RoPE axes")
    return head_dim // 4, 3 * head_dim // 8, 3 * head_dim // 8


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.zimage.nextdit import NextDiTConfig, NextDiTConfigError

    if prefix + "layers.0.adaLN_modulation.0.weight" not in tensors:
        raise NextDiTConfigError("NextDiT: not Z-Image's modulation (no layers.0.adaLN_modulation.0)")
    return NextDiTConfig.detect_from_weights(tensors, prefix, axes_split=zimage_axes, axes_lens=ZIMAGE_AXES_LENS,
                                             rope_theta=ZIMAGE_ROPE_THETA, time_scale=ZIMAGE_TIME_SCALE,
                                             pad_multiple=ZIMAGE_PAD_MULTIPLE)


def nextdit_facts(config: Any) -> dict[str, Any]:
    """The facts a signature tests of a `NextDiTConfig` (its fields, `image_model` "lumina2")."""
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "lumina2"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.zimage.keys import lora_key_map
    from comfy_core.families.zimage.nextdit import NextDiT

    return NextDiT(config, operations=operations, lora_keys=lora_key_map)


def nextdit_errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.zimage.nextdit import NextDiTConfigError

    return (NextDiTConfigError,)


def _is_diffusers(names: Any) -> bool:
    from comfy_core.families.zimage.keys import is_diffusers_zimage

    return is_diffusers_zimage(names)


def _from_diffusers(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from comfy_core.families.zimage.keys import convert_diffusers_state_dict

    return convert_diffusers_state_dict(state)


def zimage_architecture() -> Architecture:
    return Architecture(name="zimage", markers=(COMFY_MARKER,), detect=_detect, facts=nextdit_facts, build=_build,
                        errors=nextdit_errors(), context_width=lambda config: config.cap_feat_dim,
                        is_diffusers=_is_diffusers, from_diffusers=_from_diffusers,
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    return Family(
        name="zimage",
        display_name="Z-Image",
        signature=Signature(required_prefixes=("model.diffusion_model." + CAP_EMBEDDER,),
                            unet=(("image_model", "lumina2"), ("z_image_modulation", True),
                                  ("pad_tokens_multiple", 32))),  # without pad tokens: Ming-Image (ComfyUI)
        latent_format=flux_latent_format(),
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=ZIMAGE_SHIFT, multiplier=1.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=16),
        vae_prefix="vae.",
        conditioning=ZImageConditions(),
        key_conversions=(vae_attention_linear_to_conv(),),
        architecture=zimage_architecture(),
        text_encoders=ZIMAGE_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),  # ComfyUI's supported_models.ZImage (fp16 only for some fine-tunes)
        supported_model=supported_models.ZImage,
        comfy_model_class="Lumina2",
    )
