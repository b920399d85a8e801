"""HunyuanVideo 1.5 (Tencent Hunyuan, November 2025): the 8.3B rectified-flow video transformer, and
`HunyuanVideo15Config` read from weights.

Architecture of Tencent's HunyuanVideo 1.5 (github.com/Tencent-Hunyuan/HunyuanVideo-1.5,
`hyvideo/models/transformers`; diffusers' `HunyuanVideo15Transformer3DModel` computes the same): the
32-channel latent plus its concatenated conditioning channels (image latent + mask: 65 in all for
t2v / i2v, 98 for the 1080p super-resolution model) is cut into 1x1x1 patches by a Conv3d
(`img_in.proj`); Qwen2.5-VL's states go through a two-block token refiner (`txt_in`) conditioned on
the timestep and their mean; ByT5 glyph states (`byt5_in`) and SigLIP image states (`vision_in`)
join them, each with a learnt type row (`cond_type_embedding`: 0 text, 1 ByT5, 2 vision), in the
order `[vision, byt5, text]`; 54 double-stream blocks (separate image / text weights, joint
attention over `[img, txt]`, QK RMS norms, adaLN with 6 rows) with 3-axis RoPE (16 / 56 / 56
channels of each 128-wide head, theta 256; text tokens at position 0); a modulated final layer.
The distilled super-resolution model is a MeanFlow model (Geng et al. 2025, "Mean Flows for
One-step Generative Modeling"): `time_r_in` embeds the next sigma of the schedule and the two
embeddings are averaged.

Names are those of the released files (Tencent's layout, which ComfyUI's repackaged files keep and
ComfyUI renames on load): `img_in.proj`, `time_in.mlp.0/2`, `time_r_in.mlp.0/2`,
`txt_in.{input_embedder, t_embedder.mlp.0/2, c_embedder.linear_1/2}`,
`txt_in.individual_token_refiner.blocks.N.{norm1, self_attn_qkv, self_attn_proj, norm2, mlp.fc1/2,
adaLN_modulation.1}`, `double_blocks.N.{img,txt}_{mod.linear, attn_qkv, attn_q_norm, attn_k_norm,
attn_proj, mlp.fc1/2}`, `byt5_in.{layernorm, fc1, fc2, fc3}`, `vision_in.proj.{0,1,3,4}`,
`cond_type_embedding`, `final_layer.{linear, adaLN_modulation.1}`.

Forward as ComfyUI's `comfy/ldm/hunyuan_video/model.py` (`forward(x, timestep, context, y,
txt_byt5, clip_fea, guidance, attention_mask, ..., disable_time_r, control, transformer_options)`),
written here: `timestep` is sigma x 1000 (embedded with factor 1); the text token mask (ComfyUI's
`attention_mask`, present only when it masks something) becomes an additive mask over the Qwen
tokens; the refiner pools the mean of all text tokens; `patches_replace["dit"][("double_block", i)]`
replaces a block; `control["input"][i]` is added to the image tokens after block i.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.flux import math as flux_math
from comfy_core.families.flux.blocks import EmbedND, timestep_embedding
from comfy_core.families.flux.dit import default_axes_dim
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.wrappers import run_split_blocks

HEAD_DIM = 128  # ComfyUI: num_heads = hidden_size // 128
ROPE_THETA = 256.0
HV15_AXES = (16, 56, 56)
BYT5_HIDDEN = 2048  # ByT5Mapper's hidden / output width


class HunyuanVideo15ConfigError(ValueError):
    """The HunyuanVideo 1.5 weights are incomplete or inconsistent."""


@dataclass(frozen=True)
class HunyuanVideo15Config:
    """What the network's shape is, read from the weights (`detect_from_weights`)."""

    in_channels: int = 65
    out_channels: int = 32
    hidden_size: int = 2048
    num_heads: int = 16
    depth: int = 54
    refiner_depth: int = 2
    mlp_ratio: float = 4.0
    context_in_dim: int = 3584
    patch_size: tuple[int, int, int] = (1, 1, 1)
    byt5_in_dim: int | None = 1472
    vision_in_dim: int | None = 1152
    cond_type_embedding: bool = True
    meanflow: bool = False
    guidance_embed: bool = False
    axes_dim: tuple[int, int, int] = HV15_AXES
    theta: float = ROPE_THETA

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: width {self.hidden_size} is not a multiple of "
                                            f"{self.num_heads} heads")
        if sum(self.axes_dim) != self.hidden_size // self.num_heads:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: RoPE axes {self.axes_dim} do not fill a head of "
                                            f"{self.hidden_size // self.num_heads} channels")

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HunyuanVideo15Config":
        shape = shape_reader(tensors, prefix, HunyuanVideo15ConfigError, "HunyuanVideo 1.5")
        img_in = shape("img_in.proj.weight")  # [C, in, pt, ph, pw]
        if len(img_in) != 5:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: {prefix}img_in.proj.weight is {img_in}, not a Conv3d")
        hidden = img_in[0]
        head_dim = shape("double_blocks.0.img_attn_q_norm.weight")[0]
        if hidden % head_dim:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: width {hidden} is not a multiple of heads of "
                                            f"{head_dim}")
        patch = tuple(img_in[2:])
        out_rows = shape("final_layer.linear.weight")[0]
        patch_volume = patch[0] * patch[1] * patch[2]
        if out_rows % patch_volume:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: final layer of {out_rows} rows for patches {patch}")
        names = set(tensors)
        has = lambda key: prefix + key in names  # noqa: E731
        return cls(
            in_channels=img_in[1], out_channels=out_rows // patch_volume, hidden_size=hidden,
            num_heads=hidden // head_dim,
            depth=count_numbered(tensors, prefix, "double_blocks", HunyuanVideo15ConfigError, "HunyuanVideo 1.5"),
            refiner_depth=count_numbered(tensors, prefix, "txt_in.individual_token_refiner.blocks",
                                         HunyuanVideo15ConfigError, "HunyuanVideo 1.5"),
            mlp_ratio=shape("double_blocks.0.img_mlp.fc1.weight")[0] / hidden,
            context_in_dim=shape("txt_in.input_embedder.weight")[1],
            patch_size=patch,  # type: ignore[arg-type]
            byt5_in_dim=shape("byt5_in.fc1.weight")[1] if has("byt5_in.fc1.weight") else None,
            vision_in_dim=shape("vision_in.proj.1.weight")[1] if has("vision_in.proj.1.weight") else None,
            cond_type_embedding=has("cond_type_embedding.weight"),
            meanflow=has("time_r_in.mlp.0.weight"),
            guidance_embed=has("guidance_in.mlp.0.weight"),
            axes_dim=HV15_AXES if head_dim == HEAD_DIM else default_axes_dim(head_dim),
        )

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` for this network (`model_detection`'s hunyuan_video entry)."""
        return {"image_model": "hunyuan_video", "in_channels": self.in_channels, "out_channels": self.out_channels,
                "patch_size": list(self.patch_size), "vec_in_dim": None, "axes_dim": list(self.axes_dim),
                "meanflow": self.meanflow, "context_in_dim": self.context_in_dim, "hidden_size": self.hidden_size,
                "mlp_ratio": self.mlp_ratio, "num_heads": self.num_heads, "depth": self.depth,
                "depth_single_blocks": 0, "theta": int(self.theta), "qkv_bias": True,
                "byt5": self.byt5_in_dim is not None, "guidance_embed": self.guidance_embed,
                "vision_in_dim": self.vision_in_dim, "use_cond_type_embedding": self.cond_type_embedding}


def _linear(ops: Any, i: int, o: int, factory: dict[str, Any], bias: bool = True) -> nn.Module:
    return ops.Linear(i, o, bias=bias, **factory)


class TimeMLP(nn.Module):
    """`mlp.0` (256 -> width), SiLU, `mlp.2` over the sinusoids of a scalar (Tencent's TimestepEmbedder)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.mlp = nn.Sequential(_linear(ops, in_dim, dim, factory), nn.SiLU(), _linear(ops, dim, dim, factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


class TextMLP(nn.Module):
    """`linear_1`, SiLU, `linear_2` (the refiner's pooled-text embedder)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.linear_1 = _linear(ops, in_dim, dim, factory)
        self.linear_2 = _linear(ops, dim, dim, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class FC2(nn.Module):
    """`fc1` -> activation -> `fc2` (the blocks' MLPs)."""

    def __init__(self, dim: int, inner: int, act: nn.Module, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.fc1 = _linear(ops, dim, inner, factory)
        self.act = act
        self.fc2 = _linear(ops, inner, dim, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class RefinerBlock(nn.Module):
    """One token-refiner block: LayerNorm -> self-attention -> gated residual, LayerNorm -> SiLU MLP
    -> gated residual, the two gates from `adaLN_modulation(c)`."""

    def __init__(self, dim: int, heads: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = ops.LayerNorm(dim, elementwise_affine=True, eps=1e-6, **factory)
        self.self_attn_qkv = _linear(ops, dim, 3 * dim, factory)
        self.self_attn_proj = _linear(ops, dim, dim, factory)
        self.norm2 = ops.LayerNorm(dim, elementwise_affine=True, eps=1e-6, **factory)
        self.mlp = FC2(dim, 4 * dim, nn.SiLU(), ops, factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), _linear(ops, dim, 2 * dim, factory))

    def forward(self, x: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None,
                options: dict[str, Any]) -> torch.Tensor:
        # x [B, L, C], c [B, C], mask additive [B, 1, L, L] or None
        gate_attn, gate_mlp = self.adaLN_modulation(c).chunk(2, dim=1)
        b, n, _ = x.shape
        q, k, v = self.self_attn_qkv(self.norm1(x)).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attn = flux_math.attention(q, k, v, pe=None, mask=mask, transformer_options=options)  # [B, L, C]
        x = x + self.self_attn_proj(attn) * gate_attn.unsqueeze(1)
        return x + self.mlp(self.norm2(x)) * gate_mlp.unsqueeze(1)


class IndividualTokenRefiner(nn.Module):
    def __init__(self, dim: int, heads: int, depth: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([RefinerBlock(dim, heads, ops, factory) for _ in range(depth)])

    def forward(self, x: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None,
                options: dict[str, Any]) -> torch.Tensor:
        pair = None
        if mask is not None:  # additive [B, L]: a pair is masked when either token is
            row = mask.view(mask.shape[0], 1, 1, mask.shape[1]).repeat(1, 1, mask.shape[1], 1)
            pair = row + row.transpose(2, 3)
        for block in self.blocks:
            x = block(x, c, pair, options)
        return x


class TokenRefiner(nn.Module):
    """`txt_in`: projects the LLM states to the width and refines them, conditioned on the
    timestep plus the mean of the text tokens (all of them, as ComfyUI)."""

    def __init__(self, text_dim: int, dim: int, heads: int, depth: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.input_embedder = _linear(ops, text_dim, dim, factory)
        self.t_embedder = TimeMLP(256, dim, ops, factory)
        self.c_embedder = TextMLP(text_dim, dim, ops, factory)
        self.individual_token_refiner = IndividualTokenRefiner(dim, heads, depth, ops, factory)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, mask: torch.Tensor | None,
                options: dict[str, Any]) -> torch.Tensor:
        t = self.t_embedder(timestep_embedding(timesteps, 256, time_factor=1.0).to(x.dtype))  # [B, C]
        c = t + self.c_embedder((x.sum(dim=1) / x.shape[1]).to(x.dtype))
        return self.individual_token_refiner(self.input_embedder(x), c, mask, options)


class ByT5Mapper(nn.Module):
    """`byt5_in`: LayerNorm -> fc1 -> GELU -> fc2 -> GELU -> fc3 (glyph states to the width)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.layernorm = ops.LayerNorm(in_dim, **factory)
        self.fc1 = _linear(ops, in_dim, BYT5_HIDDEN, factory)
        self.fc2 = _linear(ops, BYT5_HIDDEN, BYT5_HIDDEN, factory)
        self.fc3 = _linear(ops, BYT5_HIDDEN, dim, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(self.layernorm(x))))))


class VisionProjection(nn.Module):
    """`vision_in.proj`: LayerNorm, Linear, GELU, Linear, LayerNorm (Wan's `MLPProj` layout)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = nn.Sequential(ops.LayerNorm(in_dim, **factory), _linear(ops, in_dim, in_dim, factory), nn.GELU(),
                                  _linear(ops, in_dim, dim, factory), ops.LayerNorm(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class PatchEmbed3D(nn.Module):
    """`img_in.proj`: Conv3d with kernel = stride = the patch, `[B, C, T, H, W] -> [B, N, width]`."""

    def __init__(self, patch: tuple[int, int, int], in_channels: int, dim: int, ops: Any,
                 factory: dict[str, Any]) -> None:
        super().__init__()
        self.proj = ops.Conv3d(in_channels, dim, kernel_size=patch, stride=patch, bias=True, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class Modulate(nn.Module):
    def __init__(self, dim: int, rows: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.rows = rows
        self.linear = _linear(ops, dim, rows * dim, factory)

    def forward(self, vec: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.linear(F.silu(vec))[:, None, :].chunk(self.rows, dim=-1)  # each [B, 1, C]


class RMSNorm(nn.Module):
    """QK RMS norm over a head (`weight`, eps 1e-6), computed in the input's dtype."""

    def __init__(self, dim: int, factory: dict[str, Any]) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(dtype=x.dtype, device=x.device)
        return F.rms_norm(x, weight.shape, weight=weight, eps=1e-6)


class DoubleBlock(nn.Module):
    """A double-stream block: per stream adaLN (6 rows: shift, scale, gate for attention and MLP),
    fused q/k/v with RMS-normed q and k, one joint attention over `[img, txt]`, GELU-tanh MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        inner = int(dim * mlp_ratio)
        for s in ("img", "txt"):
            setattr(self, f"{s}_mod", Modulate(dim, 6, ops, factory))
            setattr(self, f"{s}_norm1", ops.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{s}_attn_qkv", _linear(ops, dim, 3 * dim, factory))
            setattr(self, f"{s}_attn_q_norm", RMSNorm(dim // heads, factory))
            setattr(self, f"{s}_attn_k_norm", RMSNorm(dim // heads, factory))
            setattr(self, f"{s}_attn_proj", _linear(ops, dim, dim, factory))
            setattr(self, f"{s}_norm2", ops.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **factory))
            setattr(self, f"{s}_mlp", FC2(dim, inner, nn.GELU(approximate="tanh"), ops, factory))

    def _qkv(self, s: str, x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, n, _ = x.shape
        modulated = getattr(self, f"{s}_norm1")(x) * (1 + scale) + shift
        q, k, v = getattr(self, f"{s}_attn_qkv")(modulated).view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        return getattr(self, f"{s}_attn_q_norm")(q).to(v), getattr(self, f"{s}_attn_k_norm")(k).to(v), v

    def _rest(self, s: str, x: torch.Tensor, attn: torch.Tensor, mods: tuple[torch.Tensor, ...]) -> torch.Tensor:
        _, _, gate1, shift2, scale2, gate2 = mods
        x = x + getattr(self, f"{s}_attn_proj")(attn) * gate1
        hidden = getattr(self, f"{s}_norm2")(x) * (1 + scale2) + shift2
        return x + getattr(self, f"{s}_mlp")(hidden) * gate2

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # img [B, Ni, C], txt [B, Nt, C], vec [B, C], pe [B, 1, Ni+Nt, d/2, 2, 2]
        img_mods, txt_mods = self.img_mod(vec), self.txt_mod(vec)
        iq, ik, iv = self._qkv("img", img, img_mods[0], img_mods[1])
        tq, tk, tv = self._qkv("txt", txt, txt_mods[0], txt_mods[1])
        attn = flux_math.run_attention(torch.cat((iq, tq), dim=2), torch.cat((ik, tk), dim=2),
                                       torch.cat((iv, tv), dim=2), pe=pe, mask=attn_mask,
                                       transformer_options=transformer_options or {})  # [B, Ni+Nt, C]
        n = img.shape[1]
        return self._rest("img", img, attn[:, :n], img_mods), self._rest("txt", txt, attn[:, n:], txt_mods)


class FinalLayer(nn.Module):
    """Modulated LayerNorm (`adaLN_modulation.1` gives shift then scale) and the projection."""

    def __init__(self, dim: int, out: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.norm_final = ops.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **factory)
        self.linear = _linear(ops, dim, out, factory)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), _linear(ops, dim, 2 * dim, factory))

    def forward(self, x: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(vec)[:, None, :].chunk(2, dim=-1)
        return self.linear(self.norm_final(x) * (1 + scale) + shift)


class HunyuanVideo15Transformer(nn.Module):
    """The HunyuanVideo 1.5 network (see the module doc)."""

    def __init__(self, config: HunyuanVideo15Config, dtype: Any = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        dim, heads = config.hidden_size, config.num_heads
        self.patch_size = list(config.patch_size)
        self.out_channels = config.out_channels
        self.pe_embedder = EmbedND(dim // heads, config.theta, config.axes_dim)
        self.img_in = PatchEmbed3D(config.patch_size, config.in_channels, dim, ops, factory)
        self.time_in = TimeMLP(256, dim, ops, factory)
        self.time_r_in = TimeMLP(256, dim, ops, factory) if config.meanflow else None
        self.guidance_in = TimeMLP(256, dim, ops, factory) if config.guidance_embed else None
        self.txt_in = TokenRefiner(config.context_in_dim, dim, heads, config.refiner_depth, ops, factory)
        self.byt5_in = ByT5Mapper(config.byt5_in_dim, dim, ops, factory) if config.byt5_in_dim else None
        self.vision_in = VisionProjection(config.vision_in_dim, dim, ops, factory) if config.vision_in_dim else None
        self.cond_type_embedding = nn.Embedding(3, dim, **factory) if config.cond_type_embedding else None
        self.double_blocks = nn.ModuleList([DoubleBlock(dim, heads, config.mlp_ratio, ops, factory)
                                            for _ in range(config.depth)])
        patch_volume = config.patch_size[0] * config.patch_size[1] * config.patch_size[2]
        self.final_layer = FinalLayer(dim, patch_volume * config.out_channels, ops, factory)

    @classmethod
    def from_config(cls, config: HunyuanVideo15Config, operations: Any = None) -> "HunyuanVideo15Transformer":
        return cls(config, operations=operations)

    @property
    def params(self) -> dict[str, Any]:
        return asdict(self.config)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.hunyuan_video15.keys import lora_key_map

        return lora_key_map(names)

    def _type_row(self, tokens: torch.Tensor, kind: int) -> torch.Tensor:
        if self.cond_type_embedding is None:
            return tokens
        ids = torch.full(tokens.shape[:2], kind, dtype=torch.long, device=tokens.device)
        return tokens + self.cond_type_embedding(ids).to(tokens.dtype)

    def _img_ids(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t, h, w = x.shape
        pt, ph, pw = self.patch_size
        grid = torch.meshgrid(torch.arange(t // pt, device=x.device), torch.arange(h // ph, device=x.device),
                              torch.arange(w // pw, device=x.device), indexing="ij")
        return torch.stack(grid, dim=-1).reshape(1, -1, 3).expand(b, -1, -1).to(torch.float32)  # [B, N, 3]

    def _vec(self, img: torch.Tensor, timestep: torch.Tensor, guidance: torch.Tensor | None,
             disable_time_r: bool, options: Mapping[str, Any]) -> torch.Tensor:
        vec = self.time_in(timestep_embedding(timestep, 256, time_factor=1.0).to(img.dtype))  # [B, C]
        if self.time_r_in is not None and not disable_time_r:
            # MeanFlow: the next sigma of the schedule (ComfyUI finds the current one among the run's
            # sample sigmas); its embedding is averaged with the timestep's.
            sigmas, schedule = options.get("sigmas"), options.get("sample_sigmas")
            if sigmas is not None and schedule is not None:
                index = torch.where(sigmas[0] == schedule)[0]
                if len(index) > 0 and int(index[0]) + 1 < len(schedule):
                    r = schedule[int(index[0]) + 1].reshape(1).to(device=timestep.device, dtype=timestep.dtype)
                    vec_r = self.time_r_in(timestep_embedding(r, 256, time_factor=1000.0).to(img.dtype))
                    vec = (vec + vec_r) / 2
        if self.guidance_in is not None and guidance is not None:
            vec = vec + self.guidance_in(timestep_embedding(guidance, 256).to(img.dtype))
        return vec

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                txt_byt5: torch.Tensor | None = None, clip_fea: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                disable_time_r: bool = False, control: Any = None,
                transformer_options: dict[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        # x [B, in, T, H, W], timestep [B] (sigma x 1000), context [B, Lt, text_dim],
        # txt_byt5 [B, Lb, 1472], clip_fea [B, Lv, 1152], attention_mask [B, Lt] (1 keep / 0 pad)
        options = dict(transformer_options or {})
        if x.ndim != 5:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5 takes a 5-D video latent, got {tuple(x.shape)}")
        if x.shape[1] != self.config.in_channels:
            raise HunyuanVideo15ConfigError(f"HunyuanVideo 1.5: the latent and its conditioning have {x.shape[1]} "
                                            f"channels, the network takes {self.config.in_channels}")
        b, _, t, h, w = x.shape
        img_ids = self._img_ids(x)
        img = self.img_in(x)  # [B, N, C]
        vec = self._vec(img, timestep, guidance, bool(disable_time_r), options)
        txt_mask = None
        if attention_mask is not None:
            txt_mask = attention_mask
            if not torch.is_floating_point(txt_mask):
                txt_mask = (txt_mask - 1).to(img.dtype) * torch.finfo(img.dtype).max  # 0 keep, -max pad
            txt_mask = txt_mask.to(img.dtype)
        txt = self._type_row(self.txt_in(context.to(img.dtype), timestep, txt_mask, options), 0)
        pieces = [txt]
        masks = [txt_mask] if txt_mask is not None else None
        if self.byt5_in is not None and txt_byt5 is not None:
            glyph = self._type_row(self.byt5_in(txt_byt5.to(img.dtype)), 1)
            pieces.insert(0, glyph)  # ByT5 first (HunyuanVideo 1.5)
            if masks is not None:
                masks.insert(0, torch.zeros(glyph.shape[:2], dtype=img.dtype, device=img.device))
        if clip_fea is not None:
            if self.vision_in is None:
                raise HunyuanVideo15ConfigError("HunyuanVideo 1.5: this network has no vision input (vision_in)")
            vision = self._type_row(self.vision_in(clip_fea.to(img.dtype)), 2)
            pieces.insert(0, vision)
            if masks is not None:
                masks.insert(0, torch.zeros(vision.shape[:2], dtype=img.dtype, device=img.device))
        txt = torch.cat(pieces, dim=1)  # [B, Lv + Lb + Lt, C]
        txt_ids = torch.zeros((b, txt.shape[1], 3), device=x.device, dtype=torch.float32)
        pe = self.pe_embedder(torch.cat((img_ids, txt_ids), dim=1))
        attn_mask = None
        if masks is not None:
            row = torch.cat([torch.zeros((b, img.shape[1]), dtype=img.dtype, device=img.device)] + masks, dim=1)
            attn_mask = row[:, None, None, :]  # [B, 1, 1, N + L] additive over keys
        img = self._blocks(img, txt, vec, pe, attn_mask, control, options)
        out = self.final_layer(img, vec)  # [B, N, p * out]
        pt, ph, pw = self.patch_size
        out = out.reshape(b, t // pt, h // ph, w // pw, self.out_channels, pt, ph, pw)
        return out.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(b, self.out_channels, t, h, w)

    def _blocks(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor,
                attn_mask: torch.Tensor | None, control: Any, options: dict[str, Any]) -> torch.Tensor:
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        total = len(self.double_blocks)

        def run(index: int, streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            block = self.double_blocks[index]
            options["block_type"], options["block_index"], options["total_blocks"] = "double", index, total
            if ("double_block", index) in blocks_replace:
                def original(args: dict[str, Any]) -> dict[str, Any]:
                    i, t = block(args["img"], args["txt"], args["vec"], args["pe"],
                                 attn_mask=args.get("attention_mask"),
                                 transformer_options=args.get("transformer_options"))
                    return {"img": i, "txt": t}

                out = blocks_replace[("double_block", index)](
                    {"img": streams["img"], "txt": streams["txt"], "vec": vec, "pe": pe, "attention_mask": attn_mask,
                     "transformer_options": options}, {"original_block": original})
                new_img, new_txt = out["img"], out["txt"]
            else:
                new_img, new_txt = block(streams["img"], streams["txt"], vec, pe, attn_mask=attn_mask,
                                         transformer_options=options)
            if control is not None:
                additions = control.get("input") or []
                if index < len(additions) and additions[index] is not None:
                    new_img = new_img + additions[index]
            return {"img": new_img, "txt": new_txt}

        def rest(streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            for index in range(1, total):
                streams = run(index, streams)
            return streams

        streams = {"img": img, "txt": txt}
        if total == 0:
            return img
        return run_split_blocks(options, lambda s: run(0, s), rest, streams)["img"]


__all__ = ["HunyuanVideo15Config", "HunyuanVideo15ConfigError", "HunyuanVideo15Transformer"]
