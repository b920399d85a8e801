"""Qwen-Image 2.1's conditioning rules and its prefix-cache option, after today's ComfyUI
(`comfy_extras/nodes_qwen.py` TextEncodeQwenImage21 / QwenImage21Cache and
`comfy/text_encoders/qwen_image21.py`), written here as pure functions.

Qwen-Image 2.1 is a new network, not a Qwen-Image checkpoint with new weights: a Qwen3-VL-8B text
encoder (`qwen3vl_8b`, CLIPLoader type "qwen_image"), a 64-channel latent at 1/16 of the pixels, and
a DiT that keeps the text (and reference) tokens as a prefix whose attention keys and values can be
cached across steps. What this module holds is what the nodes and the encoder share:

- the encoder's chat template: a short system turn ("Comprehend and analyze the provided prompt."),
  the user turn, the opened assistant turn; with reference images, `<imageN>` and one vision block per
  image, joined by spaces, before the prompt (`prompt_template`);
- which encoder positions become conditioning (`conditioning_positions`): everything before the
  second `<|im_start|>` (the system turn) is dropped, positions counted after each image's expansion
  into its vision embeddings; unless the vision tokens are kept (no VAE, so no reference latents),
  each image's span is dropped too and its `image_slot` (where its reference latents go in the DiT's
  sequence) is the count of kept positions before it;
- the reference size (`reference_size`): about `resolution` x `resolution` pixels with the aspect
  kept, sides multiples of 32 and at least 32, or each side rounded to 32 when `resolution` is 0;
- the prefix cache's settings (`PrefixCacheSettings`), stored in the MODEL's
  `transformer_options["qwen_image21_cache"]` as ComfyUI's node stores them.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

CACHE_OPTION = "qwen_image21_cache"  # the transformer_options key ComfyUI's DiT reads
CACHE_DEVICES = ("auto", "gpu", "cpu", "off")
CACHE_DTYPES = ("default", "int8", "int4")
LATENT_CHANNELS = 64
DOWN_FACTOR = 16  # latent side = pixel side // 16
REFERENCE_GRID = 32  # reference sides are multiples of 32: each vision slot covers 2x2 latents
MAX_REFERENCES = 16
IM_START_ID = 151644
VISION_BLOCK = "<|vision_start|><|image_pad|><|vision_end|>"
SYSTEM_TURN = "<|im_start|>system\nComprehend and analyze the provided prompt.<|im_end|>\n"
PROMPT_TEMPLATE = SYSTEM_TURN + "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


class QwenImage21Error(ValueError):
    """A Qwen-Image 2.1 setting or input that cannot be used as given."""


@dataclass(frozen=True)
class PrefixCacheSettings:
    """Where the DiT keeps the prefix's attention keys/values (`device`: auto = spare VRAM then RAM,
    gpu, cpu, off = recompute every step) and at what precision (`dtype`: default = lossless, int8,
    int4)."""

    device: str = "auto"
    dtype: str = "default"

    def __post_init__(self) -> None:
        if self.device not in CACHE_DEVICES:
            raise QwenImage21Error(f"prefix cache device must be one of {list(CACHE_DEVICES)}, got {self.device!r}")
        if self.dtype not in CACHE_DTYPES:
            raise QwenImage21Error(f"prefix cache dtype must be one of {list(CACHE_DTYPES)}, got {self.dtype!r}")

    def as_option(self) -> dict[str, str]:
        return {"device": self.device, "dtype": self.dtype}


def cache_settings(transformer_options: Mapping[str, Any]) -> PrefixCacheSettings:
    """The prefix-cache settings a MODEL's transformer_options carry (the defaults when none)."""
    value = transformer_options.get(CACHE_OPTION)
    if value is None:
        return PrefixCacheSettings()
    if not isinstance(value, Mapping):
        raise QwenImage21Error(f"transformer_options[{CACHE_OPTION!r}] must be a mapping, got {type(value).__name__}")
    return PrefixCacheSettings(value.get("device", "auto"), value.get("dtype", "default"))


def with_cache_settings(transformer_options: Mapping[str, Any], settings: PrefixCacheSettings) -> dict[str, Any]:
    """A copy of `transformer_options` carrying `settings` (replacing earlier ones)."""
    return {**transformer_options, CACHE_OPTION: settings.as_option()}


