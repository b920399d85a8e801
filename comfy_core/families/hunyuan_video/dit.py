"""HunyuanVideo 1.0 (Tencent Hunyuan, December 2024, "HunyuanVideo: A Systematic Framework For Large
Video Generative Models"): the 13B rectified-flow video transformer, and `HunyuanVideoConfig` read
from weights.

Architecture (Tencent's `hyvideo/modules/models.py`; diffusers' `HunyuanVideoTransformer3DModel`
computes the same): the 16-channel latent (33 with the I2V release's image latent + mask, 32 for
SkyReels' I2V) is cut into 1x2x2 patches by a Conv3d (`img_in.proj`); LLaVA-Llama-3's states go
through a two-block token refiner (`txt_in`, the same as HunyuanVideo 1.5's: hunyuan_video15/dit.py)
conditioned on the timestep and their mean; the modulation vector is the timestep embedding plus
CLIP-L's pooled vector (`vector_in`) plus the distilled guidance embedding (`guidance_in`, guidance
x 1000); 20 double-stream blocks (HunyuanVideo 1.5's `DoubleBlock`: separate image / text weights,
joint attention over `[img, txt]`, QK RMS norms, 6-row adaLN), then 40 single-stream blocks over the
joined sequence (3-row adaLN, one `linear1` giving q/k/v and the MLP input, `linear2` over the
attention output and the GELU-tanh MLP), 3-axis RoPE 16 / 56 / 56 of each 128-wide head, theta 256,
text tokens at position 0; a modulated final layer.

Names are the released files' (Tencent's, which ComfyUI's repackaged files keep and ComfyUI renames
on load in `supported_models.HunyuanVideo.process_unet_state_dict`): `img_in.proj`, `time_in.mlp.0/2`,
`vector_in.in_layer/out_layer`, `guidance_in.mlp.0/2`, `txt_in.*` (as 1.5's),
`double_blocks.N.{img,txt}_{mod.linear, attn_qkv, attn_q_norm, attn_k_norm, attn_proj, mlp.fc1/2}`,
`single_blocks.N.{linear1, linear2, q_norm, k_norm, modulation.linear}`,
`final_layer.{linear, adaLN_modulation.1}`.

Forward as ComfyUI's `comfy/ldm/hunyuan_video/model.py` (`forward(x, timestep, context, y,
txt_byt5, guidance, attention_mask, guiding_frame_index, ref_latent, ..., control,
transformer_options)`), written here: `timestep` is sigma x 1000 (embedded with factor 1); the text
token mask becomes an additive mask over the text keys; `guiding_frame_index` (HunyuanImageToVideo's
"v2 (replace)") gives the first latent frame's tokens their own modulation vector
(`time_in(index) + vector_in(y)`), the rest and the text the usual one; `ref_latent` ("custom")
prepends the reference latent's tokens at frame -1, shifted right by the latent's width, and drops
them from the output; `patches_replace["dit"][("double_block", i)]` / `("single_block", i)` replace
a block; `control["input"][i]` is added to the image tokens after double block i,
`control["output"][i]` after single block i.
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
from comfy_core.families.hunyuan_video15.dit import (DoubleBlock, FinalLayer, PatchEmbed3D, RMSNorm, TimeMLP,
                                                     TokenRefiner, _linear)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader
from comfy_core.wrappers import run_split_blocks

HEAD_DIM = 128  # ComfyUI: num_heads = hidden_size // 128
ROPE_THETA = 256.0
HV_AXES = (16, 56, 56)
NAME = "HunyuanVideo"


class HunyuanVideoConfigError(ValueError):
    """The HunyuanVideo 1.0 weights are incomplete or inconsistent (or are another network's)."""


@dataclass(frozen=True)
class HunyuanVideoConfig:
    """What the network's shape is, read from the weights (`detect_from_weights`)."""

    in_channels: int = 16
    out_channels: int = 16
    hidden_size: int = 3072
    num_heads: int = 24
    depth: int = 20
    depth_single_blocks: int = 40
    refiner_depth: int = 2
    mlp_ratio: float = 4.0
    context_in_dim: int = 4096
    vec_in_dim: int | None = 768
    patch_size: tuple[int, int, int] = (1, 2, 2)
    guidance_embed: bool = True
    axes_dim: tuple[int, int, int] = HV_AXES
    theta: float = ROPE_THETA

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise HunyuanVideoConfigError(f"{NAME}: width {self.hidden_size} is not a multiple of "
                                          f"{self.num_heads} heads")
        if sum(self.axes_dim) != self.hidden_size // self.num_heads:
            raise HunyuanVideoConfigError(f"{NAME}: RoPE axes {self.axes_dim} do not fill a head of "
                                          f"{self.hidden_size // self.num_heads} channels")

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "HunyuanVideoConfig":
        shape = shape_reader(tensors, prefix, HunyuanVideoConfigError, NAME)
        names = set(tensors)
        has = lambda key: prefix + key in names  # noqa: E731
        if has("cond_type_embedding.weight"):
            raise HunyuanVideoConfigError(f"{NAME}: {prefix}cond_type_embedding is HunyuanVideo 1.5's")
        img_in = shape("img_in.proj.weight")  # [C, in, pt, ph, pw]
        if len(img_in) != 5:
            raise HunyuanVideoConfigError(f"{NAME}: {prefix}img_in.proj.weight is {img_in}, not a Conv3d "
                                          "(a 2-D patch is HunyuanImage 2.1)")
        hidden = img_in[0]
        head_dim = shape("double_blocks.0.img_attn_q_norm.weight")[0]
        if hidden % head_dim:
            raise HunyuanVideoConfigError(f"{NAME}: width {hidden} is not a multiple of heads of {head_dim}")
        patch = tuple(img_in[2:])
        out_rows = shape("final_layer.linear.weight")[0]
        patch_volume = patch[0] * patch[1] * patch[2]
        if out_rows % patch_volume:
            raise HunyuanVideoConfigError(f"{NAME}: final layer of {out_rows} rows for patches {patch}")
        return cls(
            in_channels=img_in[1], out_channels=out_rows // patch_volume, hidden_size=hidden,
            num_heads=hidden // head_dim,
            depth=count_numbered(tensors, prefix, "double_blocks", HunyuanVideoConfigError, NAME),
            depth_single_blocks=count_numbered(tensors, prefix, "single_blocks", HunyuanVideoConfigError, NAME),
            refiner_depth=count_numbered(tensors, prefix, "txt_in.individual_token_refiner.blocks",
                                         HunyuanVideoConfigError, NAME),
            mlp_ratio=shape("double_blocks.0.img_mlp.fc1.weight")[0] / hidden,
            context_in_dim=shape("txt_in.input_embedder.weight")[1],
            vec_in_dim=shape("vector_in.in_layer.weight")[1] if has("vector_in.in_layer.weight") else None,
            patch_size=patch,  # type: ignore[arg-type]
            guidance_embed=has("guidance_in.mlp.0.weight"),
            axes_dim=HV_AXES if head_dim == HEAD_DIM else default_axes_dim(head_dim),
        )

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` for this network (`model_detection`'s hunyuan_video entry)."""
        return {"image_model": "hunyuan_video", "in_channels": self.in_channels, "out_channels": self.out_channels,
                "patch_size": list(self.patch_size), "vec_in_dim": self.vec_in_dim, "axes_dim": list(self.axes_dim),
                "meanflow": False, "context_in_dim": self.context_in_dim, "hidden_size": self.hidden_size,
                "mlp_ratio": self.mlp_ratio, "num_heads": self.num_heads, "depth": self.depth,
                "depth_single_blocks": self.depth_single_blocks, "theta": int(self.theta), "qkv_bias": True,
                "byt5": False, "guidance_embed": self.guidance_embed}


class VectorMLP(nn.Module):
    """`in_layer`, SiLU, `out_layer` (Tencent's MLPEmbedder: the pooled-text vector)."""

    def __init__(self, in_dim: int, dim: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.in_layer = _linear(ops, in_dim, dim, factory)
        self.out_layer = _linear(ops, dim, dim, factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out_layer(F.silu(self.in_layer(x)))


class Modulation(nn.Module):
    """`modulation.linear` over SiLU(vec): `rows` chunks, each `[B, 1, C]`, or per token `[B, N, C]`
    when `vec` is a pair `[B, 2, C]` split at token `split` (the token-replace modulation)."""

    def __init__(self, dim: int, rows: int, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.rows = rows
        self.linear = _linear(ops, dim, rows * dim, factory)

    def forward(self, vec: torch.Tensor, split: tuple[int, int] | None = None) -> tuple[torch.Tensor, ...]:
        return per_token_mods(self.linear, vec, self.rows, split)


def per_token_mods(linear: nn.Module, vec: torch.Tensor, rows: int,
                   split: tuple[int, int] | None) -> tuple[torch.Tensor, ...]:
    """`linear(SiLU(vec))` cut in `rows` chunks: `[B, 1, C]` each for `vec` [B, C]; for a pair
    `vec` [B, 2, C] with `split` (first, total) tokens: `[B, total, C]`, the first `first` tokens
    from `vec[:, 0]`, the rest from `vec[:, 1]` (ComfyUI's `modulation_dims`)."""
    if vec.ndim == 2:
        return linear(F.silu(vec))[:, None, :].chunk(rows, dim=-1)
    out = linear(F.silu(vec))  # [B, 2, rows * C]
    first, total = split if split is not None else (0, 1)
    if first >= total:
        per_token = out[:, :1].expand(-1, total, -1)
    else:
        per_token = torch.cat((out[:, :1].expand(-1, first, -1), out[:, 1:].expand(-1, total - first, -1)), dim=1)
    return per_token.chunk(rows, dim=-1)


class HunyuanDoubleBlock(DoubleBlock):
    """HunyuanVideo 1.5's double-stream block (the same math and names), whose modulation may be per
    token (`img_split`: the token-replace pair of vectors, see `per_token_mods`)."""

    def forward(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                img_split: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if vec.ndim == 2:
            return super().forward(img, txt, vec, pe, attn_mask=attn_mask, transformer_options=transformer_options)
        img_mods = per_token_mods(self.img_mod.linear, vec, 6, img_split)
        txt_mods = per_token_mods(self.txt_mod.linear, vec, 6, (0, txt.shape[1]))  # the text: vec[:, 1]
        iq, ik, iv = self._qkv("img", img, img_mods[0], img_mods[1])
        tq, tk, tv = self._qkv("txt", txt, txt_mods[0], txt_mods[1])
        attn = flux_math.run_attention(torch.cat((iq, tq), dim=2), torch.cat((ik, tk), dim=2),
                                       torch.cat((iv, tv), dim=2), pe=pe, mask=attn_mask,
                                       transformer_options=transformer_options or {})  # [B, Ni+Nt, C]
        n = img.shape[1]
        return self._rest("img", img, attn[:, :n], img_mods), self._rest("txt", txt, attn[:, n:], txt_mods)


class SingleBlock(nn.Module):
    """A single-stream block (Tencent's MMSingleStreamBlock): adaLN with 3 rows (shift, scale, gate);
    `linear1` gives q, k, v and the MLP input; RMS-normed q / k, RoPE, attention; `linear2` over the
    attention output joined with GELU-tanh(MLP input); a gated residual."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float, ops: Any, factory: dict[str, Any]) -> None:
        super().__init__()
        self.heads = heads
        self.dim = dim
        self.mlp_width = int(dim * mlp_ratio)
        self.linear1 = _linear(ops, dim, 3 * dim + self.mlp_width, factory)
        self.linear2 = _linear(ops, dim + self.mlp_width, dim, factory)
        self.q_norm = RMSNorm(dim // heads, factory)
        self.k_norm = RMSNorm(dim // heads, factory)
        self.pre_norm = ops.LayerNorm(dim, elementwise_affine=False, eps=1e-6, **factory)
        self.modulation = Modulation(dim, 3, ops, factory)

    def forward(self, x: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor | None,
                attn_mask: torch.Tensor | None = None, transformer_options: dict[str, Any] | None = None,
                split: tuple[int, int] | None = None) -> torch.Tensor:
        # x [B, L, C] (image then text tokens), vec [B, C] (or the token-replace pair [B, 2, C])
        shift, scale, gate = self.modulation(vec, (split[0], x.shape[1]) if split is not None else None)
        b, n, _ = x.shape
        qkv, mlp = self.linear1(self.pre_norm(x) * (1 + scale) + shift).split([3 * self.dim, self.mlp_width], dim=-1)
        q, k, v = qkv.view(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4)  # each [B, H, L, D]
        attn = flux_math.run_attention(self.q_norm(q).to(v), self.k_norm(k).to(v), v, pe=pe, mask=attn_mask,
                                       transformer_options=transformer_options or {})  # [B, L, C]
        return x + self.linear2(torch.cat((attn, F.gelu(mlp, approximate="tanh")), dim=2)) * gate


class HunyuanFinalLayer(FinalLayer):
    """HunyuanVideo 1.5's final layer, with the per-token (token-replace) modulation."""

    def forward(self, x: torch.Tensor, vec: torch.Tensor, split: tuple[int, int] | None = None) -> torch.Tensor:
        if vec.ndim == 2:
            return super().forward(x, vec)
        shift, scale = per_token_mods(self.adaLN_modulation[1], vec, 2, split)
        return self.linear(self.norm_final(x) * (1 + scale) + shift)


class HunyuanVideoTransformer(nn.Module):
    """The HunyuanVideo 1.0 network (see the module doc)."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "y", "txt_byt5", "guidance", "attention_mask",
                         "guiding_frame_index", "ref_latent", "disable_time_r", "control", "transformer_options")

    def __init__(self, config: HunyuanVideoConfig, dtype: Any = None, device: Any = None,
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
        self.vector_in = VectorMLP(config.vec_in_dim, dim, ops, factory) if config.vec_in_dim else None
        self.guidance_in = TimeMLP(256, dim, ops, factory) if config.guidance_embed else None
        self.txt_in = TokenRefiner(config.context_in_dim, dim, heads, config.refiner_depth, ops, factory)
        self.double_blocks = nn.ModuleList([HunyuanDoubleBlock(dim, heads, config.mlp_ratio, ops, factory)
                                            for _ in range(config.depth)])
        self.single_blocks = nn.ModuleList([SingleBlock(dim, heads, config.mlp_ratio, ops, factory)
                                            for _ in range(config.depth_single_blocks)])
        patch_volume = config.patch_size[0] * config.patch_size[1] * config.patch_size[2]
        self.final_layer = HunyuanFinalLayer(dim, patch_volume * config.out_channels, ops, factory)

    @classmethod
    def from_config(cls, config: HunyuanVideoConfig, operations: Any = None) -> "HunyuanVideoTransformer":
        return cls(config, operations=operations)

    @property
    def params(self) -> dict[str, Any]:
        return asdict(self.config)

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.hunyuan_video.keys import lora_key_map

        return lora_key_map(names)

    def _img_ids(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t, h, w = x.shape
        pt, ph, pw = self.patch_size
        sizes = ((t + pt // 2) // pt, (h + ph // 2) // ph, (w + pw // 2) // pw)  # ComfyUI's rounding
        grid = torch.meshgrid(*(torch.arange(s, device=x.device) for s in sizes), indexing="ij")
        return torch.stack(grid, dim=-1).reshape(1, -1, 3).expand(b, -1, -1).to(torch.float32)  # [B, N, 3]

    def _vec(self, img: torch.Tensor, timestep: torch.Tensor, y: torch.Tensor | None, guidance: torch.Tensor | None,
             guiding_frame_index: torch.Tensor | None) -> torch.Tensor:
        """[B, C]; with `guiding_frame_index` the pair [B, 2, C] (first-frame vector, the usual one)."""
        vec = self.time_in(timestep_embedding(timestep, 256, time_factor=1.0).to(img.dtype))  # [B, C]
        pooled = None
        if self.vector_in is not None:
            if y is None:
                raise HunyuanVideoConfigError(f"{NAME}: the network takes CLIP-L's pooled vector (y), none was given")
            pooled = self.vector_in(y[:, :self.config.vec_in_dim].to(img.dtype))
        if guiding_frame_index is not None:
            index = guiding_frame_index.to(device=timestep.device, dtype=torch.float32).reshape(-1)
            replace = self.time_in(timestep_embedding(index, 256, time_factor=1.0).to(img.dtype))
            replace = replace.expand(vec.shape[0], -1)
            if pooled is not None:
                replace, vec = replace + pooled, vec + pooled
            vec = torch.stack((replace, vec), dim=1)  # [B, 2, C]
        elif pooled is not None:
            vec = vec + pooled
        if self.guidance_in is not None and guidance is not None:
            g = self.guidance_in(timestep_embedding(guidance.to(device=timestep.device), 256).to(img.dtype))  # [B, C]
            vec = vec + (g[:, None] if vec.ndim == 3 else g)
        return vec

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor, y: torch.Tensor | None = None,
                guidance: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                guiding_frame_index: torch.Tensor | None = None, ref_latent: torch.Tensor | None = None,
                control: Any = None, transformer_options: dict[str, Any] | None = None,
                **kwargs: Any) -> torch.Tensor:
        # x [B, in, T, H, W], timestep [B] (sigma x 1000), context [B, Lt, text_dim], y [B, vec_in],
        # guidance [B], attention_mask [B, Lt] (1 keep / 0 pad), ref_latent [B, in, Tr, H, W]
        options = dict(transformer_options or {})
        if x.ndim != 5:
            raise HunyuanVideoConfigError(f"{NAME} takes a 5-D video latent, got {tuple(x.shape)}")
        if x.shape[1] != self.config.in_channels:
            raise HunyuanVideoConfigError(f"{NAME}: the latent and its conditioning have {x.shape[1]} channels, the "
                                          f"network takes {self.config.in_channels}")
        b, _, t, h, w = x.shape
        pt, ph, pw = self.patch_size
        if t % pt or h % ph or w % pw:  # ComfyUI pads, then fails to fold the output back
            raise HunyuanVideoConfigError(f"{NAME}: a latent of {t} x {h} x {w} does not divide into patches of "
                                          f"{tuple(self.patch_size)}")
        img_ids = self._img_ids(x)
        img = self.img_in(x)  # [B, N, C]
        vec = self._vec(img, timestep, y, guidance, guiding_frame_index)
        ref_tokens = 0
        if ref_latent is not None:
            ref_ids = self._img_ids(ref_latent).clone()
            ref_ids[..., 0] = -1
            ref_ids[..., 2] += w // pw
            ref = self.img_in(ref_latent.to(img.dtype))
            ref_tokens = ref.shape[1]
            img = torch.cat((ref, img), dim=1)
            img_ids = torch.cat((ref_ids, img_ids), dim=1)
        split = None
        if vec.ndim == 3:  # token replace: the first latent frame's tokens (ComfyUI counts them on the latent)
            split = ((w // pw) * (h // ph), img.shape[1])
        txt_mask = None
        if attention_mask is not None:
            txt_mask = attention_mask
            if not torch.is_floating_point(txt_mask):
                txt_mask = (txt_mask - 1).to(img.dtype) * torch.finfo(img.dtype).max  # 0 keep, -max pad
            txt_mask = txt_mask.to(img.dtype)
        txt = self.txt_in(context.to(img.dtype), timestep, txt_mask, options)  # [B, Lt, C]
        txt_ids = torch.zeros((b, txt.shape[1], 3), device=x.device, dtype=torch.float32)
        pe = self.pe_embedder(torch.cat((img_ids, txt_ids), dim=1))
        attn_mask = None
        if txt_mask is not None:
            row = torch.cat((torch.zeros((txt_mask.shape[0], img.shape[1]), dtype=img.dtype, device=img.device),
                             txt_mask), dim=1)
            attn_mask = row[:, None, None, :]  # [B, 1, 1, N + L] additive over keys
        img = self._blocks(img, txt, vec, pe, attn_mask, split, control, options)
        if ref_tokens:
            img = img[:, ref_tokens:]
            if split is not None:
                split = (split[0], img.shape[1])
        out = self.final_layer(img, vec, split)  # [B, N, p * out]
        out = out.reshape(b, t // pt, h // ph, w // pw, self.out_channels, pt, ph, pw)
        return out.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(b, self.out_channels, t, h, w)

    def _blocks(self, img: torch.Tensor, txt: torch.Tensor, vec: torch.Tensor, pe: torch.Tensor,
                attn_mask: torch.Tensor | None, split: tuple[int, int] | None, control: Any,
                options: dict[str, Any]) -> torch.Tensor:
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        doubles, singles = len(self.double_blocks), len(self.single_blocks)
        img_len = img.shape[1]

        def run_double(index: int, streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            block = self.double_blocks[index]
            options["block_type"], options["block_index"], options["total_blocks"] = "double", index, doubles
            if ("double_block", index) in blocks_replace:
                def original(args: dict[str, Any]) -> dict[str, Any]:
                    i, t = block(args["img"], args["txt"], args["vec"], args["pe"],
                                 attn_mask=args.get("attention_mask"),
                                 transformer_options=args.get("transformer_options"), img_split=split)
                    return {"img": i, "txt": t}

                out = blocks_replace[("double_block", index)](
                    {"img": streams["img"], "txt": streams["txt"], "vec": vec, "pe": pe, "attention_mask": attn_mask,
                     "transformer_options": options}, {"original_block": original})
                new_img, new_txt = out["img"], out["txt"]
            else:
                new_img, new_txt = block(streams["img"], streams["txt"], vec, pe, attn_mask=attn_mask,
                                         transformer_options=options, img_split=split)
            if control is not None:
                additions = control.get("input") or []
                if index < len(additions) and additions[index] is not None:
                    new_img = new_img + additions[index]
            return {"img": new_img, "txt": new_txt}

        def run_single(index: int, joined: torch.Tensor) -> torch.Tensor:
            block = self.single_blocks[index]
            options["block_type"], options["block_index"], options["total_blocks"] = "single", index, singles
            if ("single_block", index) in blocks_replace:
                def original(args: dict[str, Any]) -> dict[str, Any]:
                    return {"img": block(args["img"], args["vec"], args["pe"], attn_mask=args.get("attention_mask"),
                                         transformer_options=args.get("transformer_options"), split=split)}

                joined = blocks_replace[("single_block", index)](
                    {"img": joined, "vec": vec, "pe": pe, "attention_mask": attn_mask, "transformer_options": options},
                    {"original_block": original})["img"]
            else:
                joined = block(joined, vec, pe, attn_mask=attn_mask, transformer_options=options, split=split)
            if control is not None:
                additions = control.get("output") or []
                if index < len(additions) and additions[index] is not None:
                    joined = torch.cat((joined[:, :img_len] + additions[index], joined[:, img_len:]), dim=1)
            return joined

        def rest(streams: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            for index in range(1, doubles):
                streams = run_double(index, streams)
            joined = torch.cat((streams["img"], streams["txt"]), dim=1)
            for index in range(singles):
                joined = run_single(index, joined)
            return {"img": joined[:, :img_len], "txt": joined[:, img_len:]}

        streams = {"img": img, "txt": txt}
        if doubles == 0:
            return rest(streams)["img"]
        return run_split_blocks(options, lambda s: run_double(0, s), rest, streams)["img"]


__all__ = ["HunyuanVideoConfig", "HunyuanVideoConfigError", "HunyuanVideoTransformer"]
