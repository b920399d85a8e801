"""HunyuanVideo 1.0's text-encoder set (ComfyUI's `comfy/text_encoders/hunyuan_video.py`:
`HunyuanVideoClipModel`, `HunyuanVideoTokenizer`): CLIP-L (`clip_l`, the pooled vector) and the text
part of LLaVA-Llama-3-8B (`llama`, the context), loaded by DualCLIPLoader type "hunyuan_video" from
`clip_l.safetensors` and `llava_llama3_fp8_scaled.safetensors` (a Llama 3 8B in the Hugging Face
layout under `model.`: comfy_core/text_encoders/llama.py).

Tokenizing (`HunyuanVideoTokenizer.tokenize_with_weights`): CLIP-L tokenizes the prompt itself
(key "l"); the Llama tokenizer (comfy_core/text_encoders/llama_tokenizer.py, ComfyUI's
`LLAMA3Tokenizer(min_length=1, pad_token=128258)`: a start token, no end token, no padding beyond one
token, prompt weights parsed) tokenizes the prompt inside HunyuanVideo's template (a system turn
asking for a video description, then the user turn; `llama_template` replaces it) under key "llama".

Encoding (`HunyuanVideoClipModel.encode_token_weights`): the Llama tower runs with its token mask and
gives block -3's output without the final norm (ComfyUI's `LLAMAModel(layer="hidden",
layer_idx=-3)`); the states are cropped to the user turn: from after the `<|start_header_id|>user
<|end_header_id|>` header and its "\\n\\n" token (271) up to and including the user turn's
`<|eot_id|>`, the token mask likewise (left out when it masks nothing). The pooled output is CLIP-L's
(its final normed end-of-text state, not projected); CLIP-L's hidden states are not used.
CLIPSetLastLayer's layer reaches both towers, as ComfyUI's `set_clip_options` does.

Image prompts (TextEncodeHunyuanVideo_ImageToVideo, HunyuanVideo-I2V's template): `image_embeds` (the
LLaVA projector's output of CLIPVisionEncode over `llava_llama3_vision`, `[images, N, 4096]`) replace
the `<image>` tokens (128257) in turn, each laid out as N embedding positions; the states of an image
before the user turn, every `image_interleave`-th, lead the conditioning (ComfyUI's crop positions).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, replace
from typing import Any, Mapping

import torch

from comfy_core.text_encoders.encoder_set import EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.llama import LLAMA_SLOT, START_ID
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

CLIP_L_SLOT = "clip_l"
PAD_EOS = 49407  # CLIP-L pads with its end-of-text token
LLAMA_PAD = 128258  # <pad>
LLAMA_LAYER = -3
LLAMA_WIDTH = 4096
START_HEADER, END_HEADER, EOT, USER, DOUBLE_NEWLINE, IMAGE_ID = 128006, 128007, 128009, 882, 271, 128257
# ComfyUI's template (HunyuanVideo's `PROMPT_TEMPLATE_ENCODE_VIDEO` with its own spacing; 95 tokens).
LLAMA_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>")


@dataclass(frozen=True)
class LlavaLlamaOptions(EncoderOptions):
    """The Llama tower's options as `LLAMAModel` sets them: one hidden layer, a start token."""

    start_token: int = START_ID
    all_layers: bool = False


def _is_id(token: Any, value: int) -> bool:
    return isinstance(token, numbers.Integral) and not isinstance(token, bool) and token == value


def _image(token: Any) -> dict | None:
    return token if isinstance(token, dict) and token.get("original_type") == "image" else None


def expand_images(chunk: list[tuple]) -> list[tuple]:
    """A chunk with its image embeddings (`{"type": "embedding", "data": [N, W], ...}` tokens) laid out
    as N embedding vectors each, as ComfyUI's `process_tokens` inserts them."""
    out: list[tuple] = []
    for pair in chunk:
        image = _image(pair[0])
        if image is None:
            out.append(tuple(pair))
        else:
            out.extend((vector, 1.0, *pair[2:]) for vector in image["data"])
    return out


def user_turn(pairs: list[tuple], length: int | None = None) -> tuple[int, int, list[tuple[int, int, int]]]:
    """ComfyUI's crop of the Llama states (`HunyuanVideoClipModel.encode_token_weights`): (start, end)
    of the user turn among the `length` encoded positions (the chunk's tokens with the images laid
    out, `expand_images`), end past its `<|eot_id|>`, and the images before the user turn as
    (start, end, interleave) positions, which lead the conditioning. Without a user header everything
    after the start; an unclosed user turn loses its last position, as ComfyUI's slice does."""
    template_end, extra_template_end, extra_sizes = 0, 0, 0
    user_end: int | None = None
    images: list[tuple[int, int, int]] = []
    for index, pair in enumerate(pairs):
        token = pair[0]
        image = _image(token)
        if image is not None:
            size = int(image["data"].shape[0])
            if template_end > 0:
                if user_end == -1:
                    extra_template_end += size - 1
            else:
                images.append((index + extra_sizes, index + size + extra_sizes, int(image.get("image_interleave", 1))))
                extra_sizes += size - 1
            continue
        if (_is_id(token, START_HEADER) and index + 2 < len(pairs) and _is_id(pairs[index + 1][0], USER)
                and _is_id(pairs[index + 2][0], END_HEADER)):
            template_end, user_end = index + 2, -1
        if _is_id(token, EOT) and user_end == -1:
            user_end = index + 1
    length = len(pairs) + extra_sizes + extra_template_end if length is None else length
    if length > template_end + 2 and _is_id(pairs[template_end + 1][0], DOUBLE_NEWLINE):
        template_end += 2
    end = (length if user_end is None else user_end) + extra_sizes + extra_template_end
    start, end, _ = slice(template_end + extra_sizes, end).indices(length)
    return start, max(start, end), images


