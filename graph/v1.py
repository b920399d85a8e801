"""Adapter from ComfyUI's V1 custom-node class contract to a `NodeSpec`.

The V1 contract (ComfyUI `nodes.py`, described in reference/comfyui-contract.md §4.1): a class
with a classmethod `INPUT_TYPES()` returning `{"required": {...}, "optional": {...},
"hidden": {...}}`, `RETURN_TYPES`, `RETURN_NAMES`, `FUNCTION` (the method name, sync or async),
`CATEGORY`, `DESCRIPTION`, `OUTPUT_NODE`, `OUTPUT_IS_LIST`, `INPUT_IS_LIST`, `IS_CHANGED`,
`VALIDATE_INPUTS`, `check_lazy_status`, `NOT_IDEMPOTENT`, `OUTPUT_TOOLTIPS`, `DEPRECATED`,
`EXPERIMENTAL`, `API_NODE`.

`INPUT_TYPES()` is re-read whenever the engine needs the inputs (once per prompt and class, and
on every `/object_info` request), as ComfyUI does, because packs list files there.
"""
from __future__ import annotations

import inspect
from typing import Any, Mapping

from graph.errors import NodeDefinitionError
from graph.spec import HIDDEN, OPTIONAL, REQUIRED, SECTIONS, InputSpec, NodeBehaviour, NodeSpec, OutputSpec


def inputs_from_input_types(class_type: str, input_types: Any,
                            quirks: list[str] | None = None) -> tuple[InputSpec, ...]:
    """Turn an `INPUT_TYPES()` dict into `InputSpec`s (section order, then insertion order).

    A name declared in more than one section keeps its first declaration, in the order
    required, optional, hidden: that is the one ComfyUI's `comfy_execution/graph.py:
    get_input_info` finds, and so the one its validation and `get_input_data` use (its own
    execution-test pack declares `value1` under both `required` and `optional`). Each such
    name adds one sentence to `quirks` when a list is given.
    """
    if not isinstance(input_types, Mapping):
        raise NodeDefinitionError(
            f"node {class_type!r}: INPUT_TYPES() must return a dict, got {type(input_types).__name__}")
    specs: list[InputSpec] = []
    first_section: dict[str, str] = {}
    for section in SECTIONS:
        entries = input_types.get(section) or {}
        if not isinstance(entries, Mapping):
            raise NodeDefinitionError(
                f"node {class_type!r}: INPUT_TYPES()[{section!r}] must be a dict, got {type(entries).__name__}")
        for name, entry in entries.items():
            if name in first_section:
                if quirks is not None:
                    quirks.append(f"input {name!r} is declared under both {first_section[name]!r} and "
                                  f"{section!r}; the {first_section[name]!r} declaration is used, as in ComfyUI")
                continue
            first_section[name] = section
            specs.append(_input_spec(class_type, section, name, entry, quirks))
    return tuple(specs)


def _input_spec(class_type: str, section: str, name: str, entry: Any,
                quirks: list[str] | None = None) -> InputSpec:
    if section == HIDDEN and isinstance(entry, str):
        return InputSpec(name, entry, HIDDEN, {})
    if section == HIDDEN and isinstance(entry, (tuple, list)):
        # `("UNIQUE_ID",)` (RealtimeNodes): ComfyUI compares a hidden entry with "UNIQUE_ID",
        # "PROMPT", ... as a string, so a tuple matches no kind and nothing is passed for it; kept
        # as the tuple, it matches none here either and /object_info lists it as declared.
        return InputSpec(name, tuple(entry), HIDDEN, {})
    if isinstance(entry, (tuple, list)) and entry:
        type_ = entry[0]
        options = entry[1] if len(entry) > 1 and isinstance(entry[1], Mapping) else {}
        if isinstance(type_, (list, tuple)):
            type_ = list(type_)
        return InputSpec(name, type_, section, options)
    if isinstance(entry, str) and entry:
        # A bare type string where a tuple belongs (`"lora_name": AnyType("*")`, prompt-reader-node).
        # ComfyUI indexes it like the tuple it expects (comfy_execution/graph.py `get_input_info`:
        # `input_info[0]`, options `input_info[1]` when longer than 1): the type is the string's
        # first character, as a plain `str` (so `"*"` stays the any-type, a `str` subclass's
        # `__ne__` is gone, and `"STRING"` is the type `"S"`); the second character, where there
        # is one, is no dict and gives no options (`"min" in "T"` is never true). /object_info
        # lists the entry as returned.
        if quirks is not None and len(entry) > 1:
            quirks.append(f"input {name!r} is a bare type {str(entry)!r}, not a tuple; as in ComfyUI its type is "
                          f"its first character, {entry[0]!r}")
        return InputSpec(name, entry[0], section, {})
    if section == HIDDEN:
        return InputSpec(name, entry, HIDDEN, {})
    raise NodeDefinitionError(
        f"node {class_type!r}: input {name!r} must be a tuple (type, options?), got {entry!r}")


