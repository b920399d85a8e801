"""LTX-2.5's text encoder: one file holding the Gemma 4 12B tower and LTX's feature projection
(Lightricks' `gemma4-12b-with-proj-ltx-2.5`, Comfy-Org's int8 ConvRot repackage), as ComfyUI's
CLIPLoader builds it (`comfy/sd.py`: a `TEModel.GEMMA_4_12B` file with
`text_embedding_projection.video_aggregate_embed.weight` -> `lt.ltxav_te(text_encoder_model=
Gemma4_12B, text_encoder_key="gemma4")`, whatever the loader's type); written here.

The conditioning is LTX-2.3's (`encoders.LTXAVTEModel`, `text.DualTextEmbeddingProjection`): every
hidden state of the tower (the embeddings, each block's output, the last through the final norm:
49 x 3840 for the 12B) for the prompt's tokens, RMS-normed per token and state, projected by the
file's `text_embedding_projection.{video,audio}_aggregate_embed` (4096 and 2048 wide), the result
`[1, N, 6144]` with `unprocessed_ltxav_embeds` (the DiT runs its connectors). Tokens: Gemma 4's
(`<bos>`, the raw prompt; `text_encoders.gemma4_load.Gemma4Tokenizer`), under "gemma4", so
TextGenerateLTX2Prompt picks its Gemma 4 chat for this CLIP as for the E2B one. The tower also
generates (TextGenerate on this CLIP), with the 12B's own image / audio embedders when the file
has them (`text_encoders/gemma4_media.py`).

LTXAVTextEncoderLoader given a Gemma 4 file (ComfyUI's two-file `CLIPType.LTXV` branch of
`load_text_encoder_state_dicts`: any Gemma 4 variant -> `lt.ltxav_te(text_encoder_model=
gemma4_text_encoder_model(variant), text_encoder_key="gemma4")`, the files' state dicts loaded in
order, so the checkpoint's projection replaces the text-encoder file's): the same encoder set and
tokenizer; the projection from `ckpt_name` when the checkpoint has one (LTX-2.3's per-stream pair,
or LTX-2.0's single projection with its text connectors in compat mode, `encoders.py`), else the
Gemma 4 file's own (`gemma4-12b-with-proj`); neither is an `LTXAVTextEncoderError`, as is a
projection whose input is not the tower's `width x (blocks + 1)` states.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Sequence

import torch

from comfy_core.families.ltx2.encoders import LTXAVTEModel, LTXAVTextEncoderError
from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec
from comfy_core.text_encoders.gemma4 import GEMMA4_SLOT
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

PROJECTION_KEYS = tuple(f"text_embedding_projection.{side}_aggregate_embed.{part}"
                        for side in ("video", "audio") for part in ("weight", "bias"))


class LTX25TEModel(LTXAVTEModel):
    """ComfyUI's `lt.LTXAVTEModel` with the Gemma 4 12B tower under "gemma4"."""

    slot = GEMMA4_SLOT


class LTXAVGemma4Tokenizer(FamilyTokenizer):
    """ComfyUI's `lt.ltxav_gemma4_tokenizer(Gemma4_12B.tokenizer)` (tokens under "gemma4")."""

    clip_name = clip = GEMMA4_SLOT

    def state_dict(self) -> dict:
        return getattr(self, GEMMA4_SLOT).state_dict()

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, GEMMA4_SLOT).decode(list(token_ids), skip_special_tokens)


LTX25_TEXT_ENCODERS = EncoderSetSpec(
    "ltxav_gemma4", (EncoderOptions(GEMMA4_SLOT, GEMMA4_SLOT, PAD_ZERO, None, False, projected_pooled=False,
                                    kind="gemma4", nominal_width=3840),),
    GEMMA4_SLOT, set_class=LTX25TEModel, tokenizer_class=LTXAVGemma4Tokenizer)


def holds_ltx25_text_encoder(tensors: Any) -> bool:
    """Whether a Gemma 4 file also holds LTX's per-stream text projection (names only)."""
    return PROJECTION_KEYS[0] in tensors


