"""Bernini-R's in-context tokens on the Wan DiT: clean latents (a source video, a reference video,
reference images) seen by the network as extra tokens beside the noisy video.

Bernini-R (ByteDance, "Bernini: Latent Semantic Planning for Video ...", github.com/bytedance/Bernini)
is Wan 2.2 A14B text-to-video fine-tuned for in-context editing; its high- and low-noise files have
exactly the Wan 2.2 A14B t2v layout (same names and shapes), so they are detected and built as
that family (comfy_core/families/wan/wan21.py) and nothing here is a separate network. Behaviour of
ComfyUI's `WanModel._forward` / `forward_orig` / `rope_encode(source_id=...)` and
`model_base.WAN21.extra_conds` (Comfy-Org/ComfyUI PR #14216, `comfy/ldm/wan/model.py`); written here:

- Model input (`context_latents_in`, ComfyUI's `WAN21.extra_conds`): the conditioning's
  `context_latents`, a list of VAE latents `[B, 16, Ti, Hi, Wi]` (BerniniConditioning's streams in
  order: source video, reference video, each reference image), each brought into model space; one
  list per entry, batched element by element (ComfyUI's CONDList).
- Tokens (`append_context_tokens`): each latent, padded to the 1x2x2 patch, goes through the same
  `patch_embedding` as the noisy latent and its tokens are appended after the video's (after any
  Fun `ref_conv` token prefix); all of them run through every block with the video's timestep
  modulation, and are cut off after the head.
- Positions (`context_positions`): stream i (1-based, the list order) gets the 3-D RoPE of its own
  grid starting at frame / row / column 0 (ScaleROPE's options applied as to the video), composed
  with one more rotation by the angle `i * theta^(-2j/D)` on channel pair j of the head (all D/2
  pairs, theta 10000: Flux's `rope` of the position i over the whole head), which tells the
  streams apart from the video (id 0) and from each other.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import torch

from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.flux.math import rope
from comfy_core.models.model_conditions import ConditioningError

CONTEXT_LATENTS = "context_latents"  # ComfyUI's conditioning key and network keyword


def context_latents_in(model: Any, latents: Any) -> list[torch.Tensor]:
    """The conditioning's `context_latents` in model space (ComfyUI's `WAN21.extra_conds`:
    `process_latent_in` of each); each must be a 5-D video latent `[B, C, T, H, W]`."""
    if isinstance(latents, torch.Tensor) or not isinstance(latents, (list, tuple)):
        raise ConditioningError(f"Wan: {CONTEXT_LATENTS} must be a list of video latents [B, C, T, H, W], got "
                                f"{type(latents).__name__}")
    out = []
    for i, latent in enumerate(latents):
        if not isinstance(latent, torch.Tensor) or latent.ndim != 5:
            raise ConditioningError(f"Wan: {CONTEXT_LATENTS}[{i}] must be a video latent [B, C, T, H, W], got "
                                    f"{tuple(getattr(latent, 'shape', ())) or type(latent).__name__}")
        out.append(model.process_latent_in(latent))
    return out


def source_rotation(freqs: torch.Tensor, source_id: int, head_dim: int, theta: float) -> torch.Tensor:
    """`freqs` `[1, L, 1, D/2, 2, 2]` (rotation matrices per channel pair) composed with the
    rotation of position `source_id` over the whole head: pair j turned by a further
    `source_id * theta^(-2j/D)` (ComfyUI's `rope_encode(source_id=...)`). Id 0 leaves them as they are."""
    if not source_id:
        return freqs
    position = torch.tensor([[float(source_id)]], device=freqs.device, dtype=torch.float32)
    turn = rope(position, head_dim, theta).reshape(1, 1, 1, head_dim // 2, 2, 2).to(freqs.dtype)
    return freqs @ turn


def context_positions(model: Any, latents: Sequence[torch.Tensor], freqs: torch.Tensor, *, device: Any, dtype: Any,
                      rope_options: Mapping[str, Any] | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The latents padded to the network's patch and `freqs` (the video's) followed by each
    stream's RoPE: its own grid from 0, turned by its source id (1, 2, ... in list order).
    `model`: the Wan DiT (`patch_size`, `rope_encode`, `rope_embedder.theta`, `dim // num_heads`)."""
    padded = [pad_to_patch_size(latent, model.patch_size) for latent in latents]
    head_dim = model.dim // model.num_heads
    parts = [freqs]
    for index, latent in enumerate(padded):
        t, h, w = latent.shape[-3:]
        own = model.rope_encode(t, h, w, device=device, dtype=dtype, rope_options=rope_options)
        parts.append(source_rotation(own, index + 1, head_dim, model.rope_embedder.theta))
    return padded, torch.cat(parts, dim=1)


def append_context_tokens(x: torch.Tensor, latents: Sequence[torch.Tensor] | None,
                          embed: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, int]:
    """Tokens `x` `[B, L, C]` followed by each latent's patch tokens (`embed`: the network's patch
    embedding, `[B, C, T', H', W']`), and L, the count to keep after the head."""
    main_len = x.shape[1]
    if not latents:
        return x, main_len
    tokens = [x]
    for latent in latents:
        tokens.append(embed(latent.to(x.device)).to(x.dtype).flatten(2).transpose(1, 2))  # [B, Li, C]
    return torch.cat(tokens, dim=1), main_len
