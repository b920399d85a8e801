"""Lens's text encoder: GPT-OSS 20B (`comfy_core.text_encoders.gpt_oss`) behind ComfyUI's CLIP
object, as `comfy/text_encoders/gpt_oss.py` has it (`LensTokenizer` over `LensGptOssTokenizer`,
`LensTEModel` over `LensGptOssClipModel`); loaded by CLIPLoader type "lens" from the one file
(`gpt_oss_20b_*.safetensors`), which carries its own tokenizer (`tokenizer_json`: uint8 bytes of a
Hugging Face tokenizers JSON).

- Tokenizing: an empty (or blank) prompt gives no tokens; otherwise the prompt in GPT-OSS's Harmony
  chat as the Lens pipeline renders it (`LENS_CHAT`: the system turn with the date 2026-05-23,
  Lens's developer instructions, the prompt as the user turn, a fixed analysis turn, then the final
  channel opened), encoded without added special tokens, cut to 512 tokens; weights disabled.
- Encoding: the outputs of blocks 5, 11, 17 and 23 (no final norm), stacked per token `[1, T, 4 x
  2880]`, the first 97 tokens (the template before the prompt) cut; the token mask as
  `attention_mask` and the stack depth as `num_layers_stacked`, always; no pooled output. No tokens:
  a zero-length conditioning `[1, 0, 4 x 2880]` with an empty mask.
- The file: ComfyUI's names bare (`layers.N...`), under `model.`, or under `gpt_oss.transformer.`
  (also as single-file `text_encoders.gpt_oss.transformer.`); quantised layers (the template's
  `gpt_oss_20b_nvfp4`: NVFP4, comfy_core/weights/quant_registry.py) dequantised to bf16 as read.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TextEncoderError, TokenizeError
from comfy_core.text_encoders.gpt_oss import SINKS, GptOssConfig, GptOssModel, build_gpt_oss
from comfy_core.text_encoders.file_tokenizer import load_tokenizer_json, tokenizer_json_bytes
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

log = logging.getLogger(__name__)

SLOT = "gpt_oss"
TOKENIZER_KEY = "tokenizer_json"
LENS_TAPS = (5, 11, 17, 23)
LENS_TXT_OFFSET = 97
LENS_MAX_TOKENS = 512
PAD_ID = 199999  # <|endoftext|>
WIDTH = 2880
PREFIXES = ("", "model.", "gpt_oss.transformer.", "text_encoders.gpt_oss.transformer.")
LENS_SYSTEM = ("Describe the image by detailing the color, shape, size, texture, quantity, text, spatial "
               "relationships of the objects and background.")
LENS_THINKING = "Need to generate one image according to the description."
LENS_DATE = "2026-05-23"


class LensTokenizerError(TextEncoderError):
    """A GPT-OSS file without (or with an unreadable) tokenizer."""


def render_chat(prompt: str) -> str:
    """The prompt in the Harmony chat the Lens pipeline renders (see the module docstring)."""
    return ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            "Knowledge cutoff: 2024-06\n"
            f"Current date: {LENS_DATE}\n\n"
            "Reasoning: medium\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
            f"<|start|>developer<|message|># Instructions\n\n{LENS_SYSTEM}\n\n<|end|>"
            f"<|start|>user<|message|>{prompt}<|end|>"
            f"<|start|>assistant<|channel|>analysis<|message|>{LENS_THINKING}<|end|>"
            "<|start|>assistant<|channel|>final<|message|>")


class LensTokenizer(FamilyTokenizer):
    """ComfyUI's `LensTokenizer` (see the module docstring); tokens under "gpt_oss"."""

    def __init__(self, tokenizer_json: Any) -> None:
        if tokenizer_json is None:
            raise LensTokenizerError("the Lens GPT-OSS text encoder file lacks its tokenizer_json tensor")
        self.slots = (SLOT,)
        self.tokenizer_json = tokenizer_json_bytes(tokenizer_json)
        self.tokenizer = load_tokenizer_json(self.tokenizer_json, LensTokenizerError, "the Lens GPT-OSS tokenizer_json")

    def with_embedding_lookup(self, lookup: Any) -> "LensTokenizer":
        return self  # weights and embeddings are disabled for this encoder, as in ComfyUI

    def by_slot(self) -> dict[str, Any]:
        return {}

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        if not text or not text.strip():
            return {SLOT: [[]]}
        ids = self.tokenizer.encode(render_chat(text), add_special_tokens=False).ids[:LENS_MAX_TOKENS]
        return {SLOT: [[(int(token), 1.0) for token in ids]]}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {TOKENIZER_KEY: torch.frombuffer(bytearray(self.tokenizer_json), dtype=torch.uint8)}

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)


