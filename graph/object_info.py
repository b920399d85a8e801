"""Render a `NodeSpec` in ComfyUI's `/object_info` V1 JSON shape (reference §3).

One way out for every node, however it was declared: `input`, `input_order`, `output`,
`output_is_list`, `output_name`, `name`, `display_name`, `description`, `python_module`,
`category`, `output_node`, `is_input_list`, `has_intermediate_output`, `search_aliases` (today's
ComfyUI adds the last three to every node), plus `output_tooltips` / `deprecated` / `experimental` /
`api_node` / `essentials_category` only when they apply.
"""
from __future__ import annotations

from typing import Any

from graph.spec import HIDDEN, SECTIONS, InputSpec, NodeSpec


def render_input(spec: InputSpec, env: Any = None) -> Any:
    """One input entry: `[type]` or `[type, options]`; hidden inputs are their kind string."""
    if spec.section == HIDDEN:
        return spec.type
    type_ = spec.combo_values(env) if spec.is_combo else spec.type
    options = dict(spec.options)
    return [type_, options] if options else [type_]


def render_inputs(inputs: tuple[InputSpec, ...], env: Any = None) -> dict:
    """`{"input": {...}, "input_order": {...}}` for declared inputs, sections in ComfyUI order."""
    rendered: dict[str, dict] = {}
    for spec in inputs:
        rendered.setdefault(spec.section, {})[spec.name] = render_input(spec, env)
    ordered = {s: rendered[s] for s in SECTIONS if s in rendered}
    if "required" not in ordered:
        ordered = {"required": {}, **ordered}
    return {"input": ordered, "input_order": {s: list(v) for s, v in ordered.items()}}


def node_info(spec: NodeSpec, env: Any = None) -> dict:
    """The full `/object_info` entry of one node type."""
    if spec.render_info is not None:
        head = spec.render_info(env)
    else:
        head = render_inputs(spec.inputs, env)
    info: dict[str, Any] = {
        "input": head["input"],
        "input_order": head["input_order"],
        "output": [o.type for o in spec.outputs],
        "output_is_list": [o.is_list for o in spec.outputs],
        "output_name": [o.name for o in spec.outputs],
        "name": spec.node_id,
        "display_name": spec.display_name if spec.display_name_declared else None,
        "description": spec.description,
        "python_module": spec.python_module,
        "category": spec.category,
        "output_node": spec.output_node,
    }
    if any(o.tooltip is not None for o in spec.outputs) and "output_tooltips" not in head:
        info["output_tooltips"] = [o.tooltip or "" for o in spec.outputs]  # V1's; a V3 renderer gives its own
    if spec.deprecated:
        info["deprecated"] = True
    if spec.experimental:
        info["experimental"] = True
    if spec.api_node:
        info["api_node"] = True
    for key, value in head.items():  # extra keys a custom renderer adds (V3 flags, V1 class attributes)
        info.setdefault(key, value)
    # Today's ComfyUI renders every V1 node with these three (server.py `node_info`); the frontend
    # reads them. A renderer's own values (a V3 schema, a pack's class attributes) win.
    info.setdefault("is_input_list", spec.input_is_list)
    info.setdefault("has_intermediate_output", False)
    info.setdefault("search_aliases", list(spec.search_aliases))
    if spec.essentials_category is not None:
        info.setdefault("essentials_category", spec.essentials_category)
    return info
