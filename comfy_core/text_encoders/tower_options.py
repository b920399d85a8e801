"""The options an encoder set gives each of its towers, and ComfyUI's two ways of changing them for
a while, once for every tower (CLIP, T5, the Qwen3 family, Jina CLIP v2).

A tower holds `options` (its layer choice, pad token, ...: the set's `EncoderOptions` or the
tower's own dataclass) and `default_options` (what the set gave it). `reset_clip_options()` is
ComfyUI's `SDClipModel.reset_clip_options`; `using_options(options)` runs a block with other
options and restores them after, so a pack's replacement of `encode_token_weights` (which
brackets its calls with ComfyUI's `set_clip_options` / `reset_clip_options`) sees the layer in
force. Each tower keeps its own `set_clip_options`: what a layer choice means differs.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


class TowerOptions:
    """Mixin for a text tower (`nn.Module`) with `options` / `default_options` (module doc)."""

    default_options: Any = None  # the options the set gave this tower (reset_clip_options)

    def reset_clip_options(self) -> None:
        """ComfyUI's `reset_clip_options`: the set's defaults for this tower again."""
        self.options = self.default_options

    @contextmanager
    def using_options(self, options: Any) -> Iterator[None]:
        """Run with `options` for the duration, then restore (the encoder set encodes inside it)."""
        saved = self.options
        self.options = options
        try:
            yield
        finally:
            self.options = saved


__all__ = ["TowerOptions"]
