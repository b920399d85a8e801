"""Kandinsky 5's text-encoder set (ComfyUI's `comfy/text_encoders/kandinsky5.py`): Qwen2.5-VL-7B
(`qwen25_7b`, comfy_core/text_encoders/qwen25vl.py) for the context and CLIP-L (`clip_l`) for the
pooled vector, loaded by DualCLIPLoader type "kandinsky5" (the video models) or "kandinsky5_image"
(the text-to-image model), with ComfyUI's class names (`Kandinsky5TEModel`, `Kandinsky5Tokenizer`,
`Kandinsky5TokenizerImage`).

Tokenizing (ComfyUI's `Kandinsky5Tokenizer.tokenize_with_weights`): the prompt goes into Kandinsky's
chat template for Qwen2.5-VL (a system turn asking to describe the video, or for the image model
the image, then the user turn; no assistant turn), as Qwen-Image's tokenizer handles templates
(comfy_core/families/qwen_image/clip.py: `llama_template`, a prompt starting with `<|im_start|>`,
prompt weights disabled); CLIP-L tokenizes the prompt itself, weights kept.

Encoding (ComfyUI's `Kandinsky5TEModel.encode_token_weights`): Qwen2.5-VL's last block output
without the final norm (ComfyUI's layer "hidden", index -1), with the system turn and the user
turn's opening dropped as Qwen-Image's set drops them; the pooled output is CLIP-L's (its final
normed end-of-text state, not projected). CLIP-L's hidden states are not used.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.families.qwen_image.clip import QWEN25_7B_WIDTH, QwenImageTEModel, QwenImageTokenizer
from comfy_core.text_encoders.encoder_set import CombineRule, EncoderOptions, EncoderSetSpec
from comfy_core.text_encoders.errors import TokenizeError
from comfy_core.text_encoders.qwen25vl import QWEN25_7B_SLOT
from comfy_core.text_encoders.qwen_tokenizer import PAD_ID

CLIP_L_SLOT = "clip_l"
PAD_EOS = 49407  # CLIP-L pads with its end-of-text token
# Kandinsky's templates, typos included (ComfyUI keeps them: the model was trained on them).
VIDEO_TEMPLATE = (
    "<|im_start|>system\nYou are a promt engineer. Describe the video in detail.\nDescribe how the camera moves or "
    "shakes, describe the zoom and view angle, whether it follows the objects.\nDescribe the location of the video, "
    "main characters or objects and their action.\nDescribe the dynamism of the video and presented actions.\nName "
    "the visual style of the video: whether it is a professional footage, user generated content, some kind of "
    "animation, video game or scren content.\nDescribe the visual effects, postprocessing and transitions if they "
    "are presented in the video.\nPay attention to the order of key actions shown in the scene.<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>")
IMAGE_TEMPLATE = (
    "<|im_start|>system\nYou are a promt engineer. Describe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}"
    "<|im_end|>")


class Kandinsky5Tokenizer(QwenImageTokenizer):
    """The video models' tokenizers (ComfyUI's `Kandinsky5Tokenizer`): see the module doc."""

    llama_template = VIDEO_TEMPLATE

    def tokenize_with_weights(self, text: str, return_word_ids: bool = False, **kwargs: Any) -> dict[str, list]:
        tokens = super().tokenize_with_weights(text, return_word_ids, **kwargs)
        clip_l = getattr(self, CLIP_L_SLOT, None)
        if clip_l is not None:  # CLIP-L reads the prompt itself, not the template
            clip_kwargs = {k: v for k, v in kwargs.items() if k not in ("llama_template", "images", "image")}
            tokens[clip_l.spec.key] = clip_l.tokenize_with_weights(text, return_word_ids, **clip_kwargs)
        return tokens


class Kandinsky5TokenizerImage(Kandinsky5Tokenizer):
    """The text-to-image model's tokenizers (ComfyUI's `Kandinsky5TokenizerImage`): the image template."""

    llama_template = IMAGE_TEMPLATE


class Kandinsky5Combine(CombineRule):
    """The context is Qwen2.5-VL's states, the pooled vector CLIP-L's."""

    def __call__(self, spec: EncoderSetSpec, outputs: Mapping[str, torch.Tensor],
                 pooled: Mapping[str, torch.Tensor | None]) -> tuple[torch.Tensor, torch.Tensor | None]:
        if QWEN25_7B_SLOT not in outputs:
            raise TokenizeError(f"encoder set {spec.name}: its Qwen2.5-VL 7B encoder is missing")
        return outputs[QWEN25_7B_SLOT], pooled.get(CLIP_L_SLOT)


class Kandinsky5TEModel(QwenImageTEModel):
    """Kandinsky 5's set (ComfyUI's `Kandinsky5TEModel`): Qwen-Image's template drop on the context."""


def _spec(name: str, tokenizer: type, clip_type: str) -> EncoderSetSpec:
    return EncoderSetSpec(
        name,
        (EncoderOptions(CLIP_L_SLOT, "l", PAD_EOS, None, True, projected_pooled=False,
                        prefixes=("text_encoders.clip_l.transformer.text_model.",), nominal_width=768),
         EncoderOptions(QWEN25_7B_SLOT, QWEN25_7B_SLOT, PAD_ID, -1, False, projected_pooled=False,
                        prefixes=(f"text_encoders.{QWEN25_7B_SLOT}.transformer.",), kind="qwen25vl",
                        nominal_width=QWEN25_7B_WIDTH, min_length=1)),
        CLIP_L_SLOT, combine=Kandinsky5Combine(), set_class=Kandinsky5TEModel, tokenizer_class=tokenizer,
        clip_types=(clip_type,))


KANDINSKY5_TEXT_ENCODERS = _spec("kandinsky5", Kandinsky5Tokenizer, "kandinsky5")
KANDINSKY5_IMAGE_TEXT_ENCODERS = _spec("kandinsky5_image", Kandinsky5TokenizerImage, "kandinsky5_image")
