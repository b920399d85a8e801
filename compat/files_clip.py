"""`comfy.sd1_clip` / `comfy.sdxl_clip` / `comfy.text_encoders.*` helpers for packs (ComfyUI's
comfy/sd1_clip.py behaviour), over comfy_core.text_encoders. The classes packs check are ours
(their names are mapped in the surface files); this module holds the free functions and the
names of families this engine does not have, and SD3 / Flux's `t5_xxl_detect`.

torch is imported inside the functions: packs import these modules at start-up.
"""
from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def gen_empty_tokens(special_tokens: Mapping[str, Any], length: int) -> list:
    """ComfyUI's empty prompt ids: start (when the tokenizer has one), end, then pad to `length`."""
    tokens = [special_tokens[key] for key in ("start", "end") if special_tokens.get(key) is not None]
    return tokens + [special_tokens.get("pad")] * (length - len(tokens))


def expand_directory_list(directories: Iterable[str | os.PathLike]) -> list[str]:
    """The directories and every subdirectory under them (links followed), each once."""
    from comfy_core.text_encoders.embedding_files import search_folders

    return [str(p) for p in search_folders(directories)]


def load_embed(embedding_name: str, embedding_directory: str | os.PathLike | Iterable[str | os.PathLike],
               embedding_size: int, embed_key: str | None = None) -> torch.Tensor | None:
    """The vectors of embedding file `embedding_name` in the embeddings folders (`[n, size]`), or
    None when no such file exists or it cannot be read (logged), as ComfyUI's `load_embed`: a
    `.pt` / `.bin` that `torch.load(weights_only=True)` refuses (an old AUTOMATIC1111 pickle
    holding classes outside the allow-list) is read as a zip of raw float32 data instead
    (comfy_core/text_encoders/embedding_files.py, what prompts read embeddings with)."""
    from comfy_core.text_encoders.embedding_files import FolderEmbeddingLookup

    folders = [embedding_directory] if isinstance(embedding_directory, (str, os.PathLike)) else list(embedding_directory)
    return FolderEmbeddingLookup(folders)(embedding_name, embed_key, embedding_size)


def safe_load_embed_zip(embed_path: str | os.PathLike) -> torch.Tensor | None:
    """ComfyUI's `comfy.sd1_clip.safe_load_embed_zip`: a textual-inversion `.pt` read as its zip
    without unpickling (comfy_core/text_encoders/embedding_files.py `vectors_from_zip`)."""
    from comfy_core.text_encoders.embedding_files import vectors_from_zip

    return vectors_from_zip(embed_path)


def t5_xxl_detect(state_dict: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """ComfyUI's `sd3_clip.t5_xxl_detect`: `{"dtype_t5": dtype}` when a T5 encoder (its final layer
    norm) is under `prefix`, plus `{"t5xxl_scaled_fp8": dtype}` when the file marks scaled fp8."""
    out: dict[str, Any] = {}
    norm = state_dict.get(f"{prefix}encoder.final_layer_norm.weight")
    if norm is not None:
        out["dtype_t5"] = norm.dtype
    scaled = state_dict.get(f"{prefix}scaled_fp8")
    if scaled is not None:
        out["t5xxl_scaled_fp8"] = scaled.dtype
    return out


class UnsupportedTextEncoderError(NotImplementedError):
    """A ComfyUI text-encoder class of a model family this engine does not have."""


class _Unsupported:
    """Base of ComfyUI's text-encoder classes whose families are not here (Stable Cascade's, ...):
    the name exists, so packs that import it load and their `isinstance` checks are False (no
    such model is ever loaded here); building one raises, naming what is missing."""

    family = "?"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise UnsupportedTextEncoderError(
            f"{type(self).__name__}: the {self.family} text encoders are not provided by this engine "
            "(its text encoders are CLIP-L, OpenCLIP ViT-H, OpenCLIP bigG and T5-XXL: SD1.x, SD2.x, SDXL, SD3, "
            "Flux)")


class StableCascadeClipModel(_Unsupported):
    family = "Stable Cascade (CLIP-G)"
