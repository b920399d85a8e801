"""`comfy.utils.ProgressBar` over the running node's context (graph.context, reference §5.6).

ComfyUI's ProgressBar calls a global hook that checks the interrupt flag and sends `progress`
(plus `progress_state` and any preview) for the node the context variable names. Here a bar
captures the running `NodeContext` when it is made (so updates from a thread the node starts
still reach its node) and reports through `NodeContext.progress`, which raises
`graph.context.Interrupted` (= `comfy.model_management.InterruptProcessingException`) when the
prompt was interrupted. Outside a node it only counts.
"""
from __future__ import annotations

from typing import Any

from graph.context import NodeContext, current


class ProgressBar:
    """ComfyUI's `ProgressBar(total, node_id=None)`: `update(n)`, `update_absolute(v, total, preview)`."""

    def __init__(self, total: float, node_id: str | None = None) -> None:
        self.total = total
        self.current = 0
        self.node_id = node_id
        self._context: NodeContext | None = current()

    def update_absolute(self, value: float, total: float | None = None, preview: Any = None) -> None:
        """Set progress to `value` (clamped to `total`); `preview` = ("JPEG"|"PNG", PIL image, max size)."""
        if total is not None:
            self.total = total
        if value > self.total:
            value = self.total
        self.current = value
        from compat import files_utils  # torch-free; ComfyUI's global hook lives there

        if files_utils.PROGRESS_BAR_HOOK is not None:  # a pack's comfy.utils.set_progress_bar_global_hook
            files_utils.PROGRESS_BAR_HOOK(self.current, self.total, preview, node_id=self.node_id)
            return
        ctx = current() or self._context
        if ctx is not None:
            ctx.progress(self.current, self.total, preview)

    def update(self, value: float) -> None:
        """Advance by `value` steps."""
        self.update_absolute(self.current + value)
