"""Loading Qwen3.5 text-encoder files (comfy_core/text_encoders/qwen35.py's tower): the file's
names to the modules' (Comfy-Org's `model.language_model.` layout or ComfyUI's renamed `model.`),
quantised layers kept as stored (`comfy_core/weights/quant_registry.py`, `models/quant_linear.py`),
the vision tower as `visual` (qwen35_vision.py), an MTP head left out (logged), and detection that
reads a quantised file's layer descriptions before its shapes."""
from __future__ import annotations

import logging
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.text_encoders.qwen35 import (SLOT_NAMES, Qwen35Config, Qwen35KeyError, Qwen35Model, Qwen35TextEncoder,
                                             Qwen35Transformer, holds_qwen35)

log = logging.getLogger(__name__)


def detect_in_file(checkpoint: Any, tensors: Mapping[str, Any]) -> Qwen35Config | None:
    """The config of a text-encoder file's Qwen3.5 model (None when it holds none). A quantised
    file's layer descriptions (`comfy_quant` tensors, `_quantization_metadata`) are read first, so
    a format this engine does not read (ComfyUI's int4 `convrot_w4a4`, `awq_w4a16`) is refused by
    name (`QuantFormatError`) before its packed shapes are; detection
    then sees each quantised weight at its true shape."""
    from comfy_core.weights.quant_registry import METADATA_KEY, QuantizedHeader, quantized_layers

    if not holds_qwen35(tensors):
        return None
    metadata = getattr(checkpoint, "metadata", None) or {}
    if METADATA_KEY in metadata or any(name.endswith(".comfy_quant") for name in tensors):
        layers = quantized_layers(tensors, metadata, lambda name: checkpoint.read(name, None))
        if layers:
            tensors = QuantizedHeader.for_detection(checkpoint, layers).tensors
    return Qwen35Config.detect_from_weights(tensors, "")


_NOT_READ = ("mtp.",)  # the MTP draft head (see the module doc)


def qwen35_state_dict(config: Qwen35Config, state_dict: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the file's language-model tensors under our names `model.*`, the quantised layers' names
    under ours), the vision tower and MTP head left out (logged); any other key under the prefix
    is a `Qwen35KeyError`."""
    prefix, root = config.prefix, config.root
    out: dict[str, Any] = {}
    skipped = 0
    for key in state_dict.keys():
        if not key.startswith(prefix):
            continue
        name = key[len(prefix):]
        if name.startswith(root):
            out["model." + name[len(root):]] = key
        elif key == config.head_key:
            out["model.lm_head.weight"] = key
        elif root == "model.language_model." and name == "lm_head.weight":
            out["model.lm_head.weight"] = key
        elif config.vision is not None and key.startswith(config.visual_prefix):
            out["visual." + key[len(config.visual_prefix):]] = key
        elif any(name.startswith(p) or name.startswith("model." + p) for p in _NOT_READ):
            skipped += 1
        elif name == "logit_scale":
            continue
        else:
            raise Qwen35KeyError(f"Qwen3.5 key {key!r} is not a tensor of a Qwen3.5 text encoder")
    if skipped:
        log.info("Qwen3.5: the %d tensors of the MTP draft head are not read (no speculative decoding)", skipped)
    return out, []


def build_qwen35_encoder(config: Qwen35Config, state_dict: Mapping[str, Any],
                         dtype: torch.dtype | None = None, metadata: Mapping[str, str] | None = None
                         ) -> Qwen35TextEncoder:
    """Build on the meta device, then take the file's tensors as stored (`dtype` None) or cast.
    Quantised linear layers (`comfy_quant` tensors or the `_quantization_metadata` header) become
    `QuantizedLinear`s holding their stored weights; unknown formats and the unread int4 ones are
    `QuantFormatError`s."""
    from comfy_core.checkpoint.meta_build import meta_build
    from comfy_core.models.quant_linear import attach_quantized
    from comfy_core.weights.quant_registry import QuantFormatError, quantized_layers

    names, _ = qwen35_state_dict(config, state_dict)  # ours -> the file's key
    ours_by_file = {key: ours for ours, key in names.items()}
    header = {ours: state_dict[key] for ours, key in names.items() if not ours.endswith(".comfy_quant")}

    class _Info:  # dtype names for quantized_layers' storage check
        def __init__(self, t: Any) -> None:
            dtype_name = str(getattr(t, "dtype", ""))
            self.dtype = {"torch.int8": "I8", "torch.uint8": "U8", "torch.float8_e4m3fn": "F8_E4M3",
                          "torch.float8_e5m2": "F8_E5M2"}.get(dtype_name, dtype_name)
            self.shape = tuple(t.shape)

    infos = {ours: _Info(state_dict[key]) for ours, key in names.items()}
    try:
        layers = quantized_layers(infos, metadata, lambda ours: state_dict[names[ours]],
                                  lambda stored: ours_by_file.get(config.prefix + stored))
    except QuantFormatError as exc:
        raise QuantFormatError(f"Qwen3.5 ({SLOT_NAMES.get(config.slot, config.slot)}): {exc}") from None
    for layer in layers.values():
        if layer.name.startswith("visual.") and layer.format.name != "int8_tensorwise":
            # The vision tower runs through qwen3vl_vision's float32 casts, which only int8 layers survive.
            raise QuantFormatError(f"Qwen3.5 vision layer {layer.name!r}: {layer.format.name} is not read for the "
                                   "vision tower (int8_tensorwise only)")
    owned = {n for layer in layers.values() for n in layer.tensor_names(infos)}
    from comfy_core.text_encoders.qwen35_vision import Qwen35VisionModel

    root = nn.Module()  # `model` (the language model) and `visual` (the vision tower, when there is one)
    with meta_build():
        root.model = Qwen35Model(config)
        root.visual = Qwen35VisionModel(config.vision) if config.vision is not None else None
    for layer in layers.values():  # the quantised weights are attached as stored below
        try:
            linear = root.get_submodule(layer.name)
        except AttributeError:
            raise QuantFormatError(f"Qwen3.5 quantised layer {layer.name!r} is not a layer of this model") from None
        if not isinstance(linear, nn.Linear):
            raise QuantFormatError(f"Qwen3.5 quantised layer {layer.name!r}: {type(linear).__name__} is not linear")
        del linear._parameters["weight"]
    expected = root.state_dict()
    plain = {ours: t for ours, t in header.items() if ours not in owned}
    missing = sorted(set(expected) - set(plain))
    if missing:
        raise Qwen35KeyError(f"Qwen3.5 encoder (prefix {config.prefix!r}) is missing keys: {missing[:5]}")
    loaded = {}
    for ours, tensor in plain.items():
        if ours not in expected:
            raise Qwen35KeyError(f"Qwen3.5 key {names[ours]!r} is not a parameter of this {config.num_layers}-block model")
        if tuple(tensor.shape) != tuple(expected[ours].shape):
            raise Qwen35KeyError(f"Qwen3.5 key {names[ours]!r}: expected shape {tuple(expected[ours].shape)}, "
                                 f"got {tuple(tensor.shape)}")
        keep = dtype is None or tensor.dtype == dtype or not tensor.is_floating_point()
        loaded[ours] = tensor if keep else tensor.to(dtype)
    root.load_state_dict(loaded, strict=False, assign=True)
    if layers:
        attach_quantized(root, layers, set(infos), lambda ours: state_dict[names[ours]], "", torch.float32)
    root.eval()
    root.requires_grad_(False)
    return Qwen35TextEncoder(config, Qwen35Transformer(root.model, root.visual))


__all__ = ["build_qwen35_encoder", "detect_in_file", "qwen35_state_dict"]
