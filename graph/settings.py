"""What every prompt run of one executor shares and never changes: `RunSettings`.

`Executor` (graph/executor.py) builds it once from its constructor arguments; each `Run`
(graph/run.py) gets it with the caches and never sees the executor itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from graph.invoke import BeforeNodeCall, Recover
from graph.progress import SCOPES
from graph.registry import Registry
from graph.spec import NodeSpec

# What a call route is asked to run (`CallSite.kind`): the node's main function, or its
# check_lazy_status (ComfyUI maps both over the input lists the same way).
MAIN_CALL, LAZY_CHECK = "function", "check_lazy_status"


@dataclass(frozen=True)
class CallSite:
    """One node's mapped calls, as a call route receives them (graph/node_step.py).

    `view` is the run (graph/node_step.py's `StepView`), `instance` the node's kept instance
    (None for native nodes), `values` its per-input lists (hidden inputs included), `kind`
    MAIN_CALL or LAZY_CHECK. `run(values)` makes the calls exactly as the executor would
    without a route, over `values` (the ones given, or others the route chose), and returns
    one return value per call (a still-running async call as its task)."""

    view: Any
    node_id: str
    spec: NodeSpec
    instance: Any
    values: Mapping[str, list]
    kind: str
    run: Callable[[Mapping[str, list]], Awaitable[list]]


# `step(view, node_id, run)`: runs one node step; `run()` is the executor's own step, returning
# its graph.node_step.StepResult, and the route returns the StepResult that applies.
StepRoute = Callable[[Any, str, Callable[[], Awaitable[Any]]], Awaitable[Any]]
# `calls(site)`: makes one node's calls; returns one return value per call.
CallRoute = Callable[[CallSite], Awaitable[list]]
# `prompt(view, outputs, run)`: runs one whole prompt; `run()` is the executor's own run of it
# (graph/run.py, returning its ExecutionOutcome), and the route returns the outcome that applies.
PromptRoute = Callable[[Any, list, Callable[[], Awaitable[Any]]], Awaitable[Any]]


@dataclass(frozen=True)
class NodeRoutes:
    """A host's way around one prompt, its node steps and its node calls (ComfyUI's packs replace
    `PromptExecutor.execute`, `execution.execute` and `execution._async_map_node_over_list` to
    see every prompt, node and call; compat answers with these). A field left None: the
    executor's own path."""

    step: StepRoute | None = None
    calls: CallRoute | None = None
    prompt: PromptRoute | None = None


# Asked once at the start of each prompt: the routes in force for it, or None (the usual case:
# the executor's own path, at no cost).
RoutesProvider = Callable[[], "NodeRoutes | None"]


@dataclass(frozen=True)
class RunSettings:
    """`registry`: where node specs come from. `env`: the host's environment object, handed to
    node code as `graph.context.current().env`. `hooks`: `before_node_call(unique_id, call_index,
    graph_index)` callbacks run before each node call (graph/invoke.py). `recover(exc) -> bool`:
    the host's retry hook for a failed node call (graph/invoke.py). `progress_state`: "all"
    (ComfyUI's messages) or "active" (graph/progress.py). `value_keys`: reuse results of equal
    input values below model handles (graph/value_keys.py); False keys on structure alone, as
    ComfyUI does. `routes()`: the host's `NodeRoutes` for a prompt, asked as it starts (None,
    or a provider answering None: no routing).
    """

    registry: Registry
    env: Any = None
    hooks: tuple[BeforeNodeCall, ...] = ()
    recover: Recover | None = None
    progress_state: str = "all"
    value_keys: bool = True
    routes: RoutesProvider | None = None

    def __post_init__(self) -> None:
        if self.progress_state not in SCOPES:
            raise ValueError(f"progress_state must be one of {SCOPES}, got {self.progress_state!r}")
        if self.recover is not None and not callable(self.recover):
            raise TypeError(f"Executor recover must be a callable (exception) -> bool, got {self.recover!r}")
        if self.routes is not None and not callable(self.routes):
            raise TypeError(f"Executor routes must be a callable () -> NodeRoutes | None, got {self.routes!r}")
        object.__setattr__(self, "hooks", tuple(self.hooks))
