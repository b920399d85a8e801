"""The MMDiT of Stable Diffusion 3 / 3.5 (Esser et al. 2024, "Scaling Rectified Flow Transformers
for High-Resolution Image Synthesis"), incl. SD3.5-medium's MMDiT-X blocks, in SAI's / ComfyUI's
layout (behaviour of ComfyUI's `comfy/ldm/modules/diffusionmodules/mmdit.py: MMDiT` and its
`OpenAISignatureMMDITWrapper`; detection after `comfy/model_detection.py: detect_unet_config`).

`MMDiTConfig.detect_from_weights(tensors, prefix)` reads the structure from names and shapes;
`MMDiT(**config.model_kwargs())` (or `MMDiT.from_config(config)`) builds the network with
ComfyUI's constructor arguments, and `forward(x, timesteps, context, y, control,
transformer_options)` is ComfyUI's calling convention: `x` `[B, 16, H, W]`, `timesteps` = sigma *
1000 (discrete-flow sampling, multiplier 1000), `context` `[B, T, 4096]` (CLIP-L + CLIP-G padded,
then T5-XXL), `y` `[B, 2048]` (the pooled CLIP-L + CLIP-G output).

Patch points (ComfyUI's): `transformer_options["patches_replace"]["dit"][("double_block", i)]`
replaces joint block `i`: it gets `{"img", "txt", "vec", "transformer_options"}` and
`{"original_block": fn}` and returns `{"img", "txt"}` (SkipLayerGuidanceSD3 / DiT skip blocks so).
ControlNet residuals: `control["output"][i]`, when present and not None, is added to the image
tokens after block `i`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

# HEAD_DIM and MMDiTConfigError live with the key maps (which the network's `lora_key_map` reads).
from comfy_core.families.sd3.keys import HEAD_DIM, MMDiTConfigError  # noqa: F401 -- re-exported
from comfy_core.families.sd3.mmdit_blocks import (ContextProcessor, FinalLayer, JointBlock, PatchEmbed,
                                                  TimestepEmbedder, VectorEmbedder, ceil_div,
                                                  get_2d_sincos_pos_embed_torch)
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import numbered_children, shape_reader



class MMDiTInputError(ValueError):
    """An input the MMDiT cannot take (a latent larger than its position-embedding table)."""


@dataclass(frozen=True)
class MMDiTConfig:
    """The structure of an MMDiT (defaults: SD3.5 large's)."""

    depth: int = 38  # hidden width = 64 * depth, heads = depth
    num_blocks: int = 38  # joint blocks (a ControlNet has fewer than `depth`)
    in_channels: int = 16
    out_channels: int = 16
    patch_size: int = 2
    adm_in_channels: int | None = 2048  # pooled text vector width (y_embedder); None: no y
    context_in_features: int | None = 4096  # context_embedder input width; None: identity
    pos_embed_max_size: int | None = 192  # side of the square pos_embed table; None: computed sincos
    qk_norm: str | None = "rms"  # "rms" (SD3.5), "ln", or None (SD3 medium)
    x_block_self_attn_layers: tuple[int, ...] = ()  # MMDiT-X (SD3.5 medium): blocks with x_block.attn2
    context_processor_layers: int | None = None
    register_length: int = 0
    final_layer: bool = True  # False for ControlNets (no final layer, no pre-only block)

    @property
    def hidden_size(self) -> int:
        return HEAD_DIM * self.depth

    @property
    def num_heads(self) -> int:
        return self.depth

    @property
    def num_patches(self) -> int | None:
        return None if self.pos_embed_max_size is None else self.pos_embed_max_size ** 2

    @property
    def mmdit_x(self) -> bool:
        """SD3.5 medium's MMDiT-X (image-only self-attention in some blocks)."""
        return bool(self.x_block_self_attn_layers)

    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `MMDiT(...)` (ComfyUI's names)."""
        kwargs = self.comfy_unet_config()
        kwargs.update(num_blocks=self.num_blocks, final_layer=self.final_layer, register_length=self.register_length)
        kwargs["x_block_self_attn_layers"] = list(self.x_block_self_attn_layers)
        return kwargs

    def comfy_unet_config(self) -> dict[str, Any]:
        """The `unet_config` ComfyUI's `detect_unet_config` makes of these weights (the keys a
        node pack reading `model.model_config.unet_config` sees)."""
        unet: dict[str, Any] = {"in_channels": self.in_channels, "patch_size": self.patch_size}
        if self.final_layer:
            unet["out_channels"] = self.out_channels
        unet["depth"] = self.depth
        unet["input_size"] = None
        if self.adm_in_channels is not None:
            unet["adm_in_channels"] = self.adm_in_channels
        if self.context_in_features is not None:
            unet["context_embedder_config"] = {"target": "torch.nn.Linear", "params": {
                "in_features": self.context_in_features, "out_features": self.hidden_size}}
        if self.pos_embed_max_size is not None:
            unet["num_patches"] = self.num_patches
            unet["pos_embed_max_size"] = self.pos_embed_max_size
        if self.qk_norm is not None:
            unet["qk_norm"] = self.qk_norm
        unet["pos_embed_scaling_factor"] = None
        if self.context_processor_layers is not None:
            unet["context_processor_layers"] = self.context_processor_layers
        unet["x_block_self_attn_layers"] = list(self.x_block_self_attn_layers)
        return unet

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "model.diffusion_model.") -> "MMDiTConfig":
        """The MMDiT under `prefix` from names and shapes (`tensors[name].shape`), never data.

        Raises `MMDiTConfigError` naming the key when a tensor is missing or a shape does not
        fit the others (a width that is not 64 * depth, a non-square `pos_embed`, a pre-only
        context block anywhere but last, modulation widths that disagree with the blocks)."""
        shape = shape_reader(tensors, prefix, MMDiTConfigError, "MMDiT")
        if prefix + "joint_blocks.0.context_block.attn.qkv.weight" not in tensors:
            raise MMDiTConfigError(f"no MMDiT under {prefix!r}: {prefix}joint_blocks.0.context_block.attn.qkv.weight "
                                   f"is missing")
        embed = shape("x_embedder.proj.weight")  # [D, C, p, p]
        if len(embed) != 4 or embed[2] != embed[3]:
            raise MMDiTConfigError(f"MMDiT key {prefix}x_embedder.proj.weight has shape {embed}, "
                                   f"expected [hidden, channels, p, p]")
        hidden, in_channels, patch = embed[0], embed[1], embed[2]
        if hidden % HEAD_DIM:
            raise MMDiTConfigError(f"MMDiT width {hidden} ({prefix}x_embedder.proj.weight) is not a multiple of "
                                   f"{HEAD_DIM}")
        depth = hidden // HEAD_DIM

        blocks = numbered_children(tensors, prefix + "joint_blocks.")
        num_blocks = max(blocks) + 1
        missing = sorted(set(range(num_blocks)) - set(blocks))
        if missing:
            raise MMDiTConfigError(f"MMDiT joint blocks {missing} are missing under {prefix}joint_blocks.")

        final_layer = prefix + "final_layer.linear.weight" in tensors
        out_channels = in_channels
        if final_layer:
            out_width = shape("final_layer.linear.weight")[0]
            if out_width % (patch * patch):
                raise MMDiTConfigError(f"MMDiT final layer width {out_width} is not a multiple of {patch}x{patch}")
            out_channels = out_width // (patch * patch)

        adm = shape("y_embedder.mlp.0.weight")[1] if prefix + "y_embedder.mlp.0.weight" in tensors else None
        context_in = None
        if prefix + "context_embedder.weight" in tensors:
            out_features, context_in = shape("context_embedder.weight")
            if out_features != hidden:
                raise MMDiTConfigError(f"MMDiT key {prefix}context_embedder.weight projects to {out_features}, "
                                       f"the model is {hidden} wide")
        max_size = None
        if prefix + "pos_embed" in tensors:
            table = shape("pos_embed")  # [1, N, D]
            side = math.isqrt(table[1])
            if len(table) != 3 or side * side != table[1] or table[2] != hidden:
                raise MMDiTConfigError(f"MMDiT key {prefix}pos_embed has shape {table}, expected "
                                       f"[1, side*side, {hidden}]")
            max_size = side

        qk_norm = None
        if prefix + "joint_blocks.0.context_block.attn.ln_q.weight" in tensors:
            qk_norm = "ln" if prefix + "joint_blocks.0.context_block.attn.ln_q.bias" in tensors else "rms"
        x_attn = tuple(sorted(i for i, keys in blocks.items() if "x_block.attn2.qkv.weight" in keys))
        processor = None
        if prefix + "context_processor.layers.0.attn.qkv.weight" in tensors:
            processor = max(numbered_children(tensors, prefix + "context_processor.layers.")) + 1
        register = shape("register")[1] if prefix + "register" in tensors else 0

        config = cls(depth=depth, num_blocks=num_blocks, in_channels=in_channels, out_channels=out_channels,
                     patch_size=patch, adm_in_channels=adm, context_in_features=context_in,
                     pos_embed_max_size=max_size, qk_norm=qk_norm, x_block_self_attn_layers=x_attn,
                     context_processor_layers=processor, register_length=register, final_layer=final_layer)
        _check_blocks(config, blocks, shape, prefix)
        return config


def _check_blocks(config: MMDiTConfig, blocks: dict[int, set[str]], shape: Any, prefix: str) -> None:
    """Each block's pre-only-ness and modulation widths agree with the config."""
    hidden = config.hidden_size
    for i in range(config.num_blocks):
        keys = blocks[i]
        pre_only = config.final_layer and i == config.num_blocks - 1
        has_mlp = "context_block.mlp.fc1.weight" in keys
        if has_mlp == pre_only:
            where = f"{prefix}joint_blocks.{i}.context_block"
            if pre_only:
                raise MMDiTConfigError(f"MMDiT: the last context block {where} has an MLP; with a final layer it "
                                       f"must be pre-only (attention inputs only)")
            raise MMDiTConfigError(f"MMDiT: {where} has no MLP (pre-only) but is not the last block of a model "
                                   f"with a final layer")
        for stream, mods in (("context_block", 2 if pre_only else 6),
                             ("x_block", 9 if i in config.x_block_self_attn_layers else 6)):
            width = shape(f"joint_blocks.{i}.{stream}.adaLN_modulation.1.weight")[0]
            if width != mods * hidden:
                raise MMDiTConfigError(f"MMDiT key {prefix}joint_blocks.{i}.{stream}.adaLN_modulation.1.weight is "
                                       f"{width} wide, expected {mods} x {hidden}")


class MMDiT(nn.Module):
    """SD3 / SD3.5 MMDiT with ComfyUI's constructor and `OpenAISignatureMMDITWrapper` forward."""

    def __init__(self, input_size: int | None = 32, patch_size: int = 2, in_channels: int = 4, depth: int = 28,
                 mlp_ratio: float = 4.0, learn_sigma: bool = False, adm_in_channels: int | None = None,
                 context_embedder_config: dict | None = None, compile_core: bool = False,
                 use_checkpoint: bool = False, register_length: int = 0, attn_mode: str = "torch",
                 rmsnorm: bool = False, scale_mod_only: bool = False, swiglu: bool = False,
                 out_channels: int | None = None, pos_embed_scaling_factor: float | None = None,
                 pos_embed_offset: float | None = None, pos_embed_max_size: int | None = None,
                 num_patches: int | None = None, qk_norm: str | None = None, qkv_bias: bool = True,
                 context_processor_layers: int | None = None, x_block_self_attn: bool = False,
                 x_block_self_attn_layers: list[int] | tuple[int, ...] | None = (), context_size: int = 4096,
                 num_blocks: int | None = None, final_layer: bool = True, skip_blocks: bool = False,
                 dtype: Any = None, device: Any = None, operations: Any = None, **kwargs: Any) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = out_channels if out_channels is not None else in_channels * (2 if learn_sigma else 1)
        self.patch_size = patch_size
        self.pos_embed_scaling_factor = pos_embed_scaling_factor
        self.pos_embed_offset = pos_embed_offset
        self.pos_embed_max_size = pos_embed_max_size
        self.x_block_self_attn_layers = list(x_block_self_attn_layers or ())
        # SAI's rule: 64-wide heads, as many as the depth.
        self.hidden_size = HEAD_DIM * depth
        self.depth = depth
        self.num_heads = depth
        num_blocks = depth if num_blocks is None else num_blocks
        self.config: MMDiTConfig | None = None

        self.x_embedder = PatchEmbed(input_size, patch_size, in_channels, self.hidden_size, bias=True,
                                     strict_img_size=pos_embed_max_size is None, operations=ops, **factory)
        self.t_embedder = TimestepEmbedder(self.hidden_size, operations=ops, **factory)
        self.y_embedder = None
        if adm_in_channels is not None:
            self.y_embedder = VectorEmbedder(int(adm_in_channels), self.hidden_size, operations=ops, **factory)
        self.context_processor = None
        if context_processor_layers is not None:
            self.context_processor = ContextProcessor(context_size, context_processor_layers, operations=ops, **factory)
        self.context_embedder: nn.Module = nn.Identity()
        if context_embedder_config is not None and context_embedder_config.get("target") == "torch.nn.Linear":
            self.context_embedder = ops.Linear(**context_embedder_config["params"], **factory)
        self.register_length = register_length
        if register_length > 0:
            self.register = nn.Parameter(torch.empty(1, register_length, self.hidden_size, **factory))
        if num_patches is not None:
            self.register_buffer("pos_embed", torch.empty(1, num_patches, self.hidden_size, **factory))
        else:
            self.pos_embed = None
        self.use_checkpoint = use_checkpoint
        if not skip_blocks:
            self.joint_blocks = nn.ModuleList([
                JointBlock(self.hidden_size, self.num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                           attn_mode=attn_mode, pre_only=(i == num_blocks - 1) and final_layer, rmsnorm=rmsnorm,
                           scale_mod_only=scale_mod_only, swiglu=swiglu, qk_norm=qk_norm,
                           x_block_self_attn=(i in self.x_block_self_attn_layers) or x_block_self_attn,
                           operations=ops, **factory)
                for i in range(num_blocks)])
        if final_layer:
            self.final_layer = FinalLayer(self.hidden_size, patch_size, self.out_channels, operations=ops, **factory)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the weights are stored in (ComfyUI keeps the construction dtype here)."""
        return self.x_embedder.proj.weight.dtype

    @classmethod
    def from_config(cls, config: MMDiTConfig, *, dtype: Any = None, device: Any = None,
                    operations: Any = None) -> "MMDiT":
        model = cls(**config.model_kwargs(), dtype=dtype, device=device, operations=operations)
        model.config = config
        return model

    def lora_key_map(self, names: list[str]) -> dict[str, Any]:
        """LoRA layer name -> target, given the state-dict names under `diffusion_model.` of the
        model holding this network (`comfy_core.lora.dit_keymap`; the spellings: `keys.lora_key_map`)."""
        from comfy_core.families.sd3.keys import lora_key_map

        config = self.config
        if config is None:  # built by its constructor rather than from a config
            config = {"depth": self.depth, "num_blocks": len(getattr(self, "joint_blocks", ()))}
        return lora_key_map(config, names)

    def cropped_pos_embed(self, hw: tuple[int, int], device: Any = None) -> torch.Tensor:
        """The position embedding of an `h x w` latent `[1, (h/p)*(w/p), D]`: the centre crop of
        the square `pos_embed` table (or, without one, a sincos grid computed for the size)."""
        p = self.x_embedder.patch_size[0]
        h, w = ceil_div(int(hw[0]), p), ceil_div(int(hw[1]), p)
        if self.pos_embed is None:
            return get_2d_sincos_pos_embed_torch(self.hidden_size, w, h, device=device)[None]
        side = self.pos_embed_max_size
        if side is None or h > side or w > side:
            raise MMDiTInputError(f"MMDiT: a latent of {h}x{w} patches exceeds the position embedding's "
                                  f"{side}x{side} (at most {None if side is None else side * p} latent pixels a side)")
        top, left = (side - h) // 2, (side - w) // 2
        grid = self.pos_embed.reshape(1, side, side, self.pos_embed.shape[-1])  # [1, S, S, D]
        return grid[:, top:top + h, left:left + w, :].reshape(1, h * w, -1)  # [1, h*w, D]

    def unpatchify(self, x: torch.Tensor, hw: tuple[int, int] | None = None) -> torch.Tensor:
        """`[B, h*w, p*p*C]` tokens -> `[B, C, h*p, w*p]` (row-major patches, `(p, q, c)` inside each)."""
        c = self.out_channels
        p = self.x_embedder.patch_size[0]
        if hw is None:
            h = w = math.isqrt(x.shape[1])
        else:
            h, w = ceil_div(int(hw[0]), p), ceil_div(int(hw[1]), p)
        if h * w != x.shape[1]:
            raise MMDiTInputError(f"MMDiT: {x.shape[1]} tokens do not make a {h}x{w} grid")
        x = x.reshape(x.shape[0], h, w, p, p, c)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward_core_with_concat(self, x: torch.Tensor, c_mod: torch.Tensor, context: torch.Tensor | None = None,
                                 control: dict | None = None, transformer_options: dict | None = None) -> torch.Tensor:
        """The joint blocks and the final layer: x `[B, L, D]`, c_mod `[B, D]`, context `[B, T, D]`
        -> `[B, L, p*p*C]`."""
        options = {} if transformer_options is None else transformer_options
        if self.register_length > 0:
            registers = self.register.expand(x.shape[0], -1, -1).to(x)  # [B, R, D]
            context = registers if context is None else torch.cat((registers, context), dim=1)
        blocks_replace = options.get("patches_replace", {}).get("dit", {})
        residuals = control.get("output") if control is not None else None
        for i, block in enumerate(self.joint_blocks):
            replace = blocks_replace.get(("double_block", i))
            if replace is not None:
                def original_block(args: dict, block: JointBlock = block) -> dict:
                    txt, img = block(args["txt"], args["img"], c=args["vec"],
                                     transformer_options=args["transformer_options"])
                    return {"txt": txt, "img": img}

                out = replace({"img": x, "txt": context, "vec": c_mod, "transformer_options": options},
                              {"original_block": original_block})
                context, x = out["txt"], out["img"]
            else:
                context, x = block(context, x, c=c_mod, use_checkpoint=self.use_checkpoint,
                                   transformer_options=options)
            if residuals is not None and i < len(residuals) and residuals[i] is not None:
                x = x + residuals[i]
        return self.final_layer(x, c_mod)

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor | None = None,
                y: torch.Tensor | None = None, control: dict | None = None,
                transformer_options: dict | None = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, C, H, W]`, timesteps `[B]` (sigma * 1000), context `[B, T, context_in]`,
        y `[B, adm_in]` -> the velocity prediction `[B, out_channels, H, W]`."""
        if self.context_processor is not None:
            context = self.context_processor(context)
        hw = (x.shape[-2], x.shape[-1])
        pos = self.cropped_pos_embed(hw, device=x.device).to(dtype=x.dtype, device=x.device)  # [1, L, D]
        x = self.x_embedder(x) + pos  # [B, L, D]
        c = self.t_embedder(timesteps, dtype=x.dtype)  # [B, D]
        if y is not None and self.y_embedder is not None:
            c = c + self.y_embedder(y)
        if context is not None:
            context = self.context_embedder(context)  # [B, T, D]
        x = self.forward_core_with_concat(x, c, context, control, transformer_options)  # [B, L, p*p*C]
        x = self.unpatchify(x, hw=hw)  # [B, C, ceil(H/p)*p, ceil(W/p)*p]
        return x[:, :, :hw[0], :hw[1]]


class OpenAISignatureMMDITWrapper(MMDiT):
    """ComfyUI's name for the MMDiT its SD3 model builds (the same calling convention here)."""


__all__ = ["HEAD_DIM", "MMDiT", "MMDiTConfig", "MMDiTConfigError", "MMDiTInputError", "OpenAISignatureMMDITWrapper"]
