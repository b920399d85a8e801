"""The editor's saved workflow (`{"nodes": [...], "links": [...]}`) as an API-format prompt.

What ComfyUI's frontend does when it queues a workflow (`graphToPrompt` in
`comfyui-frontend-package`), written here from its observable behaviour so that
`main.py run`, `POST /api/workflow/to_prompt` and tests can execute the files users save and
the official templates:

- muted (mode 2) and bypassed (mode 4) nodes are left out; a link from a bypassed node is
  followed through one of its inputs: the input at the output's index when its type fits, else
  the first input of exactly that type, else the first compatible one (`*` takes the same index);
- virtual nodes (`Reroute`, `PrimitiveNode`, `Note`, `MarkdownNote`) are left out: a link
  through a Reroute is followed to its origin, and a widget input fed by a PrimitiveNode takes
  the primitive's value;
- `widgets_values` are matched to the node's widget inputs in declaration order
  (`input_order`, required then optional). Widgets the editor adds itself take a slot there but
  are not sent: the `control_after_generate` widget after an INT with that option or named
  `seed` / `noise_seed` (and after combos with the option), the auto-refresh toggle after a
  `remote` combo (its refresh button is sent, as `refresh`), and the upload button after an
  `image_upload` / `video_upload` / `audio_upload` combo; a dynamic combo
  (`COMFY_DYNAMICCOMBO_V3`) is followed by the widgets of the option it holds (`<name>.<input>`);
  socketless widgets (`COLOR`) take their place too, display-only ones (`IMAGECOMPARE`) unsent;
- a widget input that is linked sends the link instead of its value; list values are sent as
  `{"__value__": [...]}`; links to nodes that are not sent are dropped.

Subgraphs (`definitions.subgraphs[]`, each a graph of its own with `inputs`, `outputs`, `nodes`,
`links`; a node whose `type` is a definition's `id` is an instance of it) are flattened:

- every node inside an instance is sent under a compound id, the instance ids from the root down
  then its own id joined by colons (`"54:73"`, `"54:62:174"`); a muted or bypassed instance sends
  nothing from inside (a bypassed one passes its inputs through like any bypassed node). The
  editor (frontend 1.58) does so only at the top level: inside a muted instance nested in another
  it still sends the inner nodes, unlinked, so their output nodes would run; here muted is muted;
- a link from the definition's input node (id -10) continues at the instance's input of the same
  name: its link outside, or when that is not linked, the input's promoted widget value;
- a link to an instance's output continues inside, at the inner node linked to the definition's
  output node (id -20) in that slot;
- promoted widgets: a definition input linked to inner widget inputs has one value, the
  instance's saved value when it has one, else the first inner widget's own value. The
  instance's `widgets_values` hold these values in the order of such inputs; instances saved with
  `properties.proxyWidgets` (`[[inner node id, widget name], ...]`, older editors) hold one value
  per entry instead, which sets that inner widget (or the input that feeds it; id "-1" names an
  input); a missing or null value keeps the inner widget's own.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

MODE_NEVER = 2
MODE_BYPASS = 4
VIRTUAL_TYPES = frozenset({"Reroute", "PrimitiveNode", "Note", "MarkdownNote"})
# BOUNDING_BOXES: the editor's box canvas (CreateBoundingBoxes' editor_state), a widget that keeps a socket
WIDGET_TYPES = frozenset({"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO", "BOUNDING_BOXES"})
UPLOAD_OPTIONS = ("image_upload", "video_upload", "audio_upload", "animated_image_upload")
UPLOAD_BUTTON_VALUE = "image"  # what the editor saves for an upload button (whatever it uploads)
SEED_NAMES = ("seed", "noise_seed")
DYNAMIC_COMBO = "COMFY_DYNAMICCOMBO_V3"
DISPLAY_WIDGETS = frozenset({"IMAGECOMPARE", "RESOLUTION_PREVIEW"})  # socketless, shown, not sent


class EditorWorkflowError(ValueError):
    """The editor workflow cannot be turned into a prompt (unknown node types, broken links)."""


@dataclass(frozen=True)
class WidgetSlot:
    """One entry of a node's `widgets_values`: an input (`name`) or an editor-only widget."""

    name: str | None  # None: the editor's own widget (control, upload button), never sent
    optional: bool = False  # an upload button: some saved files leave its value out
    default: Any = None  # what a new node's widget holds (used when the file has no value)
    # a dynamic combo (`COMFY_DYNAMICCOMBO_V3`): option key -> that option's inputs, whose widgets
    # (named `<combo>.<input>`) follow the combo's own value for the option chosen
    dynamic: Mapping[str, Any] | None = None


