"""HiDream-I1's sparse (mixture-of-experts) DiT (HiDream.ai 2025, "HiDream-I1: A High-Efficient
Image Generative Foundation Model with Sparse Diffusion Transformer", arXiv 2505.22705) and
`HiDreamConfig` read from weights.

The 17B network: 16-channel Flux latents cut into 2x2 patches, 16 double-stream blocks then 32
single-stream blocks, 2560 wide (20 heads of 128), adaLN modulation from the timestep plus the
pooled CLIP-L + CLIP-G vector (2048 wide), joint attention with QK RMS norms over the whole width,
SwiGLU feed-forwards, the image stream's a mixture of experts (4 routed experts, the top 2 of a
softmax gate, weights not renormalised, plus one shared expert of half the width). Text comes in
two kinds: T5-XXL's states (projected once) and Llama 3.1 8B's hidden states of every layer, each
block reading its own layer (block i gets Llama state `llama_layers[i]`, projected by its own
`caption_projection.i`): a double block attends over `[image, T5, last Llama layer, its Llama
layer]` and keeps only the first two text parts; single blocks run over `[image, T5, last Llama,
its Llama layer]` and cut the appended layer away after each block. RoPE on (0, row, col) of the
image patches, text at position 0, axes 64 / 32 / 32.

Written here after ComfyUI's `comfy/ldm/hidream/model.py` (arguments, state-dict names, inputs:
`t` is the flow timestep `1000 * sigma`, `y` the pooled vector, `context` T5's states,
`encoder_hidden_states_llama3` `[B, layers, L, D]`, HiDream-E1's `image_cond` appended along the
width; the output negated, as ComfyUI's) and diffusers' `HiDreamImageTransformer2DModel` (the
numerics reference: its state-dict names are ComfyUI's; its pipeline negates the output and
passes `1000 * t`). Where they differ ComfyUI is followed: latents that are not square are not
padded to `max_resolution` with masked keys (diffusers does), so all positions are real tokens.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.sd3.mmdit_blocks import RMSNorm
from comfy_core.models.comfyui_names import comfyui_name
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

IMAGE_MODEL = "hidream"
PATCH = 2
ROPE_THETA = 10000
HEAD_DIM = 128  # not in the weights (the QK norms span the whole width): ComfyUI's model_detection
AXES_DIMS_ROPE = (64, 32, 32)
LLAMA_STATES = 32  # Llama 3.1 8B's hidden states the encoder hands over (ComfyUI drops the embeddings)
ACTIVATED_EXPERTS = 2  # the gate's top-k, not in the weights


class HiDreamConfigError(ValueError):
    """The HiDream weights are incomplete or inconsistent, or the parameters are impossible."""


class HiDreamInputError(ValueError):
    """An input the HiDream network cannot take (rank, channels, widths, Llama layers)."""


def default_llama_layers(blocks: int, states: int = LLAMA_STATES) -> tuple[int, ...]:
    """Which Llama state each block reads: block i reads state i, the blocks past the last state
    read the last one (ComfyUI's list: 0..31 then 31 sixteen times for 48 blocks)."""
    return tuple(min(i, states - 1) for i in range(blocks))


@dataclass(frozen=True)
class HiDreamConfig:
    """ComfyUI's `HiDreamImageTransformer2DModel` arguments (HiDream-I1's defaults) plus the
    feed-forward widths the weights show. `in_channels` / `out_channels` count latent channels."""

    patch_size: int = PATCH
    in_channels: int = 16
    out_channels: int = 16
    num_layers: int = 16
    num_single_layers: int = 32
    attention_head_dim: int = HEAD_DIM
    num_attention_heads: int = 20
    caption_channels: tuple[int, int] = (4096, 4096)  # (T5's width, Llama's width)
    text_emb_dim: int = 2048
    num_routed_experts: int = 4
    num_activated_experts: int = ACTIVATED_EXPERTS
    axes_dims_rope: tuple[int, ...] = AXES_DIMS_ROPE
    max_resolution: tuple[int, int] = (128, 128)
    llama_layers: tuple[int, ...] = default_llama_layers(48)
    expert_hidden: int = 6912  # routed experts' (and the non-MoE image MLP's) SwiGLU width
    shared_hidden: int = 3584  # the shared expert's width
    text_hidden: int = 6912  # the text stream's SwiGLU width (double blocks)

    def __post_init__(self) -> None:
        for name in ("caption_channels", "axes_dims_rope", "max_resolution", "llama_layers"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        if self.patch_size != PATCH:
            raise HiDreamConfigError(f"HiDream: only {PATCH}x{PATCH} patches, got {self.patch_size}")
        if sum(self.axes_dims_rope) != self.attention_head_dim or any(a % 2 for a in self.axes_dims_rope):
            raise HiDreamConfigError(f"HiDream: axes_dims_rope {list(self.axes_dims_rope)} must be even and sum to "
                                     f"the head width {self.attention_head_dim}")
        if len(self.llama_layers) != self.num_layers + self.num_single_layers:
            raise HiDreamConfigError(f"HiDream: {len(self.llama_layers)} llama_layers for "
                                     f"{self.num_layers + self.num_single_layers} blocks")
        if len(self.caption_channels) != 2:
            raise HiDreamConfigError(f"HiDream: caption_channels must be (T5 width, Llama width), got "
                                     f"{list(self.caption_channels)}")
        if self.num_routed_experts and not 0 < self.num_activated_experts <= self.num_routed_experts:
            raise HiDreamConfigError(f"HiDream: {self.num_activated_experts} activated of "
                                     f"{self.num_routed_experts} routed experts")

    @property
    def hidden_size(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def adm_in_channels(self) -> int:
        """The pooled vector's width (`y`: CLIP-L 768 + CLIP-G 1280)."""
        return self.text_emb_dim

    def params(self) -> dict[str, Any]:
        params = asdict(self)
        for name in ("caption_channels", "axes_dims_rope", "max_resolution", "llama_layers"):
            params[name] = list(params[name])
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (model_detection's HiDream keys; the widths are ours)."""
        return {"image_model": IMAGE_MODEL, **self.params()}

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HiDreamConfig":
        """The structure under `prefix` from names and shapes only: the width and latent channels
        from `x_embedder.proj`, the pooled width from `p_embedder`, the depths from the numbered
        blocks, experts from the gate, the text widths from the first and last
        `caption_projection`, the SwiGLU widths from `w1`; every block's shapes checked. The head
        width (128), RoPE split and top-k (2) are not in the weights. Raises `HiDreamConfigError`
        naming the key when the weights are incomplete or inconsistent."""
        shape = shape_reader(tensors, prefix, HiDreamConfigError, "HiDream")
        hidden, patch_in = shape("x_embedder.proj.weight")
        if patch_in % (PATCH * PATCH) or hidden % HEAD_DIM:
            raise HiDreamConfigError(f"HiDream: {prefix}x_embedder.proj.weight {(hidden, patch_in)}: the width must be "
                                     f"a multiple of the {HEAD_DIM}-wide heads and the input of {PATCH}x{PATCH} patches")
        text_emb = shape("p_embedder.pooled_embedder.linear_1.weight")[1]
        out = shape("final_layer.linear.weight")[0]
        if out % (PATCH * PATCH):
            raise HiDreamConfigError(f"HiDream: {prefix}final_layer.linear.weight gives {out} channels, not a multiple "
                                     f"of the patch area {PATCH * PATCH}")
        double = count_numbered(tensors, prefix, "double_stream_blocks", HiDreamConfigError, "HiDream")
        if not double:
            raise HiDreamConfigError(f"HiDream: no {prefix}double_stream_blocks")
        single = count_numbered(tensors, prefix, "single_stream_blocks", HiDreamConfigError, "HiDream")
        projections = count_numbered(tensors, prefix, "caption_projection", HiDreamConfigError, "HiDream")
        if projections != double + single + 1:
            raise HiDreamConfigError(f"HiDream: {projections} caption projections for {double + single} blocks "
                                     f"(expected one per block plus T5's)")
        llama_width = shape("caption_projection.0.linear.weight")[1]
        t5_width = shape(f"caption_projection.{projections - 1}.linear.weight")[1]
        first = "double_stream_blocks.0.block."
        moe = prefix + first + "ff_i.gate.weight" in tensors
        experts = shape(first + "ff_i.gate.weight")[0] if moe else 0
        expert_hidden = shape(first + ("ff_i.experts.0.w1.weight" if moe else "ff_i.w1.weight"))[0]
        shared_hidden = shape(first + "ff_i.shared_experts.w1.weight")[0] if moe else 0
        text_hidden = shape(first + "ff_t.w1.weight")[0]
        expected: dict[str, tuple[int, ...]] = {
            "t_embedder.timestep_embedder.linear_1.weight": (hidden, 256),
            "t_embedder.timestep_embedder.linear_2.weight": (hidden, hidden),
            "p_embedder.pooled_embedder.linear_2.weight": (hidden, hidden),
            "final_layer.adaLN_modulation.1.weight": (2 * hidden, hidden)}
        for i in range(projections):
            expected[f"caption_projection.{i}.linear.weight"] = (hidden, t5_width if i == projections - 1
                                                                 else llama_width)

        def swiglu(name: str, width: int) -> None:
            expected[f"{name}.w1.weight"] = (width, hidden)
            expected[f"{name}.w3.weight"] = (width, hidden)
            expected[f"{name}.w2.weight"] = (hidden, width)

        for kind, count in (("double", double), ("single", single)):
            for i in range(count):
                block = f"{kind}_stream_blocks.{i}.block."
                expected[block + "adaLN_modulation.1.weight"] = ((12 if kind == "double" else 6) * hidden, hidden)
                names = ("to_q", "to_k", "to_v", "to_out") + (("to_q_t", "to_k_t", "to_v_t", "to_out_t")
                                                            if kind == "double" else ())
                for name in names:
                    expected[f"{block}attn1.{name}.weight"] = (hidden, hidden)
                for name in ("q_rms_norm", "k_rms_norm") + (("q_rms_norm_t", "k_rms_norm_t") if kind == "double"
                                                            else ()):
                    expected[f"{block}attn1.{name}.weight"] = (hidden,)
                if moe:
                    expected[block + "ff_i.gate.weight"] = (experts, hidden)
                    swiglu(block + "ff_i.shared_experts", shared_hidden)
                    for e in range(experts):
                        swiglu(f"{block}ff_i.experts.{e}", expert_hidden)
                else:
                    swiglu(block + "ff_i", expert_hidden)
                if kind == "double":
                    swiglu(block + "ff_t", text_hidden)
        for key, want in expected.items():
            found = shape(key)
            if found != want:
                raise HiDreamConfigError(f"HiDream: {prefix}{key} has shape {found}, expected {want}")
        return cls(in_channels=patch_in // (PATCH * PATCH), out_channels=out // (PATCH * PATCH), num_layers=double,
                   num_single_layers=single, num_attention_heads=hidden // HEAD_DIM,
                   caption_channels=(t5_width, llama_width), text_emb_dim=text_emb, num_routed_experts=experts,
                   llama_layers=default_llama_layers(double + single), expert_hidden=expert_hidden,
                   shared_hidden=shared_hidden, text_hidden=text_hidden)


# --- blocks ------------------------------------------------------------------------------------------

class LinearSiLULinear(nn.Module):
    """`linear_1`, SiLU, `linear_2` (diffusers' `TimestepEmbedding`)."""

    def __init__(self, fan_in: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = ops.Linear(fan_in, dim, bias=True, **factory)
        self.linear_2 = ops.Linear(dim, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEmbed(nn.Module):
    def __init__(self, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.timestep_embedder = LinearSiLULinear(256, dim, ops, factory)

    def forward(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # t is already 1000 * sigma (multiplier 1000); cos half first (flip_sin_to_cos).
        return self.timestep_embedder(timestep_embedding(t.float(), 256, time_factor=1.0).to(dtype))  # [B, D]


class PooledEmbed(nn.Module):
    def __init__(self, fan_in: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.pooled_embedder = LinearSiLULinear(fan_in, dim, ops, factory)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.pooled_embedder(pooled)


class PatchEmbed(nn.Module):
    def __init__(self, fan_in: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Linear(fan_in, dim, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class TextProjection(nn.Module):
    def __init__(self, fan_in: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear = ops.Linear(fan_in, dim, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


class SwiGLU(nn.Module):
    """`w2(silu(w1 x) * w3 x)` (Shazeer 2020), no biases."""

    def __init__(self, dim: int, hidden: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.w1 = ops.Linear(dim, hidden, bias=False, **factory)
        self.w2 = ops.Linear(hidden, dim, bias=False, **factory)
        self.w3 = ops.Linear(dim, hidden, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoEGate(nn.Module):
    """Softmax router over the routed experts (DeepSeek-MoE's gate as HiDream uses it: top-k of the
    softmax scores, not renormalised); `weight` `[experts, D]`."""

    def __init__(self, dim: int, experts: int, top_k: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.top_k = top_k
        self.weight = nn.Parameter(torch.empty(experts, dim, **factory))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x `[N, D]` -> (expert indices `[N, k]`, weights `[N, k]`)."""
        scores = F.linear(x, self.weight.to(x.dtype)).softmax(dim=-1)  # [N, E]
        weight, index = torch.topk(scores, k=self.top_k, dim=-1)
        return index, weight


class MoESwiGLU(nn.Module):
    """A shared SwiGLU expert plus the top-k of the routed ones, each run on its own tokens only."""

    def __init__(self, dim: int, config: HiDreamConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.shared_experts = SwiGLU(dim, config.shared_hidden, ops, factory)
        self.experts = nn.ModuleList(SwiGLU(dim, config.expert_hidden, ops, factory)
                                     for _ in range(config.num_routed_experts))
        self.gate = MoEGate(dim, config.num_routed_experts, config.num_activated_experts, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # [N, D]
        index, weight = self.gate(flat)  # [N, k] each
        routed = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(index == e, as_tuple=True)
            if token.numel():
                routed.index_add_(0, token, expert(flat[token]) * weight[token, slot, None].to(flat.dtype))
        return routed.view_as(x) + self.shared_experts(x)


class HiDreamAttention(nn.Module):
    """Image `to_q/k/v/out` and (double blocks) text `to_q_t/k_t/v_t/out_t`; RMS norms (eps 1e-5)
    over the whole projected width before the heads are split."""

    def __init__(self, dim: int, heads: int, single: bool, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.single = single
        suffixes = ("",) if single else ("", "_t")
        for s in suffixes:
            for name in ("to_q", "to_k", "to_v", "to_out"):
                setattr(self, name + s, ops.Linear(dim, dim, bias=True, **factory))
            setattr(self, "q_rms_norm" + s, RMSNorm(dim, elementwise_affine=True, eps=1e-5, **factory))
            setattr(self, "k_rms_norm" + s, RMSNorm(dim, elementwise_affine=True, eps=1e-5, **factory))

    def _qkv(self, x: torch.Tensor, s: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.unflatten(-1, (self.heads, -1)).transpose(1, 2)  # [B, H, L, d]

        q = getattr(self, "q_rms_norm" + s)(getattr(self, "to_q" + s)(x))
        k = getattr(self, "k_rms_norm" + s)(getattr(self, "to_k" + s)(x))
        return heads(q.to(x.dtype)), heads(k.to(x.dtype)), heads(getattr(self, "to_v" + s)(x))

    def forward(self, img: torch.Tensor, txt: torch.Tensor | None, pe: torch.Tensor,
                transformer_options: dict[str, Any]) -> Any:
        """img `[B, Ni, D]`, txt `[B, Nt, D]` (None in single blocks), pe over `[img, txt]`."""
        q, k, v = self._qkv(img, "")
        if not self.single:
            qt, kt, vt = self._qkv(txt, "_t")
            q, k, v = torch.cat([q, qt], dim=2), torch.cat([k, kt], dim=2), torch.cat([v, vt], dim=2)
        out = flux_math.run_attention(q, k, v, pe=pe, transformer_options=transformer_options)  # [B, L, D]
        if self.single:
            return self.to_out(out)
        n = img.shape[1]
        return self.to_out(out[:, :n]), self.to_out_t(out[:, n:])


def _norm(x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), eps=1e-6)


class DoubleStreamBlock(nn.Module):
    """`adaLN_modulation.1` (12 x width: image shift/scale/gate for attention and MLP, then text's),
    `attn1`, the image MoE `ff_i`, the text SwiGLU `ff_t`; LayerNorms without weights."""

    def __init__(self, dim: int, config: HiDreamConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(dim, 12 * dim, bias=True, **factory))
        self.attn1 = HiDreamAttention(dim, config.num_attention_heads, False, ops, factory)
        self.ff_i = (MoESwiGLU(dim, config, ops, factory) if config.num_routed_experts
                     else SwiGLU(dim, config.expert_hidden, ops, factory))
        self.ff_t = SwiGLU(dim, config.text_hidden, ops, factory)

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor,
                transformer_options: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        (i_shift, i_scale, i_gate, i_shift2, i_scale2, i_gate2,
         t_shift, t_scale, t_gate, t_shift2, t_scale2, t_gate2) = self.adaLN_modulation(vec)[:, None].chunk(12, dim=-1)
        attn_i, attn_t = self.attn1(_norm(img) * (1 + i_scale) + i_shift, _norm(txt) * (1 + t_scale) + t_shift, pe,
                                    transformer_options)
        img = img + i_gate * attn_i
        txt = txt + t_gate * attn_t
        img = img + i_gate2 * self.ff_i(_norm(img) * (1 + i_scale2) + i_shift2)
        txt = txt + t_gate2 * self.ff_t(_norm(txt) * (1 + t_scale2) + t_shift2)
        return img, txt


class SingleStreamBlock(nn.Module):
    """`adaLN_modulation.1` (6 x width), `attn1` over the joint sequence, the MoE `ff_i`."""

    def __init__(self, dim: int, config: HiDreamConfig, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(dim, 6 * dim, bias=True, **factory))
        self.attn1 = HiDreamAttention(dim, config.num_attention_heads, True, ops, factory)
        self.ff_i = (MoESwiGLU(dim, config, ops, factory) if config.num_routed_experts
                     else SwiGLU(dim, config.expert_hidden, ops, factory))

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor,
                transformer_options: dict[str, Any]) -> torch.Tensor:
        shift, scale, gate, shift2, scale2, gate2 = self.adaLN_modulation(vec)[:, None].chunk(6, dim=-1)
        x = x + gate * self.attn1(_norm(x) * (1 + scale) + shift, None, pe, transformer_options)
        return x + gate2 * self.ff_i(_norm(x) * (1 + scale2) + shift2)


class BlockHolder(nn.Module):
    """ComfyUI's `HiDreamImageBlock` wrapper: the block under `.block` (the state-dict names)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any) -> Any:
        return self.block(*args)


class LastLayer(nn.Module):
    """`adaLN_modulation.1` (shift, scale), LayerNorm without weights, `linear` to patch pixels."""

    def __init__(self, dim: int, out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), ops.Linear(dim, 2 * dim, bias=True, **factory))
        self.linear = ops.Linear(dim, out, bias=True, **factory)

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(vec)[:, None].chunk(2, dim=-1)
        return self.linear(_norm(x) * (1 + scale) + shift)


# --- the network -------------------------------------------------------------------------------------

@comfyui_name("HiDreamImageTransformer2DModel")
class HiDreamTransformer(nn.Module):
    """The HiDream-I1 sparse DiT (see the module docstring); `params` are `HiDreamConfig`'s fields."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "y", "context", "encoder_hidden_states_llama3", "image_cond", "control",
                         "transformer_options")

    def __init__(self, image_model: Any = None, dtype: Any = None, device: Any = None, operations: Any = None,
                 **params: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        try:
            config = HiDreamConfig(**params)
        except TypeError as error:
            raise HiDreamConfigError(f"HiDream: {error}") from None
        factory = {"dtype": dtype, "device": device}
        dim = config.hidden_size
        self.dtype = dtype
        self.config = config
        self.patch_size = config.patch_size
        self.in_channels = config.in_channels
        self.out_channels = config.out_channels
        self.inner_dim = dim
        self.llama_layers = list(config.llama_layers)
        p2 = config.patch_size ** 2
        self.t_embedder = TimestepEmbed(dim, ops, factory)
        self.p_embedder = PooledEmbed(config.text_emb_dim, dim, ops, factory)
        self.x_embedder = PatchEmbed(config.in_channels * p2, dim, ops, factory)
        self.pe_embedder = EmbedND(dim=config.attention_head_dim, theta=ROPE_THETA, axes_dim=config.axes_dims_rope)
        self.double_stream_blocks = nn.ModuleList(BlockHolder(DoubleStreamBlock(dim, config, ops, factory))
                                                  for _ in range(config.num_layers))
        self.single_stream_blocks = nn.ModuleList(BlockHolder(SingleStreamBlock(dim, config, ops, factory))
                                                  for _ in range(config.num_single_layers))
        self.final_layer = LastLayer(dim, p2 * config.out_channels, ops, factory)
        t5_width, llama_width = config.caption_channels
        widths = [llama_width] * (config.num_layers + config.num_single_layers) + [t5_width]
        self.caption_projection = nn.ModuleList(TextProjection(w, dim, ops, factory) for w in widths)

    @classmethod
    def from_config(cls, config: HiDreamConfig, **kwargs: Any) -> "HiDreamTransformer":
        return cls(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.hidream.keys import lora_key_map

        return lora_key_map(names)

    def _check(self, x: torch.Tensor, y: torch.Tensor | None, context: torch.Tensor | None,
               llama: torch.Tensor | None) -> None:
        config = self.config
        if x.ndim != 4:
            raise HiDreamInputError(f"HiDream: the latent must be [B, C, H, W], got {tuple(x.shape)}")
        if y is None or y.ndim != 2 or y.shape[-1] != config.text_emb_dim:
            raise HiDreamInputError(f"HiDream: y (the pooled CLIP-L + CLIP-G vector) must be [B, {config.text_emb_dim}]"
                                    f", got {None if y is None else tuple(y.shape)}")
        if context is None or context.ndim != 3 or context.shape[-1] != config.caption_channels[0]:
            raise HiDreamInputError(f"HiDream: context (T5's states) must be [B, tokens, {config.caption_channels[0]}]"
                                    f", got {None if context is None else tuple(context.shape)}")
        needed = max(config.llama_layers) + 1 if config.llama_layers else 0
        if llama is None or llama.ndim != 4 or llama.shape[-1] != config.caption_channels[1] or \
                llama.shape[1] < needed:
            raise HiDreamInputError(
                f"HiDream: encoder_hidden_states_llama3 must be [B, >= {needed} layers, tokens, "
                f"{config.caption_channels[1]}] (Llama 3.1's hidden states), got "
                f"{None if llama is None else tuple(llama.shape)}")

    def forward(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor | None = None,
                y: torch.Tensor | None = None, encoder_hidden_states_llama3: torch.Tensor | None = None,
                image_cond: torch.Tensor | None = None, control: Any = None,
                transformer_options: Mapping[str, Any] = {}, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]`, t `[B]` (1000 * sigma), y `[B, text_emb_dim]`, context (T5) `[B, Lt,
        T5 width]`, encoder_hidden_states_llama3 `[B, layers, Ll, Llama width]`, image_cond
        (HiDream-E1's source latent, `[B, C, H, W']`) appended along the width -> minus the
        network's output, cropped to x's size (ComfyUI's sign: the flow velocity). ComfyUI's
        signature is `(x, t, y, context, ...)` but every caller passes `y` and `context` by
        keyword; ours takes `context` third, as our DiffusionModel (and every other network here)
        passes it."""
        self._check(x, y, context, encoder_hidden_states_llama3)
        options = dict(transformer_options or {})
        bs, _, h, w = x.shape
        if image_cond is not None:
            if image_cond.shape[:3] != x.shape[:3]:
                raise HiDreamInputError(f"HiDream: image_cond {tuple(image_cond.shape)} must match the latent "
                                        f"{tuple(x.shape)} in batch, channels and height")
            x = torch.cat([x, image_cond.to(x)], dim=-1)
        p = self.patch_size
        x = pad_to_patch_size(x, (p, p))
        ph, pw = x.shape[-2] // p, x.shape[-1] // p
        if x.shape[1] != self.in_channels:
            raise HiDreamInputError(f"HiDream: the latent has {x.shape[1]} channels, the network takes "
                                    f"{self.in_channels}")
        tokens = x.reshape(bs, -1, ph, p, pw, p).permute(0, 2, 4, 3, 5, 1).reshape(bs, ph * pw, -1)  # (p1 p2 C)
        dtype = x.dtype
        vec = self.t_embedder(t.reshape(-1).expand(bs) if t.numel() == 1 else t.reshape(-1), dtype) \
            + self.p_embedder(y.to(dtype))  # [B, D]
        img = self.x_embedder(tokens)  # [B, Ni, D]

        llama = encoder_hidden_states_llama3.to(dtype).movedim(1, 0)  # [layers, B, Ll, W]
        texts = [proj(llama[k]) for proj, k in zip(self.caption_projection, self.llama_layers)]  # [B, Ll, D] each
        t5 = self.caption_projection[-1](context.to(dtype))  # [B, Lt, D]
        last = texts[-1] if texts else t5[:, :0]
        n_llama = texts[0].shape[1] if texts else 0

        rows = torch.arange(ph, device=x.device, dtype=torch.float32).view(-1, 1).expand(ph, pw)
        cols = torch.arange(pw, device=x.device, dtype=torch.float32).view(1, -1).expand(ph, pw)
        img_ids = torch.stack([torch.zeros_like(rows), rows, cols], dim=-1).reshape(1, ph * pw, 3)
        n_text = t5.shape[1] + last.shape[1] + n_llama
        ids = torch.cat([img_ids, torch.zeros(1, n_text, 3, device=x.device)], dim=1).expand(bs, -1, -1)
        pe = self.pe_embedder(ids)  # [B, 1, Ni + Nt, d/2, 2, 2]

        txt = torch.cat([t5, last], dim=1)  # [B, Lt + Ll, D]: carried through the double blocks
        n_txt = txt.shape[1]
        block = 0
        for holder in self.double_stream_blocks:
            img, txt = holder(img, torch.cat([txt, texts[block]], dim=1), vec, pe, options)
            txt = txt[:, :n_txt]
            block += 1
        n_img = img.shape[1]
        joint = torch.cat([img, txt], dim=1)
        n_joint = joint.shape[1]
        for holder in self.single_stream_blocks:
            joint = holder(torch.cat([joint, texts[block]], dim=1), vec, pe, options)[:, :n_joint]
            block += 1
        out = self.final_layer(joint[:, :n_img], vec)  # [B, Ni, p*p*C]
        out = out.reshape(bs, ph, pw, p, p, self.out_channels).permute(0, 5, 1, 3, 2, 4)
        out = out.reshape(bs, self.out_channels, ph * p, pw * p)
        return -out[:, :, :h, :w]
