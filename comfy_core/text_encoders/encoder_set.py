"""An encoder set: which text encoders a model family uses, how each is run, how outputs combine.

The sets themselves are family policy: each family file declares its `EncoderSetSpec`
(comfy_core/families/*.py); loaders read the detected family's set, and loaders of text-encoder
files alone (CLIPLoader) match the towers found against the registry's sets
(`FamilyRegistry.encoder_sets`). Per-encoder choices follow ComfyUI (`comfy/sd1_clip.py`,
`sd2_clip.py`, `sdxl_clip.py`, `text_encoders/sd3_clip.py`, `flux.py`) and match AUTOMATIC1111
where its prompt path runs (reference a1111-prompt.md §3.1, §3.7):

| set          | encoders               | token key     | pad       | default layer        | final norm on hidden |
|--------------|------------------------|---------------|-----------|----------------------|----------------------|
| sd1          | clip_l                 | l             | EOS       | last (after norm)    | yes                  |
| sd2          | clip_h                 | h             | 0         | -2 (penultimate)     | yes                  |
| sdxl         | clip_l, clip_g         | l, g          | EOS, 0    | -2, -2               | no, no               |
| sdxl_refiner | clip_g                 | g             | 0         | -2                   | no                   |
| sd3          | clip_l, clip_g, t5xxl  | l, g, t5xxl   | EOS, 0, 0 | -2, -2, last         | no, no, yes          |
| flux         | clip_l, t5xxl          | l, t5xxl      | EOS, 0    | last, last           | yes, yes             |

Clip skip (`CLIP.clip_layer(n)`, CLIPSetLastLayer) overrides the layer of every CLIP encoder of
the set, keeping each one's final-norm choice. How the outputs combine is the set's `combine`, a
`CombineRule`: by default `CONCAT` (SD: hidden states concatenated along the channel axis in slot
order, cut to the shorter token count); a family that combines otherwise gives its own rule in its
package (SD3's and Flux's, as ComfyUI's SD3ClipModel / FluxClipModel). The pooled output comes
from the set's `pooled_from` encoder, from its first chunk.
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
CLIP_SKIP_KINDS = ("clip", "qwen3", "qwen25vl", "qwen3vl", "gemma2")  # tower kinds whose layer CLIPSetLastLayer chooses


@dataclass(frozen=True)
class EncoderOptions:
    """How one encoder of a set is tokenized and run."""

    slot: str
    token_key: str  # ComfyUI's key in the tokens dict
    pad_token: int
    layer_idx: int | None  # None = final output after the final layer norm
    layer_norm_hidden: bool
    projected_pooled: bool = True
    # Where the tower sits in the family's single-file checkpoints (most specific first).
    prefixes: tuple[str, ...] = ()
    kind: str = "clip"  # "clip" | "t5" | "umt5" | "qwen3" | "qwen25vl" | "qwen3vl" | "llama" | "gemma2": which tower type (comfy_core/text_encoders/towers.py)
    # AUTOMATIC1111's use of this encoder (comfy_core/prompt/encode.py): its layer (None: the
    # CLIP's clip skip, SD1), whether that hidden state goes through the final norm, and whose
    # tokenizer rules ("transformers" for CLIP-L, "open_clip" for the OpenCLIP towers).
    webui_layer_idx: int | None = None
    webui_layer_norm: bool = True
    webui_tokenizer: str = "transformers"
    # The output width this slot stands for when a partial set lacks the tower (SD3's zeros).
    nominal_width: int = 0
    # T5 towers: the tokenizer's `min_length` (ComfyUI: 77 for SD3, 256 for Flux).
    min_length: int | None = None
    # Where ComfyUI's save_checkpoint writes this tower in a single file (`comfy_core.saving`), and
    # whether with its `position_ids` buffer (SDXL's CLIP-L); None: a set with such a tower is not
    # saved in single files here (SaveLayoutError).
    save_prefix: str | None = None
    save_position_ids: bool = False


class CombineRule:
    """How an encoder set's outputs combine into the conditioning and the pooled output (the set's
    `combine`). This base concatenates (SD: hidden states along the channel axis in slot order, cut
    to the shorter token count; pooled: the `pooled_from` encoder's); a family whose set combines
    otherwise (SD3, Flux) gives its own subclass in its package."""

    def __eq__(self, other: object) -> bool:  # a rule is its kind (sets compare and hash by value)
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def skip_clips(self, spec: "EncoderSetSpec", tokens: Mapping[str, Any]) -> bool:
        """Whether this call runs the set without its CLIP towers (SD3's empty CLIP tokens)."""
        return False

    def __call__(self, spec: "EncoderSetSpec", outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        conds = [outputs[o.slot] for o in spec.encoders]
        if len(conds) == 1:
            return conds[0], pooled.get(spec.pooled_from)
        length = min(c.shape[1] for c in conds)
        return torch.cat([c[:, :length] for c in conds], dim=-1), pooled.get(spec.pooled_from)


CONCAT = CombineRule()


@dataclass(frozen=True)
class EncoderSetSpec:
    name: str
    encoders: tuple[EncoderOptions, ...]
    pooled_from: str  # slot whose pooled output the set returns
    combine: CombineRule = CONCAT  # a `CombineRule` (see the module docstring)
    # ComfyUI's classes for the set and its tokenizer (packs check them): TextEncoderSet and
    # FamilyTokenizer subclasses; None: the base classes.
    set_class: Any = None
    tokenizer_class: Any = None
    # AUTOMATIC1111's SDXL rule: a negative prompt that is empty in every row is all zeros.
    webui_zero_empty_negative: bool = False
    # ComfyUI's CLIPLoader / DualCLIPLoader / TripleCLIPLoader `type` values that load this set
    # from text-encoder files alone.
    clip_types: tuple[str, ...] = ()
    # Whether the set may be loaded with only some of its encoders (SD3: any of CLIP-L, CLIP-G,
    # T5-XXL, as ComfyUI's SD3ClipModel; the absent ones count as zeros).
    partial: bool = False
    # Text-encoder files the family loads whole, whatever the loader's type (LTX-2.5's Gemma 4 with
    # its projection): (match(tensors: names -> shapes) -> bool, load(path, dtype, load_device,
    # offload_device) -> CLIP) pairs, tried by CLIPLoader's path before the towers are matched.
    whole_files: tuple[tuple[Any, Any], ...] = ()

    def fits(self, slots: Sequence[str]) -> bool:
        """Whether towers in `slots` form this set."""
        mine, given = {o.slot for o in self.encoders}, set(slots)
        return given == mine or (self.partial and bool(given) and given <= mine)

    def __post_init__(self) -> None:
        if not isinstance(self.combine, CombineRule):
            raise ValueError(f"encoder set {self.name!r}: combine must be a CombineRule, got {self.combine!r}")

    def options(self, slot: str) -> EncoderOptions:
        for option in self.encoders:
            if option.slot == slot:
                return option
        raise KeyError(slot)


def spec_for_slots(slots: Sequence[str], sets: Sequence[EncoderSetSpec]) -> EncoderSetSpec:
    """The encoder set whose encoders are exactly `slots` (or, for a partial set, some of them),
    among `sets` (`FamilyRegistry.encoder_sets()`, `comfy_core.families.encoder_sets()`)."""
    wanted = set(slots)
    for spec in sets:
        if {o.slot for o in spec.encoders} == wanted:
            return spec
    for spec in sets:
        if spec.fits(slots):
            return spec
    raise TextEncoderDetectionError(
        f"no known text-encoder set has exactly the encoders {sorted(wanted)}; known sets: "
        + ", ".join(f"{s.name}={[o.slot for o in s.encoders]}" for s in sets))


def with_clip_layer(options: EncoderOptions, layer_idx: int | None) -> EncoderOptions:
    """Options with clip skip applied (None leaves the encoder's default)."""
    return options if layer_idx is None else replace(options, layer_idx=layer_idx)


class TextEncoderSet(nn.Module):
    """The module a `ClipPatcher` wraps: encoders as children named by slot (`clip_l`, `clip_h`, `clip_g`).

    Built as `TextEncoderSet(spec, encoders)`, it is an instance of the set's class with
    ComfyUI's name (`SD1ClipModel`, `SD2ClipModel`, `SDXLClipModel`, `SDXLRefinerClipModel`, each
    in its family package's `clip.py`): packs tell families apart by `isinstance(clip.cond_stage_model, SDXLClipModel)` or by its class
    name (ComfyUI's `comfy/sd1_clip.py`, `sd2_clip.py`, `sdxl_clip.py`).
    """

    # ComfyUI's SD1ClipModel names its one tower `clip_<clip_name>` and stores that name in `clip`.
    clip_name: str | None = None
    clip: str | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> "TextEncoderSet":
        spec = args[0] if args else kwargs.get("spec")
        if cls is TextEncoderSet and isinstance(spec, EncoderSetSpec) and spec.set_class is not None:
            cls = spec.set_class
        return super().__new__(cls)

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, ClipTextEncoder]) -> None:
        super().__init__()
        if not spec.fits(list(encoders)):
            raise TextEncoderDetectionError(f"encoder set {spec.name} needs {[o.slot for o in spec.encoders]}, "
                                            f"got {sorted(encoders)}")
        self.spec = spec
        self.slots = tuple(o.slot for o in spec.encoders if o.slot in encoders)
        for option in spec.encoders:
            if option.slot not in encoders:
                continue
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
        for slot in self.slots:
            self.encoder(slot).set_clip_options(options)

    def reset_clip_options(self) -> None:
        """ComfyUI's `reset_clip_options`: every tower's defaults again."""
        for slot in self.slots:
            self.encoder(slot).reset_clip_options()

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        """ComfyUI tokens dict {key: chunks} -> (cond [1, T, sum of widths], pooled [1, P]); a
        one-tower set passes its tower's extra outputs on as a third item (`{"attention_mask":
        [1, T]}` of the LLM towers), as ComfyUI's SD1ClipModel returns its tower's tuple."""
        outputs: dict[str, torch.Tensor] = {}
        pooled_by_slot: dict[str, torch.Tensor | None] = {}
        extras: dict[str, Any] = {}
        skip_clips = self.spec.combine.skip_clips(self.spec, tokens)
        for base in self.spec.encoders:
            if base.slot not in self.slots or (skip_clips and base.kind == "clip"):
                continue
            # Clip skip reaches CLIP towers and the LLM towers (ComfyUI's SD1ClipModel passes
            # set_clip_options to its one Qwen3 tower: CLIPSetLastLayer picks its block).
            options = with_clip_layer(base, layer_idx) if base.kind in CLIP_SKIP_KINDS else base
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
            outputs[options.slot], pooled_by_slot[options.slot] = out[0], out[1]
            if len(out) > 2 and out[2]:
                extras[options.slot] = out[2]
        combined = combine_outputs(self.spec, outputs, pooled_by_slot)
        if len(self.slots) == 1 and extras:
            return (*combined, dict(extras[self.slots[0]]))
        return combined


def combine_outputs(spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                    pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The set's conditioning and pooled output from its encoders' (its `combine` rule); `outputs`
    holds the encoders present (all of them, except in a partial set)."""
    return spec.combine(spec, outputs, pooled)
