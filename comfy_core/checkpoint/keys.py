"""Key and layout conversions between checkpoint tensors and our modules' parameters.

Single-file checkpoints are loaded under their original names (our modules use the LDM/SGM
names), so what remains are layout variants of the same weights. A `KeyConversion` declares one:
which keys it applies to and how a stored shape maps onto the parameter's shape. The loader
applies a conversion only when the stored and expected shapes differ and the conversion accepts
both, so a mismatch no conversion explains is still an error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping

import torch


@dataclass(frozen=True)
class KeyConversion:
    """Reshape tensors whose key matches `pattern` from rank `from_rank` to rank `to_rank`,
    provided the element count is unchanged (e.g. `[C, C]` linear -> `[C, C, 1, 1]` conv)."""

    name: str
    pattern: str
    from_rank: int
    to_rank: int

    def accepts(self, key: str, stored: tuple[int, ...], expected: tuple[int, ...]) -> bool:
        if len(stored) != self.from_rank or len(expected) != self.to_rank:
            return False
        if torch.Size(stored).numel() != torch.Size(expected).numel():
            return False
        return re.search(self.pattern, key) is not None

    def convert(self, tensor: torch.Tensor, expected: tuple[int, ...]) -> torch.Tensor:
        return tensor.reshape(expected)


def vae_attention_linear_to_conv() -> KeyConversion:
    """VAE mid-block attention stored as linear weights (files converted from diffusers, some SDXL
    VAEs) onto the LDM 1x1 convolutions."""
    return KeyConversion(
        name="vae attention linear -> 1x1 conv",
        pattern=r"(^|\.)(encoder|decoder)\.mid\.attn_1\.(q|k|v|proj_out)\.weight$",
        from_rank=2, to_rank=4,
    )


def find_conversion(conversions: Iterable[KeyConversion], key: str, stored: tuple[int, ...],
                    expected: tuple[int, ...]) -> KeyConversion | None:
    for conversion in conversions:
        if conversion.accepts(key, stored, expected):
            return conversion
    return None


def swap_scale_shift(weight: torch.Tensor) -> torch.Tensor:
    """The two halves of the first axis swapped: diffusers' `[scale, shift]` <-> BFL's / SAI's
    `[shift, scale]` (the final adaLN of Flux and MMDiT); the swap is its own inverse."""
    first, second = weight.chunk(2, dim=0)
    return torch.cat([second, first], dim=0)


def strip_prefix(names: Iterable[str], prefix: str) -> dict[str, str]:
    """`{name without prefix: full name}` for the names under `prefix`."""
    return {n[len(prefix):]: n for n in names if n.startswith(prefix)}


def prefixed_subset(tensors: Mapping[str, object], prefix: str) -> dict[str, object]:
    return {k: v for k, v in tensors.items() if k.startswith(prefix)}
