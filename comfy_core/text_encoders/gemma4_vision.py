"""Gemma 4 E2B / E4B's vision encoder and its projector into the text tower: images as soft tokens
for TextGenerate, as ComfyUI's `comfy/text_encoders/gemma4.py` (`Gemma4VisionEncoder`,
`Gemma4MultiModalProjector`, `Gemma4_Tokenizer`'s image preparation) runs them; written here.

Weights (ComfyUI's names in the file, besides the text model): `vision_model.patch_embedder.
{input_proj.weight, position_embedding_table}`, `vision_model.encoder.layers.N.` with the text
block's four sandwich norms, `self_attn.{q,k,v,o}_proj.linear.weight`, `self_attn.{q,k}_norm.weight`,
`mlp.{gate,up,down}_proj.linear.weight` (each linear with optional clipping scalars `input_min`,
`input_max`, `output_min`, `output_max`, read when the file has them), and
`multi_modal_projector.embedding_projection.weight`. Shapes give the widths, heads (the per-head
norm's width is the head width) and depth; ComfyUI's config gives patch 16, pooling 3, RMS eps
1e-6, RoPE theta 100.

Preparation (ComfyUI's): the frame as uint8 (`clip(255 x)` truncated), resized (bicubic,
antialiased) keeping its aspect to at most `max_soft_tokens` (280) x 9 patches of 16 px, both sides
multiples of 48; then 0..1. The encoder: the image cut into 16 x 16 patches (rows, then columns,
each patch's pixels row-major with the channels last), padded with empty patches at position
(-1, -1) to `max_soft_tokens` x 9; each patch mapped to `2 x - 1` then by `input_proj`, plus the
position table's x row and y row (none for padding); blocks as the text tower's (sandwich norms,
q / k per-head RMS norm with weights, v without, scale 1, tanh-GELU MLP) with bidirectional
attention (padding keys masked) and a 2-D RoPE (theta 100: the first half of each head turned by
the x position, the second by the y, rotate-half within each half); padding zeroed, then 3 x 3
patches averaged per soft token by position (empty tokens dropped) and scaled by sqrt(width); the
projector RMS-norms without a weight and projects to the text width. The soft tokens replace the
prompt's `<|image|>` token (the image turn is `\\n\\n<|image><|image|><image|>\\n\\n` after the
prompt), entering the tower as embeddings (not scaled) with token id 0 for the per-layer inputs.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.errors import TextEncoderDetectionError, TextEncoderKeyError

PREFIX = "vision_model."
PROJECTOR = "multi_modal_projector.embedding_projection.weight"
MARKER = PREFIX + "patch_embedder.input_proj.weight"
PATCH, POOL, EPS, ROPE_THETA = 16, 3, 1e-6, 100.0
MAX_SOFT_TOKENS = 280  # ComfyUI's default per image
VIDEO_SOFT_TOKENS = 70  # and per video frame
CLIP_BUFFERS = ("input_min", "input_max", "output_min", "output_max")


class Gemma4VisionError(TextEncoderDetectionError, TextEncoderKeyError, ValueError):
    """A Gemma 4 vision tower's tensors are incomplete or inconsistent (names the key)."""


def holds_vision(tensors: Mapping[str, Any]) -> bool:
    return MARKER in tensors and PROJECTOR in tensors


# --- preparation ---

