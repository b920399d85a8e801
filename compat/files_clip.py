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


def t5xxl_detect(clip_data: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """ComfyUI's `comfy.sd.t5xxl_detect(clip_data)` (behaviour of comfy/sd.py): `t5_xxl_detect` of
    the first state dict holding a 24-block T5-XXL's last feed-forward (`wi_1`, or v1.0's `wi`),
    else `{}`; its keys are `flux_clip`'s / `sd3_clip`'s keyword arguments."""
    names = ("encoder.block.23.layer.1.DenseReluDense.wi_1.weight", "encoder.block.23.layer.1.DenseReluDense.wi.weight")
    for state_dict in clip_data:
        if any(name in state_dict for name in names):
            return t5_xxl_detect(state_dict)
    return {}


def model_options_long_clip(sd: Mapping[str, Any], tokenizer_data: Mapping[str, Any],
                            model_options: Mapping[str, Any]) -> tuple[dict, dict]:
    """ComfyUI's `comfy.text_encoders.long_clipl.model_options_long_clip` (behaviour of
    comfy/text_encoders/long_clipl.py): when `sd` holds a CLIP text tower's position table, copies
    of `tokenizer_data` / `model_options` with `<name>_max_length` and
    `<name>_model_config["max_position_embeddings"]` set to its length (248 for Long-CLIP), so the
    tokenizer and encoder are built that long; otherwise both unchanged.

    `<name>` is read as ComfyUI reads it: a bare `text_model.*` tower is "clip_g" when it has a
    31st layer and "clip_l" when it has a 2nd; a `clip_l.`- or `clip_g.`-prefixed one is "clip_l" (ComfyUI's
    branches name both so). As there, `model_options["model_config"]`, when present, is the dict
    that gets the length (shared, not copied). A bare tower with neither layer cannot be named
    (ComfyUI fails there too): ValueError."""
    w = sd.get("clip_l.text_model.embeddings.position_embedding.weight")
    if w is None:
        w = sd.get("clip_g.text_model.embeddings.position_embedding.weight")
    name = "clip_l" if w is not None else None
    if w is None:
        w = sd.get("text_model.embeddings.position_embedding.weight")
        if w is not None:
            if "text_model.encoder.layers.30.mlp.fc1.weight" in sd:
                name = "clip_g"
            elif "text_model.encoder.layers.1.mlp.fc1.weight" in sd:
                name = "clip_l"
            else:
                raise ValueError("model_options_long_clip: a CLIP text tower with fewer than 2 layers cannot be "
                                 "named clip_l or clip_g")
    if w is None:
        return tokenizer_data, model_options
    tokenizer_data = dict(tokenizer_data)
    model_options = dict(model_options)
    model_config = model_options.get("model_config", {})
    model_config["max_position_embeddings"] = w.shape[0]
    model_options[f"{name}_model_config"] = model_config
    tokenizer_data[f"{name}_max_length"] = w.shape[0]
    return tokenizer_data, model_options


def flux_clip(dtype_t5: Any = None, t5_quantization_metadata: Any = None, t5xxl_scaled_fp8: Any = None) -> type:
    """ComfyUI's `comfy.text_encoders.flux.flux_clip(...)`: a `FluxClipModel` subclass for a
    `clip_target` (nunchaku's loader passes it to `comfy.sd.CLIP(clip_target, ...)`). Takes both
    today's keywords and 0.3.64's `t5xxl_scaled_fp8` (what `t5xxl_detect` returns here).

    Here text-encoder sets are built from the weights by our loaders (`comfy.sd.load_clip`,
    `load_text_encoder_state_dicts`), not from a class: the class is a subclass of ours (so
    `issubclass(..., FluxClipModel)` holds) that records the arguments, and building one raises
    `UnsupportedTextEncoderError` saying so."""
    from comfy_core.families.flux.clip import FluxClipModel

    class FluxClipModel_(FluxClipModel):
        detected = {"dtype_t5": dtype_t5, "t5_quantization_metadata": t5_quantization_metadata,
                    "t5xxl_scaled_fp8": t5xxl_scaled_fp8}

        def __init__(self, device: Any = "cpu", dtype: Any = None, model_options: Any = None) -> None:
            raise UnsupportedTextEncoderError(
                "flux_clip(...): building ComfyUI's FluxClipModel from a class is not supported by this engine; "
                "Flux's CLIP-L + T5-XXL are loaded from their files (comfy.sd.load_clip(paths, "
                "clip_type=comfy.sd.CLIPType.FLUX) or comfy.sd.load_text_encoder_state_dicts)")

    return FluxClipModel_
