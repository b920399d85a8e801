"""The registry of node types: one `NodeSpec` per class_type, built-ins protected.

A `Registry` is an ordinary object owned by the host (server, command line, test); there is no
module-level registry. It rejects a duplicate id, which also stops a pack from overriding a
built-in node (ComfyUI ignores such keys; `graph.packs` logs and skips them).
"""
from __future__ import annotations

import dataclasses

import logging
from typing import Any, Callable, Iterable, Iterator

from graph.errors import DuplicateNodeTypeError, UnknownNodeTypeError
from graph.native import spec_of
from graph.object_info import node_info
from graph.spec import NodeSpec
from graph.v1 import spec_from_v1

log = logging.getLogger(__name__)


class Registry:
    """All node types known to one engine instance."""

    def __init__(self) -> None:
        self._specs: dict[str, NodeSpec] = {}
        self._builtin: set[str] = set()

    # -- adding -------------------------------------------------------------------------------
    def add_spec(self, spec: NodeSpec, builtin: bool = False) -> NodeSpec:
        """Add a ready-made spec; raises `DuplicateNodeTypeError` if its id is taken."""
        self._refuse_duplicate(spec.node_id, spec.python_module)
        self._specs[spec.node_id] = spec
        if builtin:
            self._builtin.add(spec.node_id)
        return spec

    def add_native(self, fn: Callable, builtin: bool = True) -> NodeSpec:
        """Add a function declared with `graph.native.node`."""
        return self.add_spec(spec_of(fn), builtin=builtin)

    def add_v1(self, class_type: str, cls: type, *, display_name: str | None = None,
               python_module: str = "custom_nodes", builtin: bool = False) -> NodeSpec:
        """Add a ComfyUI V1 class under `class_type`."""
        self._refuse_duplicate(class_type, python_module)  # before INPUT_TYPES is read
        return self.add_spec(
            spec_from_v1(class_type, cls, display_name=display_name, python_module=python_module), builtin)

    def replace_spec(self, spec: NodeSpec) -> NodeSpec:
        """Register `spec` in place of the node type of that id its own module registered before
        (a pack reloaded while the server runs); the stored spec's `revision` is one more than
        the replaced one's. `DuplicateNodeTypeError` for a built-in node or another module's."""
        existing = self._specs.get(spec.node_id)
        if existing is None:
            return self.add_spec(spec)
        if spec.node_id in self._builtin or existing.python_module != spec.python_module:
            self._refuse_duplicate(spec.node_id, spec.python_module)
        replaced = dataclasses.replace(spec, revision=existing.revision + 1)
        self._specs[spec.node_id] = replaced
        return replaced

    def _refuse_duplicate(self, class_type: str, python_module: str) -> None:
        existing = self._specs.get(class_type)
        if existing is not None:
            owner = "a built-in node" if class_type in self._builtin else "another node"
            raise DuplicateNodeTypeError(
                f"node type {class_type!r} (from {python_module}) is already registered by {owner} "
                f"(from {existing.python_module})")

    # -- reading ------------------------------------------------------------------------------
    def get(self, class_type: str) -> NodeSpec:
        try:
            return self._specs[class_type]
        except (KeyError, TypeError):
            raise UnknownNodeTypeError(f"unknown node type {class_type!r}") from None

    def find(self, class_type: Any) -> NodeSpec | None:
        """The spec, or None for an unknown (or unhashable) class_type."""
        try:
            return self._specs.get(class_type)
        except TypeError:
            return None

    def __contains__(self, class_type: object) -> bool:
        return self.find(class_type) is not None

    def __len__(self) -> int:
        return len(self._specs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def is_builtin(self, class_type: str) -> bool:
        return class_type in self._builtin

    def specs(self) -> list[NodeSpec]:
        return list(self._specs.values())

    # -- /object_info -------------------------------------------------------------------------
    def object_info(self, env: Any = None, names: Iterable[str] | None = None) -> dict:
        """`{class_type: info}` for every node (or those of `names`); a node whose inputs fail to
        render is left out. Safe while another thread adds nodes (a server importing packs in the
        background, web/pack_start.py): it walks a copy of the table."""
        out: dict[str, dict] = {}
        specs = list(self._specs.items()) if names is None else [(n, self._specs[n]) for n in names if n in self._specs]
        for class_type, spec in specs:
            try:
                out[class_type] = node_info(spec, env)
            except Exception:  # noqa: BLE001 -- ComfyUI drops only the broken node
                log.exception("object_info: node %r could not be rendered; left out", class_type)
        return out

    def object_info_for(self, class_type: str, env: Any = None) -> dict:
        """`{class_type: info}`, or `{}` for an unknown type (ComfyUI's /object_info/{cls})."""
        spec = self.find(class_type)
        if spec is None:
            return {}
        try:
            return {class_type: node_info(spec, env)}
        except Exception:  # noqa: BLE001
            log.exception("object_info: node %r could not be rendered", class_type)
            return {}
