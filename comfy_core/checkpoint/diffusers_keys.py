"""diffusers' UNet and VAE tensor names -> the LDM names our modules use.

The idea of ComfyUI's `comfy/utils.py: unet_to_diffusers` and `comfy/diffusers_convert.py`
(one table of renamed parts, block numbers computed from the architecture), written here from
the two layouts: diffusers' `UNet2DConditionModel` (`down_blocks.i.resnets.j`,
`down_blocks.i.attentions.j`, `down_blocks.i.downsamplers.0`, `mid_block`, `up_blocks.i...`) and
`AutoencoderKL` (`encoder.down_blocks.i.resnets.j`, `mid_block.attentions.0.to_q`, ...) against
openaimodel.py's `input_blocks.N.k` / `middle_block.k` / `output_blocks.N.k` and the LDM
autoencoder's `encoder.down.i.block.j` / `mid.attn_1.q`. The architecture (levels, res blocks
per level, where attention and resampling sit) is read from the names themselves, so no config
file is needed. Transformer internals (`transformer_blocks.k.attn1.to_q`, `proj_in`, `norm`,
...) have the same names in both layouts. Shapes are unchanged except the VAE attention
projections, linear in diffusers and 1x1 convolutions in LDM, which the loader's
`vae_attention_linear_to_conv` conversion reshapes. Pure: names in, names out.
"""
from __future__ import annotations

import re
from typing import Iterable

