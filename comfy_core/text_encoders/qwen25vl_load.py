"""Loading a Qwen2.5-VL text encoder (`qwen25vl.py`) from a file's tensors: ComfyUI's names
(`model.*` the language model, `visual.*` the vision tower, under the file's prefix) onto
transformers' `Qwen2Model` and `Qwen2_5_VisionTransformerPretrainedModel` modules built on the meta
device, every key checked (missing, unknown, wrong shape: `Qwen25VLKeyError`), tensors kept in the
file's dtype (ComfyUI's `dtype_llama`). ComfyUI's legacy scaled-fp8 files (`scaled_fp8` marker,
per-layer `scale_weight`, as `qwen_2.5_vl_7b_fp8_scaled.safetensors`) are read as today's ComfyUI
reads them (`comfy/utils.py: convert_old_quants`): each layer with a scale keeps its fp8 weight and
computes with weight x scale; the others run as stored. Today's per-layer form (`<layer>.comfy_quant`
float8 JSON with `<layer>.weight_scale`, or the `_quantization_metadata` header the loader turns into
it) is read the same way.
"""
from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from comfy_core.checkpoint.meta_build import meta_build
from comfy_core.text_encoders.decoder_llm import (FLOAT8_FORMATS, QUANT_CONF_SUFFIX, build_on_meta, layer_quantization,
                                                  load_strict)
from comfy_core.text_encoders.qwen25vl import (
    SCALED_FP8_MARKER,
    Qwen25VLConfig,
    Qwen25VLKeyError,
    Qwen25VLTextEncoder,
    Qwen25VLTransformer,
)

SCALE_SUFFIXES = (".scale_weight", ".scale_input")

# Keys a Qwen2.5-VL file may hold that the encoder does not read: the language-model head, ComfyUI's
# SDClipModel `logit_scale`.
_IGNORED_KEYS = ("lm_head.weight", "logit_scale")


