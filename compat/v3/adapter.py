"""V3 `io.ComfyNode` class -> `NodeSpec` (the third adapter; graph/v1.py and graph/native.py
are the others). The executor never asks which one made a spec.

Each call runs `io.execute_v3` (a per-call subclass holding the hidden values, `NodeOutput` in
the V1 return shape: compat/v3/io.py, the V1 face of a V3 class, which this module builds on).
Dynamic inputs (`io.Autogrow`, `io.DynamicCombo`: compat/v3/dynamic.py) are declared flat for
the validator and reach `execute`, `check_lazy_status`, `fingerprint_inputs` and
`validate_inputs` nested, as ComfyUI passes them. With `Schema(accept_all_inputs=True)` the node
also receives the prompt's constant inputs it does not declare (editor-made widgets), as the
built-in V3-style nodes do (graph/v3_schema.py).

`/object_info` renders the entry as ComfyUI's `Schema.get_v1_info` does, with graph/v3_schema.py's
input rendering (the one the built-in V3-style nodes use): every input `[type, options]`
(combos `["COMBO", {..., "options": [...]}]`, a dynamic input as its one V3 entry), hidden
inputs `[kind]` (with the ones ComfyUI's `Schema.finalize` implies), and the node keys of
V3's `NodeInfoV1` (`output_matchtypes`, `is_input_list`, `dev_only`, `search_aliases`, ...).
"""
from __future__ import annotations

import inspect
from typing import Any

from compat.v3 import io
from compat.v3.dynamic import DynamicInput, MatchType, group_of, nest, render_group
from compat.v3.io import execute_v3, hidden_names_of, input_spec_of, output_spec_of
from compat.v3.pricing import PriceBadge
from graph.errors import NodeDefinitionError
from graph.spec import HIDDEN, SECTIONS, InputSpec, NodeBehaviour, NodeSpec
from graph.v3_schema import _ALL_ID, _ALL_PROMPT, _undeclared_constants
from graph.v3_schema import _entry as render_entry


def _matchtype_id(output: Any) -> str | None:
    template = getattr(output, "template", None)
    return getattr(template, "template_id", None) if output.get_io_type() == MatchType.io_type else None


