"""HiDream-I1 (Full, Dev, Fast) and HiDream-E1 (HiDream.ai 2025): a 17B sparse DiT (comfy_core/
families/hidream/dit.py: 16 double- and 32 single-stream blocks, 2560 wide, mixture-of-experts
image MLPs) on Flux's 16-channel latents (Flux's VAE and latent format), conditioned on four text
encoders: the pooled CLIP-L + CLIP-G vector (`y`, 2048 wide), T5-XXL's states (`context`) and
Llama 3.1 8B Instruct's hidden states of every layer (`encoder_hidden_states_llama3`).

As today's ComfyUI's `supported_models.HiDream` / `model_base.HiDream` have it:

- sampling: model type FLOW (CONST), ModelSamplingDiscreteFlow's defaults (shift 1, multiplier
  1000; ComfyUI's class overrides its shift 3.0 by an empty `sampling_settings`); the templates
  set ModelSamplingSD3 (Full 3.0, Dev / Fast 6.0), which our ModelSamplingSD3 does. Full, Dev and
  Fast share one network (Dev / Fast are guidance-distilled: the templates run them at CFG 1);
  nothing in the weights tells them apart, so they are one family;
- conditioning: `pooled_output` as `y`, `conditioning_llama3` as `encoder_hidden_states_llama3`,
  HiDream-E1's `concat_latent_image` (InstructPixToPixConditioning's image latent, in model
  space) as `image_cond`, appended to the latent along the width;
- inference in bf16 or fp32.

Files: ComfyUI's names under `model.diffusion_model.` in single files, bare in split files
(`hidream_i1_full_fp16.safetensors`, `hidream_e1_full_bf16.safetensors`) and in diffusers'
`transformer/` (the same names). Detected from names and shapes: `caption_projection.0.linear` with
`double_stream_blocks.0.block.adaLN_modulation.1` (ComfyUI's model_detection marker). The text
encoders (`clip.py`): CLIP-L + CLIP-G + T5-XXL + Llama 3.1 8B (comfy_core/text_encoders/llama.py),
QuadrupleCLIPLoader's four files or CLIPLoader / DualCLIPLoader type "hidream".
"""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.families.architecture import Architecture
from comfy_core.families.base import Family, Geometry, SamplingPolicy, Signature
from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.hidream import supported_models
from comfy_core.families.hidream.clip import HIDREAM_TEXT_ENCODERS
from comfy_core.models.model_conditions import PooledConditions

MARKER = "caption_projection.0.linear.weight"
BLOCK_MARKER = "double_stream_blocks.0.block.adaLN_modulation.1.weight"


class HiDreamConditions(PooledConditions):
    """ComfyUI's `model_base.HiDream`: the pooled vector as `y` (`encode_adm`), the Llama states
    as `encoder_hidden_states_llama3`, E1's source-image latent (in model space) as `image_cond`."""

    name = "hidream"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        llama = kwargs.get("conditioning_llama3")
        if llama is not None:
            out["encoder_hidden_states_llama3"] = llama
        image = kwargs.get("concat_latent_image")
        if image is not None:
            out["image_cond"] = model.process_latent_in(image)
        return out


def _detect(tensors: Mapping[str, Any], prefix: str) -> Any:
    from comfy_core.families.hidream.dit import HiDreamConfig, HiDreamConfigError

    if prefix + BLOCK_MARKER not in tensors:
        raise HiDreamConfigError(f"HiDream: no {prefix}{BLOCK_MARKER}")
    return HiDreamConfig.detect_from_weights(tensors, prefix)


def _facts(config: Any) -> dict[str, Any]:
    import dataclasses

    facts = dataclasses.asdict(config)
    facts["image_model"] = "hidream"
    return facts


def _build(config: Any, operations: Any = None) -> Any:
    from comfy_core.families.hidream.dit import HiDreamTransformer

    return (HiDreamTransformer.from_config(config) if operations is None
            else HiDreamTransformer.from_config(config, operations=operations))


def _errors() -> tuple[type[Exception], ...]:
    from comfy_core.families.hidream.dit import HiDreamConfigError

    return (HiDreamConfigError,)


def hidream_architecture() -> Architecture:
    return Architecture(name="hidream", markers=(MARKER,), detect=_detect, facts=_facts, build=_build,
                        errors=_errors(), context_width=lambda config: config.caption_channels[0],
                        comfy_config=lambda config: config.comfy_unet_config())


def definition() -> Family:
    latent = flux_latent_format()
    return Family(
        name="hidream",
        display_name="HiDream",
        signature=Signature(required_prefixes=("model.diffusion_model." + MARKER,),
                            unet=(("image_model", "hidream"),)),
        latent_format=latent,
        sampling=SamplingPolicy(prediction="flow", schedule="flow", shift=1.0, multiplier=1000.0,
                                default_scheduler="simple"),
        geometry=Geometry(latent_channels=latent.channels, downscale=8),
        vae_prefix="vae.",
        conditioning=HiDreamConditions(),
        architecture=hidream_architecture(),
        text_encoders=HIDREAM_TEXT_ENCODERS,
        inference_dtypes=("bf16", "fp32"),
        supported_model=supported_models.HiDream,
        comfy_model_class="HiDream",
    )


__all__ = ["HiDreamConditions", "definition", "hidream_architecture"]
