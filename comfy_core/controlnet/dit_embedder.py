"""SAI's own SD3.5 ControlNet format (`sd3.5_large_controlnet_{blur,canny,depth}.safetensors`):
the network, its structure from header shapes, and its file names.

Behaviour of ComfyUI's `comfy/cldm/dit_embedder.py: ControlNetEmbedder` and `comfy/controlnet.py:
load_controlnet_sd35` (itself SAI's `sd3.5` reference code), read there and written here. Unlike
the diffusers-layout SD3 ControlNets (`mmdit_controlnet.py`), these have no text stream: a stack of
image-only DiT blocks (`transformer_blocks.N`, one adaLN-modulated self-attention and MLP each:
the MMDiT's `DismantledBlock` run on its own), fed

    tokens = x_embedder(x) + sincos(h, w) + pos_embed_input(hint latent)
    c      = t_embedder(timesteps) + y_embedder(y)        (the pooled text is NOT zeroed here)

and one linear projection per block (`controlnet_blocks.N`) whose output is the residual; the
residual of block `i` serves `ceil(depth / blocks)` consecutive main-model blocks (depth = the
width / 64, the main model's block count: 38 for SD3.5 large, 19 ControlNet blocks -> 2 each).
The image embedding `x_embedder` is not in the files: the runner lends the main model's at run
time (`ControlNetSD35.pre_run`, as ComfyUI copies it). The position embedding is the sincos grid
computed for the latent size (ComfyUI's `get_2d_sincos_pos_embed_torch`), not the main model's
table. A variant with a `[D, D]` `y_embedder.mlp.0` ("double y embedding") instead runs the main
model's `y_embedder` first (`orig_y_embedder`, lent too), adds no position embedding and feeds
every block the same input tokens (ComfyUI's `double_y_emb` path).

File names: the blocks, `controlnet_blocks.N`, `pos_embed_input.proj` in SAI's names; the
embedders in diffusers' (`time_text_embed.timestep_embedder.linear_{1,2}`,
`time_text_embed.text_embedder.linear_{1,2}`) or SAI's (`t_embedder.mlp.{0,2}`,
`y_embedder.mlp.{0,2}`); a scalar `control_type` tensor (0 blur, 1 canny, 2 depth). diffusers'
conversion of the same files (`scripts/convert_sd3_controlnet_to_diffusers.py`: `SD3ControlNetModel`
with single transformer blocks, `attn.to_q/k/v`, `norm1.linear`, `ff.net.*`) is read too
(`diffusers_single_block_names`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.sd3.mmdit import HEAD_DIM, MMDiTConfigError
from comfy_core.families.sd3.mmdit_blocks import (DismantledBlock, PatchEmbed, TimestepEmbedder, VectorEmbedder,
                                                  ceil_div, get_2d_sincos_pos_embed_torch)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import shape_reader

SD35_MARKER = "transformer_blocks.0.adaLN_modulation.1.bias"  # ComfyUI's test for SAI's format
CONTROL_TYPE_KEY = "control_type"
CONTROL_TYPES = {0: "blur", 1: "canny", 2: "depth"}  # SAI's control_type values
DEFAULT_ADM = 2048  # the pooled CLIP-L + CLIP-G width SD3.5 models take
LATENT_CHANNELS = 16

# diffusers embedder names (SAI's files use these) -> the module's (SAI's reference) names.
EMBEDDER_RENAMES: dict[str, str] = {
    "time_text_embed.timestep_embedder.linear_1.": "t_embedder.mlp.0.",
    "time_text_embed.timestep_embedder.linear_2.": "t_embedder.mlp.2.",
    "time_text_embed.text_embedder.linear_1.": "y_embedder.mlp.0.",
    "time_text_embed.text_embedder.linear_2.": "y_embedder.mlp.2.",
    "pos_embed.proj.": "x_embedder.proj.",
}
# diffusers single-block names under transformer_blocks.N -> SAI's (q/k/v are fused into attn.qkv).
_DIFFUSERS_BLOCK: dict[str, str] = {
    "norm1.linear.": "adaLN_modulation.1.",
    "attn.to_out.0.": "attn.proj.",
    "ff.net.0.proj.": "mlp.fc1.",
    "ff.net.2.": "mlp.fc2.",
}
_QKV = ("attn.to_q.", "attn.to_k.", "attn.to_v.")


class SD35ControlNetConfigError(MMDiTConfigError):
    """An SD3.5 (SAI-format) ControlNet whose names or shapes are incomplete or inconsistent."""


def is_sd35_controlnet(names: Any) -> bool:
    """Whether `names` are SAI's SD3.5 ControlNet format (ComfyUI's test)."""
    return "controlnet_blocks.0.weight" in names and "pos_embed_input.proj.weight" in names and SD35_MARKER in names


def is_diffusers_sd35_controlnet(names: Any) -> bool:
    """Whether `names` are diffusers' conversion of an SD3.5 ControlNet (single transformer
    blocks: `transformer_blocks.0.norm1.linear`, no text stream, no `context_embedder`)."""
    return ("controlnet_blocks.0.weight" in names and "pos_embed_input.proj.weight" in names
            and "transformer_blocks.0.norm1.linear.weight" in names
            and "transformer_blocks.0.norm1_context.linear.weight" not in names
            and "context_embedder.weight" not in names)


def module_names(names: Any) -> dict[str, str]:
    """`{module name: file name}` for a SAI-format file (embedder renames; `control_type` left
    out: it is not a weight)."""
    out: dict[str, str] = {}
    for name in names:
        if name == CONTROL_TYPE_KEY:
            continue
        target = name
        for head, replacement in EMBEDDER_RENAMES.items():
            if name.startswith(head):
                target = replacement + name[len(head):]
                break
        out[target] = name
    return out


def diffusers_single_block_names(names: Any) -> dict[str, str | tuple[str, str, str]]:
    """`{module name: file name}` for diffusers' conversion of an SD3.5 ControlNet; the fused
    `attn.qkv.{weight,bias}` map to the three file names (q, k, v) concatenated along dim 0."""
    out: dict[str, Any] = {}
    block = re.compile(r"transformer_blocks\.(\d+)\.(.+)")
    for name in names:
        m = block.match(name)
        if m is None:
            out.update(module_names([name]))
            continue
        head, rest = f"transformer_blocks.{m.group(1)}.", m.group(2)
        if rest.startswith(_QKV):
            suffix = rest.split(".")[-1]
            out[f"{head}attn.qkv.{suffix}"] = tuple(f"{head}{q}{suffix}" for q in _QKV)
            continue
        for old, new in _DIFFUSERS_BLOCK.items():
            if rest.startswith(old):
                out[head + new + rest[len(old):]] = name
                break
        else:
            out[name] = name
    return out


@dataclass(frozen=True)
class SD35ControlNetConfig:
    """The structure of an SD3.5 ControlNet in SAI's format (read by `detect_from_weights`)."""

    depth: int = 38  # width / 64: the heads, and the main-model blocks the residuals serve
    num_layers: int = 19  # transformer_blocks
    patch_size: int = 2
    in_channels: int = LATENT_CHANNELS  # x_embedder input (the main model's latent)
    hint_channels: int = LATENT_CHANNELS  # pos_embed_input input (the hint latent)
    adm_in_channels: int = DEFAULT_ADM
    double_y_emb: bool = False

    @property
    def hidden_size(self) -> int:
        return HEAD_DIM * self.depth

    @property
    def borrowed(self) -> str:
        """The embedder the main model lends at run time (`ControlNetSD35.pre_run`)."""
        return "orig_y_embedder" if self.double_y_emb else "x_embedder"

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "SD35ControlNetConfig":
        """From names and shapes in the module's names (`module_names` of the file's); raises
        `SD35ControlNetConfigError` naming the key when one is missing or does not fit."""
        shape = shape_reader(tensors, prefix, SD35ControlNetConfigError, "SD3.5 ControlNet")
        y_out, y_in = shape("y_embedder.mlp.0.weight")
        hidden = y_out
        if hidden % HEAD_DIM:
            raise SD35ControlNetConfigError(f"SD3.5 ControlNet width {hidden} ({prefix}y_embedder.mlp.0.weight) is "
                                            f"not a multiple of {HEAD_DIM}")
        double = y_in == y_out
        hint = shape("pos_embed_input.proj.weight")  # [D, C, p, p]
        if len(hint) != 4 or hint[0] != hidden or hint[2] != hint[3]:
            raise SD35ControlNetConfigError(f"SD3.5 ControlNet key {prefix}pos_embed_input.proj.weight has shape "
                                            f"{hint}, expected [{hidden}, C, p, p]")
        pattern = re.compile(re.escape(prefix) + r"transformer_blocks\.(\d+)\.")
        blocks = {int(m.group(1)) for k in tensors if (m := pattern.match(k))}
        if not blocks:
            raise SD35ControlNetConfigError(f"SD3.5 ControlNet has no {prefix}transformer_blocks")
        num_layers = max(blocks) + 1
        expected = {"adaLN_modulation.1.weight": (6 * hidden, hidden), "attn.qkv.weight": (3 * hidden, hidden),
                    "attn.proj.weight": (hidden, hidden), "mlp.fc1.weight": (4 * hidden, hidden),
                    "mlp.fc2.weight": (hidden, 4 * hidden)}
        for i in range(num_layers):
            for name, want in expected.items():
                got = shape(f"transformer_blocks.{i}.{name}")
                if got != want:
                    raise SD35ControlNetConfigError(f"SD3.5 ControlNet key {prefix}transformer_blocks.{i}.{name} has "
                                                    f"shape {got}, expected {want}")
            got = shape(f"controlnet_blocks.{i}.weight")
            if got != (hidden, hidden):
                raise SD35ControlNetConfigError(f"SD3.5 ControlNet key {prefix}controlnet_blocks.{i}.weight has shape "
                                                f"{got}, expected {(hidden, hidden)}")
        in_channels = LATENT_CHANNELS
        if prefix + "x_embedder.proj.weight" in tensors:
            in_channels = shape("x_embedder.proj.weight")[1]
        elif double:
            raise SD35ControlNetConfigError(f"SD3.5 ControlNet key {prefix}x_embedder.proj.weight is missing (a "
                                            f"double-y-embedding ControlNet carries its own image embedding)")
        return cls(depth=hidden // HEAD_DIM, num_layers=num_layers, patch_size=hint[2], in_channels=in_channels,
                   hint_channels=hint[1], adm_in_channels=DEFAULT_ADM if double else y_in, double_y_emb=double)

    def model_kwargs(self) -> dict[str, Any]:
        """`ControlNetEmbedder(...)` keyword arguments (ComfyUI's names)."""
        return dict(img_size=None, patch_size=self.patch_size, in_chans=self.in_channels,
                    attention_head_dim=HEAD_DIM, num_attention_heads=self.depth,
                    adm_in_channels=self.adm_in_channels, num_layers=self.num_layers, main_model_double=self.depth,
                    double_y_emb=self.double_y_emb, hint_channels=self.hint_channels)


