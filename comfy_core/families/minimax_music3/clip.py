"""MiniMax Music 3's "text encoder": the AR stage (`ar.py`) behind ComfyUI's CLIP object, loaded
whole from its one file by CLIPLoader (type "minimax" in the template; ComfyUI builds it from the
file's `model.audio_decoder.*` tensors), as `comfy/text_encoders/minimax_music.py` has it
(`MiniMaxMusic3Tokenizer`, `MiniMaxMusic3TEModel`); written here from that behaviour.

- Tokenizer: the file's own `tokenizer_json` (uint8 bytes of a Hugging Face tokenizers JSON; its
  special tokens must sit at the checkpoint's ids, `ar.SPECIAL_TOKEN_IDS`).
  `tokenize(caption, lyrics=..., seed=..., max_audio_frames=..., cfg_scale=..., top_k=...)` ->
  `{"minimax_music3": [[(id, 1.0), ...]], "seed", "max_audio_frames", "cfg_scale", "top_k"}`, the
  ids of `prompt.build_prompt(caption, lyrics)` without added special tokens.
- Encoding runs the generation (`MiniMaxMusic3AR.generate`): the conditioning is the per-frame
  states `[1, frames, 8 x width]` (25 frames a second), no pooled output.
- The file: the full or the pruned layout (`ar.py`), float or Comfy-Org's int8 ConvRot (read
  dequantised through the file's layer descriptions, comfy_core/weights/quant_registry.py), stored
  in bf16 as ComfyUI keeps it; run in bf16 on GPUs that do it well, else float32.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from comfy_core.families.minimax_music3.ar import (CFG_SCALE, CFG_TOP_K, MAX_AUDIO_FRAMES, SPECIAL_TOKEN_IDS,
                                                   MiniMaxMusic3AR, MiniMaxMusic3TextConfigError, build_from_state)
from comfy_core.families.minimax_music3.prompt import build_prompt
from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.file_tokenizer import load_tokenizer_json, tokenizer_json_bytes
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

SLOT = "minimax_music3"
TOKENIZER_KEY = "tokenizer_json"
MARKER = "model.audio_decoder.projection.weight"


class MiniMaxMusic3TokenizerError(MiniMaxMusic3TextConfigError):
    """A text-encoder file whose tokenizer is missing or does not fit the checkpoint."""


class MiniMaxMusic3Tokenizer(FamilyTokenizer):
    """ComfyUI's `MiniMaxMusic3Tokenizer` (see the module docstring)."""

    def __init__(self, tokenizer_json: Any) -> None:
        if tokenizer_json is None:
            raise MiniMaxMusic3TokenizerError("MiniMax Music3 text encoder checkpoint is missing tokenizer_json")
        self.slots = (SLOT,)
        self.tokenizer_json = tokenizer_json_bytes(tokenizer_json)
        self.tokenizer = load_tokenizer_json(self.tokenizer_json, MiniMaxMusic3TokenizerError, "MiniMax Music3 tokenizer_json")
        for token, expected in SPECIAL_TOKEN_IDS.items():
            if self.tokenizer.token_to_id(token) != expected:
                raise MiniMaxMusic3TokenizerError(f"MiniMax Music3 tokenizer mismatch for {token}: expected id "
                                                  f"{expected}, got {self.tokenizer.token_to_id(token)}")

    def with_embedding_lookup(self, lookup: Any) -> "MiniMaxMusic3Tokenizer":
        return self  # no textual-inversion embeddings for this encoder

    def by_slot(self) -> dict[str, Any]:
        return {}

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, Any]:
        prompt = build_prompt(text, kwargs.get("lyrics", ""))
        ids = self.tokenizer.encode(prompt, add_special_tokens=False).ids
        return {SLOT: [[(int(token), 1.0) for token in ids]],
                "seed": int(kwargs.get("seed", 0)),
                "max_audio_frames": int(kwargs.get("max_audio_frames", MAX_AUDIO_FRAMES)),
                "cfg_scale": float(kwargs.get("cfg_scale", CFG_SCALE)),
                "top_k": int(kwargs.get("top_k", CFG_TOP_K))}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {TOKENIZER_KEY: torch.frombuffer(bytearray(self.tokenizer_json), dtype=torch.uint8)}

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)


