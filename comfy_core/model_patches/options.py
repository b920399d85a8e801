"""Copy-on-write edits of `model_options`, for hooks that run the model with one more patch.

After ComfyUI's `comfy/model_patcher.py: set_model_options_patch_replace`: only the containers on
the path to the new entry are copied, so the sampler's options (and the patcher's) are untouched.
"""
from __future__ import annotations

from typing import Any, Callable


def with_attention_replace(model_options: dict, patch: Callable, name: str, block_name: str, number: int,
                           transformer_index: int | None = None) -> dict:
    """A copy of `model_options` whose `patches_replace[name][(block_name, number[, index])]` is
    `patch` (`name` "attn1" or "attn2")."""
    options = dict(model_options)
    transformer_options = dict(options.get("transformer_options", {}))
    replace = dict(transformer_options.get("patches_replace", {}))
    table: dict[Any, Callable] = dict(replace.get(name, {}))
    key = (block_name, number) if transformer_index is None else (block_name, number, transformer_index)
    table[key] = patch
    replace[name] = table
    transformer_options["patches_replace"] = replace
    options["transformer_options"] = transformer_options
    return options
