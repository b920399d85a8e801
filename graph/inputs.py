"""Assembling a node's call arguments and mapping a node over list inputs.

Semantics of ComfyUI's `execution.py: get_input_data`, `_async_map_node_over_list` and
`merge_result_data` (reference/comfyui-contract.md §5.3), written here as pure functions:

* every input value is a list (a constant `c` becomes `[c]`, a linked output is the producer's
  per-slot list); an unavailable link (lazy, or not produced yet) becomes `[None]` and is
  recorded as missing;
* undeclared linked inputs are passed through; undeclared constants are dropped;
* `rawLink` inputs receive the link itself; hidden inputs are filled from the prompt context;
* without `INPUT_IS_LIST`, the node is called `max(len)` times, call i taking element i of each
  input or the last element of a shorter list (no inputs, or only empty lists: one call).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from graph.expansion import ExecutionBlocker
from graph.prompt import is_link
from graph.spec import (HIDDEN, HIDDEN_DYNPROMPT, HIDDEN_EXTRA_PNGINFO, HIDDEN_PROMPT, HIDDEN_UNIQUE_ID,
                        InputSpec)

HIDDEN_AUTH_TOKEN = "AUTH_TOKEN_COMFY_ORG"
HIDDEN_API_KEY = "API_KEY_COMFY_ORG"
HIDDEN_USAGE_SOURCE = "COMFY_USAGE_SOURCE"  # who submitted the prompt (extra_data.comfy_usage_source)
HIDDEN_EXECUTION_LIST = "EXECUTION_LIST"  # the run's output store, as ComfyUI's ExecutionList.get_cache


@dataclass
class AssembledInputs:
    values: dict[str, list] = field(default_factory=dict)  # name -> list of per-call values
    missing: set[str] = field(default_factory=set)  # linked inputs whose value is not available


def assemble_inputs(node_inputs: Mapping[str, Any], specs: Mapping[str, InputSpec], unique_id: str, *,
                    get_output: Callable[[str, int], list | None] | None,
                    original_prompt: Any = None, dynprompt: Any = None,
                    extra_data: Mapping[str, Any] | None = None, execution_list: Any = None) -> AssembledInputs:
    """Build the list-valued inputs of one node.

    `get_output(source_id, slot)` returns the producer's per-slot list or None when it is not
    available; passing `get_output=None` treats every link as missing (validation, IS_CHANGED).
    `execution_list`: what a hidden EXECUTION_LIST input receives (an object with ComfyUI's
    `get_cache(node_id, requester)`; None outside a run).
    """
    extra = extra_data or {}
    out = AssembledInputs()
    for name, value in node_inputs.items():
        spec = specs.get(name)
        if is_link(value) and not (spec is not None and spec.raw_link):
            produced = get_output(value[0], int(value[1])) if get_output is not None else None
            if produced is None:
                out.missing.add(name)
                out.values[name] = [None]
            else:
                out.values[name] = produced
        elif spec is not None:
            out.values[name] = [value]
    for spec in specs.values():
        if spec.section != HIDDEN:
            continue
        kind = spec.type
        if kind == HIDDEN_PROMPT:
            out.values[spec.name] = [original_prompt if original_prompt is not None else {}]
        elif kind == HIDDEN_DYNPROMPT:
            out.values[spec.name] = [dynprompt]
        elif kind == HIDDEN_EXTRA_PNGINFO:
            out.values[spec.name] = [extra.get("extra_pnginfo")]
        elif kind == HIDDEN_UNIQUE_ID:
            out.values[spec.name] = [unique_id]
        elif kind == HIDDEN_AUTH_TOKEN:
            out.values[spec.name] = [extra.get("auth_token_comfy_org")]
        elif kind == HIDDEN_API_KEY:
            out.values[spec.name] = [extra.get("api_key_comfy_org")]
        elif kind == HIDDEN_USAGE_SOURCE:
            out.values[spec.name] = [extra.get("comfy_usage_source")]
        elif kind == HIDDEN_EXECUTION_LIST:
            out.values[spec.name] = [execution_list]
    return out


def call_slices(values: Mapping[str, list], input_is_list: bool) -> list[dict[str, Any]]:
    """The keyword arguments of each call (see the module docstring)."""
    if input_is_list:
        return [dict(values)]
    count = max(map(len, values.values()), default=0)
    if count == 1:
        return [{k: v[0] for k, v in values.items()}]  # an empty list raises, as in ComfyUI
    if count == 0:
        return [{}]
    return [{k: v[i if len(v) > i else -1] for k, v in values.items()} for i in range(count)]


def blocker_in(kwargs: Mapping[str, Any], input_is_list: bool) -> ExecutionBlocker | None:
    """The first `ExecutionBlocker` among one call's arguments (inside lists for INPUT_IS_LIST)."""
    for value in kwargs.values():
        if input_is_list and isinstance(value, (list, tuple)):
            for element in value:
                if isinstance(element, ExecutionBlocker):
                    return element
        if isinstance(value, ExecutionBlocker):
            return value
    return None


def merge_ui(uis: list[Mapping[str, Any]]) -> dict:
    """Merge the UI dicts of a node's calls as ComfyUI's `execution.py: get_output_from_returns`
    does, for one call as for many: the keys are the first call's; each key's value is every
    element of that key's value in each call, in call order (`list.extend`). So a bare string
    is spread into its characters (`{"text": "18.5"}` reaches clients as `["1", "8", ".", "5"]`)
    and a dict into its keys, exactly as ComfyUI's clients receive them.

    Raises `KeyError` when a later call lacks one of the first call's keys and `TypeError` for a
    value that is not iterable, where ComfyUI fails the node the same way.
    """
    if not uis:
        return {}
    merged: dict[str, list] = {}
    for key in uis[0]:
        values: list = []
        for index, ui in enumerate(uis):
            if key not in ui:
                raise KeyError(f"ui key {key!r} is missing from the ui of call {index} (the first call has it)")
            value = ui[key]
            try:
                values.extend(value)
            except TypeError:
                raise TypeError(f"ui value of {key!r} must be a list (or another iterable), got "
                                f"{type(value).__name__}") from None
        merged[key] = values
    return merged


def merge_outputs(results: list[tuple], output_is_list: tuple[bool, ...]) -> list[list]:
    """Per-slot lists from the per-call result tuples (OUTPUT_IS_LIST slots are concatenated)."""
    if not results:
        return []
    merged: list[list] = []
    for i in range(len(results[0])):
        if i < len(output_is_list) and output_is_list[i]:
            slot: list = []
            for result in results:
                if isinstance(result[i], ExecutionBlocker):
                    slot.append(result[i])
                else:
                    slot.extend(result[i])
            merged.append(slot)
        else:
            merged.append([result[i] for result in results])
    return merged


def format_value(x: Any) -> Any:
    """How a current input is shown in `execution_error.current_inputs`: ComfyUI's
    `execution.format_value(x)` (packs import it, compat serves this one)."""
    if x is None or isinstance(x, (int, float, bool, str)):
        return x
    return str(x)
