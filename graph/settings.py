"""What every prompt run of one executor shares and never changes: `RunSettings`.

`Executor` (graph/executor.py) builds it once from its constructor arguments; each `Run`
(graph/run.py) gets it with the caches and never sees the executor itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graph.invoke import BeforeNodeCall, Recover
from graph.progress import SCOPES
from graph.registry import Registry


@dataclass(frozen=True)
class RunSettings:
    """`registry`: where node specs come from. `env`: the host's environment object, handed to
    node code as `graph.context.current().env`. `hooks`: `before_node_call(unique_id, call_index,
    graph_index)` callbacks run before each node call (graph/invoke.py). `recover(exc) -> bool`:
    the host's retry hook for a failed node call (graph/invoke.py). `progress_state`: "all"
    (ComfyUI's messages) or "active" (graph/progress.py). `value_keys`: reuse results of equal
    input values below model handles (graph/value_keys.py); False keys on structure alone, as
    ComfyUI does.
    """

    registry: Registry
    env: Any = None
    hooks: tuple[BeforeNodeCall, ...] = ()
    recover: Recover | None = None
    progress_state: str = "all"
    value_keys: bool = True

    def __post_init__(self) -> None:
        if self.progress_state not in SCOPES:
            raise ValueError(f"progress_state must be one of {SCOPES}, got {self.progress_state!r}")
        if self.recover is not None and not callable(self.recover):
            raise TypeError(f"Executor recover must be a callable (exception) -> bool, got {self.recover!r}")
        object.__setattr__(self, "hooks", tuple(self.hooks))
