"""`StyleModel` (the STYLE_MODEL wire object) and `load_style_model`, after ComfyUI's
`comfy/sd.py: StyleModel / load_style_model`.

A file holding `style_embedding` is a T2I-Adapter style model, one holding `redux_down.weight`
a Flux Redux encoder; anything else is refused. As in ComfyUI the module is float32 on the CPU
(its weights are small) and `get_cond(clip_vision_output)` runs it on the output's
`last_hidden_state`: `[B, T, ctx]` tokens for StyleModelApply.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from comfy_core.checkpoint.errors import ShapeMismatchError, UnsupportedFormatError
from comfy_core.checkpoint.materialize import build_on_meta, materialize
from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.style_models.redux import ReduxConfig, ReduxImageEncoder
from comfy_core.style_models.t2i_style import T2IStyleAdapter, T2IStyleConfig


class StyleModel:
    """A loaded style model: `model` (the module), `kind` ("t2i_style" | "redux")."""

    def __init__(self, model: nn.Module, kind: str) -> None:
        self.model = model
        self.kind = kind

    def get_cond(self, clip_vision_output: Any) -> torch.Tensor:
        """The style tokens `[B, T, ctx]` (float32) for a CLIP vision output."""
        tokens = clip_vision_output.last_hidden_state
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 3:
            raise ValueError(f"style model: the CLIP vision output's last_hidden_state is not [B, T, W] "
                             f"({getattr(tokens, 'shape', type(tokens).__name__)})")
        weight = next(self.model.parameters())
        width = self.model.config.width if self.kind == "t2i_style" else self.model.config.redux_dim
        if tokens.shape[-1] != width:
            raise ValueError(f"style model ({self.kind}): expects CLIP vision tokens {width} wide, got "
                             f"{tokens.shape[-1]} (a different CLIP vision model?)")
        with torch.no_grad():
            return self.model(tokens.to(device=weight.device, dtype=weight.dtype)).float()

    def __repr__(self) -> str:
        return f"StyleModel({self.kind}, {self.model.config})"


def load_style_model(path: str | Path, *, mmap: bool = True) -> StyleModel:
    """A T2I-Adapter style model or a Flux Redux encoder file -> `StyleModel` (float32, CPU).

    Raises `UnsupportedFormatError` for a file that is neither, `ShapeMismatchError` for one whose
    tensors do not fit the architecture; both name the file."""
    with CheckpointFile(path) as checkpoint:
        tensors = checkpoint.tensors
        try:
            if "style_embedding" in tensors:
                kind, module = "t2i_style", build_on_meta(lambda: T2IStyleAdapter(T2IStyleConfig.detect_from_weights(tensors)))
            elif "redux_down.weight" in tensors:
                kind, module = "redux", build_on_meta(lambda: ReduxImageEncoder(ReduxConfig.detect_from_weights(tensors)))
            else:
                raise UnsupportedFormatError(checkpoint.path, "not a style model: neither 'style_embedding' "
                                                              "(T2I-Adapter style) nor 'redux_down.weight' (Flux Redux)")
        except (KeyError, ValueError) as exc:
            raise ShapeMismatchError(checkpoint.path, f"style model: {exc}") from None
        module = materialize(module, checkpoint, "", torch.float32, "style model", zero_copy=mmap)
    module.eval()
    module.requires_grad_(False)
    return StyleModel(module, kind)
