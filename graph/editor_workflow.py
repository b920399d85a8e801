"""The editor's saved workflow (`{"nodes": [...], "links": [...]}`) as an API-format prompt.

What ComfyUI's frontend does when it queues a workflow (`graphToPrompt` in
`comfyui-frontend-package`), written here from its observable behaviour so that
`main.py run` and tests can execute the files users save and the official templates:

- muted (mode 2) and bypassed (mode 4) nodes are left out; a link from a bypassed node is
  followed through the bypassed node's input of the same type (the same slot first), as the
  editor's bypass does;
- virtual nodes (`Reroute`, `PrimitiveNode`, `Note`, `MarkdownNote`) are left out: a link
  through a Reroute is followed to its origin, and a widget input fed by a PrimitiveNode takes
  the primitive's value;
- `widgets_values` are matched to the node's widget inputs in declaration order
  (`input_order`, required then optional). Widgets the editor adds itself take a slot there but
  are not sent: the `control_after_generate` widget after an INT with that option or named
  `seed` / `noise_seed` (and after combos with the option), and the upload button after an
  `image_upload` / `video_upload` / `audio_upload` combo;
- a widget input that is linked sends the link instead of its value; list values are sent as
  `{"__value__": [...]}`; links to nodes that are not sent are dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

MODE_NEVER = 2
MODE_BYPASS = 4
VIRTUAL_TYPES = frozenset({"Reroute", "PrimitiveNode", "Note", "MarkdownNote"})
WIDGET_TYPES = frozenset({"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"})
UPLOAD_OPTIONS = ("image_upload", "video_upload", "audio_upload", "animated_image_upload")
SEED_NAMES = ("seed", "noise_seed")


class EditorWorkflowError(ValueError):
    """The editor workflow cannot be turned into a prompt (unknown node types, broken links)."""


@dataclass(frozen=True)
class WidgetSlot:
    """One entry of a node's `widgets_values`: an input (`name`) or an editor-only widget."""

    name: str | None  # None: the editor's own widget (control, upload button), never sent
    optional: bool = False  # an upload button: some saved files leave its value out
    default: Any = None  # what a new node's widget holds (used when the file has no value)


def is_editor_workflow(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data


def widget_slots(node_def: Mapping[str, Any]) -> list[WidgetSlot]:
    """The `widgets_values` layout of a node type from its `/object_info` entry."""
    slots: list[WidgetSlot] = []
    inputs = node_def.get("input", {})
    order = node_def.get("input_order") or {}
    for section in ("required", "optional"):
        declared = inputs.get(section) or {}
        for name in order.get(section) or list(declared):
            if name not in declared:
                continue
            spec = declared[name]
            kind = spec[0] if spec else None
            options = spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}
            is_combo = isinstance(kind, list) or kind == "COMBO"
            if not (is_combo or kind in WIDGET_TYPES) or options.get("forceInput"):
                continue
            slots.append(WidgetSlot(name, default=_widget_default(kind, options)))
            control = options.get("control_after_generate")
            if kind == "INT" and (control if control is not None else name in SEED_NAMES):
                slots.append(WidgetSlot(None))
            elif is_combo and control:
                slots.append(WidgetSlot(None))
            if is_combo and any(options.get(key) for key in UPLOAD_OPTIONS):
                slots.append(WidgetSlot(None, optional=True))
    return slots


def _widget_default(kind: Any, options: Mapping[str, Any]) -> Any:
    """A new widget's value, as the editor makes it: the declared default, else the first combo
    choice, 0, "" or false."""
    if "default" in options:
        return options["default"]
    if isinstance(kind, list):
        return kind[0] if kind else None
    if kind == "COMBO":
        choices = options.get("options") or []
        return choices[0] if choices else None
    return {"INT": 0, "FLOAT": 0.0, "STRING": "", "BOOLEAN": False}.get(kind)


def widget_inputs(node: Mapping[str, Any], node_def: Mapping[str, Any]) -> dict[str, Any]:
    """`{input name: value}` from a node's saved `widgets_values`; widgets the file holds no
    value for (older saves, inputs added since) keep their defaults, as in the editor."""
    slots = widget_slots(node_def)
    values = node.get("widgets_values")
    named = {slot.name: slot.default for slot in slots if slot.name is not None}
    if isinstance(values, dict):  # some packs save widgets by name
        return {**named, **{k: v for k, v in values.items() if k in named}}
    values = values or []
    if len(values) < len(slots):
        slots = [slot for slot in slots if not slot.optional]
    named.update({slot.name: value for slot, value in zip(slots, values) if slot.name is not None})
    return named


