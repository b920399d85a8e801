"""Building blocks of the MMDiT (Esser et al. 2024, "Scaling Rectified Flow Transformers for
High-Resolution Image Synthesis", sec. 4 and fig. 2): patch and vector embedders, the adaLN
"dismantled" DiT block (Peebles & Xie 2023, "Scalable Diffusion Models with Transformers"), the
joint block that attends over text and image tokens together, and the final layer.

Behaviour and parameter names follow SAI's reference code as ComfyUI carries it
(`comfy/ldm/modules/diffusionmodules/mmdit.py`: `x_embedder.proj`, `t_embedder.mlp.0/2`,
`y_embedder.mlp.0/2`, `{context,x}_block.{adaLN_modulation.1, attn.qkv, attn.proj, attn.ln_q,
attn.ln_k, attn2.*, mlp.fc1, mlp.fc2}`, `final_layer.{linear, adaLN_modulation.1}`), so SAI /
ComfyUI files load by plain name match. SD3.5's QK-norm is an RMSNorm per head (`qk_norm="rms"`);
SD3.5-medium's MMDiT-X blocks add a second, image-only self-attention (`attn2`) with its own three
modulation chunks (`x_block_self_attn`). Constructors take ComfyUI's arguments (`dtype`,
`device`, `operations`: the layer namespace, torch.nn's by default).

Attention goes through `comfy_core.attention.calling.attend`, read at every call:
the backend the model's patcher chose (SDPA by default), or a node pack's replacement.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.attention import calling
from comfy_core.models.swiglu import SwiGLUFeedForward
from comfy_core.models.unet_blocks import operations_or_default, timestep_embedding


def _gelu_tanh() -> nn.Module:
    return nn.GELU(approximate="tanh")


def modulate(x: torch.Tensor, shift: torch.Tensor | None, scale: torch.Tensor) -> torch.Tensor:
    """adaLN: `x * (1 + scale) + shift`, `x` `[B, L, D]`, `shift`/`scale` `[B, D]` (no shift:
    zero, as the scale-only modulation)."""
    if shift is None:
        shift = torch.zeros_like(scale)
    return torch.addcmul(shift.unsqueeze(1), x, 1 + scale.unsqueeze(1))


def pad_to_patch_size(img: torch.Tensor, patch_size: tuple[int, ...] = (2, 2),
                      padding_mode: str = "circular") -> torch.Tensor:
    """`img` `[B, C, *spatial]` padded at the end of each spatial axis up to a multiple of the
    patch size (ComfyUI's `common_dit.pad_to_patch_size`: circular, i.e. wrapped, by default)."""
    pad: tuple[int, ...] = ()
    for axis in range(img.ndim - 2):
        missing = (patch_size[axis] - img.shape[axis + 2] % patch_size[axis]) % patch_size[axis]
        pad = (0, missing) + pad  # F.pad lists the last axis first
    if not any(pad):
        return img
    return F.pad(img, pad, mode=padding_mode)


def sincos_1d(embed_dim: int, pos: torch.Tensor) -> torch.Tensor:
    """Transformer sin/cos embedding of positions `pos` (any shape, M values) -> `[M, embed_dim]`,
    sin half first (the MAE / DiT `get_1d_sincos_pos_embed_from_grid` order)."""
    omega = torch.arange(embed_dim // 2, device=pos.device, dtype=pos.dtype) / (embed_dim / 2.0)
    omega = 1.0 / 10000 ** omega  # [D/2]
    angles = pos.reshape(-1)[:, None] * omega[None]  # [M, D/2]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)  # [M, D]


def get_2d_sincos_pos_embed_torch(embed_dim: int, w: int, h: int, val_center: float = 7.5,
                                  val_magnitude: float = 7.5, device: Any = None,
                                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A position embedding computed for an `h x w` grid `[h*w, embed_dim]` (width half first),
    positions spread over `center +- magnitude` on the shorter side and proportionally on the
    longer one: what ComfyUI's MMDiT uses when the model carries no `pos_embed` table."""
    small = min(h, w)
    span_h = (h / small) * val_magnitude
    span_w = (w / small) * val_magnitude
    grid_h, grid_w = torch.meshgrid(
        torch.linspace(-span_h + val_center, span_h + val_center, h, device=device, dtype=dtype),
        torch.linspace(-span_w + val_center, span_w + val_center, w, device=device, dtype=dtype),
        indexing="ij")  # [h, w] each
    return torch.cat([sincos_1d(embed_dim // 2, grid_w), sincos_1d(embed_dim // 2, grid_h)], dim=1)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last axis (Zhang & Sennrich 2019), the weight cast to `x`'s dtype."""
    if weight is not None:
        weight = weight.to(dtype=x.dtype, device=x.device)
    return F.rms_norm(x, (x.shape[-1],), weight=weight, eps=eps)


class RMSNorm(nn.Module):
    """RMSNorm with an optional learnt scale `weight` `[dim]` (the QK-norm of SD3.5)."""

    def __init__(self, dim: int, elementwise_affine: bool = False, eps: float = 1e-6, device: Any = None,
                 dtype: Any = None, **kwargs: Any) -> None:
        super().__init__()
        self.eps = eps
        self.learnable_scale = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Mlp(nn.Module):
    """`fc1 -> act -> fc2` (the ViT MLP); GELU with the tanh approximation in MMDiT blocks."""

    def __init__(self, in_features: int, hidden_features: int | None = None, out_features: int | None = None,
                 act_layer: Callable[[], nn.Module] = nn.GELU, norm_layer: Any = None, bias: bool = True,
                 drop: float = 0.0, use_conv: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        factory = {"dtype": dtype, "device": device}
        if use_conv:
            self.fc1 = ops.Conv2d(in_features, hidden_features, kernel_size=1, bias=bias, **factory)
            self.fc2 = ops.Conv2d(hidden_features, out_features, kernel_size=1, bias=bias, **factory)
        else:
            self.fc1 = ops.Linear(in_features, hidden_features, bias=bias, **factory)
            self.fc2 = ops.Linear(hidden_features, out_features, bias=bias, **factory)
        self.act = act_layer()
        self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.norm(self.act(self.fc1(x))))


class PatchEmbed(nn.Module):
    """`[B, C, H, W] -> [B, (H/p)*(W/p), D]`: a stride-`p` convolution (`proj`) over the image,
    padded (circularly) to a multiple of the patch size first when `dynamic_img_pad`."""

    def __init__(self, img_size: int | None = 224, patch_size: int = 16, in_chans: int = 3, embed_dim: int = 768,
                 norm_layer: Any = None, flatten: bool = True, bias: bool = True, strict_img_size: bool = True,
                 dynamic_img_pad: bool = True, padding_mode: str = "circular", conv3d: bool = False,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        if isinstance(patch_size, (tuple, list)):
            self.patch_size = tuple(patch_size)
        else:
            self.patch_size = (patch_size,) * (3 if conv3d else 2)
        self.padding_mode = padding_mode
        self.flatten = flatten
        self.strict_img_size = strict_img_size
        self.dynamic_img_pad = dynamic_img_pad
        conv = ops.Conv3d if conv3d else ops.Conv2d
        self.proj = conv(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias,
                         dtype=dtype, device=device)
        self.norm = norm_layer(embed_dim) if norm_layer else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dynamic_img_pad:
            x = pad_to_patch_size(x, self.patch_size, padding_mode=self.padding_mode)
        x = self.proj(x)  # [B, D, H/p, W/p]
        if self.flatten:
            x = x.flatten(2).transpose(1, 2)  # [B, L, D]
        return self.norm(x)


class TimestepEmbedder(nn.Module):
    """Timestep `[B]` -> `[B, D]`: a 256-wide sinusoidal embedding (cos half first) then
    `Linear -> SiLU -> Linear` (`mlp.0`, `mlp.2`)."""

    def __init__(self, hidden_size: int, frequency_embedding_size: int = 256, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.mlp = nn.Sequential(
            ops.Linear(frequency_embedding_size, hidden_size, bias=True, dtype=dtype, device=device),
            nn.SiLU(),
            ops.Linear(hidden_size, hidden_size, bias=True, dtype=dtype, device=device),
        )
        self.frequency_embedding_size = frequency_embedding_size

    def forward(self, t: torch.Tensor, dtype: torch.dtype, **kwargs: Any) -> torch.Tensor:
        t_freq = timestep_embedding(t, self.frequency_embedding_size).to(dtype)  # [B, 256]
        return self.mlp(t_freq)


class VectorEmbedder(nn.Module):
    """A flat vector `[B, in]` (the pooled CLIP-L + CLIP-G text embedding) -> `[B, D]`."""

    def __init__(self, input_dim: int, hidden_size: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.mlp = nn.Sequential(
            ops.Linear(input_dim, hidden_size, bias=True, dtype=dtype, device=device),
            nn.SiLU(),
            ops.Linear(hidden_size, hidden_size, bias=True, dtype=dtype, device=device),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def split_qkv(qkv: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fused `[B, L, 3*H*d]` -> q, k, v each `[B, L, H, d]`."""
    qkv = qkv.reshape(qkv.shape[0], qkv.shape[1], 3, -1, head_dim).movedim(2, 0)  # [3, B, L, H, d]
    return qkv[0], qkv[1], qkv[2]


def _qk_norm(kind: str | None, head_dim: int, ops: Any, dtype: Any, device: Any) -> nn.Module:
    if kind == "rms":
        return RMSNorm(head_dim, elementwise_affine=True, eps=1.0e-6, dtype=dtype, device=device)
    if kind == "ln":
        return ops.LayerNorm(head_dim, elementwise_affine=True, eps=1.0e-6, dtype=dtype, device=device)
    if kind is None:
        return nn.Identity()
    raise ValueError(f"MMDiT: unknown qk_norm {kind!r} (expected 'rms', 'ln' or None)")


class SelfAttention(nn.Module):
    """Fused `qkv` projection with per-head QK-norm (`ln_q`, `ln_k`) and an output `proj`; the
    attention itself is run by the caller (jointly over context and image tokens)."""

    ATTENTION_MODES = ("xformers", "torch", "torch-hb", "math", "debug")

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False, qk_scale: float | None = None,
                 proj_drop: float = 0.0, attn_mode: str = "xformers", pre_only: bool = False,
                 qk_norm: str | None = None, rmsnorm: bool = False, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.attn_mode = attn_mode
        self.pre_only = pre_only
        self.qkv = ops.Linear(dim, dim * 3, bias=qkv_bias, dtype=dtype, device=device)
        if not pre_only:
            self.proj = ops.Linear(dim, dim, dtype=dtype, device=device)
        self.ln_q = _qk_norm(qk_norm, self.head_dim, ops, dtype, device)
        self.ln_k = _qk_norm(qk_norm, self.head_dim, ops, dtype, device)

    def pre_attention(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`[B, L, D]` -> q, k, v each `[B, L, D]` (q and k normalised per head)."""
        q, k, v = split_qkv(self.qkv(x), self.head_dim)  # [B, L, H, d] each
        q = self.ln_q(q).reshape(q.shape[0], q.shape[1], -1)
        k = self.ln_k(k).reshape(k.shape[0], k.shape[1], -1)
        v = v.reshape(v.shape[0], v.shape[1], -1)
        return q, k, v

    def post_attention(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_only:
            raise RuntimeError("a pre-only attention has no output projection")
        return self.proj(x)

    def forward(self, x: torch.Tensor, transformer_options: dict | None = None) -> torch.Tensor:
        q, k, v = self.pre_attention(x)
        out = calling.attend(q, k, v, self.num_heads,
                             transformer_options={} if transformer_options is None else transformer_options)
        return self.post_attention(out)


class DismantledBlock(nn.Module):
    """One stream (context or image) of a joint block: adaLN-modulated attention inputs before
    the joint attention (`pre_attention`) and the gated residual attention output and MLP after
    it (`post_attention`). `pre_only` (the last context block): only the attention inputs, two
    modulation chunks. `x_block_self_attn` (MMDiT-X): a second self-attention on the image
    tokens alone, nine chunks (shift/scale/gate of attn, MLP and attn2)."""

    ATTENTION_MODES = ("xformers", "torch", "torch-hb", "math", "debug")

    def __init__(self, hidden_size: int, num_heads: int, mlp_ratio: float = 4.0, attn_mode: str = "xformers",
                 qkv_bias: bool = False, pre_only: bool = False, rmsnorm: bool = False,
                 scale_mod_only: bool = False, swiglu: bool = False, qk_norm: str | None = None,
                 x_block_self_attn: bool = False, dtype: Any = None, device: Any = None, operations: Any = None,
                 **block_kwargs: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        if x_block_self_attn and (pre_only or scale_mod_only):
            raise ValueError("MMDiT: an MMDiT-X block can be neither pre-only nor scale-modulated only")
        factory = {"dtype": dtype, "device": device}

        def norm() -> nn.Module:
            if rmsnorm:
                return RMSNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            return ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory)

        attention = dict(dim=hidden_size, num_heads=num_heads, qkv_bias=qkv_bias, attn_mode=attn_mode,
                         qk_norm=qk_norm, rmsnorm=rmsnorm, operations=ops, **factory)
        self.norm1 = norm()
        self.attn = SelfAttention(pre_only=pre_only, **attention)
        self.x_block_self_attn = x_block_self_attn
        if x_block_self_attn:
            self.attn2 = SelfAttention(pre_only=False, **attention)
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        if not pre_only:
            self.norm2 = norm()
            if swiglu:
                self.mlp = SwiGLUFeedForward(hidden_size, int(2 * mlp_hidden_dim / 3), 256, None,
                                             {"operations": ops, **factory})
            else:
                self.mlp = Mlp(in_features=hidden_size, hidden_features=mlp_hidden_dim, act_layer=_gelu_tanh,
                               operations=ops, **factory)
        self.scale_mod_only = scale_mod_only
        if x_block_self_attn:
            n_mods = 9
        elif not scale_mod_only:
            n_mods = 2 if pre_only else 6
        else:
            n_mods = 1 if pre_only else 4
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(), ops.Linear(hidden_size, n_mods * hidden_size, bias=True, **factory))
        self.pre_only = pre_only

    def pre_attention(self, x: torch.Tensor, c: torch.Tensor) -> tuple[tuple[torch.Tensor, ...], tuple | None]:
        """x `[B, L, D]`, c `[B, D]` -> ((q, k, v), what `post_attention` needs after the residual)."""
        mods = self.adaLN_modulation(c)  # [B, n*D]
        if self.pre_only:
            if self.scale_mod_only:
                shift_msa, scale_msa = None, mods
            else:
                shift_msa, scale_msa = mods.chunk(2, dim=1)
            return self.attn.pre_attention(modulate(self.norm1(x), shift_msa, scale_msa)), None
        if self.scale_mod_only:
            scale_msa, gate_msa, scale_mlp, gate_mlp = mods.chunk(4, dim=1)
            shift_msa = shift_mlp = None
        else:
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods.chunk(6, dim=1)
        qkv = self.attn.pre_attention(modulate(self.norm1(x), shift_msa, scale_msa))
        return qkv, (x, gate_msa, shift_mlp, scale_mlp, gate_mlp)

    def post_attention(self, attn: torch.Tensor, x: torch.Tensor, gate_msa: torch.Tensor,
                       shift_mlp: torch.Tensor | None, scale_mlp: torch.Tensor, gate_mlp: torch.Tensor) -> torch.Tensor:
        """attn `[B, L, D]` (this stream's share of the joint attention) -> the block's output."""
        x = x + gate_msa.unsqueeze(1) * self.attn.post_attention(attn)
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))

    def pre_attention_x(self, x: torch.Tensor, c: torch.Tensor) -> tuple:
        """MMDiT-X: inputs of the joint attention and of the image-only `attn2`, from one norm."""
        (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp,
         shift_msa2, scale_msa2, gate_msa2) = self.adaLN_modulation(c).chunk(9, dim=1)
        x_norm = self.norm1(x)
        qkv = self.attn.pre_attention(modulate(x_norm, shift_msa, scale_msa))
        qkv2 = self.attn2.pre_attention(modulate(x_norm, shift_msa2, scale_msa2))
        return qkv, qkv2, (x, gate_msa, shift_mlp, scale_mlp, gate_mlp, gate_msa2)

    def post_attention_x(self, attn: torch.Tensor, attn2: torch.Tensor, x: torch.Tensor, gate_msa: torch.Tensor,
                         shift_mlp: torch.Tensor, scale_mlp: torch.Tensor, gate_mlp: torch.Tensor,
                         gate_msa2: torch.Tensor) -> torch.Tensor:
        out1 = gate_msa.unsqueeze(1) * self.attn.post_attention(attn)
        out2 = gate_msa2.unsqueeze(1) * self.attn2.post_attention(attn2)
        x = torch.stack([x, out1, out2], dim=0).sum(dim=0)  # the three summed in one reduction, as SAI
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))

    def forward(self, x: torch.Tensor, c: torch.Tensor, transformer_options: dict | None = None) -> torch.Tensor:
        """The block on its own stream only (self-attention over `x`)."""
        if self.pre_only:
            raise RuntimeError("a pre-only block cannot run on its own")
        options = {} if transformer_options is None else transformer_options
        if self.x_block_self_attn:
            qkv, qkv2, intermediates = self.pre_attention_x(x, c)
            attn = calling.attend(*qkv, self.attn.num_heads, transformer_options=options)
            attn2 = calling.attend(*qkv2, self.attn2.num_heads, transformer_options=options)
            return self.post_attention_x(attn, attn2, *intermediates)
        qkv, intermediates = self.pre_attention(x, c)
        attn = calling.attend(*qkv, self.attn.num_heads, transformer_options=options)
        return self.post_attention(attn, *intermediates)


def block_mixing(context: torch.Tensor | None, x: torch.Tensor, context_block: DismantledBlock,
                 x_block: DismantledBlock, c: torch.Tensor, use_checkpoint: bool = False,
                 transformer_options: dict | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """One joint block: context `[B, T, D]` and image `[B, L, D]` tokens attend together
    (`[B, T+L, D]`, context first), then each stream gets its own residual and MLP. Returns
    (context, or None after a pre-only context block; image tokens)."""
    options = {} if transformer_options is None else transformer_options
    if use_checkpoint and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(_block_mixing, context, x, context_block, x_block, c, options,
                                                 use_reentrant=False)
    return _block_mixing(context, x, context_block, x_block, c, options)


def _block_mixing(context: torch.Tensor, x: torch.Tensor, context_block: DismantledBlock, x_block: DismantledBlock,
                  c: torch.Tensor, transformer_options: dict) -> tuple[torch.Tensor | None, torch.Tensor]:
    context_qkv, context_intermediates = context_block.pre_attention(context, c)
    if x_block.x_block_self_attn:
        x_qkv, x_qkv2, x_intermediates = x_block.pre_attention_x(x, c)
    else:
        x_qkv, x_intermediates = x_block.pre_attention(x, c)
    q, k, v = (torch.cat((context_qkv[i], x_qkv[i]), dim=1) for i in range(3))  # [B, T+L, D]
    attn = calling.attend(q, k, v, x_block.attn.num_heads, transformer_options=transformer_options)
    text_len = context_qkv[0].shape[1]
    context_attn, x_attn = attn[:, :text_len], attn[:, text_len:]
    context = None if context_block.pre_only else context_block.post_attention(context_attn, *context_intermediates)
    if x_block.x_block_self_attn:
        attn2 = calling.attend(*x_qkv2, x_block.attn2.num_heads,
                               transformer_options=transformer_options)
        x = x_block.post_attention_x(x_attn, attn2, *x_intermediates)
    else:
        x = x_block.post_attention(x_attn, *x_intermediates)
    return context, x


class JointBlock(nn.Module):
    """A context stream and an image stream (`context_block`, `x_block`) joined by one attention."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        pre_only = kwargs.pop("pre_only")
        qk_norm = kwargs.pop("qk_norm", None)
        x_block_self_attn = kwargs.pop("x_block_self_attn", False)
        self.context_block = DismantledBlock(*args, pre_only=pre_only, qk_norm=qk_norm, **kwargs)
        self.x_block = DismantledBlock(*args, pre_only=False, qk_norm=qk_norm, x_block_self_attn=x_block_self_attn,
                                       **kwargs)

    def forward(self, context: torch.Tensor, x: torch.Tensor, c: torch.Tensor, use_checkpoint: bool = False,
                transformer_options: dict | None = None) -> tuple[torch.Tensor | None, torch.Tensor]:
        return block_mixing(context, x, context_block=self.context_block, x_block=self.x_block, c=c,
                            use_checkpoint=use_checkpoint, transformer_options=transformer_options)


class FinalLayer(nn.Module):
    """adaLN (shift, scale) then a linear projection to `p*p*C` values per token."""

    def __init__(self, hidden_size: int, patch_size: int, out_channels: int, total_out_channels: int | None = None,
                 dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.norm_final = ops.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6, **factory)
        width = patch_size * patch_size * out_channels if total_out_channels is None else total_out_channels
        self.linear = ops.Linear(hidden_size, width, bias=True, **factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(hidden_size, 2 * hidden_size, bias=True, **factory))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)  # [B, D] each
        return self.linear(modulate(self.norm_final(x), shift, scale))  # [B, L, p*p*C]


class SelfAttentionContext(nn.Module):
    """Plain self-attention over text tokens (the optional context processor)."""

    def __init__(self, dim: int, heads: int = 8, dim_head: int = 64, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.heads = heads
        self.dim_head = dim // heads
        self.qkv = ops.Linear(dim, dim * 3, bias=True, dtype=dtype, device=device)
        self.proj = ops.Linear(dim, dim, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = split_qkv(self.qkv(x), self.dim_head)  # [B, T, H, d]
        b, t = x.shape[0], x.shape[1]
        out = calling.attend(q.reshape(b, t, -1), k.reshape(b, t, -1), v.reshape(b, t, -1), self.heads)
        return self.proj(out)


class ContextProcessorBlock(nn.Module):
    def __init__(self, context_size: int, dtype: Any = None, device: Any = None, operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.norm1 = ops.LayerNorm(context_size, elementwise_affine=False, eps=1e-6, **factory)
        self.attn = SelfAttentionContext(context_size, operations=ops, **factory)
        self.norm2 = ops.LayerNorm(context_size, elementwise_affine=False, eps=1e-6, **factory)
        self.mlp = Mlp(in_features=context_size, hidden_features=context_size * 4, act_layer=_gelu_tanh,
                       operations=ops, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ContextProcessor(nn.Module):
    """Transformer layers over the raw text embedding before the context embedder."""

    def __init__(self, context_size: int, num_layers: int, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        self.layers = nn.ModuleList([ContextProcessorBlock(context_size, dtype=dtype, device=device, operations=ops)
                                     for _ in range(num_layers)])
        self.norm = ops.LayerNorm(context_size, elementwise_affine=False, eps=1e-6, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


__all__ = [
    "ContextProcessor", "DismantledBlock", "FinalLayer", "JointBlock", "Mlp", "PatchEmbed", "RMSNorm",
    "SelfAttention", "TimestepEmbedder", "VectorEmbedder", "block_mixing", "ceil_div",
    "get_2d_sincos_pos_embed_torch", "modulate", "pad_to_patch_size", "split_qkv",
]
