"""ComfyUI's `comfy.float` for node packs (ComfyUI-GGUF imports it): stochastic rounding of
weights to fp8, behaviour of ComfyUI's comfy/float.py, written here.

Stochastic rounding (Gupta et al. 2015, "Deep Learning with Limited Numerical Precision"):
each value goes to one of its two neighbouring representable values, up with probability equal
to its distance from the lower one in units of the gap, so the rounding is unbiased on average.
"""
from __future__ import annotations

import torch

# (mantissa bits, exponent bias) of the fp8 formats.
_FP8 = {torch.float8_e4m3fn: (3, 7), torch.float8_e5m2: (2, 15)}


def manual_stochastic_round_to_float8(x: torch.Tensor, dtype: torch.dtype,
                                      generator: torch.Generator | None = None) -> torch.Tensor:
    """`x` stochastically rounded onto `dtype`'s grid (values still in `x`'s dtype, clamped to
    `dtype`'s range, so `.to(dtype)` is then exact)."""
    if dtype not in _FP8:
        raise ValueError(f"manual_stochastic_round_to_float8: {dtype} is not an fp8 dtype")
    mantissa_bits, bias = _FP8[dtype]
    work = x.float()
    magnitude = work.abs()
    # The binade of each value, with subnormals sharing the smallest normal exponent's spacing.
    exponent = torch.floor(torch.log2(magnitude.clamp(min=torch.finfo(torch.float32).tiny)))
    exponent = exponent.clamp(min=1 - bias)
    gap = torch.pow(2.0, exponent - mantissa_bits)  # distance between neighbours in this binade
    steps = magnitude / gap
    lower = torch.floor(steps)
    draw = torch.rand(work.shape, generator=generator, device=work.device, dtype=torch.float32)
    rounded = (lower + (draw < (steps - lower)).float()) * gap
    info = torch.finfo(dtype)
    out = (torch.sign(work) * rounded).clamp(min=info.min, max=info.max)
    return out.to(x.dtype)


def stochastic_rounding(value: torch.Tensor, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """`value` in `dtype`: stochastic rounding (seeded, reproducible) for fp8, a plain cast for
    the other dtypes, as ComfyUI's `comfy.float.stochastic_rounding`."""
    if dtype not in _FP8:
        return value.to(dtype=dtype)
    generator = torch.Generator(device=value.device)
    generator.manual_seed(seed)
    return manual_stochastic_round_to_float8(value, dtype, generator=generator).to(dtype)
