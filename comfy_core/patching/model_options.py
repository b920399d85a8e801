"""Functions on a `model_options` dict, as ComfyUI's comfy/model_patcher.py module functions.

Packs call these on the `model_options` a sampler passes them (or on `patcher.model_options`):
each returns the dict it was given, changed where the function says, with the nested containers
it touches copied first so another holder of the old containers never sees the change.
"""
from __future__ import annotations

from typing import Any, Callable

from comfy_core.wrappers import copy_nested_dicts


def set_model_options_patch_replace(model_options: dict, patch: Callable, name: str, block_name: str, number: int,
                                    transformer_index: int | None = None) -> dict:
    """Put `patch` at `patches_replace[name][(block_name, number[, transformer_index])]`."""
    to = dict(model_options.get("transformer_options", {}))
    replace = dict(to.get("patches_replace", {}))
    by_block = dict(replace.get(name, {}))
    block = (block_name, number) if transformer_index is None else (block_name, number, transformer_index)
    by_block[block] = patch
    replace[name] = by_block
    to["patches_replace"] = replace
    model_options["transformer_options"] = to
    return model_options


def set_model_options_patch(model_options: dict, patch: Callable, name: str) -> dict:
    """Append `patch` to `transformer_options["patches"][name]` (attn1_patch, input_block_patch, ...)."""
    to = dict(model_options.get("transformer_options", {}))
    patches = dict(to.get("patches", {}))
    patches[name] = list(patches.get(name, [])) + [patch]
    to["patches"] = patches
    model_options["transformer_options"] = to
    return model_options


def append_model_option(model_options: dict, key: str, fn: Callable, disable_cfg1_optimization: bool = False) -> dict:
    """Append `fn` to the list `model_options[key]` (a new list); with `disable_cfg1_optimization`,
    set `model_options["disable_cfg1_optimization"]`."""
    model_options[key] = list(model_options.get(key, [])) + [fn]
    if disable_cfg1_optimization:
        model_options["disable_cfg1_optimization"] = True
    return model_options


def set_model_options_post_cfg_function(model_options: dict, post_cfg_function: Callable,
                                        disable_cfg1_optimization: bool = False) -> dict:
    return append_model_option(model_options, "sampler_post_cfg_function", post_cfg_function, disable_cfg1_optimization)


def set_model_options_pre_cfg_function(model_options: dict, pre_cfg_function: Callable,
                                       disable_cfg1_optimization: bool = False) -> dict:
    return append_model_option(model_options, "sampler_pre_cfg_function", pre_cfg_function, disable_cfg1_optimization)


def create_model_options_clone(orig_model_options: dict) -> dict:
    """A copy whose nested dicts and lists are new (the functions in them are shared)."""
    return copy_nested_dicts(orig_model_options)


def create_hook_patches_clone(orig_hook_patches: dict[Any, dict[str, list]]) -> dict[Any, dict[str, list]]:
    return {ref: {k: list(v) for k, v in by_key.items()} for ref, by_key in orig_hook_patches.items()}
