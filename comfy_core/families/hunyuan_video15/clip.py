"""HunyuanVideo 1.5's text-encoder set (ComfyUI's `HunyuanVideo15Tokenizer` in
`comfy/text_encoders/hunyuan_video.py` and `HunyuanImageTEModel` in `hunyuan_image.py`): Qwen2.5-VL-7B
(`qwen25_7b`) plus the glyph ByT5-small (a T5 encoder on bytes, 1472 wide), loaded by DualCLIPLoader
type "hunyuan_video_15" from `qwen_2.5_vl_7b(_fp8_scaled)` and `byt5_small_glyphxl_fp16`.

- Qwen2.5-VL: the prompt inside HunyuanVideo 1.5's chat template (the video-description system turn,
  the user turn, the opened assistant turn), prompt weights off, an empty prompt made " "; the
  states of the third layer from the end (`hidden_states[-3]`, no final norm); the system turn
  dropped as Qwen-Image's set drops it (qwen_image/clip.py); a template starting with `<` (27) and
  longer than 36 tokens drops a fixed 36 (HunyuanImage's refiner rule, kept as ComfyUI has it).
- ByT5: only when the prompt quotes text (`"..."`, then `‘...’`, then `“...”`): the quotes'
  contents as `Text "<quote>". ` each, tokenized as bytes (byt5_tokenizer.py), encoded to the final
  normed states with the token mask zeroing what follows `</s>`; returned as
  `conditioning_byt5small` (the network's `txt_byt5`).

The ByT5 file is detected as a T5 encoder (slot `t5xxl` of this set; its tokens go under "byt5").
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import torch

from comfy_core.families.qwen_image.clip import QWEN25_7B_WIDTH, QwenImageTEModel, QwenImageTokenizer
from comfy_core.text_encoders.byt5_tokenizer import BYT5_KEY, BYT5_SMALL_WIDTH
from comfy_core.text_encoders.encoder_set import CombineRule, EncoderOptions, EncoderSetSpec
from comfy_core.text_encoders.qwen25vl import QWEN25_7B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

BYT5_SLOT = "t5xxl"  # the slot a T5-layout file is detected as (comfy_core/split/text_encoder_files.py)
HV15_TEMPLATE = (
    "<|im_start|>system\nYou are a helpful assistant. Describe the video by detailing the following aspects:\n"
    "1. The main content and theme of the video.\n"
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects.\n"
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects.\n"
    "4. background environment, light, style and atmosphere.\n"
    "5. camera angles, movements, and transitions used in the video.<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
QWEN_HIDDEN_LAYER = -3
REFINER_TEMPLATE_START, REFINER_TEMPLATE_END = 27, 36  # "<" ; HunyuanImage's fixed template length
_QUOTES = (r'"(.*?)"', r"‘(.*?)’", r"“(.*?)”")


def glyph_text(prompt: str) -> str:
    """What the ByT5 encoder reads of a prompt: each quoted text as `Text "<quote>". ` ("" when none)."""
    quotes = [match for pattern in _QUOTES for match in re.findall(pattern, prompt)]
    return "".join(f'Text "{quote}". ' for quote in quotes)


class HunyuanVideo15Tokenizer(QwenImageTokenizer):
    """ComfyUI's `HunyuanVideo15Tokenizer`: Qwen2.5-VL tokens (key "qwen25_7b") and, for quoted
    text, ByT5 tokens (key "byt5")."""

    llama_template = HV15_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        kwargs.pop("prevent_empty_text", None)
        tokens = super().tokenize_with_weights(text, return_word_ids, prevent_empty_text=True, **dict(kwargs))
        tokens.pop(BYT5_KEY, None)  # the base tokenizes the templated prompt for every slot
        glyphs = glyph_text(text)
        if glyphs and BYT5_SLOT in self.slots:
            tokens[BYT5_KEY] = getattr(self, BYT5_SLOT).tokenize_with_weights(glyphs, return_word_ids, **kwargs)
        return tokens


class QwenStatesOnly(CombineRule):
    """The conditioning is the Qwen states; ByT5's go beside them (`conditioning_byt5small`)."""

    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        return outputs[QWEN25_7B_SLOT], None


class HunyuanVideo15TEModel(QwenImageTEModel):
    """ComfyUI's `HunyuanImageTEModel` as HunyuanVideo 1.5 uses it (see the module doc)."""

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        if BYT5_SLOT in self.slots:
            glyph = self.encoder(BYT5_SLOT)
            glyph.enable_attention_masks = True  # ComfyUI's ByT5SmallModel switches
            glyph.zero_out_masked = True

    @contextmanager
    def _qwen_only(self) -> Iterator[None]:
        saved = self.slots
        self.slots = (QWEN25_7B_SLOT,)
        try:
            yield
        finally:
            self.slots = saved

    def encode_token_weights(self, tokens: Mapping[str, Any], layer_idx: int | None = None,
                             projected_pooled: bool = True, template_end: int = -1) -> tuple:
        pairs = tokens[QWEN25_7B_SLOT][0]
        first = pairs[0][0] if pairs else None
        if (template_end == -1 and isinstance(first, int) and first == REFINER_TEMPLATE_START
                and len(pairs) > REFINER_TEMPLATE_END):
            template_end = REFINER_TEMPLATE_END
        with self._qwen_only():
            cond, pooled, extra = super().encode_token_weights({QWEN25_7B_SLOT: tokens[QWEN25_7B_SLOT]},
                                                               layer_idx=layer_idx, projected_pooled=projected_pooled,
                                                               template_end=template_end)
        if BYT5_KEY in tokens and BYT5_SLOT in self.slots:
            glyph = self.encoder(BYT5_SLOT)
            with glyph.using_options(self.spec.options(BYT5_SLOT)):
                extra["conditioning_byt5small"] = glyph.encode_token_weights(tokens[BYT5_KEY])[0]
        return cond, pooled, extra


HV15_TEXT_ENCODERS = EncoderSetSpec(
    "hunyuan_video15",
    (EncoderOptions(QWEN25_7B_SLOT, QWEN25_7B_SLOT, PAD_ID, QWEN_HIDDEN_LAYER, False, projected_pooled=False,
                    prefixes=(f"text_encoders.{QWEN25_7B_SLOT}.transformer.",), kind="qwen25vl",
                    nominal_width=QWEN25_7B_WIDTH, min_length=1),
     EncoderOptions(BYT5_SLOT, BYT5_KEY, 0, None, True, projected_pooled=False,
                    prefixes=("text_encoders.byt5_small.transformer.",), kind="byt5",
                    nominal_width=BYT5_SMALL_WIDTH, min_length=1)),
    QWEN25_7B_SLOT, combine=QwenStatesOnly(), set_class=HunyuanVideo15TEModel,
    tokenizer_class=HunyuanVideo15Tokenizer, clip_types=("hunyuan_video_15",))
