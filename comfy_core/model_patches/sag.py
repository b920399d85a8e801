"""Self-Attention Guidance (Hong et al. 2023, "Improving Sample Quality of Diffusion Models
Using Self-Attention Guidance", ICCV, arXiv 2210.00939).

Behaviour of ComfyUI's comfy_extras/nodes_sag.py: the middle block's first self-attention
records the negative pass's attention map; after CFG, the regions that map attends to most
(mean over heads, summed over queries, above 1) are Gaussian-blurred in the negative's x0
prediction, the blurred x0 is re-noised with the same noise, run through the model with the
negative conditioning, and the result `cfg + scale * (blurred - model(blurred noised))` is
returned. Needs the negative pass at every step (cfg 1 optimisation off).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from comfy_core.attention import attention
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.sampling.cond_batch import calc_cond_batch_in_force


def attention_with_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-head attention on `[B, N, heads*d]` that also returns its softmax map
    `[B*heads, Nq, Nk]` (batch-major). The arithmetic is the naive backend's (fp32 scores)."""
    b, nq, _ = q.shape
    q, k, v = (t.reshape(b, t.shape[1], heads, t.shape[2] // heads).transpose(1, 2)
               for t in (q, k, v))  # [B, H, N, d]
    scale = 1.0 / math.sqrt(q.shape[-1])
    probs = (torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale).softmax(dim=-1)  # [B, H, Nq, Nk]
    out = torch.matmul(probs, v.float()).to(v.dtype)
    return out.transpose(1, 2).reshape(b, nq, -1), probs.reshape(b * heads, nq, -1)


def gaussian_blur_2d(img: torch.Tensor, kernel_size: int, sigma: float) -> torch.Tensor:
    """Separable-kernel Gaussian blur of `[B, C, H, W]` per channel, reflect-padded."""
    half = (kernel_size - 1) * 0.5
    xs = torch.linspace(-half, half, steps=kernel_size)
    pdf = torch.exp(-0.5 * (xs / sigma).pow(2))
    kernel1d = (pdf / pdf.sum()).to(device=img.device, dtype=img.dtype)
    kernel2d = torch.mm(kernel1d[:, None], kernel1d[None, :])
    kernel2d = kernel2d.expand(img.shape[-3], 1, kernel_size, kernel_size)
    pad = kernel_size // 2
    img = F.pad(img, [pad, pad, pad, pad], mode="reflect")
    return F.conv2d(img, kernel2d, groups=img.shape[-3])


def token_grid(total: int, height: int, width: int) -> tuple[int, int]:
    """The (rows, cols) of a `total`-token map of a `height x width` latent: the divisor of
    `total` nearest `sqrt(total * height / width)`, searched outwards as ComfyUI does."""
    x = round(math.sqrt((height / width) * total))
    for i in range(0, math.floor(math.sqrt(total) / 2)):
        for j in (x + i, max(1, x - i)):
            if total % j == 0:
                return j, total // j
    # ComfyUI fails here (maps of one to three tokens); the nearest divisor is the same idea.
    j = min((d for d in range(1, total + 1) if total % d == 0), key=lambda d: abs(d - x))
    return j, total // j


def blur_where_attended(x0: torch.Tensor, scores: torch.Tensor, sigma: float, threshold: float = 1.0) -> torch.Tensor:
    """`x0 [B, C, H, W]` blurred (kernel 9) where the attention map `scores [B*heads, N, N]`
    puts more than `threshold` of total attention, unchanged elsewhere."""
    _, n1, n2 = scores.shape
    b, _, lh, lw = x0.shape
    per_head = scores.reshape(b, -1, n1, n2)
    mask = per_head.mean(1, keepdim=False).sum(1, keepdim=False) > threshold  # [B, N]
    rows, cols = token_grid(mask.shape[-1], lh, lw)
    mask = mask.reshape(b, rows, cols).unsqueeze(1).type(scores.dtype)
    mask = F.interpolate(mask, (lh, lw))  # nearest
    blurred = gaussian_blur_2d(x0, kernel_size=9, sigma=sigma)
    return blurred * mask + x0 * (1 - mask)


@dataclass
class ScoreStore:
    """The negative pass's attention map of the last UNet call, shared by the recorder and the
    hook (one run at a time, as ComfyUI's closure). Clones share it."""

    scores: Any = None

    def __deepcopy__(self, memo: dict) -> "ScoreStore":
        return self


@dataclass(frozen=True)
class RecordingAttention:
    """`attn1` replacement of the middle block: attention as usual, keeping the map of the
    batch's negative rows when the batch has some."""

    store: ScoreStore = field(compare=False)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra_options: dict) -> torch.Tensor:
        heads = extra_options["n_heads"]
        cond_or_uncond = extra_options["cond_or_uncond"]
        if 1 not in cond_or_uncond:
            return attention(q, k, v, heads)
        rows = q.shape[0] // len(cond_or_uncond)
        out, probs = attention_with_scores(q, k, v, heads)
        first = cond_or_uncond.index(1) * heads * rows
        self.store.scores = probs[first:first + heads * rows]
        return out

    def cache_signature(self) -> tuple:
        return ("SAG.record",)


@dataclass(frozen=True)
class SelfAttentionGuidance:
    """Post-CFG hook (see the module docstring)."""

    scale: float
    blur_sigma: float
    store: ScoreStore = field(compare=False)

    def __call__(self, args: dict) -> torch.Tensor:
        guided = args["denoised"]
        if min(guided.shape[2:]) <= 4:  # too small for the blur's padding
            return guided
        scores = self.store.scores
        if scores is None:
            raise ModelPatchError("SelfAttentionGuidance: no attention map was recorded (the model's middle "
                                  "block has no self-attention, or the negative pass did not run)")
        uncond_x0 = args["uncond_denoised"]
        x = args["input"]
        degraded = blur_where_attended(uncond_x0, scores, self.blur_sigma)
        renoised = degraded + x - uncond_x0
        (sag,) = calc_cond_batch_in_force()(args["model"].apply_model, [args["uncond"]], renoised, args["sigma"],
                                 args["model_options"])
        return guided + (degraded - sag) * self.scale

    def cache_signature(self) -> tuple:
        return ("SelfAttentionGuidance", self.scale, self.blur_sigma)


def self_attention_guidance(scale: float, blur_sigma: float) -> tuple[RecordingAttention, SelfAttentionGuidance]:
    """The recorder (for `attn1` of `("middle", 0, 0)`) and the post-CFG hook, sharing one store."""
    store = ScoreStore()
    return RecordingAttention(store), SelfAttentionGuidance(scale, blur_sigma, store)