def _sent_value(value: Any) -> Any:
    return {"__value__": value} if isinstance(value, list) else value


class _Graph:
    def __init__(self, workflow: Mapping[str, Any]) -> None:
        self.nodes = {str(n["id"]): n for n in workflow["nodes"]}
        self.links: dict[int, tuple[str, int, str, int, Any]] = {}
        for link in workflow.get("links") or []:
            if isinstance(link, dict):
                entry = (link["id"], link["origin_id"], link["origin_slot"], link["target_id"],
                         link["target_slot"], link.get("type"))
            else:
                entry = tuple(link)
            link_id, origin, origin_slot, target, target_slot, kind = entry[:6]
            self.links[int(link_id)] = (str(origin), int(origin_slot), str(target), int(target_slot), kind)

    def resolve(self, link_id: int | None, seen: frozenset[str] = frozenset()) -> tuple[str, Any] | None:
        """Where a link's value comes from: `("link", [origin id, slot])`, `("value", v)` for a
        PrimitiveNode, or None when nothing upstream is sent (muted, missing, dangling)."""
        if link_id is None or int(link_id) not in self.links:
            return None
        origin, slot, _target, _tslot, kind = self.links[int(link_id)]
        node = self.nodes.get(origin)
        if node is None or origin in seen:
            return None
        seen = seen | {origin}
        node_type = node.get("type")
        if node_type == "Reroute":
            return self.resolve(_input_link(node, 0), seen)
        if node_type == "PrimitiveNode":
            values = node.get("widgets_values") or []
            return ("value", values[0]) if values else None
        mode = node.get("mode", 0)
        if mode == MODE_NEVER:
            return None
        if mode == MODE_BYPASS:
            return self.resolve(_bypass_input(node, slot, kind), seen)
        return ("link", [origin, slot])


def _input_link(node: Mapping[str, Any], index: int) -> int | None:
    inputs = node.get("inputs") or []
    return inputs[index].get("link") if index < len(inputs) else None


def _bypass_input(node: Mapping[str, Any], slot: int, kind: Any) -> int | None:
    """The link a bypassed node passes on for output `slot` of type `kind`: its input of the
    same type, the one at the same index first."""
    inputs = node.get("inputs") or []
    matching = [i for i, entry in enumerate(inputs) if entry.get("type") == kind and entry.get("link") is not None]
    if not matching:
        return None
    return inputs[slot if slot in matching else matching[0]].get("link")


def editor_to_prompt(workflow: Mapping[str, Any], node_defs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """The API-format prompt (`{id: {"class_type", "inputs", "_meta"}}`) the editor would queue.

    `node_defs` is `/object_info` (class type -> entry). Raises `EditorWorkflowError` naming
    unknown node types, or for subgraphs (not supported yet)."""
    if (workflow.get("definitions") or {}).get("subgraphs"):
        raise EditorWorkflowError("workflows with subgraphs cannot be run headless yet; "
                                  "export them with 'Export (API)' in the editor")
    graph = _Graph(workflow)
    sent = [n for n in graph.nodes.values()
            if n.get("type") not in VIRTUAL_TYPES and n.get("mode", 0) not in (MODE_NEVER, MODE_BYPASS)]
    missing = sorted({str(n.get("type")) for n in sent if n.get("type") not in node_defs})
    if missing:
        raise EditorWorkflowError(f"the workflow uses node types this server does not have: {', '.join(missing)}")
    prompt: dict[str, dict] = {}
    for node in sent:
        class_type = node["type"]
        inputs = {name: _sent_value(value) for name, value in widget_inputs(node, node_defs[class_type]).items()}
        for entry in node.get("inputs") or []:
            resolved = graph.resolve(entry.get("link"))
            if resolved is None:
                continue
            how, value = resolved
            inputs[entry["name"]] = _sent_value(value) if how == "value" else value
        prompt[str(node["id"])] = {"inputs": inputs, "class_type": class_type,
                                   "_meta": {"title": node.get("title") or node_defs[class_type].get("display_name") or class_type}}
    for item in prompt.values():
        for name, value in list(item["inputs"].items()):
            if isinstance(value, list) and len(value) == 2 and str(value[0]) not in prompt:
                del item["inputs"][name]
    return prompt


def unknown_types(workflow: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """Node types of an editor workflow that `known` lacks (virtual nodes aside)."""
    names = set(known)
    return sorted({str(n.get("type")) for n in workflow.get("nodes") or []
                   if n.get("type") not in VIRTUAL_TYPES and n.get("type") not in names})
