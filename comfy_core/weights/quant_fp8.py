"""fp8 weights with scales: ComfyUI's `float8_e4m3fn` / `float8_e5m2` (one scale per tensor) and
`mxfp8` (one power-of-two scale per block of 32 inputs) formats.

After comfy-kitchen's `TensorCoreFP8Layout` and `TensorCoreMXFP8Layout` (comfy_kitchen/tensor/,
eager backend `quantize_per_tensor_fp8` / `quantize_mxfp8`), as ComfyUI's comfy/ops.py loads them:

- per-tensor fp8: `weight` in the fp8 dtype `[out, in]`, `weight_scale` float32 (one value); the
  true weight is `weight * weight_scale`. ComfyUI quantises with `scale = amax / fp8 max` and
  `clamp(w / scale, +-max)` rounded to nearest. An `input_scale` serves fp8 matrix products only.
- MXFP8 (OCP Microscaling, block 32): `weight` float8_e4m3fn at the shape padded to multiples of
  32, `weight_scale` E8M0 exponents (`2 ** (e - 127)`, stored as float8_e8m0fnu or uint8) in the
  tiled layout of comfy_core/weights/quant_blocks.py, one per 32 inputs of a row. The scale of a
  block is the smallest power of two with `amax / scale <= 448` (`ceil(log2(amax / 448))`).
"""
from __future__ import annotations

import torch

from comfy_core.weights.quant_blocks import ceil_div, swizzle, unswizzle

FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
MX_BLOCK = 32
E8M0_BIAS = 127


def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 weight of a per-tensor fp8 weight and its one scale."""
    if scale.numel() != 1:
        raise ValueError(f"per-tensor fp8 weight_scale must be one value, got shape {list(scale.shape)}")
    return q.to(torch.float32) * scale.detach().to(device=q.device, dtype=torch.float32).reshape(())


def quantize_fp8(w: torch.Tensor, dtype: torch.dtype = torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """`(q, scale)`: ComfyUI's per-tensor quantisation with a recalculated scale."""
    w = w.detach().to(torch.float32)
    top = FP8_MAX[dtype]
    scale = (w.abs().amax() / top).clamp(min=1e-30)
    q = (w * (1.0 / scale)).clamp(-top, top).to(dtype)
    return q, scale.reshape(())


def padded_mx_shape(out_features: int, in_features: int) -> tuple[int, int]:
    """The stored shape of an MXFP8 weight (both sides padded to multiples of 32)."""
    return MX_BLOCK * ceil_div(out_features, MX_BLOCK), MX_BLOCK * ceil_div(in_features, MX_BLOCK)


def e8m0_values(codes: torch.Tensor) -> torch.Tensor:
    """E8M0 exponent codes (float8_e8m0fnu or uint8) -> float32 powers of two, `2 ** (e - 127)`."""
    raw = codes.view(torch.uint8) if codes.dtype != torch.uint8 else codes
    return torch.ldexp(torch.ones(raw.shape, dtype=torch.float32, device=raw.device),
                       raw.to(torch.int32) - E8M0_BIAS)


def dequantize_mxfp8(q: torch.Tensor, block_scales: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """The float32 weight `shape` (`[out, in]`) of a (padded) MXFP8 weight and its tiled E8M0 scales."""
    rows, cols = q.shape
    if (rows, cols) != padded_mx_shape(*shape):
        raise ValueError(f"MXFP8 weight of shape {[rows, cols]} is not the padded storage of {list(shape)}")
    scales = e8m0_values(unswizzle(block_scales, rows, cols // MX_BLOCK))  # [rows, cols / 32]
    w = q.to(torch.float32).reshape(rows, cols // MX_BLOCK, MX_BLOCK) * scales.unsqueeze(-1)
    return w.reshape(rows, cols)[:shape[0], :shape[1]]


def quantize_mxfp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`(q float8_e4m3fn [padded], scales float8_e8m0fnu [tiled])` as comfy-kitchen's `quantize_mxfp8`
    (zero blocks: scale code 0 and zero data)."""
    w = w.detach().to(torch.float32)
    rows, cols = padded_mx_shape(*w.shape)
    padded = w.new_zeros((rows, cols))
    padded[:w.shape[0], :w.shape[1]] = w
    blocks = padded.reshape(rows, cols // MX_BLOCK, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1)  # [rows, cols / 32]
    needed = (amax / FP8_MAX[torch.float8_e4m3fn]).clamp(min=2.0 ** -127)
    codes = (torch.ceil(torch.log2(needed)).to(torch.int32) + E8M0_BIAS).clamp(0, 254)
    zero = amax == 0
    scale = torch.where(zero, torch.ones_like(needed), torch.ldexp(torch.ones_like(needed), codes - E8M0_BIAS))
    data = (blocks / scale.unsqueeze(-1)).clamp(-448.0, 448.0)
    data = torch.where(zero.unsqueeze(-1), torch.zeros_like(data), data)
    codes = torch.where(zero, torch.zeros_like(codes), codes).to(torch.uint8)
    return data.reshape(rows, cols).to(torch.float8_e4m3fn), swizzle(codes).view(torch.float8_e8m0fnu)
