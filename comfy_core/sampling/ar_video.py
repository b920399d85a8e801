"""The `ar_video` sampler: block-by-block autoregressive denoising of a video latent with a
key/value cache (Causal Forcing, Self-Forcing), ComfyUI's `ksampler("ar_video",
{"num_frame_per_block": n})` (SamplerARVideo).

Inference of Self-Forcing (Huang et al. 2025, arXiv 2506.08009; github.com/guandeh17/Self-Forcing
`pipeline/causal_inference.py`) and Causal Forcing (github.com/thu-ml/Causal-Forcing); written here.
The latent `[B, C, T, H, W]` is cut along T into blocks of `num_frame_per_block` latent frames
(the last one shorter when T does not divide). For each block, in order:

1. its slice of the starting noise is denoised through the whole sigma schedule as a few-step
   consistency generator: at step i the model predicts the clean block `x0_i`; unless the next
   sigma is 0, the block becomes `x0_i` re-noised to `sigma_{i+1}` with fresh Gaussian noise
   (`model_sampling.noise_scaling(sigma_{i+1}, eps, x0_i)`: `s * eps + (1 - s) * x0` for flow
   models); the last prediction is the block;
2. the clean block is run once more at sigma 0 with the cache recording, so its keys/values join
   the context of every later block.

The model attends from a block to the cached keys/values of all earlier frames (block-causal;
comfy_core/families/wan/causal.py) at absolute RoPE frame positions. Image-to-video: an initial
latent in `transformer_options["ar_config"]["initial_latent"]` (ARVideoI2V; older ComfyUI:
`transformer_options["ar_initial_latent"]`) `[1 or B, C, Ti, H, W]` fills the first Ti frames of
the result and is recorded into the cache before the first block; the blocks cover the rest.

The fresh noise comes from a CPU generator seeded with the run's seed (`extra_args["seed"]`), so a
seed gives the same video. Inpainting masks do not apply to this sampler (they are ignored).
"""
from __future__ import annotations

from typing import Any, Callable

import torch


# transformer_options keys a causal model reads (the same strings in comfy_core/families/wan/causal.py)
KV_CACHE_OPTION = "ar_kv_cache"
FRAME_OFFSET_OPTION = "ar_frame_offset"
AR_CONFIG_OPTION = "ar_config"
LEGACY_INITIAL_LATENT_OPTION = "ar_initial_latent"