def is_editor_workflow(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("nodes"), list) and "links" in data


def widget_slots(node_def: Mapping[str, Any], prefix: str = "") -> list[WidgetSlot]:
    """The `widgets_values` layout of a node type from its `/object_info` entry (before dynamic
    combos add their option's widgets, see `expand_slots`)."""
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
            full = prefix + name
            if kind == DYNAMIC_COMBO:
                choices = {str(o.get("key")): o.get("inputs") or {} for o in options.get("options") or []
                           if isinstance(o, Mapping)}
                default = options.get("default", next(iter(choices), None))
                slots.append(WidgetSlot(full, default=default, dynamic=choices))
                continue
            # a widget without a socket (`forceInput` makes it a socket after all: V3's BoundingBox inputs)
            if options.get("socketless") and not options.get("forceInput") and isinstance(kind, str):
                display_only = kind in DISPLAY_WIDGETS
                slots.append(WidgetSlot(None if display_only else full, optional=display_only,
                                        default=options.get("default")))
                continue
            is_combo = isinstance(kind, list) or kind == "COMBO"
            if isinstance(kind, str) and "," in kind and "default" in options:
                kind = kind.split(",", 1)[0]  # a V3 MultiType declared with a widget ("FLOAT,INT" frame_rate)
            if not (is_combo or kind in WIDGET_TYPES) or options.get("forceInput"):
                continue
            slots.append(WidgetSlot(full, default=_widget_default(kind, options)))
            control = options.get("control_after_generate")
            # A seed inside a dynamic combo's option gets no implicit control widget (the editor
            # saves TextGenerate's sampling seed without one).
            if kind == "INT" and (control if control is not None else (name in SEED_NAMES and not prefix)):
                slots.append(WidgetSlot(None))
            elif is_combo and control:
                slots.append(WidgetSlot(None))
            remote = options.get("remote")
            if is_combo and isinstance(remote, Mapping):  # the editor's auto-refresh toggle, refresh button
                slots.append(WidgetSlot(None))
                if remote.get("refresh_button"):
                    slots.append(WidgetSlot("refresh", default="refresh"))
            if is_combo and any(options.get(key) for key in UPLOAD_OPTIONS):
                slots.append(WidgetSlot(None, optional=True, default=UPLOAD_BUTTON_VALUE))
    return slots


