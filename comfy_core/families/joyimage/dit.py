"""JoyImage Edit's diffusion transformer and `JoyImageConfig` read from weights.

Architecture of JD's JoyAI-Image-Edit (2026, github.com/jdopensource/JoyAI-Image-Edit, Apache 2.0),
as ComfyUI's `comfy/ldm/joyimage/model.py` (`JoyImageTransformer3DModel`) and diffusers'
`JoyImageEditPlusTransformer3DModel` describe it; written here from those descriptions, in
ComfyUI's module names (which are diffusers' names too, so both layouts load as they are):

- the latent `[B, C, T, H, W]` (Wan 2.1's 16 channels) cut into 1x2x2 patches by a Conv3d
  (`img_in`), tokens in (t, h, w) order; each reference latent likewise, its tokens after the
  image's (`[target, ref0, ref1, ...]`);
- the time: a 256-wide sinusoid of the network timestep (sigma x 1000, cos half first) ->
  `condition_embedder.time_embedder` (Linear, SiLU, Linear) -> SiLU -> `time_proj` to 6 widths:
  the shared modulation `vec` `[B, 6, dim]`;
- the text (the last Qwen3-VL 8B block's states, `clip.py`) -> `condition_embedder.text_embedder`
  (Linear, tanh-GELU, Linear);
- double-stream blocks: each stream has its own learned table `modulate_table` `[1, 6, dim]` added
  to `vec` (shift, scale, gate for the attention, then for the MLP), affine-free LayerNorms (eps
  1e-6), fused q/k/v, per-head RMS-normed q / k (eps 1e-6); the image's q / k get 3-axis RoPE, the
  text's none; one joint attention over `[image, text]`; tanh-GELU MLPs (4x width);
- the output: an affine-free LayerNorm (no modulation), `proj_out`, the target's tokens alone
  unpatchified, the padding cropped.

RoPE (ComfyUI's `get_rotary_pos_embed_for_components`): a head's channels split over (t, h, w) as
16 / 56 / 56 (for heads of 128; reduced test heads in the same proportions), base 10000 (ComfyUI's
`supported_models.JoyImage` setting, not the network's default 256), consecutive channel pairs
rotated; each component's rows and columns count from 0 while its frames continue from the previous
component's (the target at t = 0, reference k at t = k for one-frame latents). Frequencies and
angles in float32, as ComfyUI's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.wrappers import run_split_blocks

ROPE_THETA = 10000.0  # ComfyUI's supported_models.JoyImage `unet_extra_config["theta"]`
EPS = 1e-6
TIME_FREQ_DIM = 256
MOD_ROWS = 6


class JoyImageConfigError(ValueError):
    """The JoyImage weights are incomplete or inconsistent, or the parameters are impossible."""


class JoyImageInputError(ValueError):
    """Inputs the JoyImage network cannot take."""


def rope_axes(head_dim: int) -> tuple[int, int, int]:
    """A head's RoPE channels over (t, h, w): ComfyUI's 16 / 56 / 56 for heads of 128, the same
    proportions (1/8, 7/16, 7/16) for the reduced heads of test networks."""
    if head_dim == 128:
        return (16, 56, 56)
    return (head_dim // 8, 7 * head_dim // 16, 7 * head_dim // 16)


@dataclass(frozen=True)
class JoyImageConfig:
    """The network's structure (the released JoyAI-Image-Edit's: 4096 wide, 32 heads of 128, 40
    double-stream blocks, 16 latent channels in 1x2x2 patches, a 4096-wide Qwen3-VL 8B text)."""

    hidden_size: int = 4096
    num_attention_heads: int = 32
    num_layers: int = 40
    in_channels: int = 16
    out_channels: int = 16
    patch_size: tuple[int, int, int] = (1, 2, 2)
    text_dim: int = 4096
    mlp_hidden: int = 16384
    time_freq_dim: int = TIME_FREQ_DIM
    theta: float = ROPE_THETA

    def __post_init__(self) -> None:
        if self.num_attention_heads <= 0 or self.hidden_size % self.num_attention_heads:
            raise JoyImageConfigError(f"JoyImage: width {self.hidden_size} with {self.num_attention_heads} heads is "
                                      "impossible")
        axes = rope_axes(self.head_dim)
        if sum(axes) != self.head_dim or any(a <= 0 or a % 2 for a in axes):
            raise JoyImageConfigError(f"JoyImage: heads of {self.head_dim} channels give RoPE axes {list(axes)}")
        if len(self.patch_size) != 3 or min(self.patch_size) <= 0:
            raise JoyImageConfigError(f"JoyImage: patch size {list(self.patch_size)} is not 3 positive sides")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def latent_channels(self) -> int:
        return self.in_channels

    @property
    def context_width(self) -> int:
        return self.text_dim

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (its `model_detection` for JoyImage)."""
        return {"image_model": "joyimage", "in_channels": self.in_channels, "hidden_size": self.hidden_size,
                "patch_size": list(self.patch_size), "num_layers": self.num_layers,
                "num_attention_heads": self.num_attention_heads, "text_dim": self.text_dim}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "JoyImageConfig":
        """The structure from names and shapes under `prefix`, as ComfyUI reads it: width, input
        channels and patch from `img_in` `[dim, C, pt, ph, pw]`, heads from the q-norm's width,
        depth from the numbered blocks, text width from the text embedder (4096 when absent)."""
        shape = shape_reader(tensors, prefix, JoyImageConfigError, "JoyImage")
        img_in = shape("img_in.weight")
        if len(img_in) != 5:
            raise JoyImageConfigError(f"JoyImage: {prefix}img_in.weight has shape {list(img_in)}, not a Conv3d's")
        hidden, channels, patch = img_in[0], img_in[1], tuple(img_in[2:])
        head = shape("double_blocks.0.attn.img_attn_q_norm.weight")[0]
        if head <= 0 or hidden % head:
            raise JoyImageConfigError(f"JoyImage: a {head}-wide q-norm does not divide the width {hidden}")
        text = prefix + "condition_embedder.text_embedder.linear_1.weight"
        text_dim = tuple(tensors[text].shape)[1] if text in tensors else 4096
        mlp = prefix + "double_blocks.0.img_mlp.net.0.proj.weight"
        mlp_hidden = tuple(tensors[mlp].shape)[0] if mlp in tensors else 4 * hidden
        out = prefix + "proj_out.weight"
        out_channels = tuple(tensors[out].shape)[0] // math.prod(patch) if out in tensors else channels
        time = prefix + "condition_embedder.time_embedder.linear_1.weight"
        time_dim = tuple(tensors[time].shape)[1] if len(tuple(tensors[time].shape)) == 2 else TIME_FREQ_DIM
        return cls(hidden_size=hidden, num_attention_heads=hidden // head,
                   num_layers=count_numbered(tensors, prefix, "double_blocks", JoyImageConfigError, "JoyImage"),
                   in_channels=channels, out_channels=out_channels, patch_size=patch, text_dim=text_dim,
                   mlp_hidden=mlp_hidden, time_freq_dim=time_dim)