class KVCache:
    """Keys and values `[b, M, H*D]` of the frames generated so far, per (transformer block index,
    cond-or-uncond slot of `transformer_options["cond_or_uncond"]`), so a guider that runs cond and
    uncond in one batch or in two reads the same cache. A model's self-attention calls
    `attend_keys` when it finds the cache in its transformer options (Wan:
    comfy_core/families/wan/causal.py).

    `recording` (set by the sampler for the pass over a finished block) appends the current
    keys/values to what later blocks read; otherwise the cache is only read."""

    def __init__(self) -> None:
        self.entries: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        self.recording = False

    def __len__(self) -> int:
        return len(self.entries)

    def cached_tokens(self, block_index: int = 0, slot: int = 0) -> int:
        entry = self.entries.get((block_index, slot))
        return 0 if entry is None else entry[0].shape[1]

    def attend_keys(self, block_index: int, slots: Any, k: torch.Tensor,
                    v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Current keys/values `[B, L, H*D]` -> the cached prefix then the current ones,
        `[B, M + L, H*D]`; the batch is split evenly over `slots` (the cond_or_uncond list)."""
        slots = list(slots) if slots else [0]
        if k.shape[0] % len(slots):
            raise ValueError(f"ar_video KV cache: a batch of {k.shape[0]} does not split over {len(slots)} cond slots")
        per = k.shape[0] // len(slots)
        keys, values = [], []
        for n, slot in enumerate(slots):
            k_n, v_n = k[n * per:(n + 1) * per], v[n * per:(n + 1) * per]
            entry = self.entries.get((block_index, int(slot)))
            if entry is not None:
                past_k, past_v = entry
                if past_k.shape[0] != per:
                    raise ValueError(f"ar_video KV cache: {past_k.shape[0]} cached rows against a batch of {per}")
                k_n = torch.cat([past_k.to(k_n), k_n], dim=1)
                v_n = torch.cat([past_v.to(v_n), v_n], dim=1)
            if self.recording:
                self.entries[(block_index, int(slot))] = (k_n.detach(), v_n.detach())
            keys.append(k_n)
            values.append(v_n)
        return torch.cat(keys, dim=0), torch.cat(values, dim=0)


def initial_latent(transformer_options: dict) -> torch.Tensor | None:
    """The image-to-video start latent the AR nodes put in the model's transformer options."""
    config = transformer_options.get(AR_CONFIG_OPTION) or {}
    latent = config.get("initial_latent") if isinstance(config, dict) else None
    return transformer_options.get(LEGACY_INITIAL_LATENT_OPTION) if latent is None else latent


def block_ranges(start: int, frames: int, per_block: int) -> list[tuple[int, int]]:
    """Frame ranges `[s, e)` of the blocks from `start` to `frames`, `per_block` frames each."""
    if per_block < 1:
        raise ValueError(f"ar_video: num_frame_per_block must be at least 1, got {per_block}")
    return [(s, min(s + per_block, frames)) for s in range(start, frames, per_block)]


@torch.no_grad()
def sample_ar_video(model: Callable[..., torch.Tensor], x: torch.Tensor, sigmas: torch.Tensor,
                    extra_args: dict | None = None, callback: Callable[[dict], None] | None = None,
                    disable: Any = None, num_frame_per_block: int = 1) -> torch.Tensor:
    """See the module docstring. `x` `[B, C, T, H, W]` is the noise scaled to `sigmas[0]`."""
    if x.ndim != 5:
        raise ValueError(f"ar_video: the latent must be a video [batch, channels, frames, height, width], "
                         f"got {tuple(x.shape)}")
    extra_args = dict(extra_args or {})
    extra_args.pop("denoise_mask", None)
    seed = extra_args.get("seed")
    model_options = dict(extra_args.get("model_options") or {})
    base_options = dict(model_options.get("transformer_options") or {})
    model_sampling = getattr(model, "model_sampling", None)
    cache = KVCache()
    b, frames = x.shape[0], x.shape[2]
    s_in = x.new_ones([b])
    generator = torch.Generator(device="cpu").manual_seed(int(0 if seed is None else seed))

    def call(block: torch.Tensor, sigma: torch.Tensor, offset: int) -> torch.Tensor:
        options = {**base_options, KV_CACHE_OPTION: cache, FRAME_OFFSET_OPTION: offset}
        args = {**extra_args, "model_options": {**model_options, "transformer_options": options}}
        return model(block, sigma * s_in, **args)

    def record(block: torch.Tensor, offset: int) -> None:
        cache.recording = True
        try:
            call(block, sigmas.new_zeros(()), offset)
        finally:
            cache.recording = False

    out = torch.zeros_like(x)
    start = 0
    first = initial_latent(base_options)
    if first is not None:
        first = first.to(device=x.device, dtype=x.dtype)
        if first.ndim != 5 or first.shape[1] != x.shape[1] or first.shape[3:] != x.shape[3:]:
            raise ValueError(f"ar_video: the initial latent {tuple(first.shape)} does not fit the latent "
                             f"{tuple(x.shape)} (channels, height, width)")
        first = first[:, :, :frames].expand(b, -1, -1, -1, -1)
        start = first.shape[2]
        out[:, :, :start] = first
        if start < frames:
            record(first, 0)

    blocks = block_ranges(start, frames, int(num_frame_per_block))
    steps = len(sigmas) - 1
    for n, (s, e) in enumerate(blocks):
        block = x[:, :, s:e]
        for i in range(steps):
            denoised = call(block, sigmas[i], s)
            out[:, :, s:e] = denoised
            if callback is not None:
                callback({"x": out, "i": i, "sigma": sigmas[i], "sigma_hat": sigmas[i], "denoised": out,
                          "block": n, "blocks": len(blocks)})
            if float(sigmas[i + 1]) > 0:
                noise = torch.randn(block.shape, generator=generator, device="cpu").to(block)
                block = renoise(model_sampling, sigmas[i + 1], noise, denoised)
            else:
                block = denoised
        if steps == 0:
            out[:, :, s:e] = block
        if n + 1 < len(blocks):
            record(out[:, :, s:e], s)
    return out


def renoise(model_sampling: Any, sigma: torch.Tensor, noise: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """`clean` noised to `sigma` by the model's forward process (flow: `s * noise + (1 - s) * clean`)."""
    if model_sampling is None or not hasattr(model_sampling, "noise_scaling"):
        return sigma * noise + (1.0 - sigma) * clean
    return model_sampling.noise_scaling(sigma.reshape(1), noise, clean)
