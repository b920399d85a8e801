"""Diffusers' `AutoencoderKLWan` tensor names -> the original Wan VAE names our module uses.

Diffusers (`diffusers/models/autoencoders/autoencoder_kl_wan.py`) names the same tensors by its
own modules: `conv_in`/`conv_out`/`norm_out` for the original `conv1`/`head.2`/`head.0`,
`mid_block.resnets.{0,1}` and `mid_block.attentions.0` for `middle.{0,2}` and `middle.1`,
`norm1`/`conv1`/`norm2`/`conv2`/`conv_shortcut` inside a residual block for `residual.0`/
`residual.2`/`residual.3`/`residual.6`/`shortcut`, `quant_conv`/`post_quant_conv` for the
top-level `conv1`/`conv2`, and groups the levels: Wan 2.1's flat `decoder.upsamples.N` become
`decoder.up_blocks.L.resnets.J` / `up_blocks.L.upsamplers.0`, Wan 2.2's `encoder.downsamples.L.
downsamples.N` / `decoder.upsamples.L.upsamples.N` become `down_blocks.L.resnets.J` +
`down_blocks.L.downsampler` / `up_blocks.L.resnets.J` + `up_blocks.L.upsampler`. (Wan 2.1's
encoder levels stay flat in both: `encoder.down_blocks.N` is `encoder.downsamples.N`.)
ComfyUI's VAE loader does not read this layout; it is converted here from names alone.
"""
from __future__ import annotations

import re
from typing import Iterable

# A diffusers Wan VAE: RMS-norm `gamma` in the mid block (diffusers' image AutoencoderKL has `weight`).
DIFFUSERS_WAN_MARKER = "decoder.mid_block.resnets.0.norm1.gamma"


class WanKeyError(ValueError):
    """A diffusers-layout Wan VAE with tensors whose place in the original layout is unknown."""


_RESNET = {"norm1.gamma": "residual.0.gamma", "norm2.gamma": "residual.3.gamma"}
_RESNET_PREFIX = {"conv1.": "residual.2.", "conv2.": "residual.6.", "conv_shortcut.": "shortcut."}
_TOP = {"quant_conv.": "conv1.", "post_quant_conv.": "conv2."}
_ENDS = {"conv_in.": "conv1.", "conv_out.": "head.2.", "norm_out.gamma": "head.0.gamma"}
_MID = re.compile(r"mid_block\.(resnets|attentions)\.(\d+)\.(.+)$")
_DOWN_FLAT = re.compile(r"down_blocks\.(\d+)\.(.+)$")
_DOWN_RES = re.compile(r"down_blocks\.(\d+)\.(resnets\.(\d+)|downsampler)\.(.+)$")
_UP = re.compile(r"up_blocks\.(\d+)\.(resnets\.(\d+)|upsamplers\.0|upsampler)\.(.+)$")


def is_diffusers_wan_vae(names: Iterable[str], prefix: str = "") -> bool:
    return f"{prefix}{DIFFUSERS_WAN_MARKER}" in set(names)


def _inside_resnet(rest: str) -> str:
    """A residual block's own tensor name (diffusers) -> the original's."""
    if rest in _RESNET:
        return _RESNET[rest]
    for ours, theirs in _RESNET_PREFIX.items():
        if rest.startswith(ours):
            return theirs + rest[len(ours):]
    # A resample's `resample.1.*` / `time_conv.*` keep their names.
    return rest


def wan_vae_names(names: Iterable[str], prefix: str = "") -> dict[str, str]:
    """{original name (bare): stored diffusers name} for every tensor under `prefix`.

    Raises `WanKeyError` naming a tensor that has no place in the original layout."""
    stored = [n[len(prefix):] for n in names if n.startswith(prefix)]
    residual = any(_DOWN_RES.match(n[len("encoder."):]) and ".resnets." in n
                   for n in stored if n.startswith("encoder.down_blocks."))
    # How many resnets each grouped level has: where its resample goes, and the flat 2.1 numbering.
    resnets: dict[tuple[str, int], set[int]] = {}
    upsamplers: set[int] = set()
    for name in stored:
        part, _, rest = name.partition(".")
        m = _UP.match(rest) if part == "decoder" else _DOWN_RES.match(rest) if residual else None
        if m and m.group(3) is not None:
            resnets.setdefault((part, int(m.group(1))), set()).add(int(m.group(3)))
        elif m and part == "decoder":
            upsamplers.add(int(m.group(1)))
    flat_start: dict[int, int] = {}
    start = 0
    for level in sorted(level for part, level in resnets if part == "decoder"):
        flat_start[level] = start
        start += len(resnets[("decoder", level)]) + (1 if level in upsamplers else 0)

    mapping: dict[str, str] = {}
    for name in stored:
        ours = _original_name(name, residual, resnets, flat_start)
        if ours is None:
            raise WanKeyError(f"diffusers Wan VAE tensor {prefix + name!r} has no place in the original layout")
        if ours in mapping:
            raise WanKeyError(f"diffusers Wan VAE tensors {prefix + mapping[ours]!r} and {prefix + name!r} both map "
                              f"to {ours!r}")
        mapping[ours] = prefix + name
    return mapping


def _original_name(name: str, residual: bool, resnets: dict[tuple[str, int], set[int]],
                   flat_start: dict[int, int]) -> str | None:
    for theirs, ours in _TOP.items():
        if name.startswith(theirs):
            return ours + name[len(theirs):]
    part, _, rest = name.partition(".")
    if part not in ("encoder", "decoder"):
        return None
    for theirs, ours in _ENDS.items():
        if rest.startswith(theirs):
            return f"{part}.{ours}{rest[len(theirs):]}"
    m = _MID.match(rest)
    if m:
        kind, index, inner = m.group(1), int(m.group(2)), m.group(3)
        slot = 1 if kind == "attentions" else 2 * index
        return f"{part}.middle.{slot}.{inner if kind == 'attentions' else _inside_resnet(inner)}"
    if part == "encoder":
        if residual:
            m = _DOWN_RES.match(rest)
            if not m:
                return None
            level, inner = int(m.group(1)), m.group(4)
            index = int(m.group(3)) if m.group(3) is not None else len(resnets.get((part, level), ()))
            return f"encoder.downsamples.{level}.downsamples.{index}.{_inside_resnet(inner)}"
        m = _DOWN_FLAT.match(rest)
        return f"encoder.downsamples.{m.group(1)}.{_inside_resnet(m.group(2))}" if m else None
    m = _UP.match(rest)
    if not m:
        return None
    level, inner = int(m.group(1)), m.group(4)
    count = len(resnets.get((part, level), ()))
    index = int(m.group(3)) if m.group(3) is not None else count
    if residual:
        return f"decoder.upsamples.{level}.upsamples.{index}.{_inside_resnet(inner)}"
    return f"decoder.upsamples.{flat_start.get(level, 0) + index}.{_inside_resnet(inner)}"