def layer_norm(x: torch.Tensor) -> torch.Tensor:
    """Affine-free LayerNorm (eps 1e-6) computed in float32, back in `x`'s dtype."""
    return F.layer_norm(x.float(), (x.shape[-1],), eps=EPS).to(x.dtype)


class RMSNorm(nn.Module):
    """Per-head RMSNorm with a `weight` (ComfyUI's `operations.RMSNorm`), computed in float32."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), weight=self.weight.float(), eps=EPS)


def rope_table(sizes: Sequence[tuple[int, int, int]], head_dim: int, theta: float,
               device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[L, head_dim / 2]` float32 for the components' patch grids `sizes` (t, h, w) in
    sequence order (see the module doc: frames continue, rows and columns restart)."""
    axes = rope_axes(head_dim)
    angles, offset = [], 0
    for t, h, w in sizes:
        grids = [torch.arange(offset, offset + t, dtype=torch.float32, device=device),
                 torch.arange(h, dtype=torch.float32, device=device),
                 torch.arange(w, dtype=torch.float32, device=device)]
        mesh = torch.stack(torch.meshgrid(*grids, indexing="ij"), dim=0).reshape(3, -1)  # [3, t h w]
        parts = []
        for axis, dim in enumerate(axes):
            freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device)[:dim // 2] / dim))
            parts.append(torch.outer(mesh[axis], freqs))
        angles.append(torch.cat(parts, dim=1))
        offset += t
    table = torch.cat(angles, dim=0)  # [L, head_dim / 2]
    return table.cos(), table.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`x` `[B, L, H, D]` (float32) with each consecutive channel pair `(x0, x1)` rotated by its
    angle: `(x0 cos - x1 sin, x0 sin + x1 cos)`; cos / sin `[L, D / 2]`."""
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).reshape(x.shape)


class Modulate(nn.Module):
    """A stream's learned table `[1, 6, dim]` added to the shared `vec` `[B, 6, dim]`, split in 6."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.modulate_table = nn.Parameter(torch.zeros(1, MOD_ROWS, dim, **factory))

    def forward(self, vec: torch.Tensor) -> list[torch.Tensor]:
        table = self.modulate_table.to(device=vec.device, dtype=vec.dtype)
        return [row.squeeze(1) for row in (table + vec).chunk(MOD_ROWS, dim=1)]  # 6 x [B, dim]


class GELUProjection(nn.Module):
    """`gelu_tanh(proj(x))` (ComfyUI's `GELU_approx`, diffusers' `GELU(approximate="tanh")`)."""

    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(dim, inner, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    """`net.0` (Linear + tanh-GELU), `net.1` (identity: diffusers' dropout), `net.2` (Linear)."""

    def __init__(self, dim: int, inner: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.net = nn.ModuleList([GELUProjection(dim, inner, ops, factory), nn.Identity(),
                                  ops.Linear(inner, dim, bias=True, **factory)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for module in self.net:
            x = module(x)
        return x


class JointAttention(nn.Module):
    """Per-stream fused q/k/v and output projections, one attention over `[image, text]`."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        head_dim = dim // heads
        for stream in ("img", "txt"):
            setattr(self, f"{stream}_attn_qkv", ops.Linear(dim, 3 * dim, bias=True, **factory))
            setattr(self, f"{stream}_attn_q_norm", RMSNorm(head_dim, factory))
            setattr(self, f"{stream}_attn_k_norm", RMSNorm(head_dim, factory))
            setattr(self, f"{stream}_attn_proj", ops.Linear(dim, dim, bias=True, **factory))

    def _qkv(self, stream: str, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = getattr(self, f"{stream}_attn_qkv")(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)) for t in (q, k, v))  # [B, L, H, D]
        return getattr(self, f"{stream}_attn_q_norm")(q), getattr(self, f"{stream}_attn_k_norm")(k), v

    def forward(self, img: torch.Tensor, txt: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                options: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = img.dtype
        img_q, img_k, img_v = self._qkv("img", img)
        txt_q, txt_k, txt_v = self._qkv("txt", txt)
        img_q, img_k = rotate(img_q, *rope), rotate(img_k, *rope)
        q = torch.cat((img_q, txt_q), dim=1).to(dtype).transpose(1, 2)  # [B, H, L, D]
        k = torch.cat((img_k, txt_k), dim=1).to(dtype).transpose(1, 2)
        v = torch.cat((img_v, txt_v), dim=1).to(dtype).transpose(1, 2)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True, transformer_options=options)  # [B, L, H*D]
        n = img.shape[1]
        return self.img_attn_proj(out[:, :n]), self.txt_attn_proj(out[:, n:])


class DoubleStreamBlock(nn.Module):
    def __init__(self, config: JoyImageConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.hidden_size
        self.img_mod = Modulate(dim, factory)
        self.img_mlp = FeedForward(dim, config.mlp_hidden, ops, factory)
        self.txt_mod = Modulate(dim, factory)
        self.txt_mlp = FeedForward(dim, config.mlp_hidden, ops, factory)
        self.attn = JointAttention(dim, config.num_attention_heads, ops, factory)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                transformer_options: Mapping[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """img `[B, N, dim]`, txt `[B, T, dim]`, vec `[B, 6, dim]` -> both streams updated."""
        i = self.img_mod(vec)
        t = self.txt_mod(vec)
        img_attn, txt_attn = self.attn(layer_norm(img) * (1 + i[1][:, None]) + i[0][:, None],
                                       layer_norm(txt) * (1 + t[1][:, None]) + t[0][:, None], rope,
                                       transformer_options or {})
        img = img + img_attn * i[2][:, None]
        txt = txt + txt_attn * t[2][:, None]
        img = img + self.img_mlp(layer_norm(img) * (1 + i[4][:, None]) + i[3][:, None]) * i[5][:, None]
        txt = txt + self.txt_mlp(layer_norm(txt) * (1 + t[4][:, None]) + t[3][:, None]) * t[5][:, None]
        return img, txt


class TimestepEmbedding(nn.Module):
    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(in_dim, dim, bias=True, **factory)
        self.linear_2 = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TextProjection(nn.Module):
    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(in_dim, dim, bias=True, **factory)
        self.linear_2 = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.gelu(self.linear_1(x), approximate="tanh"))


class ConditionEmbedder(nn.Module):
    def __init__(self, config: JoyImageConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.hidden_size
        self.time_embedder = TimestepEmbedding(config.time_freq_dim, dim, ops, factory)
        self.time_proj = ops.Linear(dim, MOD_ROWS * dim, bias=True, **factory)
        self.text_embedder = TextProjection(config.text_dim, dim, ops, factory)
        self.time_freq_dim = config.time_freq_dim

    def forward(self, timesteps: torch.Tensor, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """timesteps `[B]` (sigma x 1000), context `[B, T, text_dim]` -> (vec `[B, 6, dim]`, txt `[B, T, dim]`)."""
        freqs = timestep_embedding(timesteps.float(), self.time_freq_dim)  # cos half first
        temb = self.time_embedder(freqs.to(context.dtype))
        vec = self.time_proj(F.silu(temb)).unflatten(1, (MOD_ROWS, -1))
        return vec, self.text_embedder(context)


@comfyui_name("JoyImageTransformer3DModel")
class JoyImageTransformer(nn.Module):
    """JoyImage Edit's transformer (see the module docstring), built from a `JoyImageConfig`."""

    def __init__(self, config: JoyImageConfig, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = list(config.patch_size)
        self.out_channels = config.out_channels
        dim = config.hidden_size
        self.img_in = ops.Conv3d(config.in_channels, dim, kernel_size=config.patch_size, stride=config.patch_size,
                                 **factory)
        self.condition_embedder = ConditionEmbedder(config, ops, factory)
        self.double_blocks = nn.ModuleList(DoubleStreamBlock(config, ops, factory) for _ in range(config.num_layers))
        self.proj_out = ops.Linear(dim, config.out_channels * math.prod(config.patch_size), bias=True, **factory)

    @classmethod
    def from_config(cls, config: JoyImageConfig, **kwargs: Any) -> "JoyImageTransformer":
        return cls(config, **kwargs)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target: ComfyUI's generic forms, and diffusers' / PEFT's
        `transformer.<module>` (the same module names)."""
        from comfy_core.families.lora_keys import native_key_map

        key_map = native_key_map(names)
        for name in names:
            if name.startswith("diffusion_model.") and name.endswith(".weight"):
                key_map["transformer." + name[len("diffusion_model."):-len(".weight")]] = name
        return key_map

    def _tokens(self, latent: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int]]:
        """`[B, C, T, H, W]` padded to the patch -> tokens `[B, t h w, dim]`, its grid (t, h, w)."""
        latent = pad_to_patch_size(latent, self.patch_size)
        pt, ph, pw = self.patch_size
        grid = (latent.shape[2] // pt, latent.shape[3] // ph, latent.shape[4] // pw)
        return self.img_in(latent).flatten(2).transpose(1, 2), grid

    def unpatchify(self, x: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
        """`[B, t h w, C pt ph pw]` -> `[B, C, t pt, h ph, w pw]` (the patch's values last, channels last)."""
        t, h, w = grid
        pt, ph, pw = self.patch_size
        c = self.out_channels
        x = x.reshape(x.shape[0], t, h, w, pt, ph, pw, c).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(x.shape[0], c, t * pt, h * ph, w * pw)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor,
                ref_latents: Sequence[torch.Tensor] | None = None, transformer_options: Mapping[str, Any] = {},
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, T, H, W]` (or `[B, C, H, W]`), timesteps (sigma x 1000) `[B]`, context
        `[B, T, text_dim]`, `ref_latents` (in the model's space) each `[B or 1, C, t, h, w]` or
        `[B or 1, C, h, w]` -> the velocity in `x`'s shape."""
        options = dict(transformer_options or {})
        config = self.config
        flat = x.ndim == 4
        if flat:
            x = x.unsqueeze(2)
        if x.ndim != 5:
            raise JoyImageInputError(f"JoyImage: the latent must be [B, C, T, H, W], got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != config.text_dim:
            raise JoyImageInputError(f"JoyImage expects {config.text_dim}-wide text states but got "
                                     f"{tuple(context.shape)}; load the text encoder with CLIPLoader type 'joyimage'")
        bs, _, ot, oh, ow = x.shape
        img, target = self._tokens(x)
        parts, sizes = [img], [target]
        for ref in ref_latents or ():
            ref = ref.to(device=x.device, dtype=x.dtype)
            if ref.ndim == 4:
                ref = ref.unsqueeze(2)
            if ref.shape[0] != bs:
                ref = ref.repeat((bs + ref.shape[0] - 1) // ref.shape[0], 1, 1, 1, 1)[:bs]
            tokens, grid = self._tokens(ref)
            parts.append(tokens)
            sizes.append(grid)
        img = torch.cat(parts, dim=1)  # [B, N, dim]
        vec, txt = self.condition_embedder(timesteps, context.to(img.dtype))
        if txt.shape[0] != bs:
            txt = txt.expand(bs, -1, -1) if txt.shape[0] == 1 else txt
        rope = rope_table(sizes, config.head_dim, config.theta, x.device)
        img = self._blocks(img, txt, vec, rope, options)
        count = math.prod(target)
        out = self.proj_out(layer_norm(img[:, :count]))
        out = self.unpatchify(out, target)[:, :, :ot, :oh, :ow]
        return out.squeeze(2) if flat else out

    def _blocks(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor,
                rope: tuple[torch.Tensor, torch.Tensor], options: dict[str, Any]) -> torch.Tensor:
        """The double-stream blocks with ComfyUI's `patches_replace["dit"][("double_block", i)]`
        (arguments `img`, `txt`, `vec`, `pe`, `transformer_options`) and the first-block split."""
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        total = len(self.double_blocks)

        def run(index: int, streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            block = self.double_blocks[index]
            options["block_type"], options["block_index"], options["total_blocks"] = "double", index, total
            if ("double_block", index) in blocks_replace:
                def original(args: dict[str, Any]) -> dict[str, Any]:
                    i, t = block(args["img"], args["txt"], args["vec"], args["pe"], args.get("transformer_options"))
                    return {"img": i, "txt": t}

                out = blocks_replace[("double_block", index)](
                    {"img": streams["img"], "txt": streams["txt"], "vec": vec, "pe": rope,
                     "transformer_options": options}, {"original_block": original})
                return {"img": out["img"], "txt": out["txt"]}
            new_img, new_txt = block(streams["img"], streams["txt"], vec, rope, options)
            return {"img": new_img, "txt": new_txt}

        def rest(streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            for index in range(1, total):
                streams = run(index, streams)
            return streams

        if total == 0:
            return img
        return run_split_blocks(options, lambda s: run(0, s), rest, {"img": img, "txt": txt})["img"]


__all__ = ["JoyImageConfig", "JoyImageConfigError", "JoyImageInputError", "JoyImageTransformer", "rope_axes",
           "rope_table"]
