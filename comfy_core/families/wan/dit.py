"""The Wan 2.1 / 2.2 video diffusion transformer and `WanConfig` read from weights.

Architecture of Alibaba's Wan (Wan Team 2025, arXiv 2503.20314; github.com/Wan-Video/Wan2.1
`wan/modules/model.py`): a video latent `[B, C, T, H, W]` is cut into 1x2x2 patches by a Conv3d,
the tokens go through `num_layers` blocks of 3-D-RoPE self-attention, cross-attention to the
umT5 text states (and, for image-to-video, to CLIP-vision ViT-H penultimate states through
`img_emb`), and a GELU FFN, each modulated by the timestep embedding (6 rows, plus a learned
table per block), and a modulated head; unpatchified back to `[B, out_dim, T, H, W]`.

Constructor, forward arguments, state-dict names and the patch points are those of ComfyUI's
`comfy/ldm/wan/model.py` (`WanModel(model_type, patch_size, text_len, in_dim, dim, ffn_dim,
freq_dim, text_dim, out_dim, num_heads, num_layers, window_size, qk_norm, cross_attn_norm, eps,
flf_pos_embed_token_number, in_dim_ref_conv, image_model, device, dtype, operations)`,
`forward(x, timestep, context, clip_fea, time_dim_concat, transformer_options, **kwargs)`), and
its `VaceWanModel` / `CameraWanModel`; written here:

- `timestep` is in 0..1000 (ComfyUI's flow sampling with multiplier 1000), `[B]`, or `[B, T]`
  per latent frame (Wan 2.2 TI2V: ComfyUI's `WAN22.process_timestep`). A `denoise_mask` kwarg
  `[B, C, T, H, W]` with a `[B]` timestep makes the per-frame timesteps here, `mean(mask over
  C, H, W) * t`, the same computation (our `DiffusionModel` has no `process_timestep` step).
- `transformer_options["patches_replace"]["dit"][("double_block", i)]` replaces block i: called
  with `{"img", "txt", "vec", "pe", "transformer_options"}` and `{"original_block": fn}`, returns
  `{"img"}` (what SkipLayerGuidanceDiT and block-swap packs use on Wan). `block_index` /
  `total_blocks` are set on a shallow copy of the options for each block.
- VACE: `vace_context` `[B, n, 96, T, H, W]` (n hint sets), `vace_strength` (n floats); hint
  block k runs after main block `k * (num_layers // vace_layers)` and adds its skip.
- Camera: `camera_conditions` `[B, 24 (Plücker), T, 8h, 8w]` through `control_adapter`.
- `reference_latent` `[B, C, H, W]` through `ref_conv` (Wan 2.2 Fun): tokens prepended, one
  more RoPE frame, cut off before unpatchifying.
- `clip_fea` `[B, 257 or 514, 1280]` (i2v / flf2v), `time_dim_concat` (frames appended along T).
- HuMo (`WanHuMoModel`, comfy_core/families/wan/humo.py): `audio_embed` `[B, F, 8, 5, C]`,
  `reference_latent` `[B, in_dim, Tr, H, W]` appended after the video tokens.
- Wan 2.2 Animate (`AnimateWanModel`, comfy_core/families/wan/animate.py): `pose_latents`
  `[B, 16, T, H, W]` through `add_control`, `face_pixel_values` `[B, 3, T, 512, 512]` through
  `hint_tokens` / `add_hints` (the face adapter after every fifth block).
- Bernini-R (comfy_core/families/wan/bernini.py): `context_latents`, a list of clean latents
  `[B, 16, Ti, Hi, Wi]` whose tokens follow the video's, each stream with its own RoPE grid turned
  by its source id; cut off after the head.

The cross-attention text width (`text_dim`, umT5-XXL's 4096) and the CLIP width are read from
the weights, so tiny test files may use small encoders.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace as dataclasses_replace
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.attention.rope import ROPE_OPTIONS, rope_axis_positions
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.flux.blocks import EmbedND
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.families.wan.blocks import (CLIP_VISION_WIDTH, Head, MLPProj, VaceWanAttentionBlock, WanAttentionBlock,
                                            WanCamAdapter, sinusoidal_embedding_1d)
from comfy_core.families.wan import bernini
from comfy_core.families.wan.causal import frame_offset
from comfy_core.families.wan.s2v import add_s2v_modules, s2v_fields, s2v_forward_orig
from comfy_core.families.wan.animate_config import MARKER as ANIMATE_MARKER, animate_fields
from comfy_core.families.wan.dancer_config import DANCER_FIELDS, MARKER as DANCER_MARKER, dancer_fields
from comfy_core.families.wan.humo import HUMO_FIELDS, HUMO_MARKER, humo_blocks, humo_fields, humo_projection, humo_forward_orig
from comfy_core.models.weight_shapes import count_numbered as count_entries, shape_reader
from comfy_core.wrappers import run_split_blocks

HEAD_DIM = 128  # every released Wan width has 128-channel heads (ComfyUI: num_heads = dim // 128)
MODEL_TYPES = ("t2v", "i2v", "vace", "camera", "camera_2.2", "s2v", "humo", "animate2", "wandancer", "scail", "scail2",
               "animate")
S2V_MARKER = "casual_audio_encoder.encoder.final_linear.weight"  # ComfyUI's model_detection marker
S2V_FIELDS = ("audio_dim", "num_audio_token", "audio_layers", "enable_adain", "cond_dim")


class WanConfigError(ValueError):
    """The Wan weights are incomplete or inconsistent, or the parameters are impossible."""


@dataclass(frozen=True)
class WanConfig:
    """ComfyUI's Wan `unet_config` entries (Wan 2.1 14B t2v defaults) plus the widths ComfyUI
    fixes and tiny files change (`image_dim`, the CLIP-vision width)."""

    model_type: str = "t2v"
    patch_size: tuple[int, int, int] = (1, 2, 2)
    text_len: int = 512
    in_dim: int = 16
    dim: int = 5120
    ffn_dim: int = 13824
    freq_dim: int = 256
    text_dim: int = 4096
    out_dim: int = 16
    num_heads: int = 40
    num_layers: int = 40
    window_size: tuple[int, int] = (-1, -1)
    qk_norm: bool = True
    cross_attn_norm: bool = True
    eps: float = 1e-6
    flf_pos_embed_token_number: int | None = None
    in_dim_ref_conv: int | None = None
    image_dim: int = CLIP_VISION_WIDTH
    vace_layers: int | None = None
    vace_in_dim: int | None = None
    in_dim_control_adapter: int = 24
    # Wan 2.2 S2V (comfy_core/families/wan/s2v.py): ComfyUI's constructor defaults
    audio_dim: int = 1024
    num_audio_token: int = 4
    audio_layers: int = 25
    enable_adain: bool = True
    cond_dim: int = 16
    # Wan HuMo (comfy_core/families/wan/humo.py): audio tokens per frame (ComfyUI's `audio_token_num`),
    # the Whisper width, the projection's hidden width and the audio width ComfyUI fixes
    audio_token_num: int = 16
    humo_audio_channels: int = 1280
    humo_audio_hidden: int = 512
    humo_audio_dim: int = 1536
    # Wan Dancer (comfy_core/families/wan/dancer.py): the music features' width, the music encoder's
    # width, FFN and depth, and whether its q/k/v are stored fused (`in_proj_weight`)
    music_feature_dim: int = 35
    music_dim: int = 256
    music_ffn_dim: int = 1024
    music_layers: int = 2
    music_fused_qkv: bool = False
    # SCAIL-2 (comfy_core/families/wan/scail.py): the mask patch embedding's input channels
    mask_in_dim: int = 28
    # Wan 2.2 Animate (comfy_core/families/wan/animate.py): the motion code's width (the face encoder's input)
    motion_encoder_dim: int = 512

    def __post_init__(self) -> None:
        object.__setattr__(self, "patch_size", tuple(int(p) for p in self.patch_size))
        object.__setattr__(self, "window_size", tuple(int(w) for w in self.window_size))
        if self.model_type not in MODEL_TYPES:
            raise WanConfigError(f"Wan: model_type {self.model_type!r} is not one of {MODEL_TYPES}")
        if self.num_heads <= 0 or self.dim % self.num_heads:
            raise WanConfigError(f"Wan: width {self.dim} is not a multiple of {self.num_heads} heads")
        if self.head_dim % 2 or self.head_dim < 6:
            raise WanConfigError(f"Wan: a head of {self.head_dim} channels cannot carry 3-D RoPE")
        if self.vace_layers is not None and (self.vace_layers <= 0 or self.vace_layers > self.num_layers):
            raise WanConfigError(f"Wan: {self.vace_layers} VACE blocks for {self.num_layers} main blocks")

    @property
    def head_dim(self) -> int:
        return self.dim // self.num_heads

    @property
    def has_image_embedding(self) -> bool:
        """i2v / flf2v / Wan 2.1 camera: CLIP-vision tokens through `img_emb` (ComfyUI's 'i2v' cross attention)."""
        # Animate 2, Dancer, SCAIL, Animate: i2v weights
        return self.model_type in ("i2v", "camera", "animate2", "wandancer", "scail", "scail2", "animate")

    @property
    def variant(self) -> str:
        """A name for the weights' kind: t2v, i2v, flf2v, vace, camera, camera_2.2, fun (extra input
        channels without an image embedding: Fun control / inpaint, Wan 2.2 A14B i2v), ti2v (48-channel)."""
        if self.model_type == "i2v" and self.flf_pos_embed_token_number is not None:
            return "flf2v"
        if self.model_type != "t2v":
            return self.model_type
        if self.out_dim == 48:
            return "ti2v"
        return "t2v" if self.in_dim == self.out_dim else "fun"

    def params(self) -> dict[str, Any]:
        """The keyword arguments of `WanModel(**params)`."""
        params = asdict(self)
        params["patch_size"] = tuple(self.patch_size)
        params["window_size"] = tuple(self.window_size)
        return params

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (model_detection's dict: `image_model` "wan2.1" and the arguments)."""
        config = {"image_model": "wan2.1", **self.params()}
        config.pop("image_dim")
        # ComfyUI's configs name none of them (its constructors' defaults)
        for key in S2V_FIELDS + HUMO_FIELDS + DANCER_FIELDS + ("mask_in_dim", "motion_encoder_dim"):
            config.pop(key)
        for key in ("flf_pos_embed_token_number", "in_dim_ref_conv", "vace_layers", "vace_in_dim"):
            if config[key] is None:
                config.pop(key)
        if self.model_type not in ("camera", "camera_2.2"):
            config.pop("in_dim_control_adapter")
        return config

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "WanConfig":
        """The structure of the Wan DiT under `prefix` from names and shapes only (ComfyUI's
        model_detection: width from `head.modulation`, out channels from `head.head` over the 4
        outputs of a 1x2x2 patch, heads `dim // 128`, FFN from `blocks.0.ffn.0`, depth from the
        numbered blocks, in channels from `patch_embedding`; the model type from `vace_patch_embedding`
        / `control_adapter` / `img_emb`). Text and CLIP widths from `text_embedding.0` / `img_emb.proj.1`.
        Raises `WanConfigError` naming the key when the weights are incomplete or inconsistent."""
        shape = shape_reader(tensors, prefix, WanConfigError, "Wan")
        table = shape("head.modulation")
        if len(table) != 3 or table[:2] != (1, 2):
            raise WanConfigError(f"Wan: {prefix}head.modulation has shape {table}, expected (1, 2, dim)")
        dim = table[-1]
        if dim % HEAD_DIM:
            raise WanConfigError(f"Wan: width {dim} is not a multiple of the {HEAD_DIM}-channel heads")
        head_out, head_in = shape("head.head.weight")
        if head_in != dim or head_out % 4:
            raise WanConfigError(f"Wan: {prefix}head.head.weight has shape {(head_out, head_in)}, expected "
                                 f"(4 * out_dim, {dim})")
        patch = shape("patch_embedding.weight")
        if len(patch) != 5 or patch[0] != dim or tuple(patch[2:]) != (1, 2, 2):
            raise WanConfigError(f"Wan: {prefix}patch_embedding.weight has shape {patch}, expected "
                                 f"({dim}, in_dim, 1, 2, 2)")
        text_out, text_dim = shape("text_embedding.0.weight")
        time_out, freq_dim = shape("time_embedding.0.weight")
        for key, width in (("text_embedding.0.weight", text_out), ("time_embedding.0.weight", time_out)):
            if width != dim:
                raise WanConfigError(f"Wan: {prefix}{key} gives {width} channels, the model is {dim} wide")
        expect(shape, "time_projection.1.weight", (6 * dim, dim), prefix)
        num_layers = count_numbered(tensors, prefix, "blocks")
        if num_layers == 0:
            raise WanConfigError(f"Wan: no {prefix}blocks.N weights")
        ffn_dim = shape("blocks.0.ffn.0.weight")[0]
        image = prefix + "img_emb.proj.0.bias" in tensors
        vace = _has(tensors, prefix, "vace_patch_embedding.weight")
        for i in range(num_layers):
            check_block(shape, f"blocks.{i}.", dim, ffn_dim, prefix, image and not vace)
        fields: dict[str, Any] = {
            "dim": dim, "out_dim": head_out // 4, "num_heads": dim // HEAD_DIM, "ffn_dim": ffn_dim,
            "num_layers": num_layers, "in_dim": patch[1], "text_dim": text_dim, "freq_dim": freq_dim,
            "qk_norm": _has(tensors, prefix, "blocks.0.self_attn.norm_q.weight"),
            "cross_attn_norm": _has(tensors, prefix, "blocks.0.norm3.weight")}
        if vace:
            fields["model_type"] = "vace"
            fields["vace_in_dim"] = shape("vace_patch_embedding.weight")[1]
            fields["vace_layers"] = count_numbered(tensors, prefix, "vace_blocks")
            for i in range(fields["vace_layers"]):
                check_block(shape, f"vace_blocks.{i}.", dim, ffn_dim, prefix, False)
        elif _has(tensors, prefix, S2V_MARKER):
            fields.update(s2v_fields(tensors, prefix, shape, dim, WanConfigError))
        elif _has(tensors, prefix, HUMO_MARKER):
            fields.update(humo_fields(tensors, prefix, shape, dim, num_layers, WanConfigError))
        elif _has(tensors, prefix, ANIMATE_MARKER):  # Wan 2.2 Animate (wan/animate.py)
            fields.update(animate_fields(tensors, prefix, shape, dim, num_layers, WanConfigError))
        elif _has(tensors, prefix, "patch_embedding_pose.weight"):  # SCAIL / SCAIL-2 (wan/scail.py)
            from comfy_core.families.wan.scail_config import scail_fields

            fields.update(scail_fields(tensors, prefix, shape, dim, WanConfigError))
        elif _has(tensors, prefix, DANCER_MARKER) and image:
            fields.update(dancer_fields(tensors, prefix, shape, dim, WanConfigError))
        elif _has(tensors, prefix, "control_adapter.conv.weight"):
            fields["model_type"] = "camera" if image else "camera_2.2"
            adapter_in = shape("control_adapter.conv.weight")[1]
            if adapter_in % 64:
                raise WanConfigError(f"Wan: {prefix}control_adapter.conv.weight takes {adapter_in} channels, not a "
                                     "multiple of the 64 of an 8x pixel unshuffle")
            fields["in_dim_control_adapter"] = adapter_in // 64
        else:
            fields["model_type"] = "i2v" if image else "t2v"
        if image:
            fields["image_dim"] = shape("img_emb.proj.0.weight")[0]
            expect(shape, "img_emb.proj.3.weight", (dim, fields["image_dim"]), prefix)
        if _has(tensors, prefix, "img_emb.emb_pos"):
            fields["flf_pos_embed_token_number"] = shape("img_emb.emb_pos")[1]
        if _has(tensors, prefix, "ref_conv.weight"):
            fields["in_dim_ref_conv"] = shape("ref_conv.weight")[1]
        return cls(**fields)


def _has(tensors: Mapping[str, Any], prefix: str, key: str) -> bool:
    return prefix + key in tensors


def expect(shape: Any, key: str, expected: tuple[int, ...], prefix: str) -> None:
    found = shape(key)
    if tuple(found) != tuple(expected):
        raise WanConfigError(f"Wan: {prefix}{key} has shape {tuple(found)}, expected {tuple(expected)}")


def check_block(shape: Any, block: str, dim: int, ffn_dim: int, prefix: str, image: bool) -> None:
    """Every projection of one block has the model's widths (a truncated or mixed file is refused)."""
    for attn in ("self_attn", "cross_attn"):
        for proj in ("q", "k", "v", "o"):
            expect(shape, f"{block}{attn}.{proj}.weight", (dim, dim), prefix)
    if image:
        expect(shape, f"{block}cross_attn.k_img.weight", (dim, dim), prefix)
    expect(shape, f"{block}ffn.0.weight", (ffn_dim, dim), prefix)
    expect(shape, f"{block}ffn.2.weight", (dim, ffn_dim), prefix)
    expect(shape, f"{block}modulation", (1, 6, dim), prefix)


def count_numbered(tensors: Mapping[str, Any], prefix: str, group: str) -> int:
    """How many `group.N.` entries there are under `prefix`; a gap in the numbering is an error."""
    return count_entries(tensors, prefix, group, WanConfigError, "Wan")


def is_wan(names: Any, prefix: str = "") -> bool:
    """Whether the names under `prefix` are a Wan DiT in the original / ComfyUI layout."""
    return prefix + "head.modulation" in names and prefix + "patch_embedding.weight" in names


def _conv_in(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A patch-embedding convolution on `x`: in float32 as ComfyUI (its weights are built fp32),
    or in the weight's dtype when the loader stored them lower; back in `x`'s dtype."""
    weight = getattr(conv, "weight", None)
    dtype = weight.dtype if weight is not None and weight.dtype in (torch.float32, torch.float16, torch.bfloat16) \
        else torch.float32
    return conv(x.to(dtype)).to(x.dtype)


class WanModel(nn.Module):
    """The Wan DiT (see the module docstring); keyword arguments are `WanConfig`'s fields."""

    # DIFFUSION_MODEL wrappers' positional arguments, ComfyUI's `_forward` order (comfy_core/models/diffusion.py)
    wrapper_arguments = ("x", "timesteps", "context", "clip_fea", "time_dim_concat", "transformer_options")

    def __init__(self, model_type: str = "t2v", patch_size: Sequence[int] = (1, 2, 2), text_len: int = 512,
                 in_dim: int = 16, dim: int = 2048, ffn_dim: int = 8192, freq_dim: int = 256, text_dim: int = 4096,
                 out_dim: int = 16, num_heads: int = 16, num_layers: int = 32, window_size: Sequence[int] = (-1, -1),
                 qk_norm: bool = True, cross_attn_norm: bool = True, eps: float = 1e-6,
                 flf_pos_embed_token_number: int | None = None, in_dim_ref_conv: int | None = None,
                 image_dim: int = CLIP_VISION_WIDTH, vace_layers: int | None = None, vace_in_dim: int | None = None,
                 in_dim_control_adapter: int = 24, image_model: Any = None, device: Any = None, dtype: Any = None,
                 operations: Any = None, **unused: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        config = WanConfig(model_type=model_type, patch_size=tuple(patch_size), text_len=text_len, in_dim=in_dim,
                           dim=dim, ffn_dim=ffn_dim, freq_dim=freq_dim, text_dim=text_dim, out_dim=out_dim,
                           num_heads=num_heads, num_layers=num_layers, window_size=tuple(window_size), qk_norm=qk_norm,
                           cross_attn_norm=cross_attn_norm, eps=eps,
                           flf_pos_embed_token_number=flf_pos_embed_token_number, in_dim_ref_conv=in_dim_ref_conv,
                           image_dim=image_dim, vace_layers=vace_layers, vace_in_dim=vace_in_dim,
                           in_dim_control_adapter=in_dim_control_adapter)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.dtype = dtype
        self.model_type = model_type
        self.patch_size = config.patch_size
        self.text_len, self.in_dim, self.dim, self.ffn_dim = text_len, in_dim, dim, ffn_dim
        self.freq_dim, self.text_dim, self.out_dim = freq_dim, text_dim, out_dim
        self.num_heads, self.num_layers, self.window_size = num_heads, num_layers, config.window_size
        self.qk_norm, self.cross_attn_norm, self.eps = qk_norm, cross_attn_norm, eps

        self.patch_embedding = ops.Conv3d(in_dim, dim, kernel_size=self.patch_size, stride=self.patch_size,
                                          device=device, dtype=torch.float32)
        self.text_embedding = nn.Sequential(ops.Linear(text_dim, dim, **factory), nn.GELU(approximate="tanh"),
                                            ops.Linear(dim, dim, **factory))
        self.time_embedding = nn.Sequential(ops.Linear(freq_dim, dim, **factory), nn.SiLU(),
                                            ops.Linear(dim, dim, **factory))
        self.time_projection = nn.Sequential(nn.SiLU(), ops.Linear(dim, dim * 6, **factory))
        cross = "i2v_cross_attn" if config.has_image_embedding else "t2v_cross_attn"
        self.blocks = self.make_blocks(cross, ops, factory)
        self.head = Head(dim, out_dim, self.patch_size, eps, operations=ops, **factory)
        d = config.head_dim
        self.rope_embedder = EmbedND(dim=d, theta=10000.0, axes_dim=[d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)])
        self.img_emb = (MLPProj(image_dim, dim, flf_pos_embed_token_number=flf_pos_embed_token_number,
                                operations=ops, **factory) if config.has_image_embedding else None)
        self.ref_conv = (ops.Conv2d(in_dim_ref_conv, dim, kernel_size=self.patch_size[1:],
                                    stride=self.patch_size[1:], **factory) if in_dim_ref_conv is not None else None)
        if config.model_type == "vace":
            self.vace_layers, self.vace_in_dim = vace_layers, vace_in_dim
            self.vace_blocks = nn.ModuleList(
                VaceWanAttentionBlock("t2v_cross_attn", dim, ffn_dim, num_heads, self.window_size, qk_norm,
                                      cross_attn_norm, eps, block_id=i, operations=ops, **factory)
                for i in range(vace_layers))
            # hint block n runs after main block n * (num_layers // vace_layers)
            self.vace_layers_mapping = {layer: n for n, layer in
                                        enumerate(range(0, num_layers, num_layers // vace_layers))}
            self.vace_patch_embedding = ops.Conv3d(vace_in_dim, dim, kernel_size=self.patch_size,
                                                   stride=self.patch_size, device=device, dtype=torch.float32)
        if config.model_type in ("camera", "camera_2.2"):
            self.control_adapter = WanCamAdapter(in_dim_control_adapter, dim, kernel_size=self.patch_size[1:],
                                                 stride=self.patch_size[1:], operations=ops, **factory)

    def make_blocks(self, cross: str, ops: Any, factory: dict[str, Any]) -> nn.ModuleList:
        """The main blocks (HuMo's carry an audio cross-attention)."""
        return nn.ModuleList(
            WanAttentionBlock(cross, self.dim, self.ffn_dim, self.num_heads, self.window_size, self.qk_norm,
                              self.cross_attn_norm, self.eps, operations=ops, **factory) for _ in range(self.num_layers))

    @classmethod
    def from_config(cls, config: WanConfig, **kwargs: Any) -> "WanModel":
        """The module class of the config's model type, built with `config.params()` and kwargs
        (dtype, device, operations)."""
        classes = {"vace": VaceWanModel, "camera": CameraWanModel, "camera_2.2": CameraWanModel, "s2v": WanS2VModel,
                   "humo": WanHuMoModel}
        if config.model_type == "animate2" and cls is WanModel:  # its module imports this one
            raise WanConfigError("Wan: an Animate 2 network is built by "
                                 "comfy_core.families.wan.animate2.WanAnimate2Model.from_config")
        if config.model_type == "wandancer" and cls is WanModel:  # its module imports this one
            raise WanConfigError("Wan: a Dancer network is built by "
                                 "comfy_core.families.wan.dancer.WanDancerModel.from_config")
        if config.model_type in ("scail", "scail2") and cls is WanModel:  # its module imports this one
            raise WanConfigError("Wan: a SCAIL network is built by "
                                 "comfy_core.families.wan.scail.WanSCAILModel.from_config")
        if config.model_type == "animate" and cls is WanModel:  # its module imports this one
            raise WanConfigError("Wan: a Wan 2.2 Animate network is built by "
                                 "comfy_core.families.wan.animate.AnimateWanModel.from_config")
        kind = classes.get(config.model_type, cls)
        return kind(**kwargs, **config.params())

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target, given the state-dict names under `diffusion_model.` of the
        model holding this network (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.wan.keys import lora_key_map

        return lora_key_map(names)

    # -- the transformer on tokens -------------------------------------------------------------

    def time_modulation(self, t: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """`e` `[B, C]` (or `[B, T, C]` for per-frame timesteps `[B, T]`) and the block modulation
        `e0` `[B, 6, C]` (`[B, T, 6, C]`)."""
        e = self.time_embedding(sinusoidal_embedding_1d(self.freq_dim, t.flatten()).to(dtype=dtype))
        if t.ndim > 1:
            e = e.reshape(t.shape[0], -1, e.shape[-1])  # [B, T, C]
            return e, self.time_projection(e).unflatten(2, (6, self.dim))
        return e, self.time_projection(e).unflatten(1, (6, self.dim))

    def forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                     clip_fea: torch.Tensor | None = None, freqs: torch.Tensor | None = None, transformer_options: Mapping[str, Any] | None = None,
                     **kwargs: Any) -> torch.Tensor:
        """Patched latent in, latent out: x `[B, in_dim, T, H, W]` (padded), t `[B]` or `[B, T]`,
        context `[B, Nt, text_dim]`, clip_fea `[B, n, image_dim]`, freqs `[1, L, 1, D/2, 2, 2]`."""
        x = _conv_in(self.patch_embedding, x)  # [B, C, T', H', W']
        x = self.add_control(x, kwargs)
        grid_sizes = x.shape[2:]
        x = x.flatten(2).transpose(1, 2)  # [B, L, C]
        e, e0 = self.time_modulation(t, x.dtype)

        full_ref = kwargs.get("reference_latent") if self.ref_conv is not None else None
        if full_ref is not None:
            full_ref = self.ref_conv(full_ref.to(x.dtype)).flatten(2).transpose(1, 2)  # [B, h*w, C]
            x = torch.cat((full_ref, x), dim=1)
        # Bernini's in-context streams (wan/bernini.py): their tokens after the video's, cut after the head
        x, main_len = bernini.append_context_tokens(x, kwargs.get(bernini.CONTEXT_LATENTS),
                                                    lambda latent: _conv_in(self.patch_embedding, latent))

        context = self.text_embedding(context)  # [B, Nt, C]
        context_img_len = None
        if clip_fea is not None:
            if self.img_emb is not None:
                context = torch.cat([self.img_emb(clip_fea.to(context.dtype)), context], dim=1)
            context_img_len = clip_fea.shape[-2]

        hints = self.hint_tokens(kwargs, x.dtype)
        x_orig = x

        def after_block(i: int, x: torch.Tensor, options: dict[str, Any]) -> torch.Tensor:
            return self.add_hints(i, x, x_orig, hints, kwargs, e0, freqs, context, context_img_len, options)

        # the latent grid for block patches (ComfyUI's transformer_options["grid_sizes"]: MultiTalk)
        transformer_options = {**(transformer_options or {}), "grid_sizes": tuple(grid_sizes)}
        x = self.run_blocks(x, e0, freqs, context, context_img_len, transformer_options,
                            after_block if hints is not None else None)

        x = self.head(x, e)[:, :main_len]  # [B, L, p*out]
        if full_ref is not None:
            x = x[:, full_ref.shape[1]:]
        return self.unpatchify(x, grid_sizes)

    def run_blocks(self, x: torch.Tensor, e0: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                   context_img_len: int | None, transformer_options: Mapping[str, Any] | None,
                   after_block: Any = None, block_kwargs: Mapping[str, Any] | None = None) -> torch.Tensor:
        """The blocks in order on the tokens `x` `[B, L, C]`, each through its `patches_replace`
        entry if any, then `after_block(i, x, options)` (VACE hints, S2V's audio injection); the
        first block and the rest split for the first-block hook (comfy_core/wrappers.py).
        `block_kwargs` go to every block call (HuMo's `audio`)."""
        extra = dict(block_kwargs or {})
        options = dict(transformer_options or {})
        blocks_replace = (options.get("patches_replace", {}) or {}).get("dit", {}) or {}
        options["total_blocks"] = len(self.blocks)
        options["block_type"] = "double"

        def run(streams: dict, indices: range) -> dict:
            x = streams["img"]
            for i in indices:
                block = self.blocks[i]
                options["block_index"] = i
                if ("double_block", i) in blocks_replace:
                    def original(args: dict, block: nn.Module = block) -> dict:
                        return {"img": block(args["img"], context=args["txt"], e=args["vec"], freqs=args["pe"],
                                             context_img_len=context_img_len,
                                             transformer_options=args.get("transformer_options"), **extra)}

                    out = blocks_replace[("double_block", i)](
                        {"img": x, "txt": context, "vec": e0, "pe": freqs, "transformer_options": options},
                        {"original_block": original})
                    x = out["img"]
                else:
                    x = block(x, e=e0, freqs=freqs, context=context, context_img_len=context_img_len,
                              transformer_options=options, **extra)
                if after_block is not None:
                    x = after_block(i, x, options)
            return {"img": x}

        first = range(min(1, len(self.blocks)))
        return run_split_blocks(options, lambda streams: run(streams, first),
                                lambda streams: run(streams, range(len(first), len(self.blocks))), {"img": x})["img"]

    # Variant hooks: the base model has no camera adapter and no VACE hints.
    def add_control(self, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        return x

    def hint_tokens(self, kwargs: Mapping[str, Any], dtype: torch.dtype) -> list[torch.Tensor] | None:
        return None

    def add_hints(self, i: int, x: torch.Tensor, *args: Any) -> torch.Tensor:
        return x

    # -- positions, patches ------------------------------------------------------------------------

    def rope_encode(self, t: int, h: int, w: int, t_start: int = 0, steps_t: int | None = None,
                    steps_h: int | None = None, steps_w: int | None = None, device: Any = None,
                    dtype: Any = None, rope_options: Mapping[str, Any] | None = None) -> torch.Tensor:
        """3-D RoPE rotations for a `t x h x w` latent grid (in latent pixels, rounded to patches):
        positions (frame, row, column) on `[D - 4(D//6), 2(D//6), 2(D//6)]` channels of each head
        -> `[1, L, 1, D/2, 2, 2]` (ComfyUI's `rope_encode`); ScaleROPE's `rope_options` scale and
        shift each axis (comfy_core/attention/rope.py `rope_axis_positions`)."""
        pt, ph, pw = self.patch_size
        t_len, h_len, w_len = (t + pt // 2) // pt, (h + ph // 2) // ph, (w + pw // 2) // pw
        steps_t, steps_h, steps_w = steps_t or t_len, steps_h or h_len, steps_w or w_len
        ids = torch.zeros((steps_t, steps_h, steps_w, 3), device=device, dtype=dtype)
        axis = dict(rope_options=rope_options, device=device, dtype=dtype)
        ids[..., 0] += rope_axis_positions(t_len, "t", start=t_start, steps=steps_t, **axis).reshape(-1, 1, 1)
        ids[..., 1] += rope_axis_positions(h_len, "y", steps=steps_h, **axis).reshape(1, -1, 1)
        ids[..., 2] += rope_axis_positions(w_len, "x", steps=steps_w, **axis).reshape(1, 1, -1)
        return self.rope_embedder(ids.reshape(1, -1, 3)).movedim(1, 2)

    def unpatchify(self, x: torch.Tensor, grid_sizes: Sequence[int]) -> torch.Tensor:
        """Tokens `[B, L, prod(patch) * out]` -> `[B, out, T, H, W]` for the grid `(T', H', W')`."""
        c, b = self.out_dim, x.shape[0]
        u = x[:, :math.prod(grid_sizes)].reshape(b, *grid_sizes, *self.patch_size, c)
        u = torch.einsum("bfhwpqrc->bcfphqwr", u)
        return u.reshape(b, c, *[g * p for g, p in zip(grid_sizes, self.patch_size)])

    def per_frame_timesteps(self, timestep: torch.Tensor, denoise_mask: torch.Tensor | None) -> torch.Tensor:
        """Wan 2.2 TI2V: timestep `[B]` times the mean of the denoise mask over channels, rows and
        columns of each latent frame -> `[B, T]` (ComfyUI's `WAN22.process_timestep`)."""
        if denoise_mask is None or timestep.ndim != 1 or denoise_mask.ndim != 5:
            return timestep
        mask = denoise_mask.to(timestep.device, torch.float32)
        frames = torch.mean(mask, dim=(1, 3, 4), keepdim=True) * timestep.float().view(-1, 1, 1, 1, 1)
        return frames.reshape(timestep.shape[0], -1).to(timestep.dtype)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                clip_fea: torch.Tensor | None = None, time_dim_concat: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, in_dim, T, H, W]`, timestep `[B]` (0..1000) or `[B, T]`, context `[B, Nt, text_dim]`
        -> `[B, out_dim, T, H, W]`. Extra kwargs: see the module docstring; `y` and `control` are
        accepted and unused, as ComfyUI's Wan."""
        if x.ndim != 5:
            raise ValueError(f"Wan: the latent must be [batch, channels, frames, height, width], got {tuple(x.shape)}")
        if x.shape[1] != self.in_dim:
            raise ValueError(f"Wan: the model takes {self.in_dim} input channels, got {x.shape[1]}")
        if context.shape[-1] != self.text_dim:
            raise ValueError(f"Wan: the text conditioning is {context.shape[-1]} wide, the model takes {self.text_dim}")
        kwargs.pop("y", None)
        kwargs.pop("control", None)
        timestep = self.per_frame_timesteps(timestep, kwargs.pop("denoise_mask", None))
        bs, c, t, h, w = x.shape
        x = pad_to_patch_size(x, self.patch_size)
        t_len = t
        if time_dim_concat is not None:
            time_dim_concat = pad_to_patch_size(time_dim_concat.to(x.dtype), self.patch_size)
            x = torch.cat([x, time_dim_concat], dim=2)
            t_len = x.shape[2]
        if self.ref_conv is not None and kwargs.get("reference_latent") is not None:
            t_len += 1
        # autoregressive video (comfy_core/families/wan/causal.py): absolute frame positions
        freqs = self.rope_encode(t_len, h, w, t_start=frame_offset(transformer_options), device=x.device, dtype=x.dtype,
                                 rope_options=(transformer_options or {}).get(ROPE_OPTIONS))
        if kwargs.get(bernini.CONTEXT_LATENTS) is not None:  # Bernini's in-context streams (wan/bernini.py)
            if type(self).forward_orig is not WanModel.forward_orig:
                raise ValueError(f"Wan: this {self.model_type} network takes no in-context latents "
                                 f"({bernini.CONTEXT_LATENTS}, BerniniConditioning's: a Wan 2.2 A14B t2v model's)")
            kwargs[bernini.CONTEXT_LATENTS], freqs = bernini.context_positions(
                self, kwargs[bernini.CONTEXT_LATENTS], freqs, device=x.device, dtype=x.dtype,
                rope_options=(transformer_options or {}).get(ROPE_OPTIONS))
        return self.forward_orig(x, timestep, context, clip_fea=clip_fea, freqs=freqs,
                                 transformer_options=transformer_options, **kwargs)[:, :, :t, :h, :w]


class VaceWanModel(WanModel):
    """Wan 2.1 VACE: hint blocks over the `vace_context` (reference / control frames + masks)."""

    def __init__(self, model_type: str = "vace", **kwargs: Any) -> None:
        super().__init__(model_type="vace", **kwargs)

    def hint_tokens(self, kwargs: Mapping[str, Any], dtype: torch.dtype) -> list[torch.Tensor] | None:
        vace_context = kwargs.get("vace_context")
        if vace_context is None:
            raise ValueError("Wan VACE: the model needs 'vace_context' (WanVaceToVideo's conditioning)")
        shape = list(vace_context.shape)  # [B, n, vace_in_dim, T, H, W]
        stacked = vace_context.movedim(0, 1).reshape([-1] + shape[2:])  # [n*B, vace_in_dim, T, H, W]
        c = _conv_in(self.vace_patch_embedding, stacked).flatten(2).transpose(1, 2)  # [n*B, L, C]
        return list(c.to(dtype).split(shape[0], dim=0))

    def add_hints(self, i: int, x: torch.Tensor, x_orig: torch.Tensor, hints: list[torch.Tensor],
                  kwargs: Mapping[str, Any], e0: torch.Tensor, freqs: torch.Tensor, context: torch.Tensor,
                  context_img_len: int | None, options: dict[str, Any]) -> torch.Tensor:
        index = self.vace_layers_mapping.get(i)
        if index is None:
            return x
        strength = kwargs.get("vace_strength") or [1.0] * len(hints)
        for n in range(len(hints)):
            skip, hints[n] = self.vace_blocks[index](hints[n], x=x_orig, e=e0, freqs=freqs, context=context,
                                                     context_img_len=context_img_len, transformer_options=options)
            x = x + skip * strength[n]
        return x


class CameraWanModel(WanModel):
    """Wan 2.1 / 2.2 Fun camera control: the adapter's features added to the patch embedding."""

    def __init__(self, model_type: str = "camera", **kwargs: Any) -> None:
        super().__init__(model_type="camera" if model_type == "camera" else "camera_2.2", **kwargs)

    def add_control(self, x: torch.Tensor, kwargs: Mapping[str, Any]) -> torch.Tensor:
        camera = kwargs.get("camera_conditions")
        if camera is None:
            return x
        return x + self.control_adapter(camera.to(x.dtype)).to(x.dtype)


class WanS2VModel(WanModel):
    """Wan 2.2 S2V: the text-to-video DiT with audio injection, reference / motion tokens and a
    control-video encoder (comfy_core/families/wan/s2v.py); ComfyUI's `WanModel_S2V`."""

    def __init__(self, model_type: str = "s2v", audio_dim: int = 1024, num_audio_token: int = 4,
                 audio_layers: int = 25, enable_adain: bool = True, cond_dim: int = 16, **kwargs: Any) -> None:
        super().__init__(model_type="s2v", **kwargs)
        import dataclasses

        self.config = dataclasses.replace(self.config, audio_dim=audio_dim, num_audio_token=num_audio_token,
                                          audio_layers=audio_layers, enable_adain=enable_adain, cond_dim=cond_dim)
        add_s2v_modules(self, audio_dim, audio_layers, num_audio_token, enable_adain, cond_dim,
                        kwargs.get("operations"), {"dtype": kwargs.get("dtype"), "device": kwargs.get("device")})

    def forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                     clip_fea: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                     transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 16, T, H, W]` (padded); kwargs `audio_embed` `[B, L, D_a, 4T]`, `reference_latent`
        `[B, 16, Tr, H, W]`, `reference_motion` `[B, 16, Tm, H, W]`, `control_video` `[B, 16, T, H, W]`."""
        return s2v_forward_orig(self, x, t, context, freqs, transformer_options, _conv_in, self.run_blocks, **kwargs)


class WanHuMoModel(WanModel):
    """Wan HuMo: the text-to-video DiT with audio cross-attention in every block, the audio
    projection and appended reference-image tokens (comfy_core/families/wan/humo.py); ComfyUI's
    `HumoWanModel`."""

    def __init__(self, model_type: str = "humo", audio_token_num: int = 16, humo_audio_channels: int = 1280,
                 humo_audio_hidden: int = 512, humo_audio_dim: int = 1536, **kwargs: Any) -> None:
        import dataclasses

        humo = {"audio_token_num": audio_token_num, "humo_audio_channels": humo_audio_channels,
                "humo_audio_hidden": humo_audio_hidden, "humo_audio_dim": humo_audio_dim}
        object.__setattr__(self, "_humo", humo)  # read by make_blocks during the base constructor
        super().__init__(model_type="humo", **kwargs)
        self.config = dataclasses.replace(self.config, **humo)
        ops = operations_or_default(kwargs.get("operations"))
        self.audio_proj = humo_projection(self.config, ops, {"dtype": kwargs.get("dtype"), "device": kwargs.get("device")})

    def make_blocks(self, cross: str, ops: Any, factory: dict[str, Any]) -> nn.ModuleList:
        return humo_blocks(dataclasses_replace(self.config, **self._humo), ops, factory)

    def forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                     clip_fea: torch.Tensor | None = None, freqs: torch.Tensor | None = None,
                     transformer_options: Mapping[str, Any] | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, in_dim, T, H, W]` (padded); kwargs `audio_embed` `[B, F, 8, 5, C]`,
        `reference_latent` `[B, in_dim, Tr, Hr, Wr]`."""
        return humo_forward_orig(self, x, t, context, freqs, transformer_options, _conv_in, **kwargs)
