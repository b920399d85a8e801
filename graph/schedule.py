"""Which node runs next: ComfyUI's "topological dissolve" (`comfy_execution/graph.py:
ExecutionList`, reference §5.2), with O(1) amortised picks.

Nodes are added from the requested outputs backwards along non-lazy links, skipping producers
that are already cached. A pending node is ready when nothing blocks it: no unfinished producer
(a strong link) and no running async call (an external block). Among ready nodes the pick
prefers, as ComfyUI's `ux_friendly_pick_node` does: output nodes and async nodes, then nodes that
directly feed an output, then nodes two links from an output, then the rest in order. When
nothing is ready and nothing is running, the remaining nodes are in a dependency cycle.
"""
from __future__ import annotations

from typing import Callable, Container

from graph.errors import NodeInputError
from graph.prompt import DynamicPrompt, is_link

_BUCKETS = 4


class Schedule:
    def __init__(self, dynprompt: DynamicPrompt, *, is_cached: Callable[[str], bool],
                 lazy_inputs: Callable[[str], Container[str]], is_output: Callable[[str], bool],
                 is_async: Callable[[str], bool]) -> None:
        self.dynprompt = dynprompt
        self._is_cached = is_cached
        self._lazy_inputs = lazy_inputs  # node id -> names of its lazy inputs
        self._is_output = is_output
        self._is_async = is_async
        self.pending: dict[str, None] = {}  # insertion-ordered
        self.block_count: dict[str, int] = {}
        self.blocking: dict[str, dict[str, set[int]]] = {}  # producer -> consumer -> slots
        self.external: dict[str, int] = {}  # running async calls per node
        self.staged: str | None = None
        self._ready: list[dict[str, None]] = [{} for _ in range(_BUCKETS)]
        self._bucket: dict[str, int] = {}

    # -- building -----------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.pending

    def add_node(self, node_id: str) -> None:
        """Add `node_id` and every uncached producer it needs through non-lazy inputs."""
        added: list[str] = []
        links: list[tuple[str, int, str]] = []
        stack = [node_id]
        while stack:
            current = stack.pop()
            if current in self.pending:
                continue
            self.pending[current] = None
            self.block_count[current] = 0
            self.blocking[current] = {}
            added.append(current)
            lazy = self._lazy_inputs(current)
            for name, source, slot in self.dynprompt.links(current):
                if name not in lazy:
                    if not self._is_cached(source):
                        stack.append(source)
                    links.append((source, slot, current))
        for source, slot, consumer in links:
            self.add_strong_link(source, slot, consumer)
        for current in added:
            self._refresh(current)

    def add_strong_link(self, source: str, slot: int, consumer: str) -> None:
        """`consumer` cannot run before `source` has produced its outputs."""
        if self._is_cached(source):
            return
        if source not in self.pending:
            self.add_node(source)
        targets = self.blocking[source]
        if consumer not in targets:
            targets[consumer] = set()
            self.block_count[consumer] += 1
            if consumer in self._bucket:
                self._refresh(consumer)
            if source in self._bucket:
                self._refresh(source)  # it may now feed an output: re-rank it
        targets[consumer].add(slot)

    def make_input_strong_link(self, node_id: str, input_name: str) -> None:
        """A lazy input was requested: its producer must now run first."""
        inputs = self.dynprompt.get_node(node_id).get("inputs") or {}
        if input_name not in inputs:
            raise NodeInputError(
                f"Node {node_id} says it needs input {input_name}, but there is no input to that node at all")
        value = inputs[input_name]
        if not is_link(value):
            raise NodeInputError(
                f"Node {node_id} says it needs input {input_name}, but that value is a constant")
        self.add_strong_link(value[0], int(value[1]), node_id)

    def add_external_block(self, node_id: str) -> None:
        self.external[node_id] = self.external.get(node_id, 0) + 1
        self._refresh(node_id)

    def release_external_block(self, node_id: str) -> None:
        self.external[node_id] -= 1
        if not self.external[node_id]:
            del self.external[node_id]
        self._refresh(node_id)

    @property
    def has_external_blocks(self) -> bool:
        return bool(self.external)

    # -- readiness ----------------------------------------------------------------------------
    def _refresh(self, node_id: str) -> None:
        """Re-file `node_id` in the right ready bucket (or in none)."""
        old = self._bucket.pop(node_id, None)
        if old is not None:
            self._ready[old].pop(node_id, None)
        if (node_id in self.pending and node_id != self.staged and not self.block_count[node_id]
                and node_id not in self.external):
            bucket = self._classify(node_id)
            self._bucket[node_id] = bucket
            self._ready[bucket][node_id] = None

    def _classify(self, node_id: str) -> int:
        if self._is_output(node_id) or self._is_async(node_id):
            return 0
        consumers = self.blocking.get(node_id, {})
        if any(self._is_output(c) for c in consumers):
            return 1
        if any(self._is_output(cc) for c in consumers for cc in self.blocking.get(c, {})):
            return 2
        return 3

    def stage(self) -> str | None:
        """Pick the next ready node (None if none is ready right now)."""
        assert self.staged is None, "a node is already staged"
        for bucket in self._ready:
            if bucket:
                node_id = next(iter(bucket))
                del bucket[node_id]
                del self._bucket[node_id]
                self.staged = node_id
                return node_id
        return None

    def unstage(self) -> None:
        """The staged node went back to waiting (lazy inputs, expansion, async call)."""
        node_id, self.staged = self.staged, None
        if node_id is not None:
            self._refresh(node_id)

    def complete(self) -> None:
        """The staged node finished: unblock its consumers."""
        node_id, self.staged = self.staged, None
        del self.pending[node_id]
        for consumer in self.blocking.pop(node_id, {}):
            self.block_count[consumer] -= 1
            self._refresh(consumer)
        del self.block_count[node_id]

    def nodes_in_cycle(self) -> list[str]:
        """Pending nodes left after dissolving everything not blocked (ComfyUI's get_nodes_in_cycle)."""
        blocked_by: dict[str, set[str]] = {n: set() for n in self.pending}
        for source, consumers in self.blocking.items():
            for consumer in consumers:
                if consumer in blocked_by:
                    blocked_by[consumer].add(source)
        free = [n for n, b in blocked_by.items() if not b]
        while free:
            for node_id in free:
                for others in blocked_by.values():
                    others.discard(node_id)
                del blocked_by[node_id]
            free = [n for n, b in blocked_by.items() if not b]
        return list(blocked_by)
