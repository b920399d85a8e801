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
from comfy_core.text_encoders.encoder_set import EncoderSetSpec, TextEncoderSet, spec_for_slots
from comfy_core.text_encoders.errors import TextEncoderDetectionError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer
from comfy_core.text_encoders.towers import build_tower, detect_tower, tower_tokenizer
from comfy_core.text_encoders.tokenizer import ClipTokenizer

log = logging.getLogger(__name__)

_EMBEDDING_KEYS = {"clip_l": "clip_l", "clip_h": "clip_h", "clip_g": "clip_g"}


def known_prefixes(sets: Sequence[EncoderSetSpec]) -> list[tuple[str, str]]:
    """(prefix, slot) pairs of the single-file prefixes the sets declare, most specific first
    within each set, each pair once."""
    pairs: list[tuple[str, str]] = []
    for spec in sets:
        for options in spec.encoders:
            for prefix in options.prefixes:
                if (prefix, options.slot) not in pairs:
                    pairs.append((prefix, options.slot))
    return pairs


def detect_text_encoders(tensors: Mapping[str, Any], sets: Sequence[EncoderSetSpec]) -> list[ClipTextConfig]:
    """The text encoders of a single-file checkpoint, from tensor names and shapes only.

    `tensors`: name -> object with `.shape` (tuple) and `.dtype` (str). `sets`: the encoder sets
    whose prefixes to look under (a detected family's own, or `comfy_core.families.encoder_sets()`).
    Returns `[]` when the file holds no text encoder. Raises `TextEncoderDetectionError` when a
    tower is incomplete, or when the set found is not one of `sets`.
    """
    sets = list(sets)
    options_by_pair = {(prefix, o.slot): o for spec in sets for o in spec.encoders for prefix in o.prefixes}
    configs: list[Any] = []
    taken: set[str] = set()
    for prefix, slot in known_prefixes(sets):
        if prefix in taken:
            continue
        config = detect_tower(tensors, prefix, options_by_pair[(prefix, slot)])
        if config is not None:
            configs.append(config)
            taken.add(prefix)
    slots = [c.slot for c in configs]
    if len(set(slots)) != len(slots):
        raise TextEncoderDetectionError(f"several text encoders claim the same slot: "
                                        f"{[(c.slot, c.prefix) for c in configs]}")
    if configs:
        spec = spec_for_slots(slots, sets)
        log.info("text encoders: %s (%s)", spec.name, ", ".join(
            f"{c.slot} {getattr(c, 'layout', 't5')} width {c.width} x{c.layers} layers" for c in configs))
    return configs


def make_tokenizer(configs: Sequence[ClipTextConfig], clip_tokenizer: ClipTokenizer | None = None, *,
                   spec: EncoderSetSpec, tokenizer_data: Mapping[str, Any] | None = None) -> FamilyTokenizer:
    """The family tokenizer for these encoders (pad token per encoder, from the encoder set `spec`).
    `tokenizer_data`: ComfyUI's, what the files carry for their tokenizers (umT5's `spiece_model`)."""
    clip_tokenizer = clip_tokenizer or ClipTokenizer.shared_default()
    by_slot = {c.slot: c for c in configs}
    tokenizers = {}
    for options in spec.encoders:
        if options.slot not in by_slot:  # a partial set (SD3 without some towers)
            continue
        tokenizers[options.slot] = tower_tokenizer(options, by_slot[options.slot], clip_tokenizer,
                                                   _EMBEDDING_KEYS.get(options.slot, options.slot), tokenizer_data)
    return (spec.tokenizer_class or FamilyTokenizer)(tokenizers)


def build_clip(configs: Sequence[ClipTextConfig], state_dict: Mapping[str, torch.Tensor],
               dtype: torch.dtype = torch.float32, *, clip_tokenizer: ClipTokenizer | None = None,
               load_device: torch.device | str | None = None,
               offload_device: torch.device | str | None = None, spec: EncoderSetSpec,
               tokenizer_data: Mapping[str, Any] | None = None) -> CLIP:
    """Build the encoders described by `configs` from `state_dict` and wrap them in a CLIP object.

    Modules are created on the meta device and loaded with `assign=True`; tensors already in
    `dtype` are used without copying. `clip_tokenizer` may be shared between CLIP objects
    (building one takes about 0.1 s). `tokenizer_data`: ComfyUI's, a tokenizer the file carries
    (a single file's `text_encoders.spiece_model` for Lumina 2's Gemma).
    """
    if not configs:
        raise TextEncoderDetectionError("build_clip: no text encoder configs given (the checkpoint has no text encoder)")
    encoders = {c.slot: build_tower(c, state_dict, dtype) for c in configs}
    module = TextEncoderSet(spec, encoders)
    tokenizer = make_tokenizer(configs, clip_tokenizer, spec=spec, tokenizer_data=tokenizer_data)
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)
