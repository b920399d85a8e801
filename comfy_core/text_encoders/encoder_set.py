"""Which encoders a model family uses, how each is run, and how their outputs combine.

Per-encoder choices follow ComfyUI (`comfy/sd1_clip.py`, `sd2_clip.py`, `sdxl_clip.py`) and match
AUTOMATIC1111 (reference a1111-prompt.md §3.1, §3.7):

| set          | encoders        | token key | pad | default layer           | final norm on hidden |
|--------------|-----------------|-----------|-----|-------------------------|----------------------|
| sd1          | clip_l          | l         | EOS | last (after final norm) | yes                  |
| sd2          | clip_h          | h         | 0   | -2 (penultimate)        | yes                  |
| sdxl         | clip_l, clip_g  | l, g      | EOS, 0 | -2, -2               | no, no               |
| sdxl_refiner | clip_g          | g         | 0   | -2                      | no                   |

Clip skip (`CLIP.clip_layer(n)`, CLIPSetLastLayer) overrides the layer of every encoder of the set,
keeping each one's final-norm choice. Several encoders: hidden states are concatenated along the
channel axis (in slot order l, g), cut to the shorter token count; the pooled output comes from the
set's pooling encoder (CLIP-G for SDXL), from its first chunk.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.text_encoders.encoder import ClipTextEncoder
# re-exported: their home was this module (tests and packs' glue import them from here)
from comfy_core.text_encoders.token_chunks import EmbeddingOverride, chunks_to_ids, encode_weighted_chunks  # noqa: F401
from comfy_core.text_encoders.errors import TextEncoderDetectionError, TokenizeError

log = logging.getLogger(__name__)

PAD_EOS = 49407
PAD_ZERO = 0


@dataclass(frozen=True)
class EncoderOptions:
    """How one encoder of a set is tokenized and run."""

    slot: str
    token_key: str  # ComfyUI's key in the tokens dict
    pad_token: int
    layer_idx: int | None  # None = final output after the final layer norm
    layer_norm_hidden: bool
    projected_pooled: bool = True


@dataclass(frozen=True)
class EncoderSetSpec:
    name: str
    encoders: tuple[EncoderOptions, ...]
    pooled_from: str  # slot whose pooled output the set returns

    def options(self, slot: str) -> EncoderOptions:
        for option in self.encoders:
            if option.slot == slot:
                return option
        raise KeyError(slot)


ENCODER_SETS: tuple[EncoderSetSpec, ...] = (
    EncoderSetSpec("sd1", (EncoderOptions("clip_l", "l", PAD_EOS, None, True),), "clip_l"),
    EncoderSetSpec("sd2", (EncoderOptions("clip_h", "h", PAD_ZERO, -2, True),), "clip_h"),
    EncoderSetSpec("sdxl", (EncoderOptions("clip_l", "l", PAD_EOS, -2, False),
                            EncoderOptions("clip_g", "g", PAD_ZERO, -2, False)), "clip_g"),
    EncoderSetSpec("sdxl_refiner", (EncoderOptions("clip_g", "g", PAD_ZERO, -2, False),), "clip_g"),
)


def spec_for_slots(slots: Sequence[str]) -> EncoderSetSpec:
    """The encoder-set definition whose encoders are exactly `slots`."""
    wanted = set(slots)
    for spec in ENCODER_SETS:
        if {o.slot for o in spec.encoders} == wanted:
            return spec
    raise TextEncoderDetectionError(
        f"no known text-encoder set has exactly the encoders {sorted(wanted)}; known sets: "
        + ", ".join(f"{s.name}={[o.slot for o in s.encoders]}" for s in ENCODER_SETS))


def with_clip_layer(options: EncoderOptions, layer_idx: int | None) -> EncoderOptions:
    """Options with clip skip applied (None leaves the encoder's default)."""
    return options if layer_idx is None else replace(options, layer_idx=layer_idx)


class TextEncoderSet(nn.Module):
    """The module a `ClipPatcher` wraps: encoders as children named by slot (`clip_l`, `clip_h`, `clip_g`).

    Built as `TextEncoderSet(spec, encoders)`, it is an instance of the set's class with
    ComfyUI's name (`SD1ClipModel`, `SD2ClipModel`, `SDXLClipModel`, `SDXLRefinerClipModel`, below):
    packs tell families apart by `isinstance(clip.cond_stage_model, SDXLClipModel)` or by its class
    name (ComfyUI's `comfy/sd1_clip.py`, `sd2_clip.py`, `sdxl_clip.py`).
    """

    # ComfyUI's SD1ClipModel names its one tower `clip_<clip_name>` and stores that name in `clip`.
    clip_name: str | None = None
    clip: str | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "TextEncoderSet":
        spec = args[0] if args else kwargs.get("spec")
        if cls is TextEncoderSet and isinstance(spec, EncoderSetSpec):
            cls = _SET_CLASSES.get(spec.name, TextEncoderSet)
        return super().__new__(cls)

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, ClipTextEncoder]) -> None:
        super().__init__()
        if set(encoders) != {o.slot for o in spec.encoders}:
            raise TextEncoderDetectionError(f"encoder set {spec.name} needs {[o.slot for o in spec.encoders]}, "
                                            f"got {sorted(encoders)}")
        self.spec = spec
        for option in spec.encoders:
            encoder = encoders[option.slot]
            encoder.options = option  # so the tower alone has ComfyUI's encode_token_weights
            encoder.default_options = option
            self.add_module(option.slot, encoder)

    def encoder(self, slot: str) -> ClipTextEncoder:
        return getattr(self, slot)

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """ComfyUI's `set_clip_options` on the set: every tower's (`{"layer": n}`, ...). Our own
        encodes do not read it (each call passes its clip skip); packs that call the towers'
        `encode_token_weights` themselves do."""
        for option in self.spec.encoders:
            self.encoder(option.slot).set_clip_options(options)

    def reset_clip_options(self) -> None:
        """ComfyUI's `reset_clip_options`: every tower's defaults again."""
        for option in self.spec.encoders:
            self.encoder(option.slot).reset_clip_options()

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """ComfyUI tokens dict {key: chunks} -> (cond [1, T, sum of widths], pooled [1, P])."""
        outputs: list[torch.Tensor] = []
        pooled = None
        for base in self.spec.encoders:
            options = with_clip_layer(base, layer_idx)
            options = replace(options, projected_pooled=projected_pooled and options.projected_pooled)
            if options.token_key not in tokens:
                raise TokenizeError(f"tokens for encoder set {self.spec.name} lack key {options.token_key!r} "
                                    f"({options.slot}); got keys {sorted(tokens)}")
            encoder = self.encoder(options.slot)
            # Through the tower's own `encode_token_weights`, as ComfyUI's SD1ClipModel /
            # SDXLClipModel do: a pack that replaces it on the tower (smZNodes' A1111 parsers)
            # is what runs, with this call's layer and projection in force.
            with encoder.using_options(options):
                out = encoder.encode_token_weights(tokens[options.token_key])
            cond, encoder_pooled = out[0], out[1]
            outputs.append(cond)
            if options.slot == self.spec.pooled_from:
                pooled = encoder_pooled
        if len(outputs) == 1:
            return outputs[0], pooled
        length = min(o.shape[1] for o in outputs)
        return torch.cat([o[:, :length] for o in outputs], dim=-1), pooled


class SD1ClipModel(TextEncoderSet):
    """SD1.x's CLIP-L set (ComfyUI's `comfy.sd1_clip.SD1ClipModel`)."""

    clip_name, clip = "l", "clip_l"


class SD2ClipModel(TextEncoderSet):
    """SD2.x's OpenCLIP ViT-H set (ComfyUI's `comfy.sd2_clip.SD2ClipModel`)."""

    clip_name, clip = "h", "clip_h"


class SDXLClipModel(TextEncoderSet):
    """SDXL's CLIP-L + OpenCLIP bigG set (ComfyUI's `comfy.sdxl_clip.SDXLClipModel`)."""


class SDXLRefinerClipModel(TextEncoderSet):
    """The SDXL refiner's bigG set (ComfyUI's `comfy.sdxl_clip.SDXLRefinerClipModel`)."""

    clip_name, clip = "g", "clip_g"


_SET_CLASSES: dict[str, type[TextEncoderSet]] = {
    "sd1": SD1ClipModel, "sd2": SD2ClipModel, "sdxl": SDXLClipModel, "sdxl_refiner": SDXLRefinerClipModel,
}


