"""LTXAVTextEncoderLoader's loading: a Gemma text-encoder file and an LTX-2 checkpoint -> CLIP, by
the file: Gemma 3 (LTX-2's own, `encoders.ltxav_gemma3_text_encoder`) or any Gemma 4 (ComfyUI's
"matching gemma 4 model", `gemma4_text.ltxav_gemma4_text_encoder`). One entry point the node
calls; each path lives with its tower's module (neither imports the other).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from comfy_core.families.ltx2.encoders import ltxav_gemma3_text_encoder
from comfy_core.families.ltx2.gemma4_text import ltxav_gemma4_text_encoder


def load_ltxav_text_encoder(text_encoder: str | Path, checkpoint: str | Path, dtype: torch.dtype | None = None,
                            load_device: str | None = None, offload_device: str = "cpu", **overrides: Any) -> Any:
    """The CLIP for `text_encoder` (a Gemma 3 or Gemma 4 file) with `checkpoint`'s text projection.

    `dtype`: the tower's storage dtype (None: float32 for Gemma 3, as stored for Gemma 4); the
    projection and connectors are float32. `overrides`: Gemma 4 config fields the shapes cannot
    show (tiny towers). Raises `LTXAVTextEncoderError` (a Gemma 3 file without its tokenizer:
    `MissingGemma3TokenizerError`; a Gemma 4 file's own errors: the Gemma 4 loader's
    `Gemma4FileError`) and the checkpoint reader's errors, naming the file."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.text_encoders.gemma4_load import holds_gemma4

    with CheckpointFile(text_encoder) as gemma_stored, CheckpointFile(checkpoint) as ltx_file:
        if holds_gemma4(gemma_stored.tensors):
            return ltxav_gemma4_text_encoder(gemma_stored, ltx_file, dtype, load_device, offload_device, **overrides)
        return ltxav_gemma3_text_encoder(gemma_stored, ltx_file, dtype, load_device, offload_device)


__all__ = ["load_ltxav_text_encoder"]