class MiniMaxMusic3TEModel(TextEncoderSet):
    """ComfyUI's `MiniMaxMusic3TEModel`: encoding is the AR generation (see the module docstring)."""

    @property
    def ar(self) -> MiniMaxMusic3AR:
        return self.encoder(SLOT)

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """Nothing to set: the encoder writes audio codes by generation, not a chosen layer's states,
        so layer choices (CLIPSetLastLayer) have nothing to act on."""

    def reset_clip_options(self) -> None:
        """Nothing to reset (see `set_clip_options`)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        missing = [key for key in (SLOT, "seed", "max_audio_frames", "cfg_scale", "top_k") if key not in tokens]
        if missing:
            raise TokenizeError(f"MiniMax Music 3 text encoder: the tokens lack {missing} (tokenize with this CLIP's "
                                f"tokenizer, as MiniMaxMusic3TextEncode does); got keys {sorted(tokens)}")
        ids = [int(pair[0]) for chunk in tokens[SLOT] for pair in chunk]
        hidden = self.ar.generate(ids, int(tokens["seed"]), int(tokens["max_audio_frames"]),
                                  float(tokens["cfg_scale"]), int(tokens["top_k"]))
        return hidden.unsqueeze(0), None, {}


MINIMAX_MUSIC3_TEXT_ENCODERS = EncoderSetSpec(
    "minimax_music3", (EncoderOptions(SLOT, SLOT, 0, None, False, projected_pooled=False, kind="minimax_music3",
                                      nominal_width=8 * 4096),),
    SLOT, set_class=MiniMaxMusic3TEModel, tokenizer_class=MiniMaxMusic3Tokenizer)


def holds_minimax_music3_text_encoder(tensors: Any) -> bool:
    """Whether a file holds MiniMax Music 3's AR stage (names only)."""
    return MARKER in tensors


def clip_from_state(state: Mapping[str, torch.Tensor], tokenizer_json: Any, dtype: torch.dtype | None = None,
                    load_device: Any = None, offload_device: Any = "cpu") -> Any:
    """The CLIP object of the AR stage's tensors (file names) and tokenizer bytes."""
    from comfy_core.text_encoders.clip import CLIP

    tokenizer = MiniMaxMusic3Tokenizer(tokenizer_json)
    model = build_from_state(state, dtype)
    module = MiniMaxMusic3TEModel(MINIMAX_MUSIC3_TEXT_ENCODERS, {SLOT: model})
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)


def load_minimax_music3_text_encoder(path: str | Path, dtype: torch.dtype | None = None, load_device: Any = None,
                                     offload_device: Any = "cpu") -> Any:
    """`minimax_music3_text_encoder_*.safetensors` -> CLIP. Int8 layers are dequantised as read; the
    weights are kept in bf16 (ComfyUI's storage for this model) unless `dtype` is float32."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    storage = torch.float32 if dtype == torch.float32 else torch.bfloat16
    with CheckpointFile(path) as stored:
        try:
            layers = quantized_layers(stored.tensors, getattr(stored, "metadata", None) or {}, stored.read)
        except QuantFormatError as exc:
            raise MiniMaxMusic3TextConfigError(f"{path}: {exc}") from None
        view = QuantizedHeader.for_detection(stored, layers) if layers else stored
        if TOKENIZER_KEY not in view.tensors:
            raise MiniMaxMusic3TokenizerError(f"{path}: MiniMax Music3 text encoder checkpoint is missing "
                                              f"{TOKENIZER_KEY}")
        tokenizer_json = view.read(TOKENIZER_KEY, None)
        state = {name: view.read(name, storage) for name in view.tensors if name != TOKENIZER_KEY}
    clip = clip_from_state(state, tokenizer_json, None, load_device, offload_device)
    log.info("MiniMax Music 3 text encoder: %s (%s layout%s)", Path(path).name,
             "pruned" if clip.cond_stage_model.ar.config.pruned_embedding else "full",
             ", int8 dequantised" if layers else "")
    return clip


__all__ = ["MINIMAX_MUSIC3_TEXT_ENCODERS", "MiniMaxMusic3TEModel", "MiniMaxMusic3Tokenizer",
           "MiniMaxMusic3TokenizerError", "SLOT", "clip_from_state", "holds_minimax_music3_text_encoder",
           "load_minimax_music3_text_encoder"]
