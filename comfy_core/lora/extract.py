"""LoRA extraction: a weight difference (e.g. a fine-tune minus its base) as low-rank factors.

After ComfyUI's comfy_extras/nodes_lora_extract.py (0.3.64), written here. For each `.weight`
of the difference model:

- "standard": a weight of 2+ dimensions becomes `lora_up` [out, r] and `lora_down` [r, in] (for
  a convolution `[out, r, 1, 1]` and `[r, in, kh, kw]`), the truncated SVD `diff ≈ U_r S_r V_rᵀ`
  (Eckart-Young: the best rank-r approximation in the Frobenius norm) with `up = U_r S_r`,
  `down = V_rᵀ`, both clamped to `[-q, q]`, `q` the 0.99 quantile of the two factors' values
  together (ComfyUI's outlier clamp); r = min(rank, out, in). 1-D weights (norms) are written as full `.diff` when `bias_diff`;
- "full_diff": every weight difference as a full `.diff`;
- with `bias_diff`, each `.bias` difference as `.diff_b`.

No alpha is written, so loaders scale by 1 (`delta = up @ down`). Tensors are stored as fp16, as
ComfyUI stores them. Keys: `<lora prefix><module path>.lora_up.weight` etc., the generic names
ComfyUI's LoRA loader (and ours, `comfy_core.lora.keymap`) map back to the weights.
"""
from __future__ import annotations

import logging
from typing import Mapping

import torch

log = logging.getLogger(__name__)

CLAMP_QUANTILE = 0.99
LORA_TYPES = ("standard", "full_diff")
STORE_DTYPE = torch.float16


def low_rank_factors(diff: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`(up, down)` with `up @ down ≈ diff` (flattened) at rank `min(rank, out, in)`, clamped.

    `diff`: `[out, in]` or a convolution `[out, in, kh, kw]`; float32 maths whatever its dtype.
    """
    conv = diff.ndim == 4
    out_dim, in_dim = diff.shape[0], diff.shape[1]
    rank = min(rank, in_dim, out_dim)
    matrix = diff.float().reshape(out_dim, -1)  # [out, in·kh·kw]
    u, s, vh = torch.linalg.svd(matrix)  # full_matrices, as ComfyUI
    up = u[:, :rank] @ torch.diag(s[:rank])  # [out, r]
    down = vh[:rank, :]  # [r, in·kh·kw]
    high = torch.quantile(torch.cat([up.flatten(), down.flatten()]), CLAMP_QUANTILE)
    up, down = up.clamp(-high, high), down.clamp(-high, high)
    if conv:
        up = up.reshape(out_dim, rank, 1, 1)
        down = down.reshape(rank, in_dim, diff.shape[2], diff.shape[3])
    return up, down


def extract_lora(state: Mapping[str, torch.Tensor], rank: int, lora_type: str = "standard",
                 bias_diff: bool = False, *, prefix_model: str = "", prefix_lora: str = "") -> dict[str, torch.Tensor]:
    """The LoRA tensors of a difference state dict (names under `prefix_model`), keyed under
    `prefix_lora`, stored as fp16 on the CPU. A weight whose factors cannot be computed (an SVD
    that fails, a tensor too large for `torch.quantile`) is logged and left out, as in ComfyUI."""
    if lora_type not in LORA_TYPES:
        raise ValueError(f"lora_type must be one of {LORA_TYPES}, got {lora_type!r}")
    out: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if not key.startswith(prefix_model):
            continue
        name = prefix_lora + key[len(prefix_model):]
        if key.endswith(".weight"):
            module = name[: -len(".weight")]
            if lora_type == "full_diff":
                out[f"{module}.diff"] = _stored(tensor)
            elif tensor.ndim < 2:
                if bias_diff:
                    out[f"{module}.diff"] = _stored(tensor)
            else:
                try:
                    up, down = low_rank_factors(tensor, rank)
                except RuntimeError as exc:
                    log.warning("could not extract LoRA factors for %s (%s); it is left out", key, exc)
                    continue
                out[f"{module}.lora_up.weight"] = _stored(up)
                out[f"{module}.lora_down.weight"] = _stored(down)
        elif bias_diff and key.endswith(".bias"):
            out[f"{name[: -len('.bias')]}.diff_b"] = _stored(tensor)
    return out


def _stored(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to(device="cpu", dtype=STORE_DTYPE).contiguous()
