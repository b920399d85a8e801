"""CLIP text encoders and the CLIP BPE tokenizer (SD1.x CLIP-L, SD2.x OpenCLIP ViT-H, SDXL CLIP-L + bigG).

Factory API (what the checkpoint loader calls)
-----------------------------------------------
    from comfy_core.text_encoders import detect_text_encoders, build_clip

    configs = detect_text_encoders(tensors)      # header only: name -> object with .shape (tuple), .dtype (str)
    clip = build_clip(configs, state_dict, dtype)  # state_dict: the checkpoint's name -> torch.Tensor mapping

- `detect_text_encoders(tensors) -> list[ClipTextConfig]`: finds every text encoder of a single-file
  checkpoint from tensor names and shapes only (`cond_stage_model.transformer.text_model.*` SD1,
  `cond_stage_model.model.*` SD2 open_clip layout, `conditioner.embedders.0.transformer.text_model.*`
  + `conditioner.embedders.1.model.*` SDXL, `conditioner.embedders.0.model.*` SDXL refiner). Returns
  `[]` when there is none. Each `ClipTextConfig` has `slot` ("clip_l" | "clip_h" | "clip_g"),
  `prefix`, `layout` ("hf" | "open_clip") and the widths; `ClipTextConfig.detect_from_weights(tensors,
  prefix)` does one prefix.
- `build_clip(configs, state_dict, dtype=torch.float32) -> CLIP`: builds the encoders on the meta device,
  converts the checkpoint keys under each config's prefix and loads them with `assign=True` (tensors of
  the right dtype are used without a copy). Raises `TextEncoderError` subclasses naming the key.
  Only keys under the configs' prefixes are read.

CLIP object (ComfyUI's API, what nodes and packs use)
------------------------------------------------------
`CLIP.tokenize(text)`, `encode_from_tokens(tokens, return_pooled=False, return_dict=False)`,
`encode_from_tokens_scheduled(tokens, unprojected=False, add_dict={})` -> CONDITIONING,
`encode(text)`, `clone()`, `clip_layer(layer_idx)`, `add_patches(patches, strength_patch,
strength_model)`, `get_key_patches()`, `get_sd()`, `load_model()`, `set_embedding_lookup(fn)` (resolve
`embedding:NAME` with `fn(name, embedding_key, width) -> tensor [n, width] | None`, this clone
only), `.patcher` (a `comfy_core.patching.ClipPatcher` whose base module is a
`TextEncoderSet` with children `clip_l` / `clip_h` / `clip_g`, each a `ClipTextEncoder` whose
`transformer` is our `ClipTextModelWithProjection` in transformers' layout, so parameter names are ComfyUI's:
`clip_l.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight`), `.tokenizer`, `.layer_idx`.
Prompt weighting is ComfyUI's: `(word:1.2)`, `(word)` = x1.1, escaped `\\(`; a weighted token is
interpolated from the encoding of the empty prompt.

Lower-level API (for the A1111 prompt engine)
---------------------------------------------
`ClipTextEncoder.encode_ids(ids [B, 77] long, overrides=None, layer_idx=None, layer_norm_hidden=True)
-> (hidden [B, 77, width], pooled [B, proj])` encodes id chunks with optional per-position embedding
overrides (`EmbeddingOverride(row, position, vectors [k, width])`, textual inversion) and a layer
choice (None = after the final layer norm; negative = hidden state of that layer, as in ComfyUI).
Use it inside `with clip.patcher.applied() as encoders:` (`encoders.clip_l.encode_ids(...)`) so
LoRA patches apply. `CLIP.encoder_options(slot)` says the pad token, default layer and layer-norm
choice in force for that encoder (clip skip included); `CLIP.tokenizer.clip_tokenizer` is the raw
BPE tokenizer (`encode(text) -> ids` without BOS/EOS).

Modules: `vocab` (BPE vocabulary from openai-clip's file), `tokenizer` (text -> ids),
`prompt_weights` + `sd_tokenizer` (ComfyUI weights and 77-token chunks), `config` (detection),
`convert` (checkpoint <-> transformers keys), `encoder` (one tower), `encoder_set` (families'
encoder sets), `weighting` (ComfyUI interpolation), `clip` (the CLIP object), `factory`,
`conditioning` (pure CONDITIONING helpers used by nodes/conditioning.py).
"""
from __future__ import annotations

from comfy_core.text_encoders.clip import CLIP
from comfy_core.text_encoders.config import ClipTextConfig
from comfy_core.text_encoders.encoder import ClipTextEncoder, EmbeddingOverride, EncoderOutput, build_encoder
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import (
    TextEncoderDetectionError,
    TextEncoderError,
    TextEncoderKeyError,
    TokenizeError,
    VocabularyError,
)
from comfy_core.text_encoders.factory import build_clip, detect_text_encoders, make_tokenizer
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer, SDTokenizer, TokenizerSpec
from comfy_core.text_encoders.tokenizer import ClipTokenizer

__all__ = [
    "CLIP", "ClipTextConfig", "ClipTextEncoder", "ClipTokenizer", "EmbeddingOverride",
    "EncoderOptions", "EncoderOutput", "EncoderSetSpec", "FamilyTokenizer", "SDTokenizer",
    "TextEncoderDetectionError", "TextEncoderError", "TextEncoderKeyError", "TextEncoderSet",
    "TokenizeError", "TokenizerSpec", "VocabularyError", "build_clip", "build_encoder",
    "detect_text_encoders", "make_tokenizer",
]
