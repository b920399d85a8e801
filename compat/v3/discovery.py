"""V3 pack discovery: a pack module's `comfy_entrypoint()` -> `ComfyExtension` -> its nodes.

Runs as graph.packs' module hook after the pack imported. The entry point, `on_load` and
`get_node_list` may be async; they run on a private event loop (in a helper thread when the
caller is itself inside an event loop). Node ids are taken from each schema; a failing entry
point is logged and listed on GET /custom_nodes/status, and the pack's V1 nodes still count.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import traceback
from types import ModuleType
from typing import Any

from graph.errors import DuplicateNodeTypeError, NodeDefinitionError

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
    from compat.v3.adapter import spec_from_v3

    entrypoint = getattr(module, "comfy_entrypoint", None)
    if entrypoint is None:
        return
    added: list[str] = []
    try:
        extension = run_sync(entrypoint())
        run_sync(extension.on_load())
        classes = run_sync(extension.get_node_list())
    except Exception:  # noqa: BLE001 -- the pack's problem; report it, keep the server
        session.v3_errors[pack_name] = traceback.format_exc()
        log.error("custom node pack %s: comfy_entrypoint failed\n%s", pack_name, session.v3_errors[pack_name])
        return
    for cls in classes:
        try:
            spec = spec_from_v3(cls, python_module=f"custom_nodes.{pack_name}")
            registry.add_spec(spec)
        except (DuplicateNodeTypeError, NodeDefinitionError) as exc:
            log.error("custom node pack %s: V3 node %r not registered: %s", pack_name,
                      getattr(cls, "__name__", cls), exc)
            session.v3_errors.setdefault(pack_name, "")
            session.v3_errors[pack_name] += f"{getattr(cls, '__name__', cls)}: {exc}\n"
            continue
        added.append(spec.node_id)
    session.v3_nodes[pack_name] = added
