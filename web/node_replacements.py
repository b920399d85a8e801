"""Node replacements: a node type that no longer exists, and what stands in for it.

After today's ComfyUI (app/node_replace_manager.py @b5d74ccb, Comfy-Org/ComfyUI; the V3 type
`io.NodeReplace` in comfy_api/latest/_io.py): a replacement maps an old node type to a new one,
with `input_mapping` (`{"new_id", "old_id"}` copies an input, `{"new_id", "set_value"}` sets one)
and `output_mapping` (`{"old_idx", "new_idx"}`), plus `old_widget_ids` for the editor. The editor
reads them from `GET /node_replacements` (`{old_type: [replacement, ...]}`) to offer a swap for
missing nodes; `POST /prompt` applies the first replacement of each node whose type is not
registered here but whose replacement is, before validation.

Packs register them through the V3 API, `await ComfyAPI().node_replacement.register(io.NodeReplace(
...))` or `ComfyAPISync().node_replacement.register(...)` (compat/v3/api.py: the server's compat
session hands them to this server's table, `CompatSession.register_node_replacement`), or declare
them in a `node_replacements.json` at the pack's root (ComfyUI's auto-registration:
`{old_type: [{new_node_id, old_node_id?, old_widget_ids?, input_mapping?, output_mapping?}]}`).
The record is `io.NodeReplace` (compat/v3/io.py). Registration is idempotent per (old, new) pair,
as in ComfyUI. The table belongs to one server (`AppState.node_replacements`); nothing is global.
"""
from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from typing import Any, Container, Iterable

from compat.v3.io import NodeReplace, NodeReplaceError

__all__ = ["NodeReplace", "NodeReplaceError", "NodeReplacements", "PACK_FILE"]

log = logging.getLogger(__name__)

PACK_FILE = "node_replacements.json"


def _is_link(value: Any) -> bool:
    return (isinstance(value, list) and len(value) == 2 and isinstance(value[0], str)
            and isinstance(value[1], int) and not isinstance(value[1], bool))


class NodeReplacements:
    """The replacements one server knows, by old node type (registration order kept)."""

    def __init__(self) -> None:
        self._by_old: dict[str, list[NodeReplace]] = {}

    def register(self, replacement: NodeReplace) -> None:
        if not isinstance(replacement, NodeReplace):
            raise NodeReplaceError(f"expected an io.NodeReplace, got {type(replacement).__name__}")
        entries = self._by_old.setdefault(replacement.old_node_id, [])
        if any(e.new_node_id == replacement.new_node_id for e in entries):
            log.debug("node replacement %s -> %s already registered", replacement.old_node_id,
                      replacement.new_node_id)
            return
        entries.append(replacement)

    def get(self, old_node_id: str) -> list[NodeReplace] | None:
        return self._by_old.get(old_node_id)

    def as_dict(self) -> dict:
        return {old: [r.as_dict() for r in entries] for old, entries in self._by_old.items()}

    def load_pack_file(self, pack_dir: Path, pack_name: str) -> int:
        """Register the replacements of `pack_dir/node_replacements.json` (none when it is absent);
        a malformed file or entry is logged and skipped. Returns how many were registered."""
        path = Path(pack_dir) / PACK_FILE
        if not path.is_file():
            return 0
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            log.warning("%s in %s could not be read: %s", PACK_FILE, pack_name, exc)
            return 0
        if not isinstance(data, dict):
            log.warning("%s in %s must be a JSON object; skipped", PACK_FILE, pack_name)
            return 0
        count = 0
        for old_node_id, entries in data.items():
            if not isinstance(entries, list):
                log.warning("%s in %s: the value for %r must be a list; skipped", PACK_FILE, pack_name, old_node_id)
                continue
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get("new_node_id"), str):
                    continue
                try:
                    replacement = NodeReplace(new_node_id=entry["new_node_id"],
                                              old_node_id=str(entry.get("old_node_id", old_node_id)),
                                              old_widget_ids=entry.get("old_widget_ids"),
                                              input_mapping=entry.get("input_mapping"),
                                              output_mapping=entry.get("output_mapping"))
                except NodeReplaceError as exc:
                    log.warning("%s in %s: entry for %r skipped: %s", PACK_FILE, pack_name, old_node_id, exc)
                    continue
                self.register(replacement)
                count += 1
        if count:
            log.info("loaded %d node replacement(s) from %s/%s", count, pack_name, PACK_FILE)
        return count

    def load_packs(self, packs: Iterable[Any]) -> None:
        """`load_pack_file` for every pack folder (`graph.packs.PackResult`) that loaded."""
        for pack in packs:
            path = getattr(pack, "path", None)
            if getattr(pack, "ok", True) and path is not None and Path(path).is_dir():
                self.load_pack_file(Path(path), getattr(pack, "name", Path(path).name))

    def apply(self, prompt: dict, known_types: Container[str]) -> dict:
        """A copy of the API-format `prompt` in which every node whose type is not in
        `known_types` but has a replacement that is takes that replacement (the first one): its
        type, its inputs from `input_mapping` (others are dropped, as in ComfyUI), and the links
        that read its outputs renumbered by `output_mapping`. Anything else is left for the
        validator to report. `prompt` itself is not changed."""
        if not self._by_old or not isinstance(prompt, dict):
            return prompt
        readers: dict[str, list[tuple[str, str, int]]] = {}
        todo: list[str] = []
        for node_id, node in prompt.items():
            if not isinstance(node, dict) or not isinstance(node.get("inputs"), dict):
                continue
            class_type = node.get("class_type")
            if isinstance(class_type, str) and class_type not in known_types and class_type in self._by_old:
                todo.append(node_id)
            for name, value in node["inputs"].items():
                if _is_link(value):
                    readers.setdefault(value[0], []).append((node_id, name, value[1]))
        if not todo:
            return prompt
        out = copy.deepcopy(prompt)
        for node_id in todo:
            old = out[node_id]  # with the links already renumbered by earlier replacements
            replacement = self._by_old[old["class_type"]][0]
            if replacement.new_node_id not in known_types:
                continue  # replacing with another missing type would only confuse the error
            new = {**old, "class_type": replacement.new_node_id, "inputs": {}}
            for mapping in replacement.input_mapping or ():
                if not isinstance(mapping, dict) or "new_id" not in mapping:
                    continue
                if "set_value" in mapping:
                    new["inputs"][mapping["new_id"]] = copy.deepcopy(mapping["set_value"])
                elif mapping.get("old_id") in old["inputs"]:
                    new["inputs"][mapping["new_id"]] = copy.deepcopy(old["inputs"][mapping["old_id"]])
            out[node_id] = new
            for reader_id, input_name, old_index in readers.get(node_id, ()):
                inputs = out[reader_id]["inputs"]
                if inputs.get(input_name) != [node_id, old_index]:
                    continue  # the reader was replaced itself and no longer has that input
                for mapping in replacement.output_mapping or ():
                    if isinstance(mapping, dict) and mapping.get("old_idx") == old_index and "new_idx" in mapping:
                        inputs[input_name] = [node_id, mapping["new_idx"]]
                        break
        return out
