"""SAM 3's text encoder as the CLIP that CheckpointLoaderSimple returns with it.

As ComfyUI's `comfy/text_encoders/sam3_clip.py` (read there, written here): a CLIP text
transformer (24 layers, 1024 wide, quick-GELU, 32 positions) over CLIP's BPE vocabulary (the one
this engine ships: `ClipTokenizer.shared_default()`), BOS 49406, EOS 49407, padded with 0 to 32
tokens, padded keys masked in attention; the output is the last layer after the final LayerNorm,
and the conditioning carries the token mask as `attention_mask` (1 up to and including the first
EOS). Prompt weights are disabled and parentheses dropped; the text is split at commas into one
prompt per category, `name:N` asking for up to N detections; several prompts travel as
`sam3_multi_cond` (a list of {"cond", "attention_mask", "max_detections"}) beside the first
prompt's encoding. A prompt longer than 30 tokens is cut into 30-token chunks, each framed and
padded, encoded and concatenated (ComfyUI's chunks break at word boundaries; ours at tokens).
"""
from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from comfy_core.text_encoders.clip_text_model import ClipTextModelConfig, ClipTextTransformer

BOS, EOS, PAD = 49406, 49407, 0
MAX_LENGTH = 32
SLOT = "sam3_clip"


def parse_prompts(text: str) -> list[tuple[str, int]]:
    """`"person, dog:2"` -> `[("person", 1), ("dog", 2)]` (parentheses dropped, empty parts skipped)."""
    text = text.replace("(", "").replace(")", "")
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.match(r"^(.+?)\s*:\s*([\d.]+)\s*$", part)
        out.append((m.group(1).strip(), max(1, round(float(m.group(2))))) if m else (part, 1))
    return out


