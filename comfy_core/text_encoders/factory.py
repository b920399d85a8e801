"""Entry points for the checkpoint loader: find the text encoders of a checkpoint, build a CLIP.

`detect_text_encoders` looks at names and shapes only (safetensors header); `build_clip` reads the
tensors under the detected prefixes and nothing else.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.clip import CLIP
from comfy_core.text_encoders.config import ClipTextConfig
from comfy_core.text_encoders.encoder import build_encoder
from comfy_core.text_encoders.encoder_set import TextEncoderSet, spec_for_slots
from comfy_core.text_encoders.errors import TextEncoderDetectionError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer, SDTokenizer, TokenizerSpec
from comfy_core.text_encoders.tokenizer import ClipTokenizer

log = logging.getLogger(__name__)

# (prefix, slot), most specific first. A checkpoint's encoders are the prefixes that hold a tower.
KNOWN_PREFIXES: tuple[tuple[str, str], ...] = (
    ("cond_stage_model.transformer.text_model.", "clip_l"),  # SD1.x
    ("cond_stage_model.transformer.", "clip_l"),  # SD1.x saved with transformers < 4.3 (no text_model.)
    ("cond_stage_model.model.", "clip_h"),  # SD2.x, OpenCLIP ViT-H
    ("conditioner.embedders.0.transformer.text_model.", "clip_l"),  # SDXL base, CLIP-L
    ("conditioner.embedders.0.model.", "clip_g"),  # SDXL refiner, OpenCLIP bigG
    ("conditioner.embedders.1.model.", "clip_g"),  # SDXL base, OpenCLIP bigG
)

_EMBEDDING_KEYS = {"clip_l": "clip_l", "clip_h": "clip_h", "clip_g": "clip_g"}


def detect_text_encoders(tensors: Mapping[str, Any]) -> list[ClipTextConfig]:
    """The text encoders of a single-file checkpoint, from tensor names and shapes only.

    `tensors`: name -> object with `.shape` (tuple) and `.dtype` (str). Returns `[]` when the file
    holds no text encoder. Raises `TextEncoderDetectionError` when a tower is incomplete, or when the
    set found is not one a family uses.
    """
    configs: list[ClipTextConfig] = []
    for prefix, slot in KNOWN_PREFIXES:
        config = ClipTextConfig.detect_from_weights(tensors, prefix, slot=slot)
        if config is not None:
            configs.append(config)
    slots = [c.slot for c in configs]
    if len(set(slots)) != len(slots):
        raise TextEncoderDetectionError(f"several text encoders claim the same slot: "
                                        f"{[(c.slot, c.prefix) for c in configs]}")
    if configs:
        spec = spec_for_slots(slots)
        log.info("text encoders: %s (%s)", spec.name, ", ".join(
            f"{c.slot} {c.layout} width {c.width} x{c.layers} layers" for c in configs))
    return configs


def make_tokenizer(configs: Sequence[ClipTextConfig], clip_tokenizer: ClipTokenizer | None = None) -> FamilyTokenizer:
    """The family tokenizer for these encoders (pad token per encoder, from the encoder set)."""
    spec = spec_for_slots([c.slot for c in configs])
    clip_tokenizer = clip_tokenizer or ClipTokenizer.shared_default()
    by_slot = {c.slot: c for c in configs}
    tokenizers = {}
    for options in spec.encoders:
        config = by_slot[options.slot]
        tokenizers[options.slot] = SDTokenizer(clip_tokenizer, TokenizerSpec(
            key=options.token_key, pad_token=options.pad_token, embedding_width=config.width,
            embedding_key=_EMBEDDING_KEYS[options.slot], max_length=min(77, config.max_positions)))
    return FamilyTokenizer(tokenizers)


def build_clip(configs: Sequence[ClipTextConfig], state_dict: Mapping[str, torch.Tensor],
               dtype: torch.dtype = torch.float32, *, clip_tokenizer: ClipTokenizer | None = None,
               load_device: torch.device | str | None = None,
               offload_device: torch.device | str | None = None) -> CLIP:
    """Build the encoders described by `configs` from `state_dict` and wrap them in a CLIP object.

    Modules are created on the meta device and loaded with `assign=True`; tensors already in
    `dtype` are used without copying. `clip_tokenizer` may be shared between CLIP objects
    (building one takes about 0.1 s).
    """
    if not configs:
        raise TextEncoderDetectionError("build_clip: no text encoder configs given (the checkpoint has no text encoder)")
    spec = spec_for_slots([c.slot for c in configs])
    encoders = {c.slot: build_encoder(c, state_dict, dtype) for c in configs}
    module = TextEncoderSet(spec, encoders)
    return CLIP.from_encoders(module, make_tokenizer(configs, clip_tokenizer), load_device, offload_device)
