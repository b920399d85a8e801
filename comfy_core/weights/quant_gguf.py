"""GGUF diffusion models as quantised layers: each quantised 2-D weight kept as its raw ggml blocks.

ComfyUI's core does not read GGUF (its `supported_pt_extensions` has no `.gguf`); city96's
ComfyUI-GGUF pack does (`UnetLoaderGGUF`: `loader.py gguf_sd_loader`, `ops.py GGMLOps`), keeping
each quantised tensor as ggml blocks and dequantising it in the layer that uses it. This module
gives the library the same natively: `gguf_diffusion_state(path)` reads a GGUF file (with
comfy_core/weights/gguf.py, `read_gguf`) as a state dict in which every quantised 2-D `.weight`
is its raw bytes (uint8 `[out, row_bytes]`, a view of the file mapping) described by a
`comfy_quant` entry `{"format": "gguf", "type": "Q4_K"}`, the format `GGUF` of
comfy_core/weights/quant_registry.py; plain tensors (F32 / F16 / BF16) are views as stored, and a
quantised tensor of another rank (a convolution) is dequantised here (float32). The pack's
`comfy.gguf.orig_shape.<name>` metadata (tensors it flattened to fit ggml's 4 dimensions) gives
such a tensor its shape back. The rest (detection from names and shapes, building, the layers
taking their weights as stored) is the loader's path for every quantised file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch

from comfy_core.weights.gguf import TYPES_BY_NAME, GGMLType, GGUFTensor, dequantize, read_gguf

FORMAT = "gguf"
ORIG_SHAPE_KEY = "comfy.gguf.orig_shape."  # ComfyUI-GGUF's key for a reshaped tensor's true shape


def ggml_type(conf: Mapping[str, Any]) -> GGMLType:
    """The ggml type of a GGUF layer description; ValueError for a type without a dequantiser."""
    found = TYPES_BY_NAME.get(str(conf.get("type")))
    if found is None or found.block_size == 1:
        raise ValueError(f"GGUF layer type {conf.get('type')!r} is not a quantised ggml type read here "
                         f"(known: {', '.join(n for n, t in TYPES_BY_NAME.items() if t.block_size > 1)})")
    return found


def stored_shape(out_features: int, in_features: int, conf: Mapping[str, Any]) -> tuple[int, int]:
    """`[out, row_bytes]`: rows of whole blocks (a width that is not whole blocks fits no storage)."""
    t = ggml_type(conf)
    if in_features % t.block_size:
        return out_features, -1
    return out_features, in_features // t.block_size * t.type_size


def values_shape(stored: tuple[int, ...], conf: Mapping[str, Any]) -> tuple[int, ...]:
    t = ggml_type(conf)
    return stored[0], stored[1] // t.type_size * t.block_size


def dequantize_blocks(q: torch.Tensor, conf: Mapping[str, Any], shape: tuple[int, int]) -> torch.Tensor:
    """The float32 `[out, in]` values of raw ggml blocks `q` (`[out, row_bytes]`)."""
    return dequantize(GGUFTensor("", ggml_type(conf), torch.Size(shape), q))


def gguf_diffusion_state(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """A GGUF diffusion model -> (state dict, metadata) as described in the module docstring."""
    tensors, metadata = read_gguf(path)
    state: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        orig = metadata.get(ORIG_SHAPE_KEY + name)
        if tensor.quantized and len(tensor.shape) == 2 and name.endswith(".weight") and orig is None:
            layer = name[:-len(".weight")]
            state[name] = tensor.data
            conf = {"format": FORMAT, "type": tensor.type.name}
            state[f"{layer}.comfy_quant"] = torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8)
            continue
        value = dequantize(tensor) if tensor.quantized else tensor.plain()
        if orig is not None:
            value = value.reshape(tuple(int(d) for d in orig))
        state[name] = value
    text = {k: v for k, v in metadata.items() if isinstance(v, str)}
    return state, text
