"""V3 `io.ComfyNode` class -> `NodeSpec` (the third adapter; graph/v1.py and graph/native.py
are the others). The executor never asks which one made a spec.

Each call runs `io.execute_v3` (a per-call subclass holding the hidden values, `NodeOutput` in
the V1 return shape: compat/v3/io.py, the V1 face of a V3 class, which this module builds on).
`/object_info` renders the V1 shape with V3 combos as `["COMBO", {"options": [...]}]`.
"""
from __future__ import annotations

import inspect
from typing import Any

from compat.v3 import io
from compat.v3.io import execute_v3, hidden_names_of, input_spec_of, output_spec_of
from graph.errors import NodeDefinitionError
from graph.object_info import render_input
from graph.spec import HIDDEN, SECTIONS, InputSpec, NodeBehaviour, NodeSpec


def spec_from_v3(cls: type, *, python_module: str = "custom_nodes") -> NodeSpec:
    """The `NodeSpec` of V3 node class `cls` (raises NodeDefinitionError when malformed)."""
    if not (isinstance(cls, type) and issubclass(cls, io.ComfyNode)):
        raise NodeDefinitionError(f"expected an io.ComfyNode subclass, got {cls!r}")
    schema = cls.define_schema()
    if not isinstance(schema, io.Schema):
        raise NodeDefinitionError(f"{cls.__name__}.define_schema() must return io.Schema, got {schema!r}")
    node_id = schema.node_id
    inputs = [input_spec_of(node_id, i) for i in schema.inputs]
    hidden_names = hidden_names_of(schema)
    for h in schema.hidden:
        member = io.Hidden(h)
        inputs.append(InputSpec(member.name, member.value, HIDDEN, {}))
    outputs = tuple(output_spec_of(o) for o in schema.outputs)

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
        display_name=schema.display_name or node_id,
        display_name_declared=schema.display_name is not None, category=schema.category, description=schema.description,
        python_module=python_module, output_node=schema.is_output_node, input_is_list=schema.is_input_list,
        not_idempotent=schema.not_idempotent, deprecated=schema.is_deprecated,
        experimental=schema.is_experimental, api_node=schema.is_api_node, origin="v3", source=cls,
        render_info=render)