class LensTEModel(TextEncoderSet):
    """ComfyUI's `LensTEModel`: the tapped GPT-OSS states, the template cut (module docstring)."""

    # the tower is the child module `gpt_oss` (the slot), ComfyUI's attribute name too

    def set_clip_options(self, options: Mapping[str, Any]) -> None:
        """Nothing to set: the conditioning is always the fixed taps (blocks 5 / 11 / 17 / 23), so
        layer choices (CLIPSetLastLayer) have nothing to act on."""

    def reset_clip_options(self) -> None:
        """Nothing to reset (see `set_clip_options`)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        if SLOT not in tokens:
            raise TokenizeError(f"Lens text encoder: the tokens lack key {SLOT!r}; got keys {sorted(tokens)}")
        rows = [[int(pair[0]) for pair in chunk] for chunk in tokens[SLOT]]
        tower: GptOssModel = self.encoder(SLOT)
        taps = len(LENS_TAPS)
        device = tower.embed_tokens.weight.device
        if all(len(row) == 0 for row in rows):
            empty = torch.zeros(len(rows), 0, taps * tower.config.hidden_size, device=device)
            return empty, None, {"attention_mask": torch.zeros(len(rows), 0, dtype=torch.long, device=device),
                                 "num_layers_stacked": taps}
        length = max(len(row) for row in rows)
        pad = PAD_ID if PAD_ID < tower.config.vocab_size else 0  # masked out either way
        ids = torch.full((len(rows), length), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), length), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = 1
        with torch.no_grad():
            states = tower.captured(ids, mask, LENS_TAPS)  # taps x [B, T, W]
        stacked = torch.stack(states, dim=2)  # [B, T, taps, W]
        mask = mask.to(stacked.device)
        stacked, mask = stacked[:, LENS_TXT_OFFSET:], mask[:, LENS_TXT_OFFSET:]  # empty when not longer
        b, t, n, w = stacked.shape
        return stacked.reshape(b, t, n * w), None, {"attention_mask": mask, "num_layers_stacked": n}


LENS_TEXT_ENCODERS = EncoderSetSpec(
    "lens", (EncoderOptions(SLOT, SLOT, PAD_ID, None, False, projected_pooled=False, kind="gpt_oss",
                            prefixes=tuple(p for p in PREFIXES if p.startswith("text_encoders.")),
                            nominal_width=len(LENS_TAPS) * WIDTH, min_length=1),),
    SLOT, set_class=LensTEModel, tokenizer_class=LensTokenizer, clip_types=("lens",))


def tower_prefix(tensors: Any) -> str | None:
    """Where a GPT-OSS tower sits in `tensors` (one of `PREFIXES`), None when none is there."""
    return next((p for p in PREFIXES if p + SINKS in tensors), None)


def holds_gpt_oss(tensors: Any) -> bool:
    """Whether a file holds a GPT-OSS tower (names only: ComfyUI's `self_attn.sinks` key)."""
    return tower_prefix(tensors) is not None


def clip_from_state(state: Mapping[str, torch.Tensor], tokenizer_json: Any, load_device: Any = None,
                    offload_device: Any = "cpu") -> Any:
    """The CLIP object of a GPT-OSS tower's tensors (names relative to the tower) and tokenizer bytes."""
    from comfy_core.text_encoders.clip import CLIP

    tokenizer = LensTokenizer(tokenizer_json)
    config = GptOssConfig.detect_from_weights(state)
    if config is None:
        raise TextEncoderError("no GPT-OSS tower in the given tensors (no layers.0.self_attn.sinks)")
    module = LensTEModel(LENS_TEXT_ENCODERS, {SLOT: build_gpt_oss(config, state)})
    return CLIP.from_encoders(module, tokenizer, load_device, offload_device)


def load_lens_text_encoder(path: str | Path, dtype: torch.dtype | None = None, load_device: Any = None,
                           offload_device: Any = "cpu") -> Any:
    """`gpt_oss_20b_*.safetensors` -> CLIP. Quantised layers are dequantised as read; weights are
    kept in bf16 (ComfyUI's storage for this model) unless `dtype` is float32."""
    from comfy_core.checkpoint.reader import CheckpointFile
    from comfy_core.weights.quant_registry import QuantFormatError, QuantizedHeader, quantized_layers

    storage = torch.float32 if dtype == torch.float32 else torch.bfloat16
    with CheckpointFile(path) as stored:
        try:
            layers = quantized_layers(stored.tensors, getattr(stored, "metadata", None) or {}, stored.read)
        except QuantFormatError as exc:
            raise TextEncoderError(f"{path}: {exc}") from None
        view = QuantizedHeader.for_detection(stored, layers) if layers else stored
        prefix = tower_prefix(view.tensors)
        if prefix is None:
            raise TextEncoderError(f"{path}: not a GPT-OSS text encoder (no layers.0.self_attn.sinks)")
        if TOKENIZER_KEY not in view.tensors:
            raise LensTokenizerError(f"{path}: the GPT-OSS text encoder file lacks its {TOKENIZER_KEY} tensor")
        tokenizer_json = view.read(TOKENIZER_KEY, None)
        state = {name[len(prefix):]: view.read(name, storage) for name in view.tensors
                 if name.startswith(prefix) and name != TOKENIZER_KEY and not name.endswith("lm_head.weight")}
    clip = clip_from_state(state, tokenizer_json, load_device, offload_device)
    config = clip.cond_stage_model.gpt_oss.config
    log.info("Lens GPT-OSS text encoder: %s (%d blocks, width %d, %d experts%s)", Path(path).name, config.num_layers,
             config.hidden_size, config.num_experts, ", quantised layers dequantised" if layers else "")
    return clip


__all__ = ["LENS_TAPS", "LENS_TEXT_ENCODERS", "LENS_TXT_OFFSET", "LensTEModel", "LensTokenizer", "LensTokenizerError",
           "SLOT", "clip_from_state", "holds_gpt_oss", "load_lens_text_encoder", "render_chat", "tower_prefix"]