# UNet res block parts: diffusers -> LDM (openaimodel.ResBlock).
UNET_RESNET_PARTS: tuple[tuple[str, str], ...] = (
    ("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("time_emb_proj", "emb_layers.1"),
    ("norm2", "out_layers.0"), ("conv2", "out_layers.3"), ("conv_shortcut", "skip_connection"),
)
# UNet modules outside the blocks.
UNET_TOP: tuple[tuple[str, str], ...] = (
    ("time_embedding.linear_1", "time_embed.0"), ("time_embedding.linear_2", "time_embed.2"),
    ("add_embedding.linear_1", "label_emb.0.0"), ("add_embedding.linear_2", "label_emb.0.2"),
    ("conv_in", "input_blocks.0.0"), ("conv_norm_out", "out.0"), ("conv_out", "out.2"),
)
# VAE res block parts (same names but the shortcut) and mid-block attention parts (new and old
# diffusers names).
VAE_RESNET_PARTS: tuple[tuple[str, str], ...] = (
    ("norm1", "norm1"), ("conv1", "conv1"), ("norm2", "norm2"), ("conv2", "conv2"), ("conv_shortcut", "nin_shortcut"),
)
VAE_ATTENTION_PARTS: tuple[tuple[str, str], ...] = (
    ("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out"),
    ("query", "q"), ("key", "k"), ("value", "v"), ("proj_attn", "proj_out"),
)
VAE_TOP: tuple[tuple[str, str], ...] = (
    ("encoder.conv_in", "encoder.conv_in"), ("encoder.conv_out", "encoder.conv_out"),
    ("encoder.conv_norm_out", "encoder.norm_out"), ("decoder.conv_in", "decoder.conv_in"),
    ("decoder.conv_out", "decoder.conv_out"), ("decoder.conv_norm_out", "decoder.norm_out"),
    ("quant_conv", "quant_conv"), ("post_quant_conv", "post_quant_conv"),
)

UNET_MARKER = "down_blocks.0.resnets.0.conv1.weight"
VAE_MARKER = "decoder.up_blocks.0.resnets.0.norm1.weight"


class DiffusersLayoutError(ValueError):
    """Names that look like diffusers' but do not form a UNet / VAE of the known layout."""


def is_diffusers_unet(names: Iterable[str]) -> bool:
    names = set(names)
    return UNET_MARKER in names and "conv_in.weight" in names


def is_diffusers_vae(names: Iterable[str]) -> bool:
    return VAE_MARKER in set(names)


def _indices(names: set[str], pattern: str) -> list[int]:
    regex = re.compile(pattern)
    return sorted({int(m.group(1)) for n in names if (m := regex.match(n))})


def _parts(stem: str, rest: str, table: tuple[tuple[str, str], ...]) -> str | None:
    """`rest` (after a block's stem) with its first part renamed by `table`, or None."""
    for ours_from, ours_to in table:
        if rest.startswith(ours_from + "."):
            return f"{stem}{ours_to}{rest[len(ours_from):]}"
    return None


def unet_names(names: Iterable[str], prefix: str = "") -> dict[str, str]:
    """`{LDM name (with prefix): diffusers name}` for every tensor of a diffusers UNet.

    Raises `DiffusersLayoutError` for a name that fits nowhere, so nothing is dropped silently.
    """
    names = set(names)
    levels = _indices(names, r"down_blocks\.(\d+)\.")
    if not levels:
        raise DiffusersLayoutError("no down_blocks.N.* tensors: not a diffusers UNet")
    per_level = len(_indices(names, r"down_blocks\.0\.resnets\.(\d+)\."))  # LDM num_res_blocks
    stride = per_level + 1  # input blocks per level (res blocks + a downsample), output blocks per level
    up_attention = {i for i in levels if any(n.startswith(f"up_blocks.{i}.attentions.") for n in names)}
    out: dict[str, str] = {}
    block = re.compile(r"(down_blocks|up_blocks)\.(\d+)\.(resnets|attentions|downsamplers|upsamplers)\.(\d+)\.(.+)")
    mid = re.compile(r"mid_block\.(resnets|attentions)\.(\d+)\.(.+)")
    for name in sorted(names):
        ours = None
        if (m := block.fullmatch(name)) is not None:
            side, level, kind, index, rest = m.group(1), int(m.group(2)), m.group(3), int(m.group(4)), m.group(5)
            if side == "down_blocks":
                number = 1 + level * stride + index
                if kind == "resnets":
                    ours = _parts(f"input_blocks.{number}.0.", rest, UNET_RESNET_PARTS)
                elif kind == "attentions":
                    ours = f"input_blocks.{number}.1.{rest}"
                elif kind == "downsamplers" and rest.startswith("conv."):
                    ours = f"input_blocks.{(level + 1) * stride}.0.op.{rest[len('conv.'):]}"
            else:
                number = level * stride + index
                if kind == "resnets":
                    ours = _parts(f"output_blocks.{number}.0.", rest, UNET_RESNET_PARTS)
                elif kind == "attentions":
                    ours = f"output_blocks.{number}.1.{rest}"
                elif kind == "upsamplers" and rest.startswith("conv."):
                    sub = 2 if level in up_attention else 1
                    ours = f"output_blocks.{level * stride + per_level}.{sub}.{rest}"
        elif (m := mid.fullmatch(name)) is not None:
            kind, index, rest = m.group(1), int(m.group(2)), m.group(3)
            if kind == "attentions":
                ours = f"middle_block.1.{rest}"
            else:
                ours = _parts(f"middle_block.{2 * index}.", rest, UNET_RESNET_PARTS)
        else:
            ours = _parts("", name, UNET_TOP)
        if ours is None:
            raise DiffusersLayoutError(f"diffusers UNet tensor {name!r} has no LDM counterpart")
        out[prefix + ours] = name
    return out


def vae_names(names: Iterable[str], prefix: str = "") -> dict[str, str]:
    """`{LDM name (with prefix): diffusers name}` for every tensor of a diffusers AutoencoderKL."""
    names = set(names)
    up_levels = _indices(names, r"decoder\.up_blocks\.(\d+)\.")
    if not up_levels:
        raise DiffusersLayoutError("no decoder.up_blocks.N.* tensors: not a diffusers VAE")
    top = len(up_levels) - 1  # diffusers numbers decoder levels from the bottom, LDM from the top
    block = re.compile(r"(encoder|decoder)\.(down_blocks|up_blocks)\.(\d+)\.(resnets|downsamplers|upsamplers)\.(\d+)\.(.+)")
    mid = re.compile(r"(encoder|decoder)\.mid_block\.(resnets|attentions)\.(\d+)\.(.+)")
    out: dict[str, str] = {}
    for name in sorted(names):
        ours = None
        if (m := block.fullmatch(name)) is not None:
            side, level, kind, index, rest = m.group(1), int(m.group(3)), m.group(4), int(m.group(5)), m.group(6)
            if side == "encoder":
                stem = f"encoder.down.{level}."
                resample = "downsample"
            else:
                stem = f"decoder.up.{top - level}."
                resample = "upsample"
            if kind == "resnets":
                ours = _parts(f"{stem}block.{index}.", rest, VAE_RESNET_PARTS)
            elif rest.startswith("conv."):
                ours = f"{stem}{resample}.{rest}"
        elif (m := mid.fullmatch(name)) is not None:
            side, kind, index, rest = m.group(1), m.group(2), int(m.group(3)), m.group(4)
            if kind == "resnets":
                ours = _parts(f"{side}.mid.block_{index + 1}.", rest, VAE_RESNET_PARTS)
            else:
                ours = _parts(f"{side}.mid.attn_1.", rest, VAE_ATTENTION_PARTS)
        else:
            ours = _parts("", name, VAE_TOP)
        if ours is None:
            raise DiffusersLayoutError(f"diffusers VAE tensor {name!r} has no LDM counterpart")
        out[prefix + ours] = name
    return out
