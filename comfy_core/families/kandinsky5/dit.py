"""Kandinsky 5 (Kandinsky Lab, 2025): the text-to-video / image-to-video / text-to-image diffusion
transformer, and `Kandinsky5Config` read from weights.

Architecture of Kandinsky Lab's release (github.com/kandinskylab/kandinsky-5, `kandinsky/models/
dit.py`; diffusers' `Kandinsky5Transformer3DModel` computes the same): the timestep's sinusoids (cos
then sin, max period 10000, `model_dim` wide) go through a two-layer SiLU MLP (`time_embeddings`)
and get CLIP-L's pooled vector projected and layer-normed (`pooled_text_embeddings`) added; the
Qwen2.5-VL states are projected and layer-normed (`text_embeddings`) and refined by
`num_text_blocks` encoder blocks (self-attention with 1-D RoPE, GELU feed-forward, each modulated
by shift / scale / gate rows of the time embedding); the latent (with, for the video models, a zero
image latent and a mask channel: 33 channels) is cut into 1x2x2 patches and projected
(`visual_embeddings`); `num_visual_blocks` decoder blocks run modulated self-attention with 3-D RoPE
(axes `head/4, 3 head/8, 3 head/8`), cross-attention to the refined text and a feed-forward (9
modulation rows); a modulated LayerNorm and projection (`out_layer`) give the velocity. Queries and
keys are RMS-normed per head; no attention mask.

Names are those of the released files, which ComfyUI's and diffusers' share (no conversion).

Forward as ComfyUI's `comfy/ldm/kandinsky5/model.py` (`forward(x, timestep, context, y,
time_dim_replace, transformer_options)`), written here: `timestep` is sigma x 1000; `y` the pooled
CLIP-L vector; `time_dim_replace` (image-to-video: the clean latent of the start image) is written
over the first channels and frames of the input; RoPE positions are divided by the scale factor
(1, 2, 2) (the image model: 1, 1, 1; the 4096-wide Pro model at 14080 latent pixels or more: 1,
3.16, 3.16), or ComfyUI's `rope_options` (`scale_*` / `shift_*`) when set;
`patches_replace["dit"][("double_block", i)]` replaces a visual block. ComfyUI's sparse (NABLA)
attention for latents of more than 40 frames is not written here: such a latent is refused.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.attention.rope import rotate_pairs
from comfy_core.families.flux.blocks import EmbedND
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.wrappers import run_split_blocks

PATCH = (1, 2, 2)
ROPE_THETA = 10000.0
MAX_PERIOD = 10000.0
PRO_WIDTH = 4096  # the Pro models' width: a larger RoPE scale at high resolution
PRO_SCALE_PIXELS = 14080  # latent h * w from which the Pro scale applies
PRO_SCALE = (1.0, 3.16, 3.16)
VIDEO_SCALE = (1.0, 2.0, 2.0)
IMAGE_SCALE = (1.0, 1.0, 1.0)
DENSE_FRAMES = 40  # ComfyUI switches to sparse attention above this many latent frames


class Kandinsky5ConfigError(ValueError):
    """The Kandinsky 5 weights are incomplete or inconsistent, or an input does not fit them."""


def default_axes(head_dim: int) -> tuple[int, int, int]:
    """RoPE channels per axis (time, height, width) of a head: (16, 24, 24) for the Lite video model's
    64, (32, 48, 48) for 128 (ComfyUI's choices), the same proportions for other widths."""
    if head_dim % 16:
        raise Kandinsky5ConfigError(f"Kandinsky 5: a head of {head_dim} channels cannot be split into RoPE axes")
    return (head_dim // 4, 3 * head_dim // 8, 3 * head_dim // 8)


@dataclass(frozen=True)
class Kandinsky5Config:
    """What the network's shape is, read from the weights (`detect_from_weights`)."""

    in_visual_dim: int = 33  # channels per latent pixel the network reads (latent + conditioning)
    out_visual_dim: int = 16
    in_text_dim: int = 3584
    in_text_dim2: int = 768
    time_dim: int = 512
    model_dim: int = 1792
    ff_dim: int = 7168
    head_dim: int = 64
    patch_size: tuple[int, int, int] = PATCH
    num_text_blocks: int = 2
    num_visual_blocks: int = 32
    axes_dims: tuple[int, int, int] = (16, 24, 24)
    rope_scale_factor: tuple[float, float, float] = VIDEO_SCALE

    def __post_init__(self) -> None:
        if self.model_dim % self.head_dim:
            raise Kandinsky5ConfigError(f"Kandinsky 5: width {self.model_dim} is not a multiple of heads of "
                                        f"{self.head_dim}")
        if sum(self.axes_dims) != self.head_dim:
            raise Kandinsky5ConfigError(f"Kandinsky 5: RoPE axes {self.axes_dims} do not fill a head of "
                                        f"{self.head_dim}")

    @property
    def adm_in_channels(self) -> int:
        """The pooled text vector's width (what `DiffusionModel.adm_channels` checks `y` against)."""
        return self.in_text_dim2

    @property
    def image_model(self) -> bool:
        """The text-to-image model reads the latent alone (no image latent and mask channels)."""
        return self.in_visual_dim == self.out_visual_dim

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "Kandinsky5Config":
        shape = shape_reader(tensors, prefix, Kandinsky5ConfigError, "Kandinsky 5")
        visual = shape("visual_embeddings.in_layer.weight")  # [model_dim, prod(patch) * in]
        volume = math.prod(PATCH)
        out_rows = shape("out_layer.out_layer.weight")[0]
        if visual[1] % volume or out_rows % volume:
            raise Kandinsky5ConfigError(f"Kandinsky 5: patch projections of {visual[1]} / {out_rows} features are "
                                        f"not multiples of the {PATCH} patch")
        model_dim = visual[0]
        head_dim = shape("visual_transformer_blocks.0.self_attention.query_norm.weight")[0]
        in_dim, out_dim = visual[1] // volume, out_rows // volume
        image = in_dim == out_dim
        return cls(
            in_visual_dim=in_dim, out_visual_dim=out_dim,
            in_text_dim=shape("text_embeddings.in_layer.weight")[1],
            in_text_dim2=shape("pooled_text_embeddings.in_layer.weight")[1],
            time_dim=shape("time_embeddings.in_layer.weight")[0],
            model_dim=model_dim,
            ff_dim=shape("visual_transformer_blocks.0.feed_forward.in_layer.weight")[0],
            head_dim=head_dim,
            num_text_blocks=count_numbered(tensors, prefix, "text_transformer_blocks", Kandinsky5ConfigError,
                                           "Kandinsky 5"),
            num_visual_blocks=count_numbered(tensors, prefix, "visual_transformer_blocks", Kandinsky5ConfigError,
                                             "Kandinsky 5"),
            axes_dims=default_axes(head_dim),
            rope_scale_factor=IMAGE_SCALE if image else VIDEO_SCALE,
        )

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` for this network (`model_detection`'s Kandinsky 5 entry: the width,
        RoPE axes, the image model's RoPE scale, time / feed-forward widths, patch input width, depths)."""
        config: dict[str, Any] = {"model_dim": self.model_dim, "axes_dims": tuple(self.axes_dims),
                                  "time_dim": self.time_dim, "image_model": "kandinsky5", "ff_dim": self.ff_dim,
                                  "visual_embed_dim": self.in_visual_dim * math.prod(self.patch_size),
                                  "num_text_blocks": self.num_text_blocks, "num_visual_blocks": self.num_visual_blocks}
        if self.rope_scale_factor != VIDEO_SCALE:
            config["rope_scale_factor"] = tuple(self.rope_scale_factor)
        return config


def _sinusoids(timestep: torch.Tensor, dim: int) -> torch.Tensor:
    """`[B]` -> `[B, dim]`: cos then sin of `t * 10000^(-i / (dim/2))`, float32."""
    half = dim // 2
    freqs = torch.exp(-math.log(MAX_PERIOD) * torch.arange(half, dtype=torch.float32, device=timestep.device) / half)
    args = timestep.to(torch.float32)[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def _modulate(norm: nn.Module, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """`norm(x) * (1 + scale) + shift`, in float32, back in x's dtype."""
    return (norm(x.float()) * (scale.float() + 1.0) + shift.float()).to(x.dtype)


def _gated(x: torch.Tensor, out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return (x.float() + gate.float() * out.float()).to(x.dtype)


class Projection(nn.Module):
    """`in_layer` then an affine LayerNorm (`norm`): the text and pooled-text embeddings."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.in_layer = ops.Linear(in_dim, dim, bias=True, **factory)
        self.norm = ops.LayerNorm(dim, elementwise_affine=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.in_layer(x)
        return self.norm(x).to(x.dtype)


class TimeEmbedding(nn.Module):
    """`in_layer` (model_dim sinusoids -> time_dim), SiLU, `out_layer`."""

    def __init__(self, model_dim: int, time_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.model_dim = model_dim
        self.in_layer = ops.Linear(model_dim, time_dim, bias=True, **factory)
        self.out_layer = ops.Linear(time_dim, time_dim, bias=True, **factory)

    def forward(self, timestep: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return self.out_layer(F.silu(self.in_layer(_sinusoids(timestep, self.model_dim).to(dtype))))


class Modulation(nn.Module):
    """`out_layer(SiLU(time))` split into `rows` chunks, each `[B, 1, dim]`."""

    def __init__(self, time_dim: int, dim: int, rows: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.rows = rows
        self.out_layer = ops.Linear(time_dim, rows * dim, bias=True, **factory)

    def forward(self, time: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.out_layer(F.silu(time))[:, None, :].chunk(self.rows, dim=-1)


class HeadRMSNorm(nn.Module):
    """RMS norm over a head's channels (`weight`; torch's default epsilon), computed in float32."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(device=x.device, dtype=torch.float32)
        return F.rms_norm(x.float(), weight.shape, weight=weight).to(x.dtype)


class Attention(nn.Module):
    """`to_query` / `to_key` / `to_value` (with biases), per-head RMS norms on queries and keys,
    RoPE on both when given (self-attention), `out_layer`."""

    def __init__(self, dim: int, head_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = dim // head_dim
        for name in ("to_query", "to_key", "to_value", "out_layer"):
            setattr(self, name, ops.Linear(dim, dim, bias=True, **factory))
        self.query_norm = HeadRMSNorm(head_dim, factory)
        self.key_norm = HeadRMSNorm(head_dim, factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor | None = None, rope: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        # x [B, N, C], context [B, L, C] (cross-attention) or None, rope [1, 1, N, D/2, 2, 2]
        source = x if context is None else context
        b = x.shape[0]
        q = self.query_norm(self.to_query(x).view(b, x.shape[1], self.heads, -1)).transpose(1, 2)  # [B, H, N, D]
        k = self.key_norm(self.to_key(source).view(b, source.shape[1], self.heads, -1)).transpose(1, 2)
        v = self.to_value(source).view(b, source.shape[1], self.heads, -1).transpose(1, 2)
        if rope is not None:
            q = rotate_pairs(q, rope, v.dtype)
            k = rotate_pairs(k, rope, v.dtype)
        out = calling.attend(q, k, v, self.heads, skip_reshape=True,
                             transformer_options=transformer_options or {})  # [B, N, C]
        return self.out_layer(out)


class FeedForward(nn.Module):
    """`in_layer` (no bias), GELU, `out_layer` (no bias)."""

    def __init__(self, dim: int, ff_dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.in_layer = ops.Linear(dim, ff_dim, bias=False, **factory)
        self.out_layer = ops.Linear(ff_dim, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(F.gelu(self.in_layer(x)))


def _plain_norm(dim: int, ops: Any, factory: dict[str, Any]) -> nn.Module:
    return ops.LayerNorm(dim, elementwise_affine=False, **factory)


class TextBlock(nn.Module):
    """An encoder block over the text tokens: modulated self-attention and feed-forward (6 rows)."""

    def __init__(self, config: Kandinsky5Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.model_dim
        self.text_modulation = Modulation(config.time_dim, dim, 6, ops, factory)
        self.self_attention_norm = _plain_norm(dim, ops, factory)
        self.self_attention = Attention(dim, config.head_dim, ops, factory)
        self.feed_forward_norm = _plain_norm(dim, ops, factory)
        self.feed_forward = FeedForward(dim, config.ff_dim, ops, factory)

    def forward(self, x: torch.Tensor, time: torch.Tensor, rope: torch.Tensor,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        shift, scale, gate, ff_shift, ff_scale, ff_gate = self.text_modulation(time)
        out = self.self_attention(_modulate(self.self_attention_norm, x, shift, scale), rope=rope,
                                  transformer_options=transformer_options)
        x = _gated(x, out, gate)
        out = self.feed_forward(_modulate(self.feed_forward_norm, x, ff_shift, ff_scale))
        return _gated(x, out, ff_gate)


class VisualBlock(nn.Module):
    """A decoder block over the visual tokens: modulated self-attention (3-D RoPE), cross-attention
    to the text and feed-forward (9 rows)."""

    def __init__(self, config: Kandinsky5Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        dim = config.model_dim
        self.visual_modulation = Modulation(config.time_dim, dim, 9, ops, factory)
        self.self_attention_norm = _plain_norm(dim, ops, factory)
        self.self_attention = Attention(dim, config.head_dim, ops, factory)
        self.cross_attention_norm = _plain_norm(dim, ops, factory)
        self.cross_attention = Attention(dim, config.head_dim, ops, factory)
        self.feed_forward_norm = _plain_norm(dim, ops, factory)
        self.feed_forward = FeedForward(dim, config.ff_dim, ops, factory)

    def forward(self, x: torch.Tensor, context: torch.Tensor, time: torch.Tensor, rope: torch.Tensor,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        rows = self.visual_modulation(time)
        out = self.self_attention(_modulate(self.self_attention_norm, x, rows[0], rows[1]), rope=rope,
                                  transformer_options=transformer_options)
        x = _gated(x, out, rows[2])
        out = self.cross_attention(_modulate(self.cross_attention_norm, x, rows[3], rows[4]), context=context,
                                   transformer_options=transformer_options)
        x = _gated(x, out, rows[5])
        out = self.feed_forward(_modulate(self.feed_forward_norm, x, rows[6], rows[7]))
        return _gated(x, out, rows[8])


class OutLayer(nn.Module):
    """Modulated LayerNorm (`modulation`: shift then scale) and the patch projection."""

    def __init__(self, config: Kandinsky5Config, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.modulation = Modulation(config.time_dim, config.model_dim, 2, ops, factory)
        self.norm = _plain_norm(config.model_dim, ops, factory)
        self.out_layer = ops.Linear(config.model_dim, math.prod(config.patch_size) * config.out_visual_dim,
                                    bias=True, **factory)

    def forward(self, x: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        shift, scale = self.modulation(time)
        return self.out_layer(_modulate(self.norm, x, shift, scale))


class Kandinsky5Transformer(nn.Module):
    """The Kandinsky 5 network (see the module doc)."""

    def __init__(self, config: Kandinsky5Config, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.patch_size = config.patch_size
        volume = math.prod(config.patch_size)
        self.time_embeddings = TimeEmbedding(config.model_dim, config.time_dim, ops, factory)
        self.text_embeddings = Projection(config.in_text_dim, config.model_dim, ops, factory)
        self.pooled_text_embeddings = Projection(config.in_text_dim2, config.time_dim, ops, factory)
        self.visual_embeddings = nn.Module()
        self.visual_embeddings.in_layer = ops.Linear(volume * config.in_visual_dim, config.model_dim, bias=True,
                                                     **factory)
        self.text_transformer_blocks = nn.ModuleList([TextBlock(config, ops, factory)
                                                      for _ in range(config.num_text_blocks)])
        self.visual_transformer_blocks = nn.ModuleList([VisualBlock(config, ops, factory)
                                                        for _ in range(config.num_visual_blocks)])
        self.out_layer = OutLayer(config, ops, factory)
        self.rope_3d = EmbedND(config.head_dim, ROPE_THETA, config.axes_dims)
        self.rope_1d = EmbedND(config.head_dim, ROPE_THETA, [config.head_dim])

    @classmethod
    def from_config(cls, config: Kandinsky5Config, operations: Any = None) -> "Kandinsky5Transformer":
        return cls(config, operations=operations)

    @property
    def params(self) -> dict[str, Any]:
        return asdict(self.config)

    def _visual_positions(self, t: int, h: int, w: int, options: Mapping[str, Any],
                          device: torch.device) -> torch.Tensor:
        """`[1, t h w, 3]` positions of the patches: `index / scale` per axis (ComfyUI's
        `rope_encode_3d`: the last index lands on `(n - 1) / scale`), or `rope_options`' scale and
        shift."""
        pt, ph, pw = self.patch_size
        counts = (t // pt, h // ph, w // pw)
        rope_options = options.get("rope_options")
        starts = [0.0, 0.0, 0.0]
        if rope_options is not None:
            scales = [1.0 / float(rope_options.get(k, 1.0)) for k in ("scale_t", "scale_y", "scale_x")]
            starts = [float(rope_options.get(k, 0.0)) for k in ("shift_t", "shift_y", "shift_x")]
        else:
            scale = self.config.rope_scale_factor
            if self.config.model_dim == PRO_WIDTH and h * w >= PRO_SCALE_PIXELS:
                scale = PRO_SCALE
            scales = list(scale)
        axes = [torch.arange(n, dtype=torch.float32, device=device) / s + start
                for n, s, start in zip(counts, scales, starts)]
        grid = torch.meshgrid(*axes, indexing="ij")
        return torch.stack(grid, dim=-1).reshape(1, -1, 3)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                time_dim_replace: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        # x [B, in, T, H, W] (or [B, in, H, W] for the image model), timestep [B] (sigma x 1000),
        # context [B, L, text_dim], y [B, pooled_dim], time_dim_replace [B, C, T0, H, W]
        options = dict(transformer_options or {})
        image = x.ndim == 4
        if image:
            x = x.unsqueeze(2)
        if x.ndim != 5 or x.shape[1] != self.config.in_visual_dim:
            raise Kandinsky5ConfigError(f"Kandinsky 5: the network takes [B, {self.config.in_visual_dim}, T, H, W] "
                                        f"(latent and conditioning), got {tuple(x.shape)}")
        if y is None:
            raise Kandinsky5ConfigError("Kandinsky 5: no pooled text vector (y); it comes from CLIP-L")
        b, _, t, h, w = x.shape
        pt, ph, pw = self.patch_size
        if t % pt or h % ph or w % pw:
            raise Kandinsky5ConfigError(f"Kandinsky 5: latent {t}x{h}x{w} is not a multiple of the {self.patch_size} "
                                        f"patch")
        if t > DENSE_FRAMES:
            raise Kandinsky5ConfigError(f"Kandinsky 5: {t} latent frames; above {DENSE_FRAMES} ComfyUI switches to "
                                        "sparse (NABLA) attention, which is not written here")
        if time_dim_replace is not None:
            x = x.clone()
            frames = min(time_dim_replace.shape[2], t)
            x[:, :time_dim_replace.shape[1], :frames] = time_dim_replace[:, :, :frames].to(x)
        time = self.time_embeddings(timestep, x.dtype) + self.pooled_text_embeddings(y.to(x.dtype))  # [B, time_dim]
        text = self.text_embeddings(context.to(x.dtype))  # [B, L, C]
        text_rope = self.rope_1d(torch.arange(text.shape[1], dtype=torch.float32, device=x.device)[None, :, None])
        for block in self.text_transformer_blocks:
            text = block(text, time, text_rope, transformer_options=options)
        # [B, C, T, H, W] -> [B, T/pt, H/ph, W/pw, pt ph pw C] tokens
        patches = x.permute(0, 2, 3, 4, 1).reshape(b, t // pt, pt, h // ph, ph, w // pw, pw, -1)
        patches = patches.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(b, -1, pt * ph * pw * x.shape[1])
        visual = self.visual_embeddings.in_layer(patches)  # [B, N, C]
        rope = self.rope_3d(self._visual_positions(t, h, w, options, x.device))
        visual = self._blocks(visual, text, time, rope, options)
        out = self.out_layer(visual, time)  # [B, N, pt ph pw out]
        out = out.reshape(b, t // pt, h // ph, w // pw, -1, pt, ph, pw)
        out = out.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(b, -1, t, h, w)
        return out.squeeze(2) if image else out

    def _blocks(self, visual: torch.Tensor, text: torch.Tensor, time: torch.Tensor, rope: torch.Tensor,
                options: dict[str, Any]) -> torch.Tensor:
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        total = len(self.visual_transformer_blocks)

        def run(index: int, streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            block = self.visual_transformer_blocks[index]
            options["block_type"], options["block_index"], options["total_blocks"] = "double", index, total
            if ("double_block", index) in blocks_replace:
                def original(args: dict[str, Any]) -> dict[str, Any]:
                    return {"x": block(args["x"], args["context"], args["time_embed"], args["freqs"],
                                       transformer_options=args.get("transformer_options"))}

                out = blocks_replace[("double_block", index)](
                    {"x": streams["img"], "context": text, "time_embed": time, "freqs": rope, "sparse_params": None,
                     "transformer_options": options}, {"original_block": original})["x"]
            else:
                out = block(streams["img"], text, time, rope, transformer_options=options)
            return {"img": out}

        def rest(streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            for index in range(1, total):
                streams = run(index, streams)
            return streams

        if total == 0:
            return visual
        return run_split_blocks(options, lambda s: run(0, s), rest, {"img": visual})["img"]


__all__ = ["Kandinsky5Config", "Kandinsky5ConfigError", "Kandinsky5Transformer", "default_axes"]
