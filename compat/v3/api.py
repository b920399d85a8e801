"""`ComfyExtension`, `ComfyAPI` and `ComfyAPISync` (comfy_api.latest).

A V3 pack exports `comfy_entrypoint()` (sync or async) returning a `ComfyExtension`, whose
`get_node_list()` lists its `io.ComfyNode` classes (compat/v3/discovery.py registers them).
`ComfyAPI().execution.set_progress(value, max_value, node_id=None, preview_image=None,
ignore_size_limit=False)` reports progress for the running node (async; `ComfyAPISync` is the
same, sync), through `graph.context.current().progress`.

`ComfyAPI().node_replacement.register(io.NodeReplace(...))` (async; sync on `ComfyAPISync`)
registers a stand-in for a node type that no longer exists, with the server packs see now
(`CompatSession.register_node_replacement`): served at GET /node_replacements and applied to
POST /prompt (web/node_replacements.py). Packs call it from `ComfyExtension.on_load`, as
ComfyUI's own extensions do, or at import.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from graph.context import current


class ComfyExtension(ABC):
    async def on_load(self) -> None:
        """Called once before `get_node_list`."""

    @abstractmethod
    async def get_node_list(self) -> list[type]:
        """The pack's `io.ComfyNode` classes."""


class NoRunningNodeError(RuntimeError):
    """set_progress was called outside a node call."""


def _preview(preview_image: Any, max_size: int | None) -> tuple | None:
    if preview_image is None:
        return None
    from PIL import Image

    if isinstance(preview_image, Image.Image):
        return ("JPEG", preview_image, max_size)
    import numpy as np
    import torch

    if isinstance(preview_image, torch.Tensor):
        image = preview_image[0] if preview_image.ndim == 4 else preview_image  # [H, W, C]
        pixels = np.clip(255.0 * image.detach().cpu().float().numpy(), 0, 255).astype(np.uint8)
        return ("JPEG", Image.fromarray(pixels), max_size)
    raise TypeError(f"set_progress: preview_image must be a PIL image or an IMAGE tensor, got "
                    f"{type(preview_image).__name__}")


def set_progress(value: float, max_value: float, node_id: str | None = None, preview_image: Any = None,
                 ignore_size_limit: bool = False) -> None:
    ctx = current()
    if ctx is None:
        raise NoRunningNodeError("ComfyAPI.execution.set_progress called outside a running node")
    if node_id is not None and node_id not in (ctx.node_id, ctx.display_node_id):
        raise ValueError(f"set_progress: node_id {node_id!r} is not the running node ({ctx.node_id!r})")
    from compat.session import active

    max_size = None if ignore_size_limit else active().preview_size
    ctx.progress(value, max_value, _preview(preview_image, max_size))


class _SyncExecution:
    def set_progress(self, value: float, max_value: float, node_id: str | None = None, preview_image: Any = None,
                     ignore_size_limit: bool = False) -> None:
        set_progress(value, max_value, node_id, preview_image, ignore_size_limit)


class _AsyncExecution:
    async def set_progress(self, value: float, max_value: float, node_id: str | None = None,
                           preview_image: Any = None, ignore_size_limit: bool = False) -> None:
        set_progress(value, max_value, node_id, preview_image, ignore_size_limit)


def register_node_replacement(node_replace: Any) -> None:
    from compat.session import active
    from compat.v3.io import NodeReplace, NodeReplaceError

    if not isinstance(node_replace, NodeReplace):
        raise NodeReplaceError(f"node_replacement.register: expected an io.NodeReplace, got "
                               f"{type(node_replace).__name__}")
    active().register_node_replacement(node_replace)


class _SyncNodeReplacement:
    def register(self, node_replace: Any) -> None:
        register_node_replacement(node_replace)


class _AsyncNodeReplacement:
    async def register(self, node_replace: Any) -> None:
        register_node_replacement(node_replace)


class ComfyAPI:
    def __init__(self) -> None:
        self.execution = _AsyncExecution()
        self.node_replacement = _AsyncNodeReplacement()


class ComfyAPISync:
    def __init__(self) -> None:
        self.execution = _SyncExecution()
        self.node_replacement = _SyncNodeReplacement()
