"""ComfyUI's `comfy_execution.progress` for node packs: the per-prompt progress registry and its
handlers, over our engine's progress (graph/context.py, graph/progress.py).

The engine tracks and sends every node's progress itself (`progress` and `progress_state`
messages, graph/progress.py); this registry is the pack-facing face of it:

- `get_progress_state()` is the registry of the prompt running now (one per session, made anew
  when the running prompt changes, as ComfyUI's executor resets its global registry per prompt);
- `update_progress(node_id, value, max, image)` records the node's state, tells the registry's
  enabled handlers, and, when `node_id` is the node running in this context, reports it to the
  engine (`NodeContext.report`): the client gets the same `progress_state` and preview a
  ProgressBar update gives. Progress of another node id reaches the handlers only: the engine
  reports the nodes it runs;
- `add_progress_handler(handler)` registers a pack's `ProgressHandler` on that registry.

`CLIProgressHandler` draws tqdm bars; `WebUIProgressHandler(server)` sends the registry's
`progress_state` (and previews) through a server's `send_sync`, for packs that make one.
"""
from __future__ import annotations

from abc import ABC
from enum import Enum
from typing import Any, Optional, Tuple, TypedDict

from graph.context import current

PreviewImageTuple = Tuple[str, Any, Optional[int]]  # ("JPEG"|"PNG", PIL image, max size)


class NodeState(Enum):
    Pending = "pending"
    Running = "running"
    Finished = "finished"
    Error = "error"


class NodeProgressState(TypedDict):
    state: NodeState
    value: float
    max: float


class ProgressHandler(ABC):
    """A receiver of a registry's progress events (all methods optional)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.enabled = True

    def set_registry(self, registry: "ProgressRegistry") -> None:
        pass

    def start_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        pass

    def update_handler(self, node_id: str, value: float, max_value: float, state: NodeProgressState, prompt_id: str,
                       image: PreviewImageTuple | None = None) -> None:
        pass

    def finish_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        pass

    def reset(self) -> None:
        pass

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False


class CLIProgressHandler(ProgressHandler):
    """A tqdm bar per node, closed when the node finishes."""

    def __init__(self) -> None:
        super().__init__("cli")
        self.progress_bars: dict[str, Any] = {}

    def _bar(self, node_id: str, total: float) -> Any:
        from tqdm import tqdm

        if node_id not in self.progress_bars:
            self.progress_bars[node_id] = tqdm(total=total, desc=f"Node {node_id}", unit="steps", leave=True,
                                               position=len(self.progress_bars))
        return self.progress_bars[node_id]

    def start_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        self._bar(node_id, state["max"])

    def update_handler(self, node_id: str, value: float, max_value: float, state: NodeProgressState, prompt_id: str,
                       image: PreviewImageTuple | None = None) -> None:
        bar = self._bar(node_id, max_value)
        if bar.total != max_value:
            bar.reset(total=max_value)
        if value > bar.n:
            bar.update(value - bar.n)

    def finish_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        bar = self.progress_bars.pop(node_id, None)
        if bar is not None:
            if bar.total and bar.n < bar.total:
                bar.update(bar.total - bar.n)
            bar.close()

    def reset(self) -> None:
        for bar in self.progress_bars.values():
            bar.close()
        self.progress_bars.clear()


class WebUIProgressHandler(ProgressHandler):
    """Sends the registry's non-pending nodes as `progress_state` (and previews with their node's
    metadata) through `server_instance.send_sync`, to its current client."""

    def __init__(self, server_instance: Any) -> None:
        super().__init__("webui")
        self.server_instance = server_instance
        self.registry: ProgressRegistry | None = None

    def set_registry(self, registry: "ProgressRegistry") -> None:
        self.registry = registry

    def _send_progress_state(self, prompt_id: str) -> None:
        if self.registry is None:
            return
        nodes = {node_id: {"value": s["value"], "max": s["max"], "state": s["state"].value, "node_id": node_id,
                           "prompt_id": prompt_id, "display_node_id": node_id, "real_node_id": node_id,
                           "parent_node_id": None}
                 for node_id, s in self.registry.nodes.items() if s["state"] is not NodeState.Pending}
        self.server_instance.send_sync("progress_state", {"prompt_id": prompt_id, "nodes": nodes},
                                       getattr(self.server_instance, "client_id", None))

    def start_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        self._send_progress_state(prompt_id)

    def update_handler(self, node_id: str, value: float, max_value: float, state: NodeProgressState, prompt_id: str,
                       image: PreviewImageTuple | None = None) -> None:
        self._send_progress_state(prompt_id)
        if image is not None:
            from compat.prompt_server import BinaryEventTypes

            metadata = {"node_id": node_id, "prompt_id": prompt_id, "display_node_id": node_id,
                        "parent_node_id": None, "real_node_id": node_id}
            self.server_instance.send_sync(BinaryEventTypes.PREVIEW_IMAGE_WITH_METADATA, (image, metadata),
                                           getattr(self.server_instance, "client_id", None))

    def finish_handler(self, node_id: str, state: NodeProgressState, prompt_id: str) -> None:
        self._send_progress_state(prompt_id)


class ProgressRegistry:
    """The progress of one prompt's nodes, and the handlers told of it."""

    def __init__(self, prompt_id: str, dynprompt: Any) -> None:
        self.prompt_id = prompt_id
        self.dynprompt = dynprompt
        self.nodes: dict[str, NodeProgressState] = {}
        self.handlers: dict[str, ProgressHandler] = {}

    def register_handler(self, handler: ProgressHandler) -> None:
        self.handlers[handler.name] = handler

    def unregister_handler(self, handler_name: str) -> None:
        handler = self.handlers.pop(handler_name, None)
        if handler is not None:
            handler.reset()

    def enable_handler(self, handler_name: str) -> None:
        if handler_name in self.handlers:
            self.handlers[handler_name].enable()

    def disable_handler(self, handler_name: str) -> None:
        if handler_name in self.handlers:
            self.handlers[handler_name].disable()

    def ensure_entry(self, node_id: str) -> NodeProgressState:
        if node_id not in self.nodes:
            self.nodes[node_id] = NodeProgressState(state=NodeState.Pending, value=0, max=1)
        return self.nodes[node_id]

    def _enabled(self) -> list[ProgressHandler]:
        return [h for h in list(self.handlers.values()) if h.enabled]

    def start_progress(self, node_id: str) -> None:
        entry = self.ensure_entry(node_id)
        entry.update(state=NodeState.Running, value=0.0, max=1.0)
        for handler in self._enabled():
            handler.start_handler(node_id, entry, self.prompt_id)

    def update_progress(self, node_id: str, value: float, max_value: float,
                        image: PreviewImageTuple | None = None) -> None:
        entry = self.ensure_entry(node_id)
        entry.update(state=NodeState.Running, value=value, max=max_value)
        for handler in self._enabled():
            handler.update_handler(node_id, value, max_value, entry, self.prompt_id, image)
        ctx = current()
        if (ctx is not None and ctx.prompt_id == self.prompt_id
                and str(node_id) in (ctx.node_id, ctx.display_node_id)):
            ctx.report(value, max_value, image)

    def finish_progress(self, node_id: str) -> None:
        entry = self.ensure_entry(node_id)
        entry.update(state=NodeState.Finished, value=entry["max"])
        for handler in self._enabled():
            handler.finish_handler(node_id, entry, self.prompt_id)

    def reset_handlers(self) -> None:
        for handler in self.handlers.values():
            handler.reset()


