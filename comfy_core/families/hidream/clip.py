"""HiDream's text-encoder set (ComfyUI's `comfy/text_encoders/hidream.py`: `HiDreamTEModel`,
`HiDreamTokenizer`): CLIP-L, CLIP-G, T5-XXL and Llama 3.1 8B Instruct, any of them optional
(QuadrupleCLIPLoader loads all four; CLIPLoader / DualCLIPLoader type "hidream" some).

- Tokens: the same prompt for every tower, keys "l", "g", "t5xxl", "llama"; T5 with min and max
  length 128 and only the first chunk kept (the first 127 tokens and the end token); Llama with a
  start token, at least 128 tokens padded with `<|eot_id|>` (`llama_tokenizer.LlamaTokenizer`).
- Encoding: the pooled output is CLIP-L's projected pooled output then CLIP-G's (each zeros of
  768 / 1280 when its tower is absent; all 2048 zeros when neither has tokens); the conditioning
  is T5's states (T5 runs with its attention mask; zeros `[1, 128, 4096]` without T5); the Llama
  tower's every hidden state without the embeddings, `[1, 32, T, 4096]` (zeros `[1, 32, 1, 4096]`
  without Llama), goes out as the extra `conditioning_llama3`. CLIP's hidden states are not used.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import PAD_EOS, PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

_TE = "text_encoders."
T5_LENGTH = 128
LLAMA_MIN_LENGTH = 128
LLAMA_PAD = 128009
LLAMA_STATES = 32  # ComfyUI's zeros without a Llama tower


class HiDreamTEModel(TextEncoderSet):
    """ComfyUI's `HiDreamTEModel` (see the module doc)."""

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        if "t5xxl" in self.slots:  # ComfyUI's T5XXLModel(attention_mask=True)
            t5 = self.encoder("t5xxl")
            t5.enable_attention_masks = True
            t5.return_attention_masks = True

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        """{"l", "g", "t5xxl", "llama": chunks} -> (T5 states [1, T, 4096], pooled [1, 2048],
        {"conditioning_llama3": [1, 32, L, 4096]})."""
        for key in ("l", "g", "t5xxl", "llama"):
            if key not in tokens:
                raise TokenizeError(f"tokens for HiDream's encoder set lack key {key!r}; got keys {sorted(tokens)}")
        widths = {o.slot: o.nominal_width for o in self.spec.encoders}
        pooled = None
        if len(tokens["g"]) > 0 or len(tokens["l"]) > 0:
            parts = []
            for slot, key in (("clip_l", "l"), ("clip_g", "g")):
                if slot in self.slots:
                    encoder = self.encoder(slot)
                    with encoder.using_options(encoder.default_options):
                        parts.append(encoder.encode_token_weights(tokens[key])[1])
                else:
                    parts.append(torch.zeros((1, widths[slot])))
            device = next((p.device for p in parts), None)
            pooled = torch.cat([p.to(device) for p in parts], dim=-1)
        if "t5xxl" in self.slots:
            t5_out = self.encoder("t5xxl").encode_token_weights(tokens["t5xxl"])[0]
        else:
            t5_out = torch.zeros((1, T5_LENGTH, widths["t5xxl"]))
        if "llama" in self.slots:
            llama_out = self.encoder("llama").encode_token_weights(tokens["llama"])[0][:, 1:]  # no embeddings
        else:
            llama_out = torch.zeros((1, LLAMA_STATES, 1, widths["llama"]))
        if pooled is None:
            pooled = torch.zeros((1, widths["clip_l"] + widths["clip_g"]))
        return t5_out, pooled, {"conditioning_llama3": llama_out}


class HiDreamTokenizer(FamilyTokenizer):
    """ComfyUI's `HiDreamTokenizer`: every tower's tokens of the same text, T5 cut to its first
    chunk of 128."""

    def __init__(self, tokenizers: dict[str, Any]) -> None:
        t5 = tokenizers.get("t5xxl")
        if t5 is not None and t5.max_length != T5_LENGTH:
            from comfy_core.text_encoders.t5_tokenizer import T5XXLTokenizer

            tokenizers = {**tokenizers, "t5xxl": T5XXLTokenizer(min_length=T5_LENGTH, max_length=T5_LENGTH,
                                                                embedding_width=t5.embedding_size)}
        super().__init__(tokenizers)

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        out = {}
        for slot, tokenizer in self.by_slot().items():
            chunks = tokenizer.tokenize_with_weights(text, return_word_ids, **kwargs)
            out[tokenizer.spec.key] = chunks[:1] if slot == "t5xxl" else chunks
        # ComfyUI's tokenizer always gives every key; the towers a partial set lacks get the
        # tokens no tower reads (empty: CLIP's pooled output is then zeros).
        for key in ("l", "g", "t5xxl", "llama"):
            out.setdefault(key, [])
        return out


HIDREAM_TEXT_ENCODERS = EncoderSetSpec(
    "hidream",
    (EncoderOptions("clip_l", "l", PAD_EOS, None, True, projected_pooled=True,
                    prefixes=(_TE + "clip_l.transformer.text_model.",), nominal_width=768),
     EncoderOptions("clip_g", "g", PAD_ZERO, -2, False, projected_pooled=True,
                    prefixes=(_TE + "clip_g.transformer.text_model.",), nominal_width=1280),
     EncoderOptions("t5xxl", "t5xxl", PAD_ZERO, None, True, prefixes=(_TE + "t5xxl.transformer.",), kind="t5",
                    nominal_width=4096, min_length=T5_LENGTH),
     EncoderOptions("llama", "llama", LLAMA_PAD, None, False, projected_pooled=False,
                    prefixes=(_TE + "llama.transformer.",), kind="llama", nominal_width=4096,
                    min_length=LLAMA_MIN_LENGTH)),
    "clip_g", set_class=HiDreamTEModel, tokenizer_class=HiDreamTokenizer, partial=True, clip_types=("hidream",))