class Sam3TextModel(nn.Module):
    """transformers' `CLIPTextModel` layout under `text_model.*` (ComfyUI's `transformer.` child)."""

    def __init__(self, config: ClipTextModelConfig) -> None:
        super().__init__()
        self.config = config
        self.text_model = ClipTextTransformer(config)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids, mask `[B, T]` -> (states after the final LayerNorm `[B, T, W]`, the first EOS's state `[B, W]`)."""
        tm = self.text_model
        x = tm.embeddings(ids)
        t = ids.shape[1]
        neg = torch.finfo(x.dtype).min
        causal = torch.full((t, t), neg, dtype=x.dtype, device=x.device).triu(1)
        padding = (1.0 - mask.to(x.dtype)).reshape(ids.shape[0], 1, 1, t) * neg
        bias = (causal + padding).clamp(min=neg)
        for layer in tm.encoder.layers:
            x = layer(x, bias)
        x = tm.final_layer_norm(x)
        eos = (ids == EOS).int().argmax(-1)
        return x, x[torch.arange(x.shape[0], device=x.device), eos]


def text_config(tensors: dict[str, Any], prefix: str) -> ClipTextModelConfig:
    """The tower's shape from its tensors' shapes (heads: 16 at ComfyUI's 1024, else width / 64)."""
    def shape(name: str) -> tuple[int, ...]:
        return tuple(getattr(tensors[prefix + name], "shape", tensors[prefix + name]))

    vocab, width = shape("text_model.embeddings.token_embedding.weight")
    layers = 0
    while f"{prefix}text_model.encoder.layers.{layers}.layer_norm1.weight" in tensors:
        layers += 1
    heads = 16 if width == 1024 else max(1, width // 64)
    return ClipTextModelConfig(
        vocab_size=vocab, hidden_size=width, intermediate_size=shape("text_model.encoder.layers.0.mlp.fc1.weight")[0],
        num_hidden_layers=layers, num_attention_heads=heads,
        max_position_embeddings=shape("text_model.embeddings.position_embedding.weight")[0],
        projection_dim=width, hidden_act="quick_gelu")


class Sam3Clip:
    """ComfyUI's CLIP API over `Sam3TextModel`: `tokenize`, `encode_from_tokens`,
    `encode_from_tokens_scheduled`, `clone`."""

    def __init__(self, model: Sam3TextModel, tokenizer: Any = None) -> None:
        from comfy_core.text_encoders import ClipTokenizer

        self.model = model
        self.tokenizer = tokenizer or ClipTokenizer.shared_default()
        self.layer_idx = None

    def clone(self) -> "Sam3Clip":
        return Sam3Clip(self.model, self.tokenizer)

    def _chunks(self, text: str) -> list[list[tuple[int, float]]]:
        ids = self.tokenizer.encode(text)
        body = MAX_LENGTH - 2
        pieces = [ids[i:i + body] for i in range(0, len(ids), body)] or [[]]
        return [[(t, 1.0) for t in [BOS, *p, EOS] + [PAD] * (body - len(p))] for p in pieces]

    def tokenize(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, Any]:
        parsed = parse_prompts(text)
        if len(parsed) <= 1 and (not parsed or parsed[0][1] == 1):
            return {SLOT: self._chunks(parsed[0][0] if parsed else "")}
        per_prompt = [(self._chunks(phrase), most) for phrase, most in parsed]
        return {SLOT: per_prompt[0][0], "sam3_per_prompt": per_prompt}

    def _encode(self, chunks: list[list[tuple[int, float]]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.tensor([[t for t, _ in chunk] for chunk in chunks], dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row in range(ids.shape[0]):
            ends = (ids[row] == EOS).nonzero()
            stop = int(ends[0]) + 1 if len(ends) else ids.shape[1]
            mask[row, :stop] = 1
        param = next(self.model.parameters())
        with torch.no_grad():
            states, pooled = self.model(ids.to(param.device), mask.to(param.device))
        cond = states.reshape(1, -1, states.shape[-1]).float().cpu()
        return cond, pooled[:1].float().cpu(), mask.reshape(1, -1)

    def encode_from_tokens(self, tokens: dict[str, Any], return_pooled: bool = False,
                           return_dict: bool = False) -> Any:
        cond, pooled, mask = self._encode(tokens[SLOT])
        extra: dict[str, Any] = {"attention_mask": mask}
        per_prompt = tokens.get("sam3_per_prompt")
        if per_prompt is not None:
            multi = []
            for chunks, most in per_prompt:
                c, _, m = self._encode(chunks)
                multi.append({"cond": c, "attention_mask": m, "max_detections": most})
            extra["sam3_multi_cond"] = multi
        if return_dict:
            return {"cond": cond, "pooled_output": pooled, **extra}
        if return_pooled:
            return cond, pooled
        return cond

    def encode_from_tokens_scheduled(self, tokens: dict[str, Any], unprojected: bool = False,
                                     add_dict: dict[str, Any] | None = None) -> list:
        out = self.encode_from_tokens(tokens, return_dict=True)
        cond = out.pop("cond")
        return [[cond, {**out, **(add_dict or {})}]]

    def encode(self, text: str) -> torch.Tensor:
        return self.encode_from_tokens(self.tokenize(text))


# Where the text encoder sits in a SAM 3 file (transformers' CLIP layout under the prefix). Which of
# these the released file uses was not readable (ComfyUI's supported_models.py with its SAM 3 class
# is not stored): the first is this engine's choice and the one the tests write.
TEXT_PREFIXES = ("text_encoders.sam3_clip.transformer.", "sam3_clip.transformer.",
                 "cond_stage_model.sam3_clip.transformer.")


def load_sam3_clip(file: Any, dtype: torch.dtype, load_device: Any = "cpu") -> "Sam3Clip | None":
    """The text encoder of an open SAM 3 `CheckpointFile` as a CLIP, or None when the file carries
    none; float32 on a CPU or beside a non-float16 network, else the network's float16."""
    from comfy_core.checkpoint.errors import ShapeMismatchError
    from comfy_core.models.resident import load_exact

    text_prefix = next((p for p in TEXT_PREFIXES if p + "text_model.embeddings.token_embedding.weight" in file), None)
    if text_prefix is None:
        return None
    tconfig = text_config(file.tensors, text_prefix)
    with torch.device("meta"):
        text = Sam3TextModel(tconfig)
    text = text.to_empty(device="cpu")
    state = {n[len(text_prefix):]: file.read(n) for n in file.keys() if n.startswith(text_prefix + "text_model.")}
    text = load_exact(text, state, what=f"{file.path.name}: SAM 3 text encoder",
                      error=lambda message: ShapeMismatchError(file.path, message),
                      dtype=torch.float32 if dtype != torch.float16 or str(load_device) == "cpu" else dtype)
    text.text_model.embeddings.position_ids = torch.arange(tconfig.max_position_embeddings).expand(1, -1)
    return Sam3Clip(text)