def _projection(view: Any, width: int, states: int) -> torch.nn.Module:
    from comfy_core.families.ltx2.text import DualTextEmbeddingProjection

    missing = [key for key in PROJECTION_KEYS if key not in view.tensors]
    if missing:
        raise LTXAVTextEncoderError(f"{view.path}: LTX-2.5's text projection lacks {missing}")
    for key in PROJECTION_KEYS[0::2]:
        shape = tuple(view.tensors[key].shape)
        if len(shape) != 2 or shape[1] != width * states:
            raise LTXAVTextEncoderError(f"{view.path}: {key} is {list(shape)}; the Gemma 4 tower ({width} wide, "
                                        f"{states} hidden states) needs [*, {width * states}]")
    try:
        return DualTextEmbeddingProjection.from_weights({k: view.read(k, torch.float32) for k in PROJECTION_KEYS},
                                                        width)
    except (KeyError, ValueError) as exc:
        raise LTXAVTextEncoderError(f"{view.path}: {exc}") from None


def _clip(tower: Any, tokenizer: Any, projection: torch.nn.Module, connectors: Any, load_device: Any,
          offload_device: Any) -> Any:
    from comfy_core.text_encoders.clip import CLIP

    module = LTX25TEModel(LTX25_TEXT_ENCODERS, {GEMMA4_SLOT: tower})
    module.attach(projection, connectors)
    return CLIP.from_encoders(module, LTXAVGemma4Tokenizer({GEMMA4_SLOT: tokenizer}), load_device, offload_device)


def load_ltx25_text_encoder(path: str | Path, dtype: torch.dtype | None = None, load_device: Any = None,
                            offload_device: Any = "cpu", **overrides: Any) -> Any:
    """`gemma4-12b-with-proj-ltx-2.5*` -> CLIP (see the module doc). `dtype`: the tower's storage
    dtype (None: as stored, quantised layers dequantised to the file's float dtype); the
    projection is float32. `overrides`: Gemma 4 config fields the shapes cannot show (tiny towers)."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.text_encoders.gemma4_load import build_tower, detect, readable_view, tokenizer_for

    with CheckpointFile(path) as stored:
        view = readable_view(stored)
        config = detect(view, **overrides)
        tokenizer = tokenizer_for(view, config)
        projection = _projection(view, config.hidden_size, config.num_layers + 1)
        tower = build_tower(view, config, dtype)
    log.info("LTX-2.5 text encoder: %s (Gemma 4, width %d x%d, with its projection)", Path(path).name,
             config.hidden_size, config.num_layers)
    return _clip(tower, tokenizer, projection, None, load_device, offload_device)


def ltxav_gemma4_text_encoder(stored: Any, checkpoint: Any, dtype: torch.dtype | None = None,
                              load_device: Any = None, offload_device: Any = "cpu", **overrides: Any) -> Any:
    """LTXAVTextEncoderLoader on a Gemma 4 file: the open Gemma 4 file `stored` and LTX checkpoint
    `checkpoint` (`CheckpointFile`s) -> CLIP (see the module doc; `dtype`, `overrides` as
    `load_ltx25_text_encoder`'s). Raises `LTXAVTextEncoderError` for the projection, the Gemma 4
    loader's `Gemma4FileError` (`MissingGemma4TokenizerError`, ...) for the file."""
    from comfy_core.families.ltx2.encoders import checkpoint_projection
    from comfy_core.text_encoders.gemma4_load import build_tower, detect, readable_view, tokenizer_for

    view = readable_view(stored)
    config = detect(view, **overrides)
    tokenizer = tokenizer_for(view, config)
    width, states = config.hidden_size, config.num_layers + 1
    found = checkpoint_projection(checkpoint, width, states)
    if found is not None:
        projection, connectors = found
        source = f"{Path(checkpoint.path).name} (projection{', connectors' if connectors else ''})"
    elif holds_ltx25_text_encoder(view.tensors):
        projection, connectors = _projection(view, width, states), None
        source = "its own projection"
    else:
        raise LTXAVTextEncoderError(f"{checkpoint.path}: no LTX-2 text projection, and the Gemma 4 file "
                                    f"{Path(view.path).name} carries none either ('{PROJECTION_KEYS[0]}'); "
                                    "ckpt_name must be an LTX-2 checkpoint")
    tower = build_tower(view, config, dtype)
    log.info("LTX-2 text encoder: %s (Gemma 4 %s, width %d x%d) + %s", Path(view.path).name, config.name, width,
             config.num_layers, source)
    return _clip(tower, tokenizer, projection, connectors, load_device, offload_device)


__all__ = ["LTX25TEModel", "LTX25_TEXT_ENCODERS", "LTXAVGemma4Tokenizer", "holds_ltx25_text_encoder",
           "load_ltx25_text_encoder", "ltxav_gemma4_text_encoder"]
