"""Normalized Attention Guidance (Chen et al. 2025, "Normalized Attention Guidance: Universal
Negative Guidance for Diffusion Models", arXiv 2505.21179) as a self-attention output patch.

Behaviour of today's ComfyUI, comfy_extras/nodes_nag.py (`NAGuidance`; read for behaviour, written
here afresh). ComfyUI does not run a second attention against the negative context as the
paper's reference code does; it uses the negative that CFG already batches with the positive:

- the patch is a `transformer_options["patches"]["attn1_output_patch"]`, called after each
  self-attention (`attn1`, output projection applied) with `(out, extra_options)`;
- `extra_options["cond_or_uncond"]` says which batch slices are the positive (0) and the negative
  (1); without both (a cond-only or uncond-only batch) the output is left as it is;
- the model's `disable_cfg1_optimization` is set, so at CFG 1 the sampler still runs the negative
  (which is what makes NAG a negative prompt for distilled models);
- on the positive slice `z+`, with the negative slice `z-` (per token, over the last axis):

      g      = scale * z+ - (scale - 1) * z-                 (extrapolation)
      r      = max(|g|_1, eps) / max(|z+|_1, eps)             (L1 ratio, eps = 1e-6)
      g_hat  = g * min(r, tau) / r                           (norm growth clipped at tau)
      out+   = alpha * g_hat + (1 - alpha) * z+              (blend)

  the negative slice stays as it is. With `extra_options["img_slice"] = (start, end)` (a joint
  text+image token stream) only those tokens are guided, and the guided tokens are written into
  BOTH slices, as ComfyUI does.

`scale = 1` gives `g = z+`, `r = 1` and (tau >= 1) `out+ = z+`; `alpha = 0` gives `z+`: either is the
plain model (its negative still evaluated at CFG 1).

Where it runs (each family's `Architecture.self_attention_hook`): a patch is called only by networks whose blocks call its
hook, and the hooks' calling conventions differ between families, so the patch is installed
only under a hook whose convention it speaks:

- the UNet (SD1.x, SD2.x, SDXL, SVD; comfy_core/models/transformer.py `BasicTransformerBlock`)
  calls ComfyUI's `attn1_output_patch` exactly as ComfyUI does: the same numbers as ComfyUI;
- the Flux line's double and single blocks (Flux, Flux.2, Chroma, LongCat; comfy_core/families/
  flux/blocks.py `patched_self_attention`) call it on the joint attention output before the
  projection with `img_slice`, as today's ComfyUI's Flux blocks do;
- Wan's self-attention (comfy_core/families/wan/blocks.py) offers ComfyUI's Wan `attn1_patch`,
  `{"x": attention output, "q", "k", "transformer_options"} -> x`, run BEFORE the output
  projection `o`; NAG is applied there (`NAGSelfAttentionPatch`). ComfyUI's Wan network (at the
  versions read) calls no `attn1_output_patch`, so there ComfyUI's node does nothing: this is an
  extension, and it differs from guidance after `o` only in the L1 ratio being measured before
  the projection (extrapolation and blending commute with the affine `o`);
- any other network: `nag_hook` returns None and the node logs that NAG has no effect there (a
  no-op, as ComfyUI's node is on a network that never calls the hook).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from comfy_core.model_patches.errors import ModelPatchError

EPS = 1e-6

# The self-attention hooks (a family's `Architecture.self_attention_hook`) whose calling
# convention this module speaks.
SELF_ATTENTION_HOOKS = ("attn1_output_patch", "attn1_patch")


class NAGError(ModelPatchError):
    """Settings NAG cannot run with."""


def normalized_attention_guidance(z_pos: torch.Tensor, z_neg: torch.Tensor, scale: float, alpha: float,
                                  tau: float) -> torch.Tensor:
    """The guided positive attention output: extrapolate away from `z_neg`, clip the growth of the
    per-token L1 norm at `tau`, blend with `z_pos` by `alpha`. `z_pos`, `z_neg` `[B, N, C]` (any
    leading shape; the norm is over the last axis) -> `[B, N, C]`."""
    guided = z_pos * scale - z_neg * (scale - 1.0)
    norm_pos = torch.linalg.vector_norm(z_pos, ord=1, dim=-1, keepdim=True).clamp_min(EPS)
    norm_guided = torch.linalg.vector_norm(guided, ord=1, dim=-1, keepdim=True).clamp_min(EPS)
    ratio = norm_guided / norm_pos
    guided = guided * (ratio.clamp_max(tau) / ratio)
    return guided * alpha + z_pos * (1.0 - alpha)


def _slot(cond_or_uncond: Sequence[int], kind: int, rows: int) -> slice:
    start = list(cond_or_uncond).index(kind) * rows
    return slice(start, start + rows)


@dataclass(frozen=True)
class NormalizedAttentionGuidance:
    """ComfyUI's NAG `attn1_output_patch`: `(out [B, N, C], extra_options) -> out`; `out` is
    changed in place (the attention's fresh result, as ComfyUI does) and returned."""

    scale: float
    alpha: float
    tau: float

    def __post_init__(self) -> None:
        if not self.tau >= 1.0:
            raise NAGError(f"NAG: nag_tau must be at least 1 (got {self.tau}): a smaller bound would shrink "
                           "the positive attention even at nag_scale 1")
        if not 0.0 <= self.alpha <= 1.0:
            raise NAGError(f"NAG: nag_alpha must be in [0, 1] (got {self.alpha})")
        if not self.scale >= 0.0:
            raise NAGError(f"NAG: nag_scale must be at least 0 (got {self.scale})")

    def __call__(self, out: torch.Tensor, extra_options: dict[str, Any]) -> torch.Tensor:
        return self.guide(out, extra_options)

    def guide(self, out: torch.Tensor, options: dict[str, Any]) -> torch.Tensor:
        """NAG on the batch `out` `[B, N, C]` whose slices `options["cond_or_uncond"]` names."""
        cond_or_uncond = options.get("cond_or_uncond")
        if cond_or_uncond is None or 0 not in cond_or_uncond or 1 not in cond_or_uncond:
            return out
        img_slice = options.get("img_slice")
        tokens = slice(None) if img_slice is None else slice(int(img_slice[0]), int(img_slice[1]))
        rows = out.shape[0] // len(cond_or_uncond)
        pos, neg = _slot(cond_or_uncond, 0, rows), _slot(cond_or_uncond, 1, rows)
        guided = normalized_attention_guidance(out[pos, tokens], out[neg, tokens], self.scale, self.alpha, self.tau)
        if img_slice is not None:
            out[neg, tokens] = guided  # ComfyUI writes the joint stream's guided image tokens into both
        out[pos, tokens] = guided
        return out

    def cache_signature(self) -> tuple:
        return ("NormalizedAttentionGuidance", self.scale, self.alpha, self.tau)


@dataclass(frozen=True)
class NAGSelfAttentionPatch:
    """The same guidance under ComfyUI's Wan `attn1_patch` convention: `{"x": self-attention
    output [B, L, C] before the output projection, "q", "k", "transformer_options"} -> x`."""

    guidance: NormalizedAttentionGuidance

    def __call__(self, kwargs: dict[str, Any]) -> torch.Tensor:
        return self.guidance.guide(kwargs["x"], kwargs.get("transformer_options") or {})

    def cache_signature(self) -> tuple:
        return ("NAGSelfAttentionPatch",) + self.guidance.cache_signature()


def architecture_name(patcher: Any) -> str | None:
    """The name of the architecture of the patcher's diffusion network (None when unknown)."""
    family = getattr(getattr(patcher, "model", None), "family", None)
    return getattr(getattr(family, "architecture", None), "name", None)


def nag_hook(patcher: Any) -> str | None:
    """The patch slot NAG goes under for this MODEL (its architecture's `self_attention_hook`),
    or None when its network offers none."""
    family = getattr(getattr(patcher, "model", None), "family", None)
    hook = getattr(getattr(family, "architecture", None), "self_attention_hook", None)
    return hook if hook in SELF_ATTENTION_HOOKS else None


def apply_nag(patcher: Any, scale: float, alpha: float, tau: float) -> tuple[Any, bool]:
    """A clone of `patcher` with NAG installed (and the CFG-1 shortcut off, as ComfyUI), and
    whether its network runs it. On a network with no self-attention hook the clone carries
    ComfyUI's `attn1_output_patch` all the same (a network that calls it, as a pack's may, runs
    it; ours never do) and the caller says that NAG has no effect."""
    guidance = NormalizedAttentionGuidance(float(scale), float(alpha), float(tau))
    hook = nag_hook(patcher)
    patched = patcher.clone()
    if hook == "attn1_patch":
        patched.add_block_patch(hook, NAGSelfAttentionPatch(guidance))
    else:
        patched.add_block_patch("attn1_output_patch", guidance)
    patched.set_option("disable_cfg1_optimization", True)
    return patched, hook is not None
