"""Per-prompt node progress, rendered as ComfyUI's `progress_state` messages.

Mirrors `comfy_execution/progress.py` (ProgressRegistry with the WebUI handler): a node is
`running` from its start (value 0, max 1) through its updates, then `finished` with value = max.
Every change sends one `progress_state` event. With `scope="all"` (ComfyUI's behaviour, the
default) it lists every node that is not pending, which makes a prompt's progress traffic
quadratic in its node count; `scope="active"` lists only the running nodes plus the node that
just changed, which is linear and shows the same thing in ComfyUI's frontend (it replaces its
node-state map with each message and draws only running nodes).
"""
from __future__ import annotations

from typing import Callable

from graph.events import PROGRESS_STATE, Event
from graph.prompt import DynamicPrompt

RUNNING = "running"
FINISHED = "finished"


SCOPES = ("all", "active")


class ProgressState:
    def __init__(self, prompt_id: str, dynprompt: DynamicPrompt, emit: Callable[[Event], None],
                 scope: str = "all") -> None:
        if scope not in SCOPES:
            raise ValueError(f"progress_state scope must be one of {SCOPES}, got {scope!r}")
        self.scope = scope
        self.prompt_id = prompt_id
        self.dynprompt = dynprompt
        self._emit = emit
        # node id -> the entry as sent; entries are replaced, never mutated, so a sent snapshot
        # (a shallow copy of this dict) never changes afterwards.
        self._nodes: dict[str, dict] = {}
        self._running: dict[str, dict] = {}
        self._identities: dict[str, dict] = {}

    def _identity(self, node_id: str) -> dict:
        """The fields of a node's entry that never change during the prompt (looked up once)."""
        identity = self._identities.get(node_id)
        if identity is None:
            dynprompt = self.dynprompt
            identity = self._identities[node_id] = {
                "node_id": node_id, "prompt_id": self.prompt_id,
                "display_node_id": dynprompt.get_display_node_id(node_id),
                "parent_node_id": dynprompt.get_parent_node_id(node_id),
                "real_node_id": dynprompt.get_real_node_id(node_id),
            }
        return identity

    def _set(self, node_id: str, state: str, value: float, total: float) -> None:
        entry = self._nodes[node_id] = {"value": value, "max": total, "state": state, **self._identity(node_id)}
        if state == RUNNING:
            self._running[node_id] = entry
        else:
            self._running.pop(node_id, None)
        if self.scope == "all":
            nodes = dict(self._nodes)
        else:
            nodes = dict(self._running)
            nodes[node_id] = entry
        self._emit(Event(PROGRESS_STATE, {"prompt_id": self.prompt_id, "nodes": nodes}))

    def start(self, node_id: str) -> None:
        self._set(node_id, RUNNING, 0.0, 1.0)

    def update(self, node_id: str, value: float, total: float) -> None:
        self._set(node_id, RUNNING, value, total)

    def finish(self, node_id: str) -> None:
        entry = self._nodes.get(node_id)
        total = entry["max"] if entry is not None else 1.0
        self._set(node_id, FINISHED, total, total)

    def get(self, node_id: str) -> dict | None:
        return self._nodes.get(node_id)
