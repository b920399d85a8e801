"""Fibo 2.0's prompts and sizes as its pipeline prepares them (diffusers 0.42's `BriaFibo2Pipeline`
and `BriaFibo2ImageProcessor`, the reference implementation; written here from their behaviour):

- a generation prompt that is a JSON object is a structured (VGL) caption, put in the form training
  saw (`generation_prompt`): empty values (None, "", {}, [], NaN) dropped at every depth, the
  `aesthetic_score` / `preference_score` fields dropped from the caption and its sections, sections
  left empty dropped, serialised compactly (`,` / `:`, non-ASCII kept); a caption of exactly
  `short_description` and `text_render` keeps both, in that order, the list even when empty. Any
  other prompt (a short description) is sent as it is;
- an edit prompt (`edit_prompt`) is one JSON object: a vision marker per image (`image`, or `image_1`
  ... for several), the result's caption when the prompt has one (`structured_caption`: its other
  keys, cleaned as above, or its own `structured_caption` key), then `edit_instruction` (the prompt
  itself when it is not a JSON object);
- the null caption (`NULL_CAPTION`, every key of the caption with an empty value) is the negative
  Fibo 2.0 was trained with for classifier-free guidance;
- `bucket_size`: the size Fibo 2.0 was trained at for an aspect ratio: of the sizes divisible by 16,
  at least 64 a side, within 10% of 1024 x 1024, the one that crops least from that aspect, then the
  one closest to the area, then the wider.

Not done here: the pipeline's drawn images of a caption's `text_render` texts (shown to Qwen3-VL
with the caption) and its grey-out mask for a single edited image.
"""
from __future__ import annotations

import json
import math
from typing import Any

VISION_MARKER = "<|vision_start|><|image_pad|><|vision_end|>"
NULL_CAPTION = ('{"short_description":"","objects":[],"background_setting":"","lighting":{},'
                '"aesthetics":{},"photographic_characteristics":{},"style_medium":"",'
                '"context":"","artistic_style":""}')
SCORES = ("aesthetic_score", "preference_score")
DEFAULT_AREA = 1024 * 1024
MULTIPLE = 16


class Fibo2PromptError(ValueError):
    """An edit prompt in a form Fibo 2.0 does not read."""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _empty(value: Any) -> bool:
    if isinstance(value, float):
        return math.isnan(value)
    return value is None or (isinstance(value, (str, dict, list)) and not value)


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        value = {k: _clean(v) for k, v in value.items()}
        return {k: v for k, v in value.items() if not _empty(v)}
    if isinstance(value, list):
        return [v for v in map(_clean, value) if not _empty(v)]
    return value


def parse_prompt(prompt: str) -> tuple[Any, str | None]:
    """(the caption in its trained form: a dict, a string or None; the edit instruction or None).
    A prompt that is not a JSON object comes back as it is, with no instruction."""
    try:
        caption = json.loads(prompt)
    except json.JSONDecodeError:
        return prompt, None
    if not isinstance(caption, dict):
        return prompt, None
    instruction = caption.pop("edit_instruction", None)
    if "structured_caption" in caption:
        caption = caption.pop("structured_caption")
        if not isinstance(caption, dict):
            return caption or None, instruction
    keys = set(caption)
    cleaned = {key: ({k: v for k, v in value.items() if k not in SCORES} if isinstance(value, dict) else value)
               for key, value in _clean(caption).items() if key not in SCORES}
    cleaned = {key: value for key, value in cleaned.items() if value != {}}
    if keys == {"short_description", "text_render"}:
        cleaned = {"short_description": cleaned.get("short_description") or "",
                   "text_render": cleaned.get("text_render") or []}
    return cleaned or None, instruction


def generation_prompt(prompt: str) -> str:
    """The text a generation (no image) encodes: a JSON caption cleaned and compact, else the prompt."""
    caption, _instruction = parse_prompt(prompt)
    return prompt if isinstance(caption, str) else _dumps(caption or {})


def check_edit_prompt(prompt: str) -> None:
    """Refuses a JSON object without `edit_instruction`, or whose `structured_caption` is not a caption
    (a JSON object or a string) or comes with other keys (the pipeline's rule)."""
    try:
        edit = json.loads(prompt)
    except json.JSONDecodeError:
        return
    if not isinstance(edit, dict):
        return
    if "edit_instruction" not in edit:
        raise Fibo2PromptError("to edit images the prompt must be the edit instruction, or a JSON caption of the "
                               "result with an \"edit_instruction\" key")
    if "structured_caption" in edit and (not isinstance(edit["structured_caption"], (dict, str)) or len(edit) > 2):
        raise Fibo2PromptError("an edit prompt with a \"structured_caption\" key holds the result's caption there "
                               "(a JSON object or a string) and nothing else but \"edit_instruction\"")


def edit_prompt(prompt: str, images: int) -> str:
    """The JSON object an edit of `images` images encodes (see the module doc)."""
    check_edit_prompt(prompt)
    caption, instruction = parse_prompt(prompt)
    if instruction is None:
        caption, instruction = None, prompt
    edit: dict[str, Any] = ({"image": VISION_MARKER} if images == 1
                            else {f"image_{k}": VISION_MARKER for k in range(1, images + 1)})
    if caption:
        edit["structured_caption"] = caption
    edit["edit_instruction"] = instruction
    return _dumps(edit)


def bucket_size(aspect_ratio: float, area: int = DEFAULT_AREA, multiple: int = MULTIPLE) -> tuple[int, int]:
    """(width, height) Fibo 2.0 was trained at for `aspect_ratio` = width / height (see the module doc)."""
    min_side = 4 * multiple
    best: tuple[tuple[float, int, int], tuple[int, int]] | None = None
    for width in range(min_side, 2 * area // min_side, multiple):
        # the heights (multiples of `multiple` from min_side, below 2 area / width) within 10% of the area
        first = max(min_side, math.ceil((0.9 * area / width - min_side) / multiple) * multiple + min_side)
        for height in range(first, 2 * area // width, multiple):
            if width * height > 1.1 * area:
                break
            if width * height < 0.9 * area:
                continue
            ratio = width / height
            crop = 1 - min(ratio / aspect_ratio, aspect_ratio / ratio)
            key = (round(crop, 9), abs(width * height - area), -width)
            if best is None or key < best[0]:
                best = (key, (width, height))
    if best is None:
        raise ValueError(f"no size near {area} pixels in multiples of {multiple}")
    return best[1]


__all__ = ["Fibo2PromptError", "NULL_CAPTION", "VISION_MARKER", "bucket_size", "check_edit_prompt", "edit_prompt",
           "generation_prompt", "parse_prompt"]
