"""NVFP4 weights: ComfyUI's `nvfp4` format (4-bit E2M1 values, an fp8 scale per 16 inputs and one
float32 scale for the tensor).

After comfy-kitchen's `TensorCoreNVFP4Layout` (comfy_kitchen/tensor/nvfp4.py, eager
`quantize_nvfp4` / `dequantize_nvfp4`), as ComfyUI's comfy/ops.py loads it:

- `weight`: uint8 `[rows, cols / 2]`, the weight padded to multiples of 16 on both sides, two
  E2M1 codes a byte, the even-indexed value in the high nibble (`hi_first`);
- `weight_scale`: float8_e4m3fn block scales, one per 16 values of a row, in the tiled layout of
  comfy_core/weights/quant_blocks.py;
- `weight_scale_2`: the float32 tensor scale. The value of a code is `e2m1(code) * weight_scale_2
  * block_scale`. E2M1: sign bit, 2 exponent bits, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6.

Quantising (comfy-kitchen's recipe): tensor scale `amax / (448 * 6)`; block scale `block amax / 6 /
tensor scale`, clamped to 448 and rounded to fp8; values divided by both, clamped to +-6 and
rounded to the nearest E2M1 value, ties to the even code (round-to-nearest-even).
"""
from __future__ import annotations

import torch

from comfy_core.weights.quant_blocks import ceil_div, swizzle, unswizzle

NV_BLOCK = 16
E2M1_MAX = 6.0
E4M3_MAX = 448.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 0..7; codes 8..15 are their negatives


def padded_nv_shape(out_features: int, in_features: int) -> tuple[int, int]:
    """The padded weight shape (multiples of 16); the stored uint8 tensor is `[rows, cols / 2]`."""
    return NV_BLOCK * ceil_div(out_features, NV_BLOCK), NV_BLOCK * ceil_div(in_features, NV_BLOCK)


def _lut(device: torch.device) -> torch.Tensor:
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=device)
    return torch.cat([values, -values])  # [16]


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """uint8 `[rows, n]` -> E2M1 codes `[rows, 2n]` (high nibble first)."""
    packed = packed.view(torch.uint8) if packed.dtype != torch.uint8 else packed
    return torch.stack([packed >> 4, packed & 0x0F], dim=-1).reshape(packed.shape[0], -1)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 codes `[rows, 2n]` -> uint8 `[rows, n]` (even-indexed code in the high nibble)."""
    codes = codes.to(torch.uint8)
    return (codes[:, 0::2] << 4) | codes[:, 1::2]


def dequantize_nvfp4(packed: torch.Tensor, block_scales: torch.Tensor, tensor_scale: torch.Tensor,
                     shape: tuple[int, int]) -> torch.Tensor:
    """The float32 weight `shape` (`[out, in]`) of a packed NVFP4 weight and its scales."""
    rows, cols = packed.shape[0], packed.shape[1] * 2
    if (rows, cols) != padded_nv_shape(*shape):
        raise ValueError(f"NVFP4 weight of shape {list(packed.shape)} (x2 packed) is not the padded storage "
                         f"of {list(shape)}")
    if tensor_scale.numel() != 1:
        raise ValueError(f"NVFP4 weight_scale_2 must be one value, got shape {list(tensor_scale.shape)}")
    values = _lut(packed.device)[unpack_codes(packed).long()]  # [rows, cols]
    blocks = unswizzle(block_scales, rows, cols // NV_BLOCK)
    blocks = (blocks.view(torch.float8_e4m3fn) if blocks.dtype == torch.uint8 else blocks).to(torch.float32)
    scale = blocks * tensor_scale.detach().to(device=packed.device, dtype=torch.float32).reshape(())
    w = values.reshape(rows, cols // NV_BLOCK, NV_BLOCK) * scale.unsqueeze(-1)
    return w.reshape(rows, cols)[:shape[0], :shape[1]]


def round_e2m1(x: torch.Tensor) -> torch.Tensor:
    """float32 values within +-6 -> the nearest E2M1 codes (ties to the even code), sign in bit 3."""
    values = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=x.device)
    mids = (values[1:] + values[:-1]) / 2  # [7]
    mag = x.abs()
    code = torch.bucketize(mag, mids)  # a value on a midpoint gets the lower code ...
    on_mid = (code < 7) & (mag == mids[code.clamp(max=6)])
    code = torch.where(on_mid & (code % 2 == 1), code + 1, code)  # ... or the upper one when that is even
    return code + 8 * (x < 0).to(code.dtype)


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`(packed uint8, block scales float8_e4m3fn [tiled], tensor scale float32 [])`."""
    w = w.detach().to(torch.float32)
    tensor_scale = (w.abs().amax() / (E4M3_MAX * E2M1_MAX)).clamp(min=1e-30)  # an all-zero weight: no 0/0
    rows, cols = padded_nv_shape(*w.shape)
    padded = w.new_zeros((rows, cols))
    padded[:w.shape[0], :w.shape[1]] = w
    blocks = padded.reshape(rows, cols // NV_BLOCK, NV_BLOCK)
    block_scale = (blocks.abs().amax(dim=-1) / E2M1_MAX / tensor_scale).clamp(max=E4M3_MAX)
    block_fp8 = block_scale.to(torch.float8_e4m3fn)
    total = tensor_scale * block_fp8.to(torch.float32)
    zero = total == 0
    data = blocks / torch.where(zero, torch.ones_like(total), total).unsqueeze(-1)
    data = torch.where(zero.unsqueeze(-1), torch.zeros_like(data), data).clamp(-E2M1_MAX, E2M1_MAX)
    codes = round_e2m1(data.reshape(rows, cols))
    return pack_codes(codes), swizzle(block_fp8.view(torch.uint8)).view(torch.float8_e4m3fn), tensor_scale.reshape(())
