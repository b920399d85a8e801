"""The CLIP wire object: tokenizer + text-encoder set behind a `ClipPatcher`, with ComfyUI's API.

Nodes never mutate a CLIP they receive: `clone()` shares the encoders and the tokenizer and copies
the patcher's patch containers (cheap), so "clone, change, return" keeps cached outputs valid.
Encoding always happens inside `with self.patcher.applied() as encoders:`, so LoRA weight patches
and object patches apply for that call only. Clip skip is a patcher option (`clip_layer`), so it is
part of the patcher's signature.
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping

import torch

from comfy_core.patching import ClipPatcher
from comfy_core.patching.signature import fingerprint
from comfy_core.text_encoders.encoder_set import EncoderOptions, TextEncoderSet, with_clip_layer
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.generate import SamplingOptions, generate_with_clip
from comfy_core.text_encoders.sd_tokenizer import TOKENIZER_OPTIONS, EmbeddingLookup, FamilyTokenizer

CLIP_LAYER_OPTION = "clip_layer"


class CLIP:
    """ComfyUI's CLIP object (`comfy/sd.py: CLIP`), over our encoders.

    `tokenize`, `encode_from_tokens`, `encode_from_tokens_scheduled`, `encode`, `clone`,
    `clip_layer`, `add_patches`, `get_key_patches`, `load_model`, `get_sd`, `load_sd`,
    `generate`, `decode`, `.patcher`, `.tokenizer`, `.cond_stage_model`, `.layer_idx`.
    """

    def __init__(self, patcher: ClipPatcher, tokenizer: FamilyTokenizer) -> None:
        if not isinstance(patcher.model, TextEncoderSet):
            raise TypeError(f"CLIP: the patcher's model must be a TextEncoderSet, got {type(patcher.model).__name__}")
        self.patcher = patcher
        self._tokenizer = tokenizer
        # Held here, not in patcher options: options are deep-copied on clone, a lookup is shared.
        self._embedding_lookup: EmbeddingLookup | None = None
        # ComfyUI's CLIP.tokenizer_options (set_tokenizer_option), passed to every tokenize call.
        self.tokenizer_options: dict[str, Any] = {}

    @classmethod
    def from_encoders(cls, encoders: TextEncoderSet, tokenizer: FamilyTokenizer,
                      load_device: torch.device | str | None = None,
                      offload_device: torch.device | str | None = None) -> "CLIP":
        return cls(ClipPatcher(encoders, load_device, offload_device), tokenizer)

    # --- ComfyUI attributes ---

    @property
    def cond_stage_model(self) -> TextEncoderSet:
        return self.patcher.model

    @property
    def tokenizer(self) -> FamilyTokenizer:
        """The tokenizer, with this clone's embedding lookup (if one was set) wired in: the same
        object on every read (and for every clone with that lookup), so what a pack sets on it
        stays, as on ComfyUI's `CLIP.tokenizer` attribute."""
        lookup = self._embedding_lookup
        return self._tokenizer if lookup is None else self._tokenizer.with_embedding_lookup(lookup)

    @tokenizer.setter
    def tokenizer(self, tokenizer: FamilyTokenizer) -> None:
        """A pack assigning `clip.tokenizer` (a plain attribute in ComfyUI): used as given, from now
        on, by this CLIP and its later clones; embeddings resolve as that tokenizer's own lookup says."""
        self._tokenizer = tokenizer
        self._embedding_lookup = None

    @property
    def layer_idx(self) -> int | None:
        return self.patcher.model_options.get(CLIP_LAYER_OPTION)

    @layer_idx.setter
    def layer_idx(self, value: int | None) -> None:
        self.clip_layer(value)

    @property
    def family(self) -> str:
        return self.cond_stage_model.spec.name

    def cache_signature(self) -> Hashable | None:
        """Value-level identity for the executor's cache keys: the patcher's patch set (LoRA,
        clip skip, embeddings), the tokenizer and this clone's embedding lookup (None when one
        of them has no lasting identity)."""
        key, stable = fingerprint((self.patcher, self._tokenizer, self._embedding_lookup,
                                   tuple(sorted(self.tokenizer_options.items()))))
        return key if stable else None

    # --- cloning and patches ---

    def clone(self) -> "CLIP":
        n = CLIP(self.patcher.clone(), self._tokenizer)
        n._embedding_lookup = self._embedding_lookup
        n.tokenizer_options = dict(self.tokenizer_options)
        return n

    def set_tokenizer_option(self, option_name: str, value: Any) -> None:
        """ComfyUI's `CLIP.set_tokenizer_option`: an option every later `tokenize` passes to the
        tokenizers. Ours honour `<encoder>_min_length` (`clip_l_min_length`, ...): pad the last
        chunk to at least that many tokens; any other name is refused, not ignored."""
        known = {pattern.format(key=slot) for pattern in TOKENIZER_OPTIONS for slot in self._tokenizer.slots}
        if option_name not in known:
            raise TokenizeError(f"set_tokenizer_option: option {option_name!r} is not supported by these "
                                f"tokenizers; supported: {sorted(known)}")
        self.tokenizer_options[option_name] = value

    def clip_layer(self, layer_idx: int | None) -> None:
        """Clip skip: use the hidden state of layer `layer_idx` (negative, from the end) of every encoder."""
        if layer_idx is not None and not isinstance(layer_idx, int):
            raise TypeError(f"clip_layer: layer index must be an int or None, got {layer_idx!r}")
        if layer_idx is None:
            self.patcher.model_options.pop(CLIP_LAYER_OPTION, None)
        else:
            self.patcher.set_option(CLIP_LAYER_OPTION, layer_idx)

    def set_embedding_lookup(self, lookup: EmbeddingLookup | None) -> None:
        """Resolve `embedding:NAME` in prompts with `lookup(name, embedding_key, width)` (this clone only)."""
        self._embedding_lookup = lookup

    def add_patches(self, patches: dict, strength_patch: float = 1.0, strength_model: float = 1.0) -> list:
        return self.patcher.add_patches(patches, strength_patch, strength_model)

    def get_key_patches(self) -> dict:
        return self.patcher.get_key_patches()

    def load_model(self) -> ClipPatcher:
        """ComfyUI packs call this before using `cond_stage_model`; loading happens in `applied()`."""
        return self.patcher

    def get_sd(self) -> dict[str, torch.Tensor]:
        """The encoders' weights, plus what the tokenizer carries in the file (umT5's
        `spiece_model`), as ComfyUI's `CLIP.get_sd`, so a saved CLIP loads with its tokenizer."""
        state = self.patcher.model_state_dict()
        tokenizer_state = getattr(self.tokenizer, "state_dict", None)
        if callable(tokenizer_state):
            state.update(tokenizer_state())
        return state

    def load_sd(self, sd: Mapping[str, torch.Tensor], full_model: bool = False) -> Any:
        """ComfyUI's `CLIP.load_sd`: copy `sd` (our parameter names, `clip_l.transformer...`) into
        the encoders' weights, non-strictly; returns `(missing, unexpected)` keys. It changes the
        base module every clone shares, as in ComfyUI; cached patched weights are dropped."""
        result = self.cond_stage_model.load_state_dict(dict(sd), strict=False)
        self.patcher.drop_weight_cache()
        return result

    def encoder_options(self, slot: str) -> EncoderOptions:
        """Pad token, layer and final-norm choice in force for encoder `slot` (clip skip included)."""
        return with_clip_layer(self.cond_stage_model.spec.options(slot), self.layer_idx)

    # --- encoding ---

    def tokenize(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        options = {**self.tokenizer_options, **(kwargs.get("tokenizer_options") or {})}
        if options:
            kwargs["tokenizer_options"] = options
        return self.tokenizer.tokenize_with_weights(text, return_word_ids, **kwargs)

    def encode_from_tokens(self, tokens: Mapping[str, Any], return_pooled: bool | str = False,
                           return_dict: bool = False) -> Any:
        """tokens -> cond [1, T, W]; with `return_pooled` also the pooled output
        (`"unprojected"` skips the text projection); `return_dict` gives
        `{"cond": cond, "pooled_output": pooled}` plus the set's extra outputs (the LLM towers'
        `attention_mask`), as ComfyUI's `CLIP.encode_from_tokens`."""
        projected = return_pooled != "unprojected"
        with self.patcher.applied() as encoders:
            with torch.no_grad():
                out = encoders.encode_token_weights(tokens, layer_idx=self.layer_idx, projected_pooled=projected)
        cond, pooled = out[0], out[1]
        if return_dict:
            return {"cond": cond, "pooled_output": pooled, **(out[2] if len(out) > 2 else {})}
        if return_pooled:
            return cond, pooled
        return cond

    def encode_from_tokens_scheduled(self, tokens: Mapping[str, Any], unprojected: bool = False,
                                     add_dict: Mapping[str, Any] | None = None, show_pbar: bool = True) -> list:
        """tokens -> CONDITIONING `[[cond, {"pooled_output": pooled, **add_dict}]]` (no hook schedules)."""
        out = self.encode_from_tokens(tokens, return_pooled="unprojected" if unprojected else True,
                                      return_dict=True)
        cond = out.pop("cond")
        out.update(add_dict or {})
        return [[cond, out]]

    def encode(self, text: str) -> torch.Tensor:
        return self.encode_from_tokens(self.tokenize(text))

    # --- generation (LLM text encoders; comfy_core/text_encoders/generate.py) ---

    def generate(self, tokens: Mapping[str, Any], do_sample: bool = True, max_length: int = 256,
                 temperature: float = 1.0, top_k: int = 50, top_p: float = 0.95, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, seed: int | None = None, presence_penalty: float = 0.0,
                 mtp: Any = True) -> list[int]:
        """ComfyUI's `CLIP.generate`: token ids written by the main encoder after `tokens`.
        `mtp` has no effect (no encoder here has multi-token-prediction weights)."""
        options = SamplingOptions(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p,
                                  min_p=min_p, repetition_penalty=repetition_penalty,
                                  presence_penalty=presence_penalty, seed=seed)
        return generate_with_clip(self, tokens, max_length, options)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        """ComfyUI's `CLIP.decode`: the tokenizer's text of `token_ids`."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)

    def __repr__(self) -> str:
        return f"CLIP(family={self.family!r}, layer_idx={self.layer_idx!r}, patches={len(self.patcher.patches)})"
