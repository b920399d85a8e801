"""V3 `io.ComfyNode` class -> `NodeSpec` (the third adapter; graph/v1.py and graph/native.py
are the others). The executor never asks which one made a spec.

Per call, as ComfyUI does (PREPARE_CLASS_CLONE), the node runs on a fresh subclass whose
`hidden` holds that call's hidden values; `execute`'s `NodeOutput` becomes the V1 return shape
(`{"result", "ui", "expand"}`, or an `ExecutionBlocker` for `block_execution`).
`/object_info` renders the V1 shape with V3 combos as `["COMBO", {"options": [...]}]`.
"""
from __future__ import annotations

import inspect
from typing import Any

from compat.v3 import io
from graph.errors import NodeDefinitionError
from graph.expansion import ExecutionBlocker
from graph.object_info import render_input
from graph.spec import HIDDEN, OPTIONAL, REQUIRED, SECTIONS, InputSpec, NodeBehaviour, NodeSpec, OutputSpec


def _input_spec(node_id: str, item: Any) -> InputSpec:
    if not isinstance(item, io.Input):
        raise NodeDefinitionError(f"V3 node {node_id!r}: inputs must be io.*.Input objects, got {item!r}")
    section = OPTIONAL if item.optional else REQUIRED
    type_: Any = item.values if isinstance(item, io.Combo.Input) else item.get_io_type()
    return InputSpec(item.id, type_, section, item.options())


def _output_spec(item: Any) -> OutputSpec:
    if not isinstance(item, io.Output):
        raise NodeDefinitionError(f"V3 outputs must be io.*.Output objects, got {item!r}")
    io_type = item.get_io_type()
    return OutputSpec(io_type, item.display_name or item.id or str(io_type), item.is_output_list, item.tooltip)


def _to_v1(result: Any) -> Any:
    """A V3 return value in the V1 shape the engine understands."""
    if not isinstance(result, io.NodeOutput):
        return result  # tuples and V1 dicts pass through
    if result.block_execution is not None:
        return ExecutionBlocker(result.block_execution)
    out: dict[str, Any] = {"result": tuple(result.args)}
    ui = result.ui
    if ui is not None:
        out["ui"] = ui.as_dict() if hasattr(ui, "as_dict") else ui
    if result.expand is not None:
        out["expand"] = result.expand
    return out


def _hidden_names(schema: io.Schema) -> list[str]:
    return [io.Hidden(h).name for h in schema.hidden]


def execute_v3(cls: type, kwargs: dict, hidden_names: list[str] | None = None) -> Any:
    """One call: hidden values go to a per-call subclass's `hidden`, the rest to `execute`;
    the result in the V1 shape (a coroutine of it for async nodes)."""
    if hidden_names is None:
        hidden_names = _hidden_names(cls.define_schema())
    kwargs = dict(kwargs)
    hidden_values = {name: kwargs.pop(name) for name in hidden_names if name in kwargs}
    clone = type(cls.__name__, (cls,), {"hidden": io.HiddenHolder(**hidden_values), "__module__": cls.__module__})
    result = clone.execute(**kwargs)
    if inspect.isawaitable(result):
        async def finish() -> Any:
            return _to_v1(await result)
        return finish()
    return _to_v1(result)


def v1_input_types(cls: type) -> dict:
    """`INPUT_TYPES()` of a V3 class in ComfyUI's V1 form (combos as lists of values)."""
    schema = cls.define_schema()
    out: dict[str, dict] = {"required": {}}
    for item in schema.inputs:
        spec = _input_spec(schema.node_id, item)
        out.setdefault(spec.section, {})[spec.name] = (spec.type, dict(spec.options))
    if schema.hidden:
        out["hidden"] = {io.Hidden(h).name: io.Hidden(h).value for h in schema.hidden}
    return out


def spec_from_v3(cls: type, *, python_module: str = "custom_nodes") -> NodeSpec:
    """The `NodeSpec` of V3 node class `cls` (raises NodeDefinitionError when malformed)."""
    if not (isinstance(cls, type) and issubclass(cls, io.ComfyNode)):
        raise NodeDefinitionError(f"expected an io.ComfyNode subclass, got {cls!r}")
    schema = cls.define_schema()
    if not isinstance(schema, io.Schema):
        raise NodeDefinitionError(f"{cls.__name__}.define_schema() must return io.Schema, got {schema!r}")
    node_id = schema.node_id
    inputs = [_input_spec(node_id, i) for i in schema.inputs]
    hidden_names = _hidden_names(schema)
    for h in schema.hidden:
        member = io.Hidden(h)
        inputs.append(InputSpec(member.name, member.value, HIDDEN, {}))
    outputs = tuple(_output_spec(o) for o in schema.outputs)

    def call(_instance: Any, **kwargs: Any) -> Any:
        return execute_v3(cls, kwargs, hidden_names)

    def without_hidden(kwargs: dict) -> dict:
        return {k: v for k, v in kwargs.items() if k not in hidden_names}

    validate = None
    validate_params: frozenset[str] = frozenset()
    takes_all = takes_types = False
    if cls.overrides("validate_inputs"):
        argspec = inspect.getfullargspec(cls.validate_inputs)
        takes_all = argspec.varkw is not None
        named = set(argspec.args[1:]) | set(argspec.kwonlyargs)
        takes_types = "input_types" in named
        validate_params = frozenset(named - {"input_types"})
        validate = lambda **kw: cls.validate_inputs(**kw)  # noqa: E731
    fingerprint = (lambda **kw: cls.fingerprint_inputs(**without_hidden(kw))) \
        if cls.overrides("fingerprint_inputs") else None
    lazy = (lambda _instance, **kw: cls.check_lazy_status(**without_hidden(kw))) \
        if cls.overrides("check_lazy_status") else None

    behaviour = NodeBehaviour(
        make_instance=lambda: None, call=call, is_changed=fingerprint, validate_inputs=validate,
        validate_params=validate_params, validate_takes_all=takes_all,
        validate_takes_input_types=takes_types, check_lazy_status=lazy,
        is_coroutine=inspect.iscoroutinefunction(cls.execute))
    frozen_inputs = tuple(inputs)

    def render(env: Any) -> dict:
        rendered: dict[str, dict] = {}
        for spec in frozen_inputs:
            if spec.section != HIDDEN and spec.is_combo:
                entry: Any = ["COMBO", {**dict(spec.options), "options": spec.combo_values(env)}]
            else:
                entry = render_input(spec, env)
            rendered.setdefault(spec.section, {})[spec.name] = entry
        ordered = {s: rendered[s] for s in SECTIONS if s in rendered}
        ordered.setdefault("required", {})
        return {"input": ordered, "input_order": {s: list(v) for s, v in ordered.items()}}

    return NodeSpec(
        node_id=node_id, inputs=frozen_inputs, outputs=outputs, behaviour=behaviour,
        display_name=schema.display_name or node_id, category=schema.category, description=schema.description,
        python_module=python_module, output_node=schema.is_output_node, input_is_list=schema.is_input_list,
        not_idempotent=schema.not_idempotent, deprecated=schema.is_deprecated,
        experimental=schema.is_experimental, api_node=schema.is_api_node, origin="v3", source=cls,
        render_info=render)