def expand_slots(slots: list[WidgetSlot], values: list | Mapping[str, Any]) -> list[WidgetSlot]:
    """`slots` with each dynamic combo followed by the widgets of the option it holds in
    `values` (a list: position by position, as the editor restores them; or by name), nested
    ones too."""
    pending, expanded = list(slots), []
    while pending and len(expanded) < 4096:
        slot = pending.pop(0)
        position = len(expanded)
        expanded.append(slot)
        if slot.dynamic is not None:
            if isinstance(values, Mapping):
                chosen = values.get(slot.name, slot.default)
            else:
                chosen = values[position] if position < len(values) else slot.default
            option = slot.dynamic.get(str(chosen)) if isinstance(chosen, (str, int, float, bool)) else None
            if option:
                pending[0:0] = widget_slots({"input": option}, prefix=f"{slot.name}.")
    return expanded


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
    by_name = node.get("widgets_values_named")
    if not values and isinstance(by_name, Mapping) and by_name:  # newer saves may name them only
        values = dict(by_name)
    if isinstance(values, dict):  # some packs save widgets by name
        slots = expand_slots(slots, values)
        named = {slot.name: slot.default for slot in slots if slot.name is not None}
        return {**named, **{k: v for k, v in values.items() if k in named}}
    values = values or []
    if any(slot.dynamic is not None for slot in slots):
        slots = expand_slots(slots, values)
        named = {slot.name: slot.default for slot in slots if slot.name is not None}
    if len(values) < len(slots):
        # Values are missing: the optional widgets some files leave out (an upload button, a
        # display-only widget) go first, except an upload button the file does hold ("image", as
        # the editor saves it): then what is missing is a widget added after it since (today's
        # LoadVideo `edit`), which keeps its default, as in the editor.
        slots = [slot for i, slot in enumerate(slots)
                 if not slot.optional or (slot.default == UPLOAD_BUTTON_VALUE and i < len(values)
                                          and values[i] == UPLOAD_BUTTON_VALUE)]
    named.update({slot.name: value for slot, value in zip(slots, values) if slot.name is not None})
    return named


def _sent_value(value: Any) -> Any:
    return {"__value__": value} if isinstance(value, list) else value


SUBGRAPH_INPUT_NODE = -10
SUBGRAPH_OUTPUT_NODE = -20
_LEGACY_PREFIX = re.compile(r"^\s*\d+\s*:\s*(.+)$")

# (origin node id, origin slot, target node id, target slot, type)
_Link = tuple[str, int, str, int, Any]
# ("link", [execution id, slot]) or ("value", widget value)
_Resolved = tuple[str, Any]


def _parse_links(links: Any) -> dict[int, _Link]:
    parsed: dict[int, _Link] = {}
    for link in links or []:
        if link is None:  # a deleted link some editors leave as null
            continue
        try:
            if isinstance(link, dict):
                entry = (link["id"], link["origin_id"], link["origin_slot"], link["target_id"],
                         link["target_slot"], link.get("type"))
            else:
                entry = tuple(link)[:6]
            link_id, origin, origin_slot, target, target_slot, kind = entry
            parsed[int(link_id)] = (str(origin), int(origin_slot), str(target), int(target_slot), kind)
        except (KeyError, TypeError, ValueError):
            raise EditorWorkflowError(f"the workflow has a malformed link: {link!r}") from None
    return parsed


def _link_key(link_id: Any) -> int | None:
    try:
        return int(link_id) if link_id is not None else None
    except (TypeError, ValueError):
        return None