class HunyuanVideoTokenizer(FamilyTokenizer):
    """ComfyUI's `HunyuanVideoTokenizer` (see the module doc)."""

    llama_template = LLAMA_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, llama_template: str | None = None,
                              image_embeds: Any = None, image_interleave: int = 1, **kwargs: Any) -> dict[str, list]:
        out: dict[str, list] = {}
        if CLIP_L_SLOT in self.slots:
            clip_l = getattr(self, CLIP_L_SLOT)
            out[clip_l.spec.key] = clip_l.tokenize_with_weights(text, return_word_ids, **kwargs)
        if LLAMA_SLOT in self.slots:
            llama = getattr(self, LLAMA_SLOT)
            prompt = (self.llama_template if llama_template is None else llama_template).format(text)
            chunks = llama.tokenize_with_weights(prompt, return_word_ids, **kwargs)
            used = 0
            for chunk in chunks:  # each `<image>` takes the next image's embeddings
                for index, pair in enumerate(chunk):
                    if (_is_id(pair[0], IMAGE_ID) and image_embeds is not None
                            and used < image_embeds.shape[0]):
                        chunk[index] = ({"type": "embedding", "data": image_embeds[used], "original_type": "image",
                                         "image_interleave": int(image_interleave)},) + tuple(pair[1:])
                        used += 1
            out[llama.spec.key] = chunks
        return out


class HunyuanVideoClipModel(TextEncoderSet):
    """ComfyUI's `HunyuanVideoClipModel` (see the module doc)."""

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True) -> tuple:
        for key in ("l", LLAMA_SLOT):
            if key not in tokens:
                raise TokenizeError(f"tokens for HunyuanVideo's encoder set lack key {key!r}; got keys "
                                    f"{sorted(tokens)}")
        llama = self.encoder(LLAMA_SLOT)
        options = self.spec.options(LLAMA_SLOT)
        if layer_idx is not None:
            options = replace(options, layer_idx=layer_idx)
        chunks = [expand_images(list(chunk)) for chunk in tokens[LLAMA_SLOT]]
        with llama.using_options(options):
            states, _, *rest = llama.encode_token_weights(chunks)
        extra = dict(rest[0]) if rest else {}
        start, end, images = user_turn(list(tokens[LLAMA_SLOT][0]) if tokens[LLAMA_SLOT] else [], states.shape[1])
        cond = states[:, start:end]
        if images:  # the image tokens (every `interleave`-th) lead the conditioning
            cond = torch.cat([states[:, a:b:step] for a, b, step in images] + [cond], dim=1)
        if "attention_mask" in extra:
            mask = extra["attention_mask"][:, start:end]
            if int(mask.sum()) == mask.numel():
                del extra["attention_mask"]  # it masks nothing (ComfyUI leaves it out)
            else:
                extra["attention_mask"] = mask
        clip_l = self.encoder(CLIP_L_SLOT)
        clip_options = self.spec.options(CLIP_L_SLOT)
        if layer_idx is not None:
            clip_options = replace(clip_options, layer_idx=layer_idx)
        with clip_l.using_options(clip_options):
            pooled = clip_l.encode_token_weights(tokens["l"])[1]
        return cond, pooled, extra


HUNYUAN_VIDEO_TEXT_ENCODERS = EncoderSetSpec(
    "hunyuan_video",
    (EncoderOptions(CLIP_L_SLOT, "l", PAD_EOS, None, True, projected_pooled=False,
                    prefixes=("text_encoders.clip_l.transformer.text_model.",), nominal_width=768),
     LlavaLlamaOptions(LLAMA_SLOT, LLAMA_SLOT, LLAMA_PAD, LLAMA_LAYER, False, projected_pooled=False,
                       prefixes=(f"text_encoders.{LLAMA_SLOT}.transformer.",), kind="llama",
                       nominal_width=LLAMA_WIDTH, min_length=1)),
    CLIP_L_SLOT, set_class=HunyuanVideoClipModel, tokenizer_class=HunyuanVideoTokenizer,
    clip_types=("hunyuan_video",))
