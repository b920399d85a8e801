"""Patched weights stored back in fp8: seeded stochastic rounding, as ComfyUI 0.3.64 stores them.

ComfyUI's patcher (comfy/model_patcher.py `patch_weight_to_device`) computes a patched weight in
float32 and stores it in the weight's dtype through `comfy.float.stochastic_rounding(out, dtype,
seed=string_to_seed(key))`: a plain cast for float32/16 and bfloat16; for fp8 (e4m3fn, e5m2) each
value goes to one of its two neighbouring fp8 values, up with probability equal to its distance
from the lower one in units of their gap (stochastic rounding, Gupta et al. 2015, "Deep Learning
with Limited Numerical Precision", arXiv:1502.02551), so small LoRA deltas survive on average
instead of all rounding away. The draws come from a generator seeded with the CRC-32 of the
parameter name, so a patched model is reproducible, weight by weight.

The arithmetic is ComfyUI's, step for step (its comfy/float.py; written here), so our CPU results
equal its bit for bit: the value is first cast to float16; the binade is
`clamp(floor(log2|x|) + bias, 0, 2^e - 1)` (0: subnormal); the mantissa is scaled to units of the
fp8 gap, a uniform float16 draw is added and the sum floored; all in float16, in row blocks of
about 4096 x 4096 values with one generator running through them.
"""
from __future__ import annotations

import zlib

import torch

# (exponent bits, mantissa bits, exponent bias) of the fp8 formats.
_FP8_FORMATS = {torch.float8_e4m3fn: (4, 3, 7), torch.float8_e5m2: (5, 2, 15)}
_BLOCK = 4096 * 4096  # values per row block (ComfyUI's slicing, which decides the draw order)


def string_to_seed(text: str) -> int:
    """ComfyUI's `string_to_seed`: the CRC-32 (reflected, polynomial 0xEDB88320) of the
    characters' code points; for text of code points below 256 that is `zlib.crc32` of its bytes."""
    try:
        return zlib.crc32(text.encode("latin-1"))
    except UnicodeEncodeError:
        pass
    crc = 0xFFFFFFFF
    for char in text:
        crc ^= ord(char)
        for _ in range(8):
            crc = (crc >> 1) ^ 0xEDB88320 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def _round_block(value: torch.Tensor, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """One row block of `value` stochastically rounded onto `dtype`'s grid, as float16 values."""
    exponent_bits, mantissa_bits, bias = _FP8_FORMATS[dtype]
    half = value.half()
    magnitude = half.abs()
    sign = torch.where(magnitude == 0, 0, torch.sign(half))
    exponent = torch.clamp(torch.floor(torch.log2(magnitude)) + bias, 0, 2 ** exponent_bits - 1)
    normal = exponent != 0
    # The magnitude in units of the fp8 gap of its binade: the fraction bits of a normal value
    # ((m / 2^(e - bias) - 1) * 2^mantissa), the subnormal value over the smallest gap.
    units = torch.where(normal, (magnitude / 2.0 ** (exponent - bias) - 1.0) * 2 ** mantissa_bits,
                        magnitude / 2.0 ** (1 - bias - mantissa_bits))
    units += torch.rand(units.size(), dtype=units.dtype, layout=units.layout, device=units.device,
                        generator=generator)
    fraction = units.floor() / 2 ** mantissa_bits
    sign *= torch.where(normal, 2.0 ** (exponent - bias) * (1.0 + fraction), 2.0 ** (1 - bias) * fraction)
    limits = torch.finfo(dtype)
    return torch.clamp(sign, min=limits.min, max=limits.max)


def stochastic_rounding(value: torch.Tensor, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """`value` in `dtype`: seeded stochastic rounding for the fp8 dtypes, a plain cast otherwise
    (ComfyUI's `comfy.float.stochastic_rounding`)."""
    if dtype not in _FP8_FORMATS:
        return value.to(dtype=dtype)
    generator = torch.Generator(device=value.device)
    generator.manual_seed(seed)
    out = torch.empty_like(value, dtype=dtype)
    if value.dim() == 0:
        out.copy_(_round_block(value, dtype, generator))
        return out
    blocks = max(1, value.numel() / _BLOCK)
    rows = max(1, round(value.shape[0] / blocks))
    for start in range(0, value.shape[0], rows):
        out[start:start + rows].copy_(_round_block(value[start:start + rows], dtype, generator))
    return out


def store_patched(value: torch.Tensor, dtype: torch.dtype, key: str) -> torch.Tensor:
    """A patched weight computed in float32 (`value`), stored in the weight's `dtype` the way
    ComfyUI's patcher stores it (fp8: stochastic rounding seeded by the parameter name `key`)."""
    if value.dtype == dtype:
        return value
    return stochastic_rounding(value, dtype, seed=string_to_seed(key))
