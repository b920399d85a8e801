"""Stable Audio Open's text-encoder set (ComfyUI's `comfy/text_encoders/sa_t5.py`): one T5-base
tower (T5 v1.0: ReLU feed-forward, 768 wide; tokens under our T5 slot's key `t5xxl`, ComfyUI's
`t5base`), run with its token mask
(pads are not attended) and its output zeroed after the prompt's end token
(`zero_out_masked`), tokenized to at least 128 tokens, no pooled output. Loaded by CLIPLoader
type "stable_audio" (`t5-base.safetensors`) or from a single file's `text_encoders.t5base.`.
ComfyUI's class names: `SAT5Model` (clip name `t5base`) and `SAT5Tokenizer`."""
from __future__ import annotations

from typing import Any, Mapping

from comfy_core.text_encoders.encoder_set import PAD_ZERO, EncoderOptions, EncoderSetSpec, TextEncoderSet
from comfy_core.text_encoders.sd_tokenizer import FamilyTokenizer

T5_SLOT = "t5xxl"  # the slot every T5 encoder file is read into (comfy_core.split)
TOKEN_KEY = "t5base"
T5_BASE_WIDTH = 768
MIN_LENGTH = 128  # ComfyUI's T5BaseTokenizer


class SAT5Model(TextEncoderSet):
    """ComfyUI's `comfy.text_encoders.sa_t5.SAT5Model` (an SD1ClipModel named `t5base`)."""

    clip_name, clip = TOKEN_KEY, f"clip_{TOKEN_KEY}"

    def __init__(self, spec: EncoderSetSpec, encoders: Mapping[str, Any]) -> None:
        super().__init__(spec, encoders)
        tower = self.encoder(T5_SLOT)
        tower.enable_attention_masks = True  # ComfyUI's T5BaseModel(enable_attention_masks=True,
        tower.zero_out_masked = True  # zero_out_masked=True)

    @property
    def clip_t5base(self) -> Any:
        return self.encoder(T5_SLOT)


class SAT5Tokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.sa_t5.SAT5Tokenizer` (clip_name "t5base")."""

    clip_name, clip = TOKEN_KEY, f"clip_{TOKEN_KEY}"

    @property
    def clip_t5base(self) -> Any:
        return getattr(self, T5_SLOT)


STABLE_AUDIO_TEXT_ENCODERS = EncoderSetSpec(
    "stable_audio", (EncoderOptions(T5_SLOT, T5_SLOT, PAD_ZERO, None, True, projected_pooled=False,
                                    prefixes=("text_encoders.t5base.transformer.",), kind="t5",
                                    nominal_width=T5_BASE_WIDTH, min_length=MIN_LENGTH),),
    T5_SLOT, set_class=SAT5Model, tokenizer_class=SAT5Tokenizer, clip_types=("stable_audio",))


# --- Stable Audio 3: T5Gemma (ComfyUI's comfy/text_encoders/sa3.py) ---

T5GEMMA_SLOT = "t5gemma"
T5GEMMA_WIDTH = 768


class SAT5GemmaModel(TextEncoderSet):
    """ComfyUI's `comfy.text_encoders.sa3.SAT5GemmaModel` (an SD1ClipModel named `t5gemma`): one
    T5Gemma tower, final normed states, no pooled output (`comfy_core.text_encoders.t5gemma_clip`)."""

    clip_name, clip = T5GEMMA_SLOT, f"clip_{T5GEMMA_SLOT}"

    @property
    def clip_t5gemma(self) -> Any:
        return self.encoder(T5GEMMA_SLOT)


class SAT5GemmaTokenizer(FamilyTokenizer):
    """ComfyUI's `comfy.text_encoders.sa3.SAT5GemmaTokenizer` (clip_name "t5gemma"): the file's
    SentencePiece model, no BOS / EOS, minimum length 1, pad 0."""

    clip_name, clip = T5GEMMA_SLOT, f"clip_{T5GEMMA_SLOT}"

    @property
    def clip_t5gemma(self) -> Any:
        return getattr(self, T5GEMMA_SLOT)

    def state_dict(self) -> dict:
        return getattr(self, T5GEMMA_SLOT).state_dict()


# CLIPLoader type "stable_audio" with a T5Gemma file (a T5-base file gives Stable Audio Open's set:
# the towers' slots tell them apart, from names and shapes).
STABLE_AUDIO3_TEXT_ENCODERS = EncoderSetSpec(
    "stable_audio3", (EncoderOptions(T5GEMMA_SLOT, T5GEMMA_SLOT, 0, None, True, projected_pooled=False,
                                     prefixes=(f"text_encoders.{T5GEMMA_SLOT}.transformer.model.encoder.",),
                                     kind="t5gemma", nominal_width=T5GEMMA_WIDTH, min_length=1),),
    T5GEMMA_SLOT, set_class=SAT5GemmaModel, tokenizer_class=SAT5GemmaTokenizer, clip_types=("stable_audio",))
