"""Qwen3.5's tokenizer and encoder set, as ComfyUI's `comfy/text_encoders/qwen35.py` builds them
(`Qwen35Tokenizer`, `Qwen35ImageTokenizer`, `Qwen35TEModel`; the tower is qwen35.py's).

The vocabulary is Qwen3.5's own (248,044 byte-level BPE tokens, then added tokens from 248044:
`<|endoftext|>`, `<|im_start|>`, `<|im_end|>`, ... in Qwen's order), which ComfyUI ships as
`comfy/text_encoders/qwen35_tokenizer/` and this repository does not: it is read from a Hugging
Face `tokenizer.json` in a `qwen35_tokenizer/` folder beside the text-encoder file, or from
ComfyUI's `tokenizer_data["qwen35_tokenizer"]` (a path, the JSON, or its bytes); without one the
load is a `Qwen35TokenizerMissingError`, and a vocabulary whose special tokens sit elsewhere (Qwen2
/ Qwen3's, shipped here for the other Qwen towers) a `VocabularyError`. Tokenized as ComfyUI's
`SDTokenizer` with Qwen's settings (`qwen_tokenizer.QwenTokenizer` over that vocabulary): no start
or end token, pad `<|endoftext|>`, one chunk, weights disabled.

The prompt template (`Qwen35ImageTokenizer.tokenize_with_weights`):
`<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n`, a system turn
`<|im_start|>system\n{system_prompt}<|im_end|>\n` before it when one is given, and
`<think>\n</think>\n` after it unless `thinking`; a text that starts with `<|im_start|>` is used as
it is; `llama_template` replaces the user turn; ComfyUI's `skip_template` is not read (its Qwen3.5
tokenizer applies the template either way). Images (TextGenerate's `image`, one entry per batch
item) put one `<|vision_start|><|image_pad|><|vision_end|>` block each before the prompt, and each
`<|image_pad|>` (248056) becomes ComfyUI's image entry `{"type": "image", "data": IMAGE}`, which the
tower replaces by its vision tower's tokens (qwen35_vision.py).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.generate import GenerationError
from comfy_core.text_encoders.qwen35 import (DEFAULT_SLOT, ENDOFTEXT_ID, IM_END_ID, IM_START_ID, IMAGE_PAD_ID,
                                             LLAMA_TEMPLATE, NO_THINKING, TOKENIZER_KEY, Qwen35Config,
                                             Qwen35TokenizerMissingError)

VISION_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"  # one per image, before the prompt
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer


def load_qwen35_backend(source: Any) -> Any:
    """A `tokenizers.Tokenizer` from Qwen3.5's vocabulary: a `tokenizer.json` (path, folder holding
    one, JSON text or bytes, or uint8 tensor of its bytes). `Qwen35TokenizerMissingError` when
    there is none; `VocabularyError` for one that is not Qwen3.5's (its specials at other ids)."""
    from tokenizers import Tokenizer

    from comfy_core.text_encoders.errors import VocabularyError

    if source is None:
        raise Qwen35TokenizerMissingError(
            "the Qwen3.5 tokenizer is not here: this engine does not ship Qwen3.5's vocabulary. Put Qwen3.5's "
            f"Hugging Face tokenizer.json in a folder {TOKENIZER_KEY}/ beside the text-encoder file (ComfyUI ships "
            f"it as comfy/text_encoders/{TOKENIZER_KEY}/), or pass tokenizer_data={{{TOKENIZER_KEY!r}: path}}")
    if isinstance(source, torch.Tensor):
        source = bytes(source.reshape(-1).to(torch.uint8).tolist())
    if isinstance(source, (bytes, bytearray)):
        source = source.decode("utf-8")
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source)
        if path.is_dir():
            path = path / "tokenizer.json"
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise Qwen35TokenizerMissingError(f"the Qwen3.5 tokenizer {path} cannot be read: {exc}") from None
    try:
        backend = Tokenizer.from_str(source)
    except Exception as exc:  # the tokenizers library raises its own Exception type
        raise VocabularyError(f"not a Hugging Face tokenizer.json for Qwen3.5: {exc}") from None
    for token_id, content in ((ENDOFTEXT_ID, "<|endoftext|>"), (IM_START_ID, "<|im_start|>"),
                              (IM_END_ID, "<|im_end|>")):
        if backend.token_to_id(content) != token_id:
            raise VocabularyError(f"not Qwen3.5's vocabulary: {content} is {backend.token_to_id(content)}, "
                                  f"Qwen3.5 has it at {token_id}")
    return backend


@lru_cache(maxsize=4)
def _backend_from_text(text: str) -> Any:
    return load_qwen35_backend(text)


def find_tokenizer(model_path: str | Path | None) -> Path | None:
    """The `qwen35_tokenizer/tokenizer.json` beside a model file, None when there is none."""
    if model_path is None:
        return None
    candidate = Path(model_path).parent / TOKENIZER_KEY / "tokenizer.json"
    return candidate if candidate.is_file() else None