_REGISTRY_ATTRIBUTE = "_comfy_progress_registry"


def _session() -> Any:
    from compat import active

    try:
        return active.active()
    except active.CompatNotInstalledError:
        return None


def reset_progress_state(prompt_id: str, dynprompt: Any) -> None:
    """A new registry for `prompt_id` (the previous one's handlers reset)."""
    session = _session()
    previous = getattr(session, _REGISTRY_ATTRIBUTE, None)
    if previous is not None:
        previous.reset_handlers()
    if session is None:
        raise RuntimeError("comfy_execution.progress: the compatibility layer is not installed")
    setattr(session, _REGISTRY_ATTRIBUTE, ProgressRegistry(prompt_id, dynprompt))


def get_progress_state() -> ProgressRegistry:
    """The registry of the prompt running now (made when the running prompt changes; outside a
    prompt, the session's last one, or an empty one with prompt id "")."""
    session = _session()
    registry = getattr(session, _REGISTRY_ATTRIBUTE, None)
    ctx = current()
    if registry is None or (ctx is not None and registry.prompt_id != ctx.prompt_id):
        from graph.prompt import DynamicPrompt

        if registry is not None:
            registry.reset_handlers()
        registry = ProgressRegistry(ctx.prompt_id if ctx is not None else "", DynamicPrompt({}))
        if session is not None:
            setattr(session, _REGISTRY_ATTRIBUTE, registry)
    return registry


def add_progress_handler(handler: ProgressHandler) -> None:
    """Register `handler` on the current prompt's registry."""
    registry = get_progress_state()
    handler.set_registry(registry)
    registry.register_handler(handler)
