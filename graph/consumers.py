"""Who still needs each node's outputs during one prompt run, so the `none` cache strategy can
free them as soon as the last consumer has run (ComfyUI frees them with the cache, per prompt;
graph/cache.py).

A node consumes its linked producers; a node that expanded into a subgraph also consumes the
producers its result links name (it reads them when it resumes).
"""
from __future__ import annotations

from graph.prompt import DynamicPrompt


class Consumers:
    def __init__(self, dynprompt: DynamicPrompt) -> None:
        self._dynprompt = dynprompt
        self._waiting: dict[str, set[str]] = {}  # producer -> consumers that have not run yet
        self._result_sources: dict[str, set[str]] = {}  # expanded node -> producers of its result

    def add(self, node_id: str) -> None:
        """`node_id` will read every producer it links to."""
        # Nodes that failed validation (inputs not a dict) have no links and never run.
        waiting = self._waiting
        for _name, source, _slot in self._dynprompt.links(node_id):
            consumers = waiting.get(source)
            if consumers is None:
                waiting[source] = {node_id}
            else:
                consumers.add(node_id)

    def add_result_source(self, node_id: str, source: str) -> None:
        """The expanded `node_id` will read `source` when it resumes."""
        self._waiting.setdefault(source, set()).add(node_id)
        self._result_sources.setdefault(node_id, set()).add(source)

    def done(self, node_id: str) -> list[str]:
        """`node_id` has run: the producers nobody needs any more (the node itself last, when
        nothing consumes it)."""
        sources = {source for _name, source, _slot in self._dynprompt.links(node_id)}
        expanded = self._result_sources.pop(node_id, None)
        if expanded:
            sources |= expanded
        free: list[str] = []
        for source in sources:
            consumers = self._waiting.get(source)
            if consumers is None:
                continue
            consumers.discard(node_id)
            if not consumers:
                free.append(source)
        if not self._waiting.get(node_id):
            free.append(node_id)
        return free