def prompt_template(image_count: int) -> str:
    """The encoder's template (`{}` marks the prompt) for `image_count` reference images."""
    if image_count < 0 or image_count > MAX_REFERENCES:
        raise QwenImage21Error(f"Qwen-Image 2.1 takes 0 to {MAX_REFERENCES} reference images, got {image_count}")
    if image_count == 0:
        return PROMPT_TEMPLATE
    references = " ".join(f"<image{number}>{VISION_BLOCK}" for number in range(1, image_count + 1))
    return PROMPT_TEMPLATE.replace("{}", references + "{}", 1)


def reference_size(height: int, width: int, resolution: int) -> tuple[int, int]:
    """(height, width) of a reference image of `height` x `width` pixels: about `resolution`^2 pixels,
    aspect kept, sides rounded to multiples of 32 (at least 32); `resolution` 0 rounds each side."""
    if height < 1 or width < 1:
        raise QwenImage21Error(f"a reference image needs pixels, got {height}x{width}")
    if resolution < 0:
        raise QwenImage21Error(f"resolution must be 0 or more, got {resolution}")
    if resolution > 0:
        ratio = width / height
        width = round(math.sqrt(resolution * resolution * ratio) / REFERENCE_GRID) * REFERENCE_GRID
        height = round(math.sqrt(resolution * resolution / ratio) / REFERENCE_GRID) * REFERENCE_GRID
    else:
        width = round(width / REFERENCE_GRID) * REFERENCE_GRID
        height = round(height / REFERENCE_GRID) * REFERENCE_GRID
    return max(REFERENCE_GRID, height), max(REFERENCE_GRID, width)


def over_white(pixels: torch.Tensor) -> torch.Tensor:
    """IMAGE [B, H, W, C] -> its RGB [B, H, W, 3], composited over white when C > 3 (the vision
    tower's view of an RGBA reference; the VAE keeps all the channels)."""
    rgb = pixels[..., :3]
    if pixels.shape[-1] <= 3:
        return rgb
    alpha = pixels[..., 3:4]
    return rgb * alpha + (1.0 - alpha)


def _is_id(token: Any, value: int) -> bool:
    return isinstance(token, numbers.Integral) and not isinstance(token, bool) and token == value


def _is_image(token: Any) -> bool:
    return isinstance(token, Mapping) and token.get("type") == "image"


def conditioning_positions(tokens: Sequence[Any], image_sizes: Sequence[int], keep_vision: bool
                           ) -> tuple[torch.Tensor, list[int]]:
    """Which encoder output positions are conditioning, and each dropped image's slot.

    `tokens`: the first chunk's tokens (ids, image entries, embedding tensors); `image_sizes`: how
    many positions each image entry expanded to, in order. Returns (keep [N] bool over the expanded
    sequence, slots: per image, the number of kept positions before it; empty when `keep_vision`)."""
    images = sum(1 for token in tokens if _is_image(token))
    if images != len(image_sizes):
        raise QwenImage21Error(f"{images} image entries in the tokens but {len(image_sizes)} image sizes")
    if any(size < 1 for size in image_sizes):
        raise QwenImage21Error(f"every image expands to at least one position, got sizes {list(image_sizes)}")
    starts, spans, position = [], [], 0
    sizes = iter(image_sizes)
    for token in tokens:
        if _is_image(token):
            size = next(sizes)
            spans.append((position, size))
            position += size
            continue
        if _is_id(token, IM_START_ID):
            starts.append(position)
        position += 1
    keep = torch.ones(position, dtype=torch.bool)  # [N]
    if len(starts) > 1:
        keep[:starts[1]] = False  # the system turn
    slots: list[int] = []
    if not keep_vision:
        for start, size in spans:
            keep[start:start + size] = False
            slots.append(int(keep[:start].sum()))
    return keep, slots


def empty_latent(height: int, width: int) -> torch.Tensor:
    """Zeros [1, 64, height // 16, width // 16]: Qwen-Image 2.1's latent for an image of that size."""
    return torch.zeros((1, LATENT_CHANNELS, height // DOWN_FACTOR, width // DOWN_FACTOR))