def target_size(height: int, width: int, max_soft_tokens: int = MAX_SOFT_TOKENS) -> tuple[int, int]:
    """The resized (height, width) of an image (ComfyUI's `_get_aspect_ratio_preserving_size`)."""
    max_patches = max_soft_tokens * POOL * POOL
    target_px = max_patches * PATCH ** 2
    factor = math.sqrt(target_px / (height * width))
    side = POOL * PATCH
    h, w = math.floor(factor * height / side) * side, math.floor(factor * width / side) * side
    if h == 0 and w == 0:
        raise ValueError(f"gemma4: cannot resize a {height}x{width} image to a whole number of {side}-px cells")
    longest = (max_patches // POOL ** 2) * side
    if h == 0:
        h, w = side, min(math.floor(width / height) * side, longest)
    elif w == 0:
        w, h = side, min(math.floor(height / width) * side, longest)
    if h * w > target_px:
        raise ValueError(f"gemma4: resizing [{height}x{width}] to [{h}x{w}] exceeds the patch budget")
    return h, w


def prepare_image(frame: torch.Tensor, max_soft_tokens: int = MAX_SOFT_TOKENS) -> torch.Tensor:
    """One frame `[H, W, C]` in 0..1 -> `[1, H', W', 3]` in 0..1 at the encoder's size."""
    import torchvision.transforms.functional as TVF

    pixels = (frame[..., :3].clamp(0, 1) * 255).to(torch.uint8).movedim(-1, 0)  # [3, H, W]
    h, w = target_size(pixels.shape[1], pixels.shape[2], max_soft_tokens)
    if (h, w) != tuple(pixels.shape[1:]):
        pixels = TVF.resize(pixels, [h, w], interpolation=TVF.InterpolationMode.BICUBIC, antialias=True)
    return (pixels.float() / 255.0).movedim(0, -1)[None]


def patchify(pixels: torch.Tensor, max_soft_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`[B, 3, H, W]` -> patches `[B, N, 16 * 16 * 3]` (padded to `max_soft_tokens` x 9) and their
    (x, y) positions `[B, N, 2]` (-1 for padding)."""
    batch, _, height, width = pixels.shape
    ph, pw = height // PATCH, width // PATCH
    patches = pixels.reshape(batch, -1, ph, PATCH, pw, PATCH).permute(0, 2, 4, 3, 5, 1).reshape(batch, ph * pw, -1)
    y, x = torch.meshgrid(torch.arange(ph, device=pixels.device), torch.arange(pw, device=pixels.device), indexing="ij")
    positions = torch.stack([x.flatten(), y.flatten()], dim=-1)[None].expand(batch, -1, -1)
    padding = max_soft_tokens * POOL * POOL - ph * pw
    if padding > 0:
        patches = torch.cat([patches, patches.new_zeros(batch, padding, patches.shape[-1])], dim=1)
        positions = torch.cat([positions, positions.new_full((batch, padding, 2), -1)], dim=1)
    return patches, positions


# --- the modules (ComfyUI's names) ---

def _unit_rms(x: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)


class _Norm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (_unit_rms(x.float()) * self.weight.float()).to(x.dtype)


class ClippedLinear(nn.Module):
    """A linear without bias whose input and output are clamped to the file's scalars (±inf when absent)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = nn.Linear(inputs, outputs, bias=False)
        for name in CLIP_BUFFERS:
            self.register_buffer(name, torch.empty(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clamp(self.input_min.to(x.dtype), self.input_max.to(x.dtype))
        x = F.linear(x, self.linear.weight.to(x.dtype))
        return x.clamp(self.output_min.to(x.dtype), self.output_max.to(x.dtype))


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj, self.k_proj = ClippedLinear(width, heads * head_dim), ClippedLinear(width, heads * head_dim)
        self.v_proj, self.o_proj = ClippedLinear(width, heads * head_dim), ClippedLinear(heads * head_dim, width)
        self.q_norm, self.k_norm = _Norm(head_dim), _Norm(head_dim)


class _MLP(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = ClippedLinear(width, inner), ClippedLinear(width, inner), \
            ClippedLinear(inner, width)


class _Layer(nn.Module):
    def __init__(self, width: int, inner: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.self_attn = _Attention(width, heads, head_dim)
        self.mlp = _MLP(width, inner)
        for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward"):
            setattr(self, f"{norm}_layernorm", _Norm(width))


class _Layers(nn.Module):
    def __init__(self, depth: int, width: int, inner: int, heads: int, head_dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer(width, inner, heads, head_dim) for _ in range(depth))


class _PatchEmbedder(nn.Module):
    def __init__(self, width: int, table: int) -> None:
        super().__init__()
        self.input_proj = nn.Linear(3 * PATCH * PATCH, width, bias=False)
        self.position_embedding_table = nn.Parameter(torch.empty(2, table, width))


class _Encoder(nn.Module):
    def __init__(self, depth: int, width: int, inner: int, heads: int, head_dim: int, table: int) -> None:
        super().__init__()
        self.patch_embedder = _PatchEmbedder(width, table)
        self.encoder = _Layers(depth, width, inner, heads, head_dim)


class _Projector(nn.Module):
    def __init__(self, width: int, text_width: int) -> None:
        super().__init__()
        self.embedding_projection = nn.Linear(width, text_width, bias=False)


def rope_2d(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin `[B, N, head_dim]` float32: the first half of a head for x, the second for y, each
    half a rotate-half RoPE of theta 100."""
    half = head_dim // 2
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, half, 2, dtype=torch.float32, device=positions.device) / half))
    cos, sin = [], []
    for axis in range(2):
        freqs = positions[..., axis].float()[..., None] * inv  # [B, N, half / 2]
        angles = torch.cat([freqs, freqs], dim=-1)
        cos.append(angles.cos())
        sin.append(angles.sin())
    return torch.cat(cos, dim=-1), torch.cat(sin, dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x `[B, N, H, d]`: each half rotated (rotate-half) by its axis' angles (cos / sin `[B, N, d]`)."""
    half = x.shape[-1] // 2
    out = []
    for part, c, s in ((x[..., :half], cos[..., :half], sin[..., :half]),
                       (x[..., half:], cos[..., half:], sin[..., half:])):
        quarter = part.shape[-1] // 2
        rotated = torch.cat((-part[..., quarter:], part[..., :quarter]), dim=-1)
        out.append(part * c[:, :, None] + rotated * s[:, :, None])
    return torch.cat(out, dim=-1)


class Gemma4Vision(nn.Module):
    """The vision encoder (`vision_model`) and its projector (`multi_modal_projector`)."""

    def __init__(self, depth: int, width: int, inner: int, heads: int, head_dim: int, table: int,
                 text_width: int) -> None:
        super().__init__()
        self.head_dim, self.heads, self.width = head_dim, heads, width
        self.vision_model = _Encoder(depth, width, inner, heads, head_dim, table)
        self.multi_modal_projector = _Projector(width, text_width)

    def forward(self, pixels: torch.Tensor, max_soft_tokens: int = MAX_SOFT_TOKENS) -> torch.Tensor:
        """Prepared images `[B, H, W, 3]` in 0..1 -> soft tokens `[B, n, text width]` float32."""
        dtype = self.vision_model.patch_embedder.input_proj.weight.dtype
        x_in = pixels.movedim(-1, 1).to(torch.float32)
        patches, positions = patchify(x_in, max_soft_tokens)
        padding = (positions == -1).all(dim=-1)  # [B, N]
        embed = self.vision_model.patch_embedder
        x = F.linear((2.0 * (patches - 0.5)).to(dtype), embed.input_proj.weight).float()
        table = embed.position_embedding_table.float()
        clamped = positions.clamp(min=0)
        pos = table[0][clamped[..., 0]] + table[1][clamped[..., 1]]
        x = x + torch.where(padding[..., None], 0.0, pos)
        cos, sin = rope_2d(positions, self.head_dim)
        bias = torch.zeros(padding.shape, dtype=torch.float32, device=x.device).masked_fill(
            padding, torch.finfo(torch.float32).min)[:, None, None, :]  # [B, 1, 1, N]: padding keys
        for layer in self.vision_model.encoder.layers:
            x = self._layer(layer, x, cos, sin, bias)
        x = x.masked_fill(padding[..., None], 0.0)
        soft = self._pool(x, positions, max_soft_tokens)
        projector = self.multi_modal_projector.embedding_projection
        return F.linear(_unit_rms(soft), projector.weight.float())

    def _layer(self, layer: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               bias: torch.Tensor) -> torch.Tensor:
        attn = layer.self_attn
        batch, length, _ = x.shape
        h = layer.input_layernorm(x)
        q = attn.q_norm(attn.q_proj(h).view(batch, length, self.heads, self.head_dim))
        k = attn.k_norm(attn.k_proj(h).view(batch, length, self.heads, self.head_dim))
        v = _unit_rms(attn.v_proj(h).view(batch, length, self.heads, self.head_dim))
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             attn_mask=bias, scale=1.0)
        x = x + layer.post_attention_layernorm(attn.o_proj(out.transpose(1, 2).reshape(batch, length, -1)))
        h = layer.pre_feedforward_layernorm(x)
        mlp = layer.mlp
        inner = F.gelu(mlp.gate_proj(h), approximate="tanh") * mlp.up_proj(h)
        return x + layer.post_feedforward_layernorm(mlp.down_proj(inner))

    def _pool(self, x: torch.Tensor, positions: torch.Tensor, length: int) -> torch.Tensor:
        clamped = positions.clamp(min=0)
        max_x = clamped[..., 0].max(dim=-1, keepdim=True)[0] + 1
        cell = torch.div(clamped, POOL, rounding_mode="floor")
        index = cell[..., 0] + (max_x // POOL) * cell[..., 1]
        weights = F.one_hot(index.long(), length).float() / (POOL * POOL)  # [B, N, length]
        pooled = weights.transpose(1, 2) @ x.float()
        valid = ~(weights == 0).all(dim=1)  # [B, length]
        if valid.any() and not valid.all():
            pooled = pooled[:, valid[0]]
        return pooled * self.width ** 0.5


def build_vision(tensors: Mapping[str, Any], read: Any, text_width: int, dtype: torch.dtype | None) -> Gemma4Vision:
    """The vision tower of a file (`tensors`: names -> shapes; `read(name) -> tensor`)."""
    from comfy_core.checkpoint.meta_build import meta_build

    def shape(key: str) -> tuple[int, ...]:
        if key not in tensors:
            raise Gemma4VisionError(f"Gemma 4 vision tower lacks {key!r}")
        return tuple(int(d) for d in tensors[key].shape)

    width = shape(MARKER)[0]
    table = shape(PREFIX + "patch_embedder.position_embedding_table")[1]
    pattern = re.compile(re.escape(PREFIX) + r"encoder\.layers\.(\d+)\.")
    depth = 1 + max((int(m.group(1)) for name in tensors for m in [pattern.match(name)] if m), default=-1)
    if depth < 1:
        raise Gemma4VisionError("Gemma 4 vision tower has no encoder layers")
    base = PREFIX + "encoder.layers.0."
    head_dim = shape(base + "self_attn.q_norm.weight")[0]
    heads = shape(base + "self_attn.q_proj.linear.weight")[0] // head_dim
    inner = shape(base + "mlp.gate_proj.linear.weight")[0]
    if shape(PROJECTOR) != (text_width, width):
        raise Gemma4VisionError(f"Gemma 4 key {PROJECTOR!r}: expected shape {(text_width, width)}, "
                                f"got {shape(PROJECTOR)}")
    with meta_build():
        module = Gemma4Vision(depth, width, inner, heads, head_dim, table, text_width)
    state = {}
    for name, expected in module.state_dict().items():
        key = name if name.startswith("multi_modal_projector.") else name
        if key in tensors:
            tensor = read(key)
            if tuple(tensor.shape) != tuple(expected.shape):
                raise Gemma4VisionError(f"Gemma 4 key {key!r}: expected shape {tuple(expected.shape)}, "
                                        f"got {tuple(tensor.shape)}")
            state[name] = tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
        elif name.rsplit(".", 1)[-1] in CLIP_BUFFERS:  # no clipping stored: unbounded
            state[name] = torch.tensor(float("inf") if name.endswith("max") else float("-inf"))
        else:
            raise Gemma4VisionError(f"Gemma 4 vision tower lacks {key!r}")
    module.load_state_dict(state, assign=True)
    module.eval()
    module.requires_grad_(False)
    return module


__all__ = ["Gemma4Vision", "Gemma4VisionError", "MAX_SOFT_TOKENS", "build_vision", "holds_vision", "patchify",
           "prepare_image", "rope_2d", "target_size"]