def spec_from_v1(class_type: str, cls: type, *, display_name: str | None = None,
                 python_module: str = "custom_nodes") -> NodeSpec:
    """Build the `NodeSpec` of V1 class `cls` registered as `class_type`."""
    if not isinstance(cls, type):
        raise NodeDefinitionError(f"node {class_type!r}: expected a class, got {cls!r}")
    if not hasattr(cls, "INPUT_TYPES"):
        raise NodeDefinitionError(f"node {class_type!r}: class {cls.__name__} has no INPUT_TYPES")
    function_name = getattr(cls, "FUNCTION", None)
    # ComfyUI lists a class whose FUNCTION names no method (packs' "info" nodes with no outputs) and
    # only fails if it is ever run; a prompt never runs one that is neither an output nor upstream
    # of one. So does this engine: registered, with the refusal at call time.
    runnable = isinstance(function_name, str) and callable(getattr(cls, function_name, None))

    def read_inputs() -> tuple[InputSpec, ...]:
        return inputs_from_input_types(class_type, cls.INPUT_TYPES())

    quirks: list[str] = []
    if not runnable:
        quirks.append(f"FUNCTION {function_name!r} names no method of {cls.__name__}: listed, as ComfyUI lists "
                      f"it, but running it fails")
    try:
        inputs = inputs_from_input_types(class_type, cls.INPUT_TYPES(), quirks)
    except Exception as ex:  # noqa: BLE001 -- ComfyUI only drops such a node from /object_info
        # Registered all the same (INPUT_TYPES is read again for each prompt and /object_info).
        inputs = ()
        quirks.append(f"INPUT_TYPES() failed while loading ({type(ex).__name__}: {ex}); it is read again "
                      f"whenever a prompt or /object_info needs it")

    return_types = tuple(getattr(cls, "RETURN_TYPES", ()) or ())
    names = tuple(getattr(cls, "RETURN_NAMES", None) or return_types)
    is_list = tuple(getattr(cls, "OUTPUT_IS_LIST", None) or (False,) * len(return_types))
    tooltips = getattr(cls, "OUTPUT_TOOLTIPS", None)
    outputs = tuple(
        OutputSpec(t, str(names[i]) if i < len(names) else str(t),
                   bool(is_list[i]) if i < len(is_list) else False,
                   tooltips[i] if tooltips and i < len(tooltips) else None)
        for i, t in enumerate(return_types))

    validate = getattr(cls, "VALIDATE_INPUTS", None)
    validate_params: frozenset[str] = frozenset()
    takes_all = takes_types = False
    if validate is not None:
        argspec = inspect.getfullargspec(validate)
        names_ = set(argspec.args) | set(argspec.kwonlyargs)
        takes_all = argspec.varkw is not None
        takes_types = "input_types" in names_
        validate_params = frozenset(names_ - {"input_types"})

    is_changed = getattr(cls, "IS_CHANGED", None)
    has_lazy = callable(getattr(cls, "check_lazy_status", None))
    behaviour = NodeBehaviour(
        make_instance=cls,
        call=(lambda instance, **kw: getattr(instance, function_name)(**kw)) if runnable else
        _not_runnable(class_type, cls, function_name),
        # Called on the class, exactly as ComfyUI does; a signature mismatch raises and the
        # caller turns that into "always changed".
        is_changed=(lambda **kw: getattr(cls, "IS_CHANGED")(**kw)) if is_changed is not None else None,
        validate_inputs=(lambda **kw: getattr(cls, "VALIDATE_INPUTS")(**kw)) if validate is not None else None,
        validate_params=validate_params,
        validate_takes_all=takes_all,
        validate_takes_input_types=takes_types,
        check_lazy_status=(lambda instance, **kw: instance.check_lazy_status(**kw)) if has_lazy else None,
        is_coroutine=runnable and inspect.iscoroutinefunction(getattr(cls, function_name)),
    )

    def render(env: Any) -> dict:
        return _render_v1(cls)

    return NodeSpec(
        node_id=class_type, inputs=inputs, outputs=outputs, behaviour=behaviour,
        display_name=display_name or class_type,
        category=getattr(cls, "CATEGORY", "sd"),
        description=getattr(cls, "DESCRIPTION", "") or "",
        python_module=python_module,
        output_node=getattr(cls, "OUTPUT_NODE", False) is True,
        input_is_list=getattr(cls, "INPUT_IS_LIST", False) is True,
        not_idempotent=getattr(cls, "NOT_IDEMPOTENT", False) is True,
        deprecated=getattr(cls, "DEPRECATED", False) is True,
        experimental=getattr(cls, "EXPERIMENTAL", False) is True,
        api_node=getattr(cls, "API_NODE", False) is True,
        origin="v1", source=cls, input_source=read_inputs, render_info=render, quirks=tuple(quirks),
    )


def _not_runnable(class_type: str, cls: type, function_name: Any) -> Any:
    def call(instance: Any, **inputs: Any) -> Any:
        raise NodeDefinitionError(
            f"node {class_type!r} cannot run: FUNCTION must name a method of {cls.__name__}, got {function_name!r}")
    return call


def _render_v1(cls: type) -> dict:
    """The `input`/`input_order` part of /object_info: `INPUT_TYPES()` as returned."""
    input_types = cls.INPUT_TYPES()
    rendered = {
        "input": input_types,
        "input_order": {section: list(values.keys()) for section, values in input_types.items()},
        # The class attributes today's ComfyUI renders (server.py `node_info`).
        "has_intermediate_output": getattr(cls, "HAS_INTERMEDIATE_OUTPUT", False) is True,
        "search_aliases": getattr(cls, "SEARCH_ALIASES", []),
    }
    if getattr(cls, "DEV_ONLY", False):
        rendered["dev_only"] = True
    if hasattr(cls, "ESSENTIALS_CATEGORY"):
        rendered["essentials_category"] = cls.ESSENTIALS_CATEGORY
    return rendered


__all__ = ["spec_from_v1", "inputs_from_input_types", "REQUIRED", "OPTIONAL", "HIDDEN"]
