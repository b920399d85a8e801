"""ComfyUI's `comfy.ldm.hidream.model` module-level helpers (compat/comfy_surface/comfy/ldm/hidream/model.py)."""
from __future__ import annotations

from typing import Any


def attention(query: Any, key: Any, value: Any, transformer_options: dict | None = None) -> Any:
    """Attention over per-head tensors `[B, S, heads, head_dim]` -> `[B, S, heads * head_dim]`:
    each flattened over its heads and run through `comfy.ldm.modules.attention.optimized_attention`
    (read at each call, so a pack's replacement of it, and the running model's attention backend,
    apply), with `heads` the query's third axis (behaviour of ComfyUI's
    comfy/ldm/hidream/model.py `attention(query, key, value, transformer_options={})`)."""
    import comfy.ldm.modules.attention as attention_module

    def flat(t: Any) -> Any:
        return t.reshape(t.shape[0], -1, t.shape[-1] * t.shape[-2])

    return attention_module.optimized_attention(flat(query), flat(key), flat(value), query.shape[2],
                                                transformer_options={} if transformer_options is None
                                                else transformer_options)