def _inputs(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [entry for entry in node.get("inputs") or [] if isinstance(entry, Mapping)]


def _types(kind: Any) -> set[str]:
    return {part.strip() for part in str(kind).split(",")} if kind not in (None, "") else {"*"}


def _compatible(a: Any, b: Any) -> bool:
    left, right = _types(a), _types(b)
    return "*" in left or "*" in right or bool(left & right)


class _Scope:
    """One graph being flattened: the root workflow, or one instance of a subgraph definition
    (`path` = the instance ids from the root, `host` = the instance node in `parent`)."""

    def __init__(self, graph: Mapping[str, Any], path: tuple[str, ...] = (),
                 host: Mapping[str, Any] | None = None, parent: "_Scope | None" = None) -> None:
        self.graph, self.path, self.host, self.parent = graph, path, host, parent
        self.nodes = {str(n["id"]): n for n in graph.get("nodes") or [] if isinstance(n, Mapping) and "id" in n}
        self.links = _parse_links(graph.get("links"))
        self.input_node = str((graph.get("inputNode") or {}).get("id", SUBGRAPH_INPUT_NODE))
        self.output_node = str((graph.get("outputNode") or {}).get("id", SUBGRAPH_OUTPUT_NODE))
        self.inputs: list[Mapping[str, Any]] = [i for i in graph.get("inputs") or [] if isinstance(i, Mapping)]
        self.children: dict[str, _Scope] = {}
        self.values: dict[int, Any] | None = None  # promoted widget value per definition input index
        self.promoted: set[int] | None = None  # definition inputs that feed a widget
        self.overrides: dict[tuple[str, str], Any] = {}  # (inner node id, widget name) -> host value

    def execution_id(self, node_id: str) -> str:
        return ":".join((*self.path, node_id))


def _numeric_id(node_id: Any) -> int | None:
    text = str(node_id)
    try:
        number = int(text)
    except ValueError:
        return None
    return number if str(number) == text and number >= 0 else None


def _definition_list(graph: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    definitions = graph.get("definitions")
    subgraphs = definitions.get("subgraphs") if isinstance(definitions, Mapping) else None
    return [d for d in subgraphs if isinstance(d, Mapping)] if isinstance(subgraphs, list) else []


def normalize_definitions(workflow: Mapping[str, Any]) -> tuple[list[dict], list[dict]]:
    """The root nodes and the subgraph definitions as the editor holds them once loaded:

    - definitions nested in a definition (`definitions.subgraphs` inside it) join the list after
      it; the first definition of an id wins, and inside one the first node and link of an id;
    - an inner node whose id is taken (by a root node, or a node of an earlier definition) gets
      the next free id after the graph's last one (`state.lastNodeId` / `last_node_id`, raised by
      every id seen), as the editor renumbers it when it loads the file; the definition's links
      and the instances' `proxyWidgets` follow. The compound ids name the renumbered nodes, as
      the editor's own prompts do.

    Returns deep copies; `workflow` is not changed."""
    pending = _definition_list(workflow)
    definitions: list[dict] = []
    seen_ids: set[str] = set()

    def hoist(items: list) -> None:
        for item in items:
            if not isinstance(item, Mapping) or "id" not in item:
                continue
            nested = _definition_list(item)
            if str(item["id"]) not in seen_ids:
                seen_ids.add(str(item["id"]))
                definitions.append(copy.deepcopy({k: v for k, v in item.items() if k != "definitions"}))
            hoist(nested)

    hoist(pending)
    root_nodes = [copy.deepcopy(n) for n in workflow.get("nodes") or [] if isinstance(n, Mapping) and "id" in n]
    state = workflow.get("state") if isinstance(workflow.get("state"), Mapping) else {}
    last = 0
    for value in (workflow.get("last_node_id"), state.get("lastNodeId")):
        number = _numeric_id(value) if value is not None else None
        last = max(last, number or 0)
    used = {str(n["id"]) for n in root_nodes}
    used_numbers = {n for n in (_numeric_id(i) for i in used) if n is not None}
    remaps: dict[str, dict[str, int]] = {}
    for definition in definitions:
        nodes, kept = [], set()
        for node in definition.get("nodes") or []:
            if isinstance(node, Mapping) and "id" in node and str(node["id"]) not in kept:
                kept.add(str(node["id"]))
                nodes.append(node)
        definition["nodes"] = nodes
        links, kept = [], set()
        for link in definition.get("links") or []:
            key = str(link.get("id") if isinstance(link, Mapping) else (link[0] if link else None))
            if key not in kept:
                kept.add(key)
                links.append(link)
        definition["links"] = links
        remap: dict[str, int] = {}
        for node in nodes:
            key = str(node["id"])
            if key in used:
                new_id = last + 1
                while new_id in used_numbers:
                    new_id += 1
                last = new_id
                remap[key] = new_id
                node["id"] = new_id
                used.add(str(new_id))
                used_numbers.add(new_id)
            else:
                used.add(key)
                number = _numeric_id(key)
                if number is not None:
                    used_numbers.add(number)
                    last = max(last, number)
        if remap:
            remaps[str(definition["id"])] = remap
            for link in links:
                if isinstance(link, dict):
                    for end in ("origin_id", "target_id"):
                        if str(link.get(end)) in remap:
                            link[end] = remap[str(link[end])]
                elif isinstance(link, list) and len(link) >= 4:
                    for index in (1, 3):
                        if str(link[index]) in remap:
                            link[index] = remap[str(link[index])]
    if remaps:
        for node in [*root_nodes, *(n for d in definitions for n in d["nodes"])]:
            remap = remaps.get(str(node.get("type")))
            proxies = (node.get("properties") or {}).get("proxyWidgets") if remap else None
            for entry in proxies if isinstance(proxies, list) else ():
                if isinstance(entry, list) and entry and str(entry[0]) in remap:
                    entry[0] = str(remap[str(entry[0])])
    return root_nodes, definitions


class _Flattener:
    def __init__(self, workflow: Mapping[str, Any], node_defs: Mapping[str, Mapping[str, Any]]) -> None:
        self.node_defs = node_defs
        root_nodes, definitions = normalize_definitions(workflow)
        self.definitions: dict[str, Mapping[str, Any]] = {str(d["id"]): d for d in definitions}
        self.root = _Scope({**workflow, "nodes": root_nodes})

    # -- which nodes are sent ------------------------------------------------------------------
    def is_instance(self, node: Mapping[str, Any]) -> bool:
        return str(node.get("type")) in self.definitions

    def child(self, scope: _Scope, node: Mapping[str, Any]) -> _Scope:
        node_id = str(node["id"])
        if node_id not in scope.children:
            if len(scope.path) >= 32 or str(node.get("type")) in {str(s.graph.get("id")) for s in self._chain(scope)}:
                raise EditorWorkflowError(f"subgraph {node.get('type')} contains itself "
                                          f"(node {scope.execution_id(node_id)})")
            scope.children[node_id] = _Scope(self.definitions[str(node["type"])], (*scope.path, node_id), node, scope)
        return scope.children[node_id]

    @staticmethod
    def _chain(scope: _Scope) -> list[_Scope]:
        chain = []
        while scope is not None and scope.parent is not None:
            chain.append(scope)
            scope = scope.parent
        return chain

    def sent(self, scope: _Scope | None = None) -> list[tuple[_Scope, Mapping[str, Any]]]:
        """(scope, node) for every node the prompt holds, instances expanded."""
        scope = scope or self.root
        found: list[tuple[_Scope, Mapping[str, Any]]] = []
        for node in scope.nodes.values():
            if node.get("mode", 0) in (MODE_NEVER, MODE_BYPASS) or node.get("type") in VIRTUAL_TYPES:
                continue
            if self.is_instance(node):
                found.extend(self.sent(self.child(scope, node)))
            else:
                found.append((scope, node))
        return found

    # -- widget values -------------------------------------------------------------------------
    def widget_values(self, scope: _Scope, node: Mapping[str, Any]) -> dict[str, Any]:
        self.prepare(scope)
        values = widget_inputs(node, self.node_defs[node["type"]])
        node_id = str(node["id"])
        for name in values:
            if (node_id, name) in scope.overrides:
                values[name] = scope.overrides[(node_id, name)]
        return values

    def input_targets(self, scope: _Scope, index: int) -> list[_Link]:
        """The links inside `scope` from its definition input `index`, in the input's order."""
        order = [int(i) for i in (scope.inputs[index].get("linkIds") or []) if isinstance(i, int)]
        links = [scope.links[i] for i in order if i in scope.links]
        links += [link for link_id, link in scope.links.items()
                  if link_id not in order and link[0] == scope.input_node and link[1] == index]
        return [link for link in links if link[0] == scope.input_node and link[1] == index]

    def prepare(self, scope: _Scope) -> None:
        """Fill `scope.values` (promoted inputs) and `scope.overrides` (proxy widgets) once."""
        if scope.values is not None or scope.host is None:
            scope.values = scope.values or {}
            return
        if scope.parent is not None:  # its proxy widgets may set this instance's inputs (below)
            self.prepare(scope.parent)
            if scope.values is not None:  # prepared by the parent meanwhile
                return
        scope.values = {}
        host = scope.host
        promoted: list[int] = []  # definition inputs that feed a widget, in order
        first_target: dict[int, tuple[Mapping[str, Any], str, bool]] = {}
        linked: dict[tuple[str, str], int] = {}  # (inner node id, widget/input name) -> input index
        for index in range(len(scope.inputs)):
            for target, node, name, nested in self.widget_targets(scope, index):
                linked[(target, name)] = index
                first_target.setdefault(index, (node, name, nested))
            if index in first_target:
                promoted.append(index)
        names = [str(i.get("name")) for i in scope.inputs]
        saved = host.get("widgets_values")
        saved = saved if isinstance(saved, list) else []
        proxies = (host.get("properties") or {}).get("proxyWidgets")
        if isinstance(proxies, list):
            for position, proxy in enumerate(proxies):
                value = saved[position] if position < len(saved) else None
                if value is None or not isinstance(proxy, (list, tuple)) or len(proxy) < 2:
                    continue
                source, name = str(proxy[0]), str(proxy[1])
                if source == "-1":
                    if name in names:
                        scope.values[names.index(name)] = value
                    continue
                if (source, name) not in linked:
                    match = _LEGACY_PREFIX.match(name)
                    while match and (source, name) not in linked:
                        name = match.group(1)
                        match = _LEGACY_PREFIX.match(name)
                if (source, name) in linked:
                    scope.values[linked[(source, name)]] = value
                else:
                    scope.overrides[(source, name)] = value
        else:
            for index, value in zip(promoted, saved):
                if value is not None:
                    scope.values[index] = value
        named = host.get("widgets_values_named")
        if isinstance(named, Mapping) and not saved:
            for index in promoted:
                if named.get(names[index]) is not None:
                    scope.values[index] = named[names[index]]
        parent = scope.parent
        if parent is not None:  # the enclosing instance's proxy widgets can set this one's inputs
            parent_values = parent.overrides
            for index in promoted:
                key = (str(host["id"]), names[index])
                if key in parent_values:
                    scope.values[index] = parent_values[key]
        for index in promoted:
            if index in scope.values:
                continue
            node, name, nested = first_target[index]
            if nested:
                inner = self.child(scope, node)
                self.prepare(inner)
                inner_names = [str(i.get("name")) for i in inner.inputs]
                if name in inner_names and inner_names.index(name) in inner.values:
                    scope.values[index] = inner.values[inner_names.index(name)]
            elif node.get("type") in self.node_defs:
                values = self.widget_values(scope, node)
                if name in values:
                    scope.values[index] = values[name]

    def promoted_indexes(self, scope: _Scope) -> set[int]:
        """Definition inputs of `scope` that feed a widget (inside, or nested deeper)."""
        if scope.promoted is not None:
            return scope.promoted
        found: set[int] = set()
        scope.promoted = found  # a loop through nested instances is refused by child()
        found.update(index for index in range(len(scope.inputs))
                     if next(self.widget_targets(scope, index), None) is not None)
        return found

    def widget_targets(self, scope: _Scope, index: int) -> Iterator[tuple[str, Mapping[str, Any], str, bool]]:
        """(inner node id, inner node, widget or input name, nested) for each place the definition
        input `index` of `scope` feeds a widget: a widget of an inner node, or an input of a nested
        instance that is itself promoted to a widget (nested)."""
        for _o, _s, target, target_slot, _k in self.input_targets(scope, index):
            node = scope.nodes.get(target)
            entries = _inputs(node) if node else []
            if node is None or target_slot >= len(entries):
                continue
            entry = entries[target_slot]
            if self.is_instance(node):
                inner = self.child(scope, node)
                names = [str(i.get("name")) for i in inner.inputs]
                name = str(entry.get("name"))
                if name in names and names.index(name) in self.promoted_indexes(inner):
                    yield target, node, name, True
            elif isinstance(entry.get("widget"), Mapping):
                yield target, node, str(entry["widget"].get("name") or entry.get("name")), False

    # -- links ---------------------------------------------------------------------------------
    def resolve_input(self, scope: _Scope, node: Mapping[str, Any], index: int, seen: set) -> _Resolved | None:
        entries = _inputs(node)
        if index >= len(entries):
            return None
        return self.resolve_link(scope, entries[index].get("link"), entries[index].get("type"), seen)

    def resolve_link(self, scope: _Scope, link_id: Any, kind: Any, seen: set) -> _Resolved | None:
        link = scope.links.get(_link_key(link_id))
        if link is None:
            return None
        origin, slot = link[0], link[1]
        if origin == scope.input_node and scope.host is not None:
            return self.resolve_subgraph_input(scope, slot, kind, seen)
        node = scope.nodes.get(origin)
        return None if node is None else self.resolve_output(scope, node, slot, kind, seen)

    def resolve_subgraph_input(self, scope: _Scope, index: int, kind: Any, seen: set) -> _Resolved | None:
        """Definition input `index` of `scope`: the instance's link outside, else its promoted value."""
        if index >= len(scope.inputs):
            return None
        name = scope.inputs[index].get("name")
        host_inputs = _inputs(scope.host)
        entry = next((e for e in host_inputs if e.get("name") == name), None)
        if entry is None and len(host_inputs) == len(scope.inputs):
            entry = host_inputs[index]
        link = entry.get("link") if entry is not None else None
        if link is not None and scope.parent is not None and _link_key(link) in scope.parent.links:
            # linked outside: what that link carries, nothing when it comes from a muted node
            return self.resolve_link(scope.parent, link, kind, seen)
        self.prepare(scope)
        if index in scope.values:
            return ("value", scope.values[index])
        return None

    def resolve_output(self, scope: _Scope, node: Mapping[str, Any], slot: int, kind: Any,
                       seen: set) -> _Resolved | None:
        key = (scope.path, str(node["id"]), slot)
        if key in seen:
            raise EditorWorkflowError(f"the workflow's links form a loop at node {scope.execution_id(str(node['id']))}")
        seen = seen | {key}
        mode = node.get("mode", 0)
        if mode == MODE_NEVER:
            return None
        if mode == MODE_BYPASS:
            index = self.bypass_input(node, slot, kind)
            return None if index < 0 else self.resolve_input(scope, node, index, seen)
        node_type = node.get("type")
        if self.is_instance(node):
            inner = self.child(scope, node)
            link = next((l for l in inner.links.values() if l[2] == inner.output_node and l[3] == slot), None)
            if link is None:
                return None
            if link[0] == inner.input_node:
                return self.resolve_subgraph_input(inner, link[1], kind, seen)
            origin = inner.nodes.get(link[0])
            return None if origin is None else self.resolve_output(inner, origin, link[1], kind, seen)
        if node_type == "Reroute":
            return self.resolve_input(scope, node, 0, seen)
        if node_type == "PrimitiveNode":
            self.prepare(scope)
            override = scope.overrides.get((str(node["id"]), "value"))
            if override is not None:
                return ("value", override)
            values = node.get("widgets_values") or []
            return ("value", values[0]) if isinstance(values, list) and values else None
        if node_type in VIRTUAL_TYPES:
            return None
        return ("link", [scope.execution_id(str(node["id"])), slot])

    @staticmethod
    def bypass_input(node: Mapping[str, Any], slot: int, kind: Any) -> int:
        """Which input a bypassed node passes on for output `slot` when the consumer wants `kind`."""
        entries = _inputs(node)
        if not entries:
            return -1
        if kind in ("*", "", None):
            return slot if slot < len(entries) else 0
        outputs = [o for o in node.get("outputs") or [] if isinstance(o, Mapping)]
        out_type = outputs[slot].get("type") if slot < len(outputs) else kind
        if slot < len(entries) and _compatible(entries[slot].get("type"), out_type) \
                and _compatible(entries[slot].get("type"), kind):
            return slot
        for index, entry in enumerate(entries):
            if entry.get("type") == kind:
                return index
        for index, entry in enumerate(entries):
            if _compatible(entry.get("type"), out_type) and _compatible(entry.get("type"), kind):
                return index
        return -1


_MALFORMED = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def _malformed(exc: Exception) -> EditorWorkflowError:
    return EditorWorkflowError(f"the workflow is malformed ({type(exc).__name__}: {exc})")


def editor_to_prompt(workflow: Mapping[str, Any], node_defs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """The API-format prompt (`{id: {"class_type", "inputs", "_meta"}}`) the editor would queue,
    subgraphs flattened to compound ids (`"54:73"`).

    `node_defs` is `/object_info` (class type -> entry). Raises `EditorWorkflowError` naming
    unknown node types, for a workflow whose links or subgraphs loop, and for values of the
    wrong shape where the file format has none."""
    try:
        return _editor_to_prompt(workflow, node_defs)
    except EditorWorkflowError:
        raise
    except _MALFORMED as exc:
        raise _malformed(exc) from None


def _editor_to_prompt(workflow: Mapping[str, Any], node_defs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    if not is_editor_workflow(workflow):
        raise EditorWorkflowError("not a saved workflow: expected an object with \"nodes\" and \"links\"")
    flat = _Flattener(workflow, node_defs)
    try:
        sent = flat.sent()
        missing = sorted({str(n.get("type")) for _s, n in sent if n.get("type") not in node_defs})
        if missing:
            raise EditorWorkflowError(f"the workflow uses node types this server does not have: {', '.join(missing)}")
        prompt: dict[str, dict] = {}
        for scope, node in sent:
            class_type = node["type"]
            inputs = {name: _sent_value(value) for name, value in flat.widget_values(scope, node).items()}
            for index, entry in enumerate(_inputs(node)):
                resolved = flat.resolve_input(scope, node, index, set())
                if resolved is None or "name" not in entry:
                    continue
                how, value = resolved
                inputs[entry["name"]] = _sent_value(value) if how == "value" else value
            prompt[scope.execution_id(str(node["id"]))] = {
                "inputs": inputs, "class_type": class_type,
                "_meta": {"title": node.get("title") or node_defs[class_type].get("display_name") or class_type}}
    except RecursionError:
        raise EditorWorkflowError("the workflow's subgraphs nest too deeply or contain themselves") from None
    for item in prompt.values():
        for name, value in list(item["inputs"].items()):
            if isinstance(value, list) and len(value) == 2 and str(value[0]) not in prompt:
                del item["inputs"][name]
    return prompt


def unknown_types(workflow: Mapping[str, Any], known: Iterable[str]) -> list[str]:
    """Node types of an editor workflow that `known` lacks (virtual nodes aside; the nodes inside
    its subgraph definitions included, the instances themselves not). `EditorWorkflowError` for
    a malformed file."""
    if not is_editor_workflow(workflow):
        return []
    try:
        return _unknown_types(workflow, set(known))
    except _MALFORMED as exc:
        raise _malformed(exc) from None


def _unknown_types(workflow: Mapping[str, Any], names: set[str]) -> list[str]:
    root_nodes, definitions = normalize_definitions(workflow)
    ids = {str(d.get("id")) for d in definitions}
    nodes = [*root_nodes, *(n for d in definitions for n in d.get("nodes") or [])]
    types = {str(n.get("type")) for n in nodes if isinstance(n, Mapping)}
    return sorted(t for t in types if t not in VIRTUAL_TYPES and t not in ids and t not in names)