class Qwen35ImageTokenizer(FamilyTokenizer):
    """ComfyUI's `Qwen35ImageTokenizer` (an SD1Tokenizer named by the model type): the chat
    template of the module doc around the prompt, weights disabled."""

    clip_name = clip = DEFAULT_SLOT
    llama_template = LLAMA_TEMPLATE

    def __init__(self, tokenizers: dict[str, Any]) -> None:
        super().__init__(tokenizers)
        self.clip_name = self.clip = self.slots[0]

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              thinking: bool = False, system_prompt: str = "", prevent_empty_text: bool = False,
                              images: Any = None, image: Any = None, **kwargs: Any) -> dict[str, list]:
        for media in ("video", "audio"):
            if kwargs.pop(media, None) is not None:
                raise GenerationError(f"qwen3.5: a {media} is not read by this encoder (text and images only)")
        if image is not None and not images:
            images = [image[i:i + 1] for i in range(image.shape[0])]
        images = list(images or [])
        kwargs.pop("skip_template", None)  # ComfyUI's Qwen3.5 tokenizer applies its template either way
        if prevent_empty_text and text == "":
            text = " "
        if text.startswith("<|im_start|>"):
            full = text
        else:
            if llama_template is not None:
                template = llama_template
            elif images:
                template = LLAMA_TEMPLATE.replace("user\n", "user\n" + VISION_BLOCK * len(images), 1)
            else:
                template = LLAMA_TEMPLATE
            full = template.format(text)
            if system_prompt:
                full = "<|im_start|>system\n" + system_prompt + "<|im_end|>\n" + full
            if not thinking:
                full += NO_THINKING
        kwargs["disable_weights"] = True
        tokens = super().tokenize_with_weights(full, return_word_ids, **kwargs)
        used = 0
        for chunk in next(iter(tokens.values())):  # each <|image_pad|>, in order, becomes an image entry
            for index, pair in enumerate(chunk):
                if not isinstance(pair[0], torch.Tensor) and pair[0] == IMAGE_PAD_ID and used < len(images):
                    chunk[index] = ({"type": "image", "data": images[used], "original_type": "image"},) + tuple(pair[1:])
                    used += 1
        return tokens

    def decode(self, token_ids: list[int], skip_special_tokens: bool = True) -> str:
        return getattr(self, self.slots[0]).decode(token_ids, skip_special_tokens=skip_special_tokens)


class Qwen35TEModel(TextEncoderSet):
    """ComfyUI's `Qwen35TEModel` (an SD1ClipModel named by the model type)."""

    def __init__(self, spec: Any, encoders: Mapping[str, nn.Module]) -> None:
        super().__init__(spec, encoders)
        self.clip_name = self.clip = spec.encoders[0].slot


@lru_cache(maxsize=None)
def encoder_set(slot: str) -> EncoderSetSpec:
    """The one-tower encoder set of a Qwen3.5 model (`slot`: ComfyUI's model type), which ComfyUI
    builds for a single Qwen3.5 file under any CLIPLoader type."""
    return EncoderSetSpec(
        slot, (EncoderOptions(slot, slot, ENDOFTEXT_ID, -2, False, projected_pooled=False, kind="qwen35",
                              min_length=1),),
        slot, set_class=Qwen35TEModel, tokenizer_class=Qwen35ImageTokenizer)


def qwen35_tokenizer(options: Any, config: Qwen35Config, tokenizer_data: Mapping[str, Any] | None) -> Any:
    """The slot tokenizer (`qwen_tokenizer.QwenTokenizer` over Qwen3.5's vocabulary)."""
    from comfy_core.text_encoders.qwen_tokenizer import QwenTokenizer

    source = (tokenizer_data or {}).get(TOKENIZER_KEY)
    if isinstance(source, (str, Path)) and not str(source).lstrip().startswith("{"):
        path = Path(source)
        source = (path / "tokenizer.json" if path.is_dir() else path)
        try:
            source = source.read_text(encoding="utf-8")
        except OSError as exc:
            raise Qwen35TokenizerMissingError(f"the Qwen3.5 tokenizer {source} cannot be read: {exc}") from None
    if isinstance(source, torch.Tensor):
        source = bytes(source.reshape(-1).to(torch.uint8).tolist())
    if isinstance(source, (bytes, bytearray)):
        source = source.decode("utf-8")
    backend = _backend_from_text(source) if isinstance(source, str) else load_qwen35_backend(source)
    return QwenTokenizer(options.token_key, config.width, min_length=options.min_length,
                         pad_token=options.pad_token, disable_weights=True, backend=backend)


__all__ = ["Qwen35ImageTokenizer", "Qwen35TEModel", "encoder_set", "find_tokenizer", "load_qwen35_backend",
           "qwen35_tokenizer"]