class ControlNetEmbedder(nn.Module):
    """ComfyUI's `comfy.cldm.dit_embedder.ControlNetEmbedder` (constructor and forward; see the
    module docstring). `forward(x, timesteps, y, context, hint)` -> `{"output": residuals}`, a
    tuple of `ceil(main_model_double / num_layers) * num_layers` entries `[B, L, D]` (each block's
    tensor repeated)."""

    def __init__(self, img_size: int | None, patch_size: int, in_chans: int, attention_head_dim: int,
                 num_attention_heads: int, adm_in_channels: int, num_layers: int, main_model_double: int,
                 double_y_emb: bool, device: Any = None, dtype: Any = None, pos_embed_max_size: int | None = None,
                 operations: Any = None, hint_channels: int | None = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.main_model_double = main_model_double
        self.hidden_size = num_attention_heads * attention_head_dim
        self.patch_size = patch_size
        self.x_embedder = PatchEmbed(img_size, patch_size, in_chans, self.hidden_size,
                                     strict_img_size=pos_embed_max_size is None, operations=ops, **factory)
        self.t_embedder = TimestepEmbedder(self.hidden_size, operations=ops, **factory)
        self.double_y_emb = double_y_emb
        if double_y_emb:
            self.orig_y_embedder = VectorEmbedder(adm_in_channels, self.hidden_size, operations=ops, **factory)
            self.y_embedder = VectorEmbedder(self.hidden_size, self.hidden_size, operations=ops, **factory)
        else:
            self.y_embedder = VectorEmbedder(adm_in_channels, self.hidden_size, operations=ops, **factory)
        self.transformer_blocks = nn.ModuleList([
            DismantledBlock(hidden_size=self.hidden_size, num_heads=num_attention_heads, qkv_bias=True,
                            operations=ops, **factory)
            for _ in range(num_layers)])
        self.use_y_embedder = True
        self.controlnet_blocks = nn.ModuleList([
            ops.Linear(self.hidden_size, self.hidden_size, **factory) for _ in range(num_layers)])
        self.pos_embed_input = PatchEmbed(img_size, patch_size, in_chans if hint_channels is None else hint_channels,
                                          self.hidden_size, strict_img_size=False, operations=ops, **factory)
        self.config: SD35ControlNetConfig | None = None

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the weights are stored in (ComfyUI keeps the construction dtype here)."""
        return self.t_embedder.mlp[0].weight.dtype

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, y: torch.Tensor | None = None,
                context: torch.Tensor | None = None, hint: torch.Tensor | None = None,
                transformer_options: dict | None = None, **kwargs: Any) -> dict[str, tuple[torch.Tensor, ...]]:
        """x `[B, C, H, W]` (the scaled noisy latent), timesteps `[B]` (sigma * 1000), y `[B, adm]`
        (the pooled text), hint `[B, hint_channels, H, W]` (the hint's latent); `context` unused."""
        height, width = x.shape[-2], x.shape[-1]
        tokens = self.x_embedder(x)  # [B, L, D]
        if not self.double_y_emb:
            h, w = ceil_div(height, self.patch_size), ceil_div(width, self.patch_size)
            pos = get_2d_sincos_pos_embed_torch(self.hidden_size, w, h, device=x.device)  # [L, D] float32
            tokens = (tokens + pos).to(tokens.dtype)  # ComfyUI adds in place (computed in float32)
        c = self.t_embedder(timesteps, dtype=tokens.dtype)  # [B, D]
        if y is not None and self.y_embedder is not None:
            if self.double_y_emb:
                y = self.orig_y_embedder(y)
            c = c + self.y_embedder(y)
        tokens = tokens + self.pos_embed_input(hint)  # [B, L, D]
        options = {} if transformer_options is None else transformer_options
        repeat = math.ceil(self.main_model_double / len(self.transformer_blocks))
        output: tuple[torch.Tensor, ...] = ()
        for block, projection in zip(self.transformer_blocks, self.controlnet_blocks):
            out = block(tokens, c, transformer_options=options)  # [B, L, D]
            if not self.double_y_emb:
                tokens = out  # the double-y variant feeds every block the same tokens
            output += (projection(out),) * repeat  # one tensor, shared: the runner scales it once
        return {"output": output}


def build_sd35_controlnet(config: SD35ControlNetConfig, *, dtype: Any = None, device: Any = None,
                          operations: Any = None) -> ControlNetEmbedder:
    network = ControlNetEmbedder(**config.model_kwargs(), dtype=dtype, device=device, operations=operations)
    network.config = config
    return network


__all__ = ["CONTROL_TYPES", "ControlNetEmbedder", "SD35ControlNetConfig", "SD35ControlNetConfigError",
           "build_sd35_controlnet", "diffusers_single_block_names", "is_diffusers_sd35_controlnet",
           "is_sd35_controlnet", "module_names"]
