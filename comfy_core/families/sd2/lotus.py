"""Lotus (He et al. 2024, "Lotus: Diffusion-based Visual Foundation Model for High-quality Dense
Prediction", arXiv 2409.18124): depth and normal estimation with an SD2-derived UNet.

Lotus runs its UNet with a fixed text conditioning: its frozen text encoder (SD 2's OpenCLIP
ViT-H/14 tower) applied to the null prompt, unpadded, i.e. the start and end tokens: a
`[1, 2, 1024]` tensor. Today's ComfyUI `LotusConditioning` node (comfy_extras/nodes_lotus.py)
returns that tensor as a constant instead of shipping and running the encoder; the same values are
stored here as data (data/lotus_null_prompt.safetensors, float16, exact: every value is a float16
number; data/PROVENANCE.md says where they come from). The Lotus UNet itself (ComfyUI's `LotusD`
model: SD 2.1's UNet with a 4-wide class-label input for the task switch) is not a family here yet.
"""
from __future__ import annotations

from pathlib import Path

import torch

DATA = Path(__file__).resolve().parent / "data" / "lotus_null_prompt.safetensors"
KEY = "lotus_null_prompt"
SHAPE = (1, 2, 1024)  # [batch, tokens (start, end), OpenCLIP ViT-H width]


class LotusDataError(RuntimeError):
    """The stored null-prompt embedding is missing or not the `[1, 2, 1024]` tensor it should be."""


def null_prompt_embedding() -> torch.Tensor:
    """Lotus's text conditioning, `[1, 2, 1024]` float32 on the CPU (a new tensor per call)."""
    from comfy_core.checkpoint.errors import CheckpointError
    from comfy_core.checkpoint.reader import load_tensor_file

    try:
        tensor = load_tensor_file(DATA)[0][KEY]
    except (CheckpointError, OSError, KeyError) as exc:
        raise LotusDataError(f"the Lotus null-prompt embedding cannot be read from {DATA}: {exc}") from exc
    if tuple(tensor.shape) != SHAPE:
        raise LotusDataError(f"{DATA.name}: expected shape {SHAPE}, found {tuple(tensor.shape)}")
    return tensor.to(torch.float32)
