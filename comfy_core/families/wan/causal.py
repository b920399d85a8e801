"""Block-causal attention with a key/value cache for autoregressive Wan video (Causal Forcing,
Self-Forcing): the frames already generated are attended to through their cached keys and values,
never recomputed.

Method of Self-Forcing (Huang et al. 2025, "Self Forcing: Bridging the Train-Test Gap in
Autoregressive Video Diffusion", arXiv 2506.08009; github.com/guandeh17/Self-Forcing
`pipeline/causal_inference.py`, `wan/modules/causal_model.py`) and Causal Forcing
(github.com/thu-ml/Causal-Forcing), which distil a Wan 2.1 T2V DiT into a few-step generator that
makes the video a block of `num_frame_per_block` latent frames at a time. The checkpoint is a plain
Wan 2.1 T2V state dict (same names and shapes), so no family of its own: the causal mode is this
cache, switched on per run through `transformer_options` (what ComfyUI's `ar_video` sampler does):

- `transformer_options[KV_CACHE_OPTION]`: a key/value cache (the sampler's
  `comfy_core.sampling.ar_video.KVCache`: `attend_keys(block_index, slots, k, v)`; read by name, as
  families sit below sampling). Every self-attention (block
  `transformer_options["block_index"]`) attends from the current tokens to the cached keys/values
  of that block followed by the current ones (attention inside a block is bidirectional, to the
  past causal); while the cache is `recording`, the current keys/values are appended.
- `transformer_options[FRAME_OFFSET_OPTION]`: the latent frame index of the first frame given, so
  the 3-D RoPE frame positions are absolute (the cached keys were rotated at their own positions).

"""
from __future__ import annotations

from typing import Any, Mapping

import torch

KV_CACHE_OPTION = "ar_kv_cache"
FRAME_OFFSET_OPTION = "ar_frame_offset"


def cached_keys(transformer_options: Mapping[str, Any] | None, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys/values a self-attention attends to: `k`, `v` themselves, or, with a cache in the
    options, the cached prefix of this block followed by them."""
    cache = (transformer_options or {}).get(KV_CACHE_OPTION)
    if cache is None:
        return k, v
    options = transformer_options or {}
    return cache.attend_keys(int(options.get("block_index", 0)), options.get("cond_or_uncond"), k, v)


def frame_offset(transformer_options: Mapping[str, Any] | None) -> int:
    """The absolute latent frame index of the first frame of this call (0 outside AR sampling)."""
    return int((transformer_options or {}).get(FRAME_OFFSET_OPTION, 0) or 0)
