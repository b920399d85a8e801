"""V3 pack discovery: a pack module's `comfy_entrypoint()` -> `ComfyExtension` -> its nodes.

Runs as graph.packs' module hook after the pack imported. The entry point, `on_load` and
`get_node_list` may be async; they run on a private event loop (in a helper thread when the
caller is itself inside an event loop). Node ids are taken from each schema; a failing entry
point is logged and listed on GET /custom_nodes/status, and the pack's V1 nodes still count.

The list may hold V1 classes too: ComfyUI's `load_custom_node` registers every class it returns
by `node_cls.GET_SCHEMA().node_id` (display name from the schema's `display_name` when not None)
with no type check, and then serves and runs a V1 class as the V1 node it is. Packs rely on it
(sd-perturbed-attention, ComfyUI-ppm: a `v3_schema_stub` gives V1 classes a `GET_SCHEMA` returning
just `node_id` and `display_name`), so such a class is registered through the V1 adapter
(graph/v1.py, the registry's `add_v1`). A class that is neither, or whose schema names no node,
fails alone; the list's other nodes register.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import traceback
from types import ModuleType
from typing import Any

from graph.errors import NodeDefinitionError

log = logging.getLogger(__name__)


def run_sync(value: Any) -> Any:
    """The value, or the result of awaiting it on a private loop."""
    if not inspect.isawaitable(value):
        return value

    async def wait() -> Any:
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wait())
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["value"] = asyncio.run(wait())
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller
            box["error"] = exc

    thread = threading.Thread(target=worker, name="comfy-entrypoint")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def register_entrypoint(session: Any, module: ModuleType, pack_name: str, registry: Any) -> None:
    entrypoint = getattr(module, "comfy_entrypoint", None)
    if entrypoint is None:
        return
    added: list[str] = []
    # loaded again while the server runs (nodes.load_custom_node): its own node types are replaced
    reloading = pack_name in session.v3_nodes
    try:
        extension = run_sync(entrypoint())
        run_sync(extension.on_load())
        classes = run_sync(extension.get_node_list())
    except Exception:  # noqa: BLE001 -- the pack's problem; report it, keep the server
        session.v3_errors[pack_name] = traceback.format_exc()
        log.error("custom node pack %s: comfy_entrypoint failed\n%s", pack_name, session.v3_errors[pack_name])
        return
    for cls in classes:
        label = getattr(cls, "__name__", cls)
        try:
            spec = _register_node(registry, cls, pack_name, replace_own=reloading)
        except Exception as exc:  # noqa: BLE001 -- one node's declaration fails that node only
            log.error("custom node pack %s: V3 node %r not registered: %s", pack_name, label, exc)
            session.v3_errors.setdefault(pack_name, "")
            session.v3_errors[pack_name] += f"{label}: {exc}\n"
            continue
        for quirk in spec.quirks:
            log.warning("custom node pack %s: node %r: %s", pack_name, spec.node_id, quirk)
        added.append(spec.node_id)
    session.v3_nodes[pack_name] = added


def _register_node(registry: Any, cls: Any, pack_name: str, *, replace_own: bool = False) -> Any:
    """Register one class of a `get_node_list()`: a V3 `io.ComfyNode`, or a V1 class named by its
    `GET_SCHEMA()` (ComfyUI reads `GET_SCHEMA().node_id` of whatever the list holds). With
    `replace_own` (the pack is loaded again), a node type the pack itself registered before is
    replaced (`Registry.replace_spec`), as V1 mappings are (graph/packs.py)."""
    from compat.v3 import io
    from compat.v3.adapter import spec_from_v3
    from graph.v1 import spec_from_v1

    python_module = f"custom_nodes.{pack_name}"

    def own(node_id: str) -> bool:
        taken = registry.find(node_id)
        return replace_own and taken is not None and taken.python_module == python_module

    if isinstance(cls, type) and issubclass(cls, io.ComfyNode):
        spec = spec_from_v3(cls, python_module=python_module)
        return registry.replace_spec(spec) if own(spec.node_id) else registry.add_spec(spec)
    if isinstance(cls, type) and hasattr(cls, "INPUT_TYPES"):
        node_id, display_name = _v1_schema(cls)
        if own(node_id):
            return registry.replace_spec(spec_from_v1(node_id, cls, display_name=display_name,
                                                      python_module=python_module))
        return registry.add_v1(node_id, cls, display_name=display_name, python_module=python_module)
    raise NodeDefinitionError(f"expected an io.ComfyNode subclass or a V1 node class (with INPUT_TYPES), "
                              f"got {cls!r}")


def _v1_schema(cls: type) -> tuple[str, str | None]:
    """`(node_id, display_name)` of a V1 class listed by `get_node_list()`, from its `GET_SCHEMA()`."""
    get_schema = getattr(cls, "GET_SCHEMA", None)
    if not callable(get_schema):
        raise NodeDefinitionError(f"V1 class {cls.__name__} is listed by get_node_list() without a GET_SCHEMA(); "
                                  f"ComfyUI names a listed class by GET_SCHEMA().node_id")
    schema = get_schema()
    node_id = getattr(schema, "node_id", None)
    if not isinstance(node_id, str) or not node_id:
        raise NodeDefinitionError(f"V1 class {cls.__name__}: GET_SCHEMA().node_id must be a non-empty string, "
                                  f"got {node_id!r}")
    display_name = getattr(schema, "display_name", None)
    return node_id, display_name if display_name is None else str(display_name)
