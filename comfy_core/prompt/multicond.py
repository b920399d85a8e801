"""Composable prompts: AUTOMATIC1111's `AND` split and per-subprompt weights.

Behaviour of webui 1.10 `modules/prompt_parser.py::get_multicond_prompt_list`, written here from
`shared/reference/a1111-prompt.md` section 0.2. Each prompt is split on the case-sensitive word
`AND`; each part may end in `:weight` (its composable weight, default 1.0), which is removed
together with trailing whitespace. This applies even without `AND` (`a photo, cat:1.5` is the text
`a photo, cat` with weight 1.5). Texts are de-duplicated across the batch.

Composable diffusion: Liu et al. 2022, "Compositional Visual Generation with Composable
Diffusion Models" (combined as `uncond + cfg * sum_i w_i (cond_i - uncond)`).
"""
from __future__ import annotations

import re
from typing import Sequence

_AND = re.compile(r"\bAND\b")
# Lazy text, then an optional `: number` (no exponent), then trailing whitespace.
_WEIGHT = re.compile(r"^([\s\S]*?)(?:\s*:\s*([-+]?(?:\d+\.?|\d*\.\d+)))?\s*$")


def split_subprompt(subprompt: str) -> tuple[str, float]:
    """`"cat:1.5 "` -> `("cat", 1.5)`; a part without a weight keeps weight 1.0."""
    match = _WEIGHT.search(subprompt)
    if match is None:  # the pattern matches every string; kept for clarity of intent
        return subprompt, 1.0
    text, weight = match.groups()
    return text, float(weight) if weight is not None else 1.0


def split_and(prompt: str) -> list[tuple[str, float]]:
    """One prompt's `(text, composable_weight)` parts, in order (duplicates kept)."""
    return [split_subprompt(part) for part in _AND.split(prompt)]


def get_multicond_prompt_list(prompts: Sequence[str]) -> tuple[list[list[tuple[int, float]]], list[str], dict[str, int]]:
    """webui's function: `(res_indexes, prompt_flat_list, prompt_indexes)`.

    `res_indexes[i]` lists `(index into prompt_flat_list, weight)` for prompt i;
    `prompt_flat_list` holds each distinct subprompt text once; `prompt_indexes` maps text -> index.

    >>> get_multicond_prompt_list(["a AND b:0.5"])
    ([[(0, 1.0), (1, 0.5)]], ['a', ' b'], {'a': 0, ' b': 1})
    """
    res_indexes: list[list[tuple[int, float]]] = []
    flat: list[str] = []
    index_of: dict[str, int] = {}
    for prompt in prompts:
        indexes = []
        for text, weight in split_and(prompt):
            if text not in index_of:
                index_of[text] = len(flat)
                flat.append(text)
            indexes.append((index_of[text], weight))
        res_indexes.append(indexes)
    return res_indexes, flat, index_of
