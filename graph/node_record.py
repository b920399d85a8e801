"""What one prompt run knows about one node, in one record (graph/run.py keeps one per node)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable

from graph.cache import CacheEntry

# (value key or None, whether a model handle reaches the node): see graph/value_keys.py.
ValueKey = tuple[Hashable | None, bool]


@dataclass
class NodeRecord:
    """`entry`: the node's outputs for this run, once computed or found in the output cache
    (dropped again when the `none` strategy releases them). `value_key`: computed when its inputs
    were first assembled, kept until its entry is stored (a node may be staged several times).
    `waiting`: the returns of its calls while some are still running async tasks. `expanded`: the
    `(subgraph, result)` pairs of an expansion whose nodes have not all run yet.
    """

    entry: CacheEntry | None = None
    value_key: ValueKey | None = None
    waiting: list[Any] | None = None
    expanded: list[tuple[dict | None, Any]] | None = None
