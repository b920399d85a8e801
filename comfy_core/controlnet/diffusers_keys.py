"""diffusers `ControlNetModel` names -> the original `cldm.py` names our modules use.

The two layouts hold the same tensors: diffusers groups the encoder as `down_blocks.L.resnets.j`
/ `.attentions.j` / `.downsamplers.0` and `mid_block`, where the original numbers them
`input_blocks.n` (n = 1 + L * (R + 1) + j, the downsampler last in its level) and
`middle_block.0/1/2`; ResBlock sub-layers are renamed (`norm1` -> `in_layers.0`, ...); the hint
encoder is `controlnet_cond_embedding.conv_in / blocks.k / conv_out` (`input_hint_block.0, 2k+2,
14`) and the zero convolutions `controlnet_down_blocks.i` / `controlnet_mid_block`
(`zero_convs.i.0` / `middle_block_out.0`). Transformers keep their inner names. The mapping is
derived from the names present (which diffusers' conversion scripts relate the same way); keys it
does not know are reported back, not guessed.
"""
from __future__ import annotations

import re
from typing import Iterable

DIFFUSERS_MARKER = "controlnet_cond_embedding.conv_in.weight"
UNION_MARKER = "control_add_embedding.linear_1.bias"

_RESNET = (("norm1.", "in_layers.0."), ("conv1.", "in_layers.2."), ("time_emb_proj.", "emb_layers.1."),
           ("norm2.", "out_layers.0."), ("conv2.", "out_layers.3."), ("conv_shortcut.", "skip_connection."))
_FIXED = (("conv_in.", "input_blocks.0.0."), ("time_embedding.linear_1.", "time_embed.0."),
          ("time_embedding.linear_2.", "time_embed.2."), ("add_embedding.linear_1.", "label_emb.0.0."),
          ("add_embedding.linear_2.", "label_emb.0.2."), ("controlnet_mid_block.", "middle_block_out.0."),
          ("controlnet_cond_embedding.conv_in.", "input_hint_block.0."),
          ("controlnet_cond_embedding.conv_out.", "input_hint_block.14."))
# Union/ProMax keys keep their names; the packed attention projection gets a module of its own.
_UNION_PREFIXES = ("task_embedding", "control_add_embedding.", "transformer_layes.", "spatial_ch_projs.")


def _resnet(rest: str) -> str:
    for old, new in _RESNET:
        if rest.startswith(old):
            return new + rest[len(old):]
    return rest


def diffusers_to_original(names: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """`({original name: diffusers name}, [diffusers names left unmapped])`."""
    names = list(names)
    per_level = 1 + max((int(m.group(1)) for n in names
                         if (m := re.match(r"down_blocks\.0\.resnets\.(\d+)\.", n))), default=-1)
    mapping: dict[str, str] = {}
    left: list[str] = []
    for name in names:
        new = _convert(name, per_level)
        if new is None:
            left.append(name)
        else:
            mapping[new] = name
    return mapping, left


def _convert(name: str, per_level: int) -> str | None:
    for old, new in _FIXED:
        if name.startswith(old):
            return new + name[len(old):]
    if name.startswith(_UNION_PREFIXES):
        return name.replace(".attn.in_proj_", ".attn.in_proj.")
    if (m := re.match(r"controlnet_cond_embedding\.blocks\.(\d+)\.(.*)", name)):
        return f"input_hint_block.{2 * int(m.group(1)) + 2}.{m.group(2)}"
    if (m := re.match(r"controlnet_down_blocks\.(\d+)\.(.*)", name)):
        return f"zero_convs.{m.group(1)}.0.{m.group(2)}"
    if (m := re.match(r"down_blocks\.(\d+)\.(resnets|attentions|downsamplers)\.(\d+)\.(.*)", name)):
        level, kind, j, rest = int(m.group(1)), m.group(2), int(m.group(3)), m.group(4)
        base = 1 + level * (per_level + 1)
        if kind == "downsamplers":
            return f"input_blocks.{base + per_level}.0.{rest.replace('conv.', 'op.', 1)}"
        if kind == "resnets":
            return f"input_blocks.{base + j}.0.{_resnet(rest)}"
        return f"input_blocks.{base + j}.1.{rest}"
    if (m := re.match(r"mid_block\.(resnets|attentions)\.(\d+)\.(.*)", name)):
        kind, j, rest = m.group(1), int(m.group(2)), m.group(3)
        if kind == "attentions":
            return f"middle_block.1.{rest}"
        return f"middle_block.{2 * j}.{_resnet(rest)}"
    return None