def spec_from_v3(cls: type, *, python_module: str = "custom_nodes") -> NodeSpec:
    """The `NodeSpec` of V3 node class `cls` (raises NodeDefinitionError when malformed)."""
    if not (isinstance(cls, type) and issubclass(cls, io.ComfyNode)):
        raise NodeDefinitionError(f"expected an io.ComfyNode subclass, got {cls!r}")
    schema = cls.define_schema()
    if not isinstance(schema, io.Schema):
        raise NodeDefinitionError(f"{cls.__name__}.define_schema() must return io.Schema, got {schema!r}")
    node_id = schema.node_id
    inputs: list[InputSpec] = []
    plain: dict[str, InputSpec] = {}
    groups: dict[str, tuple[Any, dict]] = {}
    for item in schema.inputs:
        if isinstance(item, DynamicInput):
            try:
                groups[item.id] = group_of(node_id, item)
            except io.SchemaError as exc:
                raise NodeDefinitionError(f"V3 node {node_id!r}: input {item.id!r}: {exc}") from exc
            inputs.extend(groups[item.id][0].flat())
        else:
            plain[item.id] = input_spec_of(node_id, item)
            inputs.append(plain[item.id])
    hidden = schema.all_hidden()
    hidden_names = hidden_names_of(schema)
    kinds = {member.name: member.value for member in hidden}
    inputs.extend(InputSpec(key, kinds[member], HIDDEN, {}) for key, member in hidden_names.items())
    if schema.accept_all_inputs:  # the prompt's other constant inputs, read from the prompt (not rendered)
        inputs += [InputSpec(_ALL_PROMPT, "PROMPT", HIDDEN, {}), InputSpec(_ALL_ID, "UNIQUE_ID", HIDDEN, {})]
    declared = tuple(inputs)
    outputs = tuple(output_spec_of(o) for o in schema.outputs)
    group_list = [g for g, _ in groups.values()]
    listed = schema.is_input_list

    def nested(kwargs: dict, tuples: bool = False, strict: bool = False) -> dict:
        if schema.accept_all_inputs:
            kwargs = dict(kwargs)
            kwargs = {**_undeclared_constants(kwargs.pop(_ALL_PROMPT, None), kwargs.pop(_ALL_ID, None), declared),
                      **kwargs}
        return nest(group_list, kwargs, tuples=tuples, listed=listed, strict=strict)

    def call(_instance: Any, **kwargs: Any) -> Any:
        return execute_v3(cls, nested(kwargs, strict=True), hidden_names)

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
        validate = lambda **kw: cls.validate_inputs(**nested(kw))  # noqa: E731
    fingerprint = (lambda **kw: cls.fingerprint_inputs(**nested(without_hidden(kw)))) \
        if cls.overrides("fingerprint_inputs") else None
    # ComfyUI hands check_lazy_status each dynamic value as (value, flat name): the node answers
    # with the flat names the executor knows.
    lazy = (lambda _instance, **kw: cls.check_lazy_status(**nested(without_hidden(kw), tuples=True))) \
        if cls.overrides("check_lazy_status") else None

    behaviour = NodeBehaviour(
        make_instance=lambda: None, call=call, is_changed=fingerprint, validate_inputs=validate,
        validate_params=validate_params, validate_takes_all=takes_all,
        validate_takes_input_types=takes_types, check_lazy_status=lazy,
        is_coroutine=inspect.iscoroutinefunction(cls.execute))
    matchtypes = [_matchtype_id(o) for o in schema.outputs]
    price_badge = None
    if schema.price_badge is not None:
        if not isinstance(schema.price_badge, PriceBadge):
            raise NodeDefinitionError(f"V3 node {node_id!r}: price_badge must be an io.PriceBadge, "
                                      f"got {schema.price_badge!r}")
        try:
            price_badge = schema.price_badge.as_dict(schema.inputs)
        except io.SchemaError as exc:
            raise NodeDefinitionError(f"V3 node {node_id!r}: {exc}") from exc

    def render(env: Any) -> dict:
        rendered: dict[str, dict] = {"required": {}}
        for item in schema.inputs:
            if item.id in groups:
                section, entry = render_group(*groups[item.id], env)
            else:
                spec = plain[item.id]
                section, entry = spec.section, render_entry(spec, env)
            rendered.setdefault(section, {})[item.id] = entry
        for member in hidden:
            rendered.setdefault(HIDDEN, {})[member.name] = [member.value]
        ordered = {s: rendered[s] for s in SECTIONS if s in rendered}
        return {
            "input": ordered,
            "input_order": {s: list(v) for s, v in ordered.items()},
            "is_input_list": schema.is_input_list,
            "output_tooltips": [o.tooltip for o in schema.outputs],
            "output_matchtypes": matchtypes if any(m is not None for m in matchtypes) else None,
            "deprecated": schema.is_deprecated,
            "experimental": schema.is_experimental,
            "dev_only": schema.is_dev_only,
            "api_node": schema.is_api_node,
            "price_badge": price_badge,
            "search_aliases": list(schema.search_aliases) or None,
            "essentials_category": schema.essentials_category,
            "has_intermediate_output": schema.has_intermediate_output,
        }

    return NodeSpec(
        node_id=node_id, inputs=declared, outputs=outputs, behaviour=behaviour,
        display_name=schema.display_name or node_id,
        display_name_declared=schema.display_name is not None, category=schema.category, description=schema.description,
        python_module=python_module, output_node=schema.is_output_node, input_is_list=schema.is_input_list,
        not_idempotent=schema.not_idempotent, deprecated=schema.is_deprecated,
        experimental=schema.is_experimental, api_node=schema.is_api_node, origin="v3", source=cls,
        render_info=render)