def qwen25vl_state_dicts(config: Qwen25VLConfig, state_dict: Mapping[str, torch.Tensor]
                         ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The file's tensors under `config.prefix` -> (`Qwen2Model` names without `model.`, vision
    names without `visual.`, scaled-fp8 weight scales by the scaled weight's file name without the
    prefix). Unknown keys under the prefix (quantisation metadata, scales without the scaled-fp8
    marker) are a `Qwen25VLKeyError`, never dropped silently."""
    prefix = config.prefix
    model, visual = prefix + "model.", prefix + "visual."
    language: dict[str, torch.Tensor] = {}
    vision: dict[str, torch.Tensor] = {}
    scales: dict[str, torch.Tensor] = {}
    # Today's per-layer form (`comfy_quant` JSON + `weight_scale`), float8 formats only (decoder_llm).
    quantized = layer_quantization(prefix, state_dict, Qwen25VLKeyError, "Qwen2.5-VL")
    for layer, conf in quantized.items():
        if conf.get("format") not in FLOAT8_FORMATS:
            raise Qwen25VLKeyError(f"Qwen2.5-VL layer {prefix + layer!r}: quantisation format {conf.get('format')!r} "
                                   f"is not read for text encoders (only {', '.join(FLOAT8_FORMATS)})")
    for key, tensor in state_dict.items():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name in _IGNORED_KEYS:
            continue
        if config.scaled_fp8 and (name == SCALED_FP8_MARKER or name.endswith(SCALE_SUFFIXES)):
            if name.endswith(".scale_weight"):  # `scale_input` only serves fp8 matrix products
                scales[name[:-len(".scale_weight")] + ".weight"] = tensor
            continue
        layer = name.rpartition(".")[0]
        if layer in quantized and name.endswith((QUANT_CONF_SUFFIX, ".weight_scale", ".input_scale")):
            if name.endswith(".weight_scale"):
                scales[layer + ".weight"] = tensor
            continue
        if key.startswith(model) and (name.endswith(".weight") or name.endswith(".bias")):
            language[key[len(model):]] = tensor
        elif key.startswith(visual) and config.vision is not None and (name.endswith(".weight") or name.endswith(".bias")):
            vision[key[len(visual):]] = tensor
        else:
            raise Qwen25VLKeyError(f"Qwen2.5-VL key {key!r} is not a weight of a Qwen2.5-VL text encoder"
                                   + (" (only ComfyUI's scaled-fp8 files with the scaled_fp8 marker are read; "
                                      "other quantised Qwen2.5-VL files are not supported yet)"
                                      if "scale" in name or "quant" in name else ""))
    return language, vision, scales


def _scale_layers(module: nn.Module, scales: Mapping[str, torch.Tensor], key_prefix: str) -> None:
    """ComfyUI's reading of a legacy scaled-fp8 file (`convert_old_quants`): each linear layer with a
    `scale_weight` is an fp8 layer whose true weight is the stored one times the scale
    (`ScaledFp8Linear`, no fp8 matrix products, as ComfyUI's text encoders); the others run as stored."""
    from comfy_core.models.layers import own_hook_lists
    from comfy_core.models.storage_cast import SCALE_WEIGHT, ScaledFp8Linear

    for name, scale in scales.items():
        layer_name = name[:-len(".weight")]
        try:
            layer = module.get_submodule(layer_name)
        except AttributeError:
            layer = None
        if not isinstance(layer, nn.Linear):
            raise Qwen25VLKeyError(f"Qwen2.5-VL key {key_prefix + layer_name + '.scale_weight'!r} scales "
                                   "no linear layer of this encoder")
        if scale.numel() != 1:
            raise Qwen25VLKeyError(f"Qwen2.5-VL key {key_prefix + layer_name + '.scale_weight'!r}: one scale per "
                                   f"layer expected, got shape {list(scale.shape)}")
        own_hook_lists(layer)
        layer.__class__ = ScaledFp8Linear
        layer.register_buffer(SCALE_WEIGHT, scale.detach().to(device=layer.weight.device, dtype=torch.float32).reshape(()))
        layer.scale_input = None
        layer.fp8_matrix_mult = False


def _load_strict(module: nn.Module, converted: Mapping[str, torch.Tensor], key_prefix: str,
                 dtype: torch.dtype | None, keep: set[str] = frozenset()) -> None:
    """Assign `converted` (module-relative names) into `module` built on the meta device: every
    parameter present, each of its shape, nothing else; the names in `keep` (scaled fp8 weights)
    as stored whatever `dtype` says."""
    load_strict(module, converted, key_prefix, dtype, Qwen25VLKeyError, "Qwen2.5-VL", "Qwen2.5-VL encoder",
                "this encoder", keep)


def build_qwen25vl_encoder(config: Qwen25VLConfig, state_dict: Mapping[str, torch.Tensor],
                           dtype: torch.dtype | None = None) -> Qwen25VLTextEncoder:
    """Build on the meta device, then load the file's tensors with `assign=True`.

    `dtype`: the storage dtype (computation is float32 anyway); None keeps each tensor as the file
    stores it, as ComfyUI keeps its LLM encoders in the file's dtype (`dtype_llama`).
    """
    from transformers import Qwen2Model

    language, vision, scales = qwen25vl_state_dicts(config, state_dict)
    model = build_on_meta(Qwen2Model, config.to_transformers())  # RoPE tables per call (`mrope_tables`)
    scaled = {name for name in scales}  # file names (without the prefix) of the weights stored scaled
    _load_strict(model, language, config.prefix + "model.", dtype,
                 keep={n[len("model."):] for n in scaled if n.startswith("model.")})
    _scale_layers(model, {n[len("model."):]: t for n, t in scales.items() if n.startswith("model.")},
                  config.prefix + "model.")
    visual = None
    if config.vision is not None:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

        with meta_build():
            visual = Qwen2_5_VisionTransformerPretrainedModel(config.vision.to_transformers())
        visual.rotary_pos_emb = None  # computed per call
        _load_strict(visual, vision, config.prefix + "visual.", dtype,
                     keep={n[len("visual."):] for n in scaled if n.startswith("visual.")})
        _scale_layers(visual, {n[len("visual."):]: t for n, t in scales.items() if n.startswith("visual.")},
                      config.prefix + "visual.")
    stray = sorted(n for n in scaled if not n.startswith(("model.", "visual.")) or
                   (n.startswith("visual.") and visual is None))
    if stray:
        raise Qwen25VLKeyError(f"Qwen2.5-VL keys {[config.prefix + n[:-len('weight')] + 'scale_weight' for n in stray]} "
                               "scale no weight of this encoder")
    transformer = Qwen25VLTransformer(model, visual)
    head = state_dict.get(config.prefix + "lm_head.weight")
    if head is not None:  # the file's LM head: for generation only (non-persistent), checked when used
        transformer.register_buffer("lm_head_weight", head if dtype is None or head.dtype == dtype else head.to(dtype),
                                    persistent=False)
    return Qwen25VLTextEncoder(config, transformer)
