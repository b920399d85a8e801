"""Alibaba PAI's Z-Image-Turbo Fun ControlNets ("VideoX-Fun" 2025: `Z-Image-Turbo-Fun-Controlnet-Union`
1.0, 2.0, 2.1; ComfyUI's `ZImage_Control` in `comfy/ldm/lumina/controlnet.py` and
`ZImageControlPatch` in `comfy_extras/nodes_model_patch.py`, behaviour read there, code written
here).

A VACE-style side network: Z-Image transformer blocks (comfy_core/families/zimage/nextdit.py's
`JointTransformerBlock`, Z-Image modulation) over the control image's tokens only, each with an
`after_proj` whose output is added (x `strength`) to the main network's image tokens, the first
one also with a `before_proj` that adds the main stream's image tokens to its input:

    c = control_all_x_embedder.2-1(patchify_2x2(control latent))        [B, N, D]
    1.0 (6 layers, 16 channels):  c = control_noise_refiner blocks (c)   (plain modulated blocks)
                                  main block 5k:  (skip, c) = control_layers[k](c, img_input)
    2.x (3 or 15 layers, 16 + 17 inpaint channels, `control_noise_refiner.N` are control blocks):
                                  noise refiner block i: (skip, c) = control_noise_refiner[i](c, img_input); img += skip
                                  main block k * round(30 / layers): (skip, c) = control_layers[k](c, img_input)
    img[:, :N] += strength * skip

where a control block is `c' = block(before_proj(c) + x if first else c)`, `skip = after_proj(c')`,
`img_input` is the main stream's image tokens at the entry of the refiners (noise refiner blocks)
or of the main blocks. The spacing `round(30 / layers)` is ComfyUI's, for Z-Image's 30 blocks,
whatever the model's depth. The control latent is the Flux VAE's, in model space (Flux's latent
format): the control image's, then for inpaint models one mask channel (1 = keep, nearest-resized)
and the inpaint image's latent (the image outside the mask, grey 0.5 inside; all grey without
one; a grey control image when only an inpaint image is given).

Files (`model_patches/Z-Image-Turbo-Fun-Controlnet-Union*.safetensors`) in diffusers' attention
names (`attention.to_q/to_k/to_v`, `to_out.0`, `norm_q/norm_k`), fused here to the NextDiT names
(`attention.qkv`, `out`, `q_norm`, `k_norm`) as ComfyUI converts them. Every width and count is
read from names and shapes; the 2.1 files with an all-zero `control_noise_refiner.0.after_proj`
("broken") are told apart by that one tensor's values, as ComfyUI does, and rerouted as it does
(`is_broken_release`, `ZImageFunControlConfig.broken`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.families.flux.latent_format import flux_latent_format
from comfy_core.families.zimage import zimage_axes
from comfy_core.families.zimage.nextdit import JointTransformerBlock, NextDiTConfig
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.models.unet_blocks import operations_or_default
from comfy_core.models.weight_shapes import count_numbered, shape_reader

ZIMAGE_FUN_MARKER = "control_all_x_embedder.2-1.weight"  # ComfyUI's test for this patch kind
CONTROL_IN_DIM = 16  # the Flux VAE's latent channels
INPAINT_IN_DIM = 17  # one mask channel and the inpaint image's 16
ZIMAGE_DEPTH = 30  # ComfyUI spaces the control layers over Z-Image's 30 blocks
PATCH = 2
_ATTENTION_NAMES = ((".attention.to_out.0.", ".attention.out."), (".attention.norm_k.", ".attention.k_norm."),
                    (".attention.norm_q.", ".attention.q_norm."))


def convert_zimage_fun_keys(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The release's diffusers attention names -> NextDiT's: `to_q/to_k/to_v` rows fused into
    `qkv` (q, k, v order), `to_out.0` -> `out`, `norm_q/k` -> `q_norm/k_norm`; others unchanged."""
    out: dict[str, torch.Tensor] = {}
    for name, value in state.items():
        if name.endswith((".attention.to_k.weight", ".attention.to_v.weight")):
            continue
        if name.endswith(".attention.to_q.weight"):
            base = name[:-len("to_q.weight")]
            try:
                value = torch.cat([state[base + "to_q.weight"], state[base + "to_k.weight"],
                                   state[base + "to_v.weight"]], dim=0)
            except KeyError as exc:
                raise ModelPatchError(f"Z-Image Fun ControlNet: {base}to_q.weight without {exc.args[0]}") from None
            out[base + "qkv.weight"] = value
            continue
        for theirs, ours in _ATTENTION_NAMES:
            name = name.replace(theirs, ours)
        out[name] = value
    stray = [k for k in state if k.endswith((".attention.to_k.weight", ".attention.to_v.weight"))
             and k.replace(".to_k.", ".to_q.").replace(".to_v.", ".to_q.") not in state]
    if stray:
        raise ModelPatchError(f"Z-Image Fun ControlNet: {stray[0]} without its to_q")
    return out


@dataclass(frozen=True)
class ZImageFunControlConfig:
    """The control network's shape: control layers, refiner blocks and whether they are control
    blocks (2.x), extra input channels (0, or 17 for inpaint), and the blocks' structure."""

    n_control_layers: int = 6
    n_refiner_layers: int = 2
    refiner_control: bool = False
    additional_in_dim: int = 0
    blocks: NextDiTConfig = NextDiTConfig()
    # The 2.1 releases whose `control_noise_refiner.0.after_proj` is all zero: their refiner steps
    # run the control layers instead (ComfyUI's `broken`; `is_broken_release` tells them apart).
    broken: bool = False

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "ZImageFunControlConfig":
        """From the converted names' shapes: `control_all_x_embedder.2-1.weight` `[D, 4 (16 + extra)]`,
        the numbered `control_layers.N` / `control_noise_refiner.N`, a block's `q_norm` (head width),
        `feed_forward.w1` (SwiGLU width), `adaLN_modulation.0` (modulation input). Raises
        `ModelPatchError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, ModelPatchError, "Z-Image Fun ControlNet")
        dim, fan_in = shape(ZIMAGE_FUN_MARKER)
        extra = fan_in // (PATCH * PATCH) - CONTROL_IN_DIM
        if fan_in % (PATCH * PATCH) or extra not in (0, INPAINT_IN_DIM):
            raise ModelPatchError(f"Z-Image Fun ControlNet: {prefix}{ZIMAGE_FUN_MARKER} takes {fan_in} inputs, "
                                  f"expected 4 x {CONTROL_IN_DIM} or 4 x {CONTROL_IN_DIM + INPAINT_IN_DIM}")
        layers = count_numbered(tensors, prefix, "control_layers", ModelPatchError, "Z-Image Fun ControlNet")
        refiners = count_numbered(tensors, prefix, "control_noise_refiner", ModelPatchError, "Z-Image Fun ControlNet")
        if layers == 0:
            raise ModelPatchError(f"Z-Image Fun ControlNet: no {prefix}control_layers.N")
        head_dim = shape("control_layers.0.attention.q_norm.weight")[0]
        if head_dim <= 0 or dim % head_dim:
            raise ModelPatchError(f"Z-Image Fun ControlNet: head width {head_dim} does not divide the width {dim}")
        ffn = shape("control_layers.0.feed_forward.w1.weight")[0]
        adaln = shape("control_layers.0.adaLN_modulation.0.weight")[1]
        refiner_control = prefix + "control_noise_refiner.0.after_proj.weight" in tensors
        blocks = NextDiTConfig(dim=dim, n_heads=dim // head_dim, n_kv_heads=dim // head_dim, ffn_hidden=ffn,
                               adaln_dim=adaln, axes_dims=zimage_axes(head_dim))
        expected: dict[str, tuple[int, ...]] = {}
        groups = [(f"control_layers.{i}.", True, i == 0) for i in range(layers)]
        groups += [(f"control_noise_refiner.{i}.", refiner_control, refiner_control and i == 0)
                   for i in range(refiners)]
        for block, skip, first in groups:
            expected[block + "attention.qkv.weight"] = (3 * dim, dim)
            expected[block + "attention.out.weight"] = (dim, dim)
            for norm in ("q_norm", "k_norm"):
                expected[f"{block}attention.{norm}.weight"] = (head_dim,)
            expected[block + "feed_forward.w1.weight"] = (ffn, dim)
            expected[block + "feed_forward.w3.weight"] = (ffn, dim)
            expected[block + "feed_forward.w2.weight"] = (dim, ffn)
            expected[block + "adaLN_modulation.0.weight"] = (4 * dim, adaln)
            if skip:
                expected[block + "after_proj.weight"] = (dim, dim)
            if first:
                expected[block + "before_proj.weight"] = (dim, dim)
        for key, want in expected.items():
            if shape(key) != want:
                raise ModelPatchError(f"Z-Image Fun ControlNet: {prefix}{key} has shape {shape(key)}, "
                                      f"expected {want}")
        return cls(n_control_layers=layers, n_refiner_layers=refiners, refiner_control=refiner_control,
                   additional_in_dim=extra, blocks=blocks)


def is_broken_release(state: Mapping[str, Any], prefix: str = "") -> bool:
    """Whether a 2.x file is one of the 2.1 releases whose first refiner skip is all zero, which
    ComfyUI tells apart by that tensor's values (as it reads SD2's v-prediction from one tensor:
    names and shapes cannot show it) and reroutes."""
    after = state.get(prefix + "control_noise_refiner.0.after_proj.weight")
    return after is not None and not bool(torch.count_nonzero(after))


class ZImageControlBlock(JointTransformerBlock):
    """A Z-Image block over the control tokens with `after_proj` (the skip it gives the main
    stream) and, the first of its stack, `before_proj` (mixing in the main stream's tokens)."""

    def __init__(self, config: NextDiTConfig, first: bool, factory: dict[str, Any], ops: Any) -> None:
        super().__init__(config, True, factory, ops)
        if first:
            self.before_proj = ops.Linear(config.dim, config.dim, bias=True, **factory)
        self.after_proj = ops.Linear(config.dim, config.dim, bias=True, **factory)

    def control(self, c: torch.Tensor, x: torch.Tensor, freqs: torch.Tensor,
                vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """c (control) `[B', N, D]`, x (main image tokens) `[B, N, D]` -> (skip, c') `[B, N, D]`."""
        if hasattr(self, "before_proj"):
            c = self.before_proj(c) + x
        c = self(c, freqs, vec)
        return self.after_proj(c), c


class ZImageFunControlNet(nn.Module):
    """`control_all_x_embedder.2-1`, `control_layers`, `control_noise_refiner` (see the module docstring)."""

    def __init__(self, config: ZImageFunControlConfig, dtype: torch.dtype | None = None, device: Any = None,
                 operations: Any = None) -> None:
        super().__init__()
        ops = operations_or_default(operations)
        factory = {"dtype": dtype, "device": device}
        self.config = config
        self.additional_in_dim = config.additional_in_dim
        self.n_control_layers = config.n_control_layers
        dim = config.blocks.dim
        self.control_all_x_embedder = nn.ModuleDict(
            {"2-1": ops.Linear(PATCH * PATCH * (CONTROL_IN_DIM + config.additional_in_dim), dim, bias=True, **factory)})
        self.control_layers = nn.ModuleList(ZImageControlBlock(config.blocks, i == 0, factory, ops)
                                            for i in range(config.n_control_layers))
        self.control_noise_refiner = nn.ModuleList(
            ZImageControlBlock(config.blocks, i == 0, factory, ops) if config.refiner_control
            else JointTransformerBlock(config.blocks, True, factory, ops) for i in range(config.n_refiner_layers))

    def embed(self, latent: torch.Tensor, freqs: torch.Tensor, vec: torch.Tensor) -> torch.Tensor:
        """Control latent `[B, C, H, W]` (model space) -> control tokens `[B, N, D]` (channel-last
        2x2 patches, as Z-Image's `x_embedder`); 1.0's plain refiner blocks run here."""
        b, c, h, w = latent.shape
        if c != CONTROL_IN_DIM + self.additional_in_dim or h % PATCH or w % PATCH:
            raise ModelPatchError(f"Z-Image Fun ControlNet: a control latent of {c} channels and {h}x{w} (the patch "
                                  f"takes {CONTROL_IN_DIM + self.additional_in_dim} channels, even sizes)")
        embedder = self.control_all_x_embedder["2-1"]
        tokens = latent.view(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 2, 4, 3, 5, 1)
        tokens = tokens.flatten(3).flatten(1, 2)  # [B, N, p*p*C]
        control = embedder(tokens)  # [B, N, D], in the latent's dtype (the layers cast their weights)
        if not self.config.refiner_control:
            for block in self.control_noise_refiner:
                control = block(control, freqs[:control.shape[0], :control.shape[1]], vec)
        return control

    def refiner_block(self, index: int, control: torch.Tensor, x: torch.Tensor, freqs: torch.Tensor,
                      vec: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """After the main network's noise refiner block `index`: (skip or None, control). A
        `broken` release runs control layer 0 after refiner block 0, and the other control layers
        after refiner block 1, giving the first one's skip (ComfyUI's reroute)."""
        if not self.config.refiner_control:
            return None, control
        if self.config.broken:
            if index == 0:
                return self.control_block(0, control, x, freqs, vec)
            first = None
            for layer in range(1, len(self.control_layers)):
                skip, control = self.control_block(layer, control, x, freqs, vec)
                first = skip if first is None else first
            return first, control
        if not 0 <= index < len(self.control_noise_refiner):
            raise ModelPatchError(f"Z-Image Fun ControlNet: no control refiner block {index} (the patch has "
                                  f"{len(self.control_noise_refiner)})")
        return self.control_noise_refiner[index].control(control, x, freqs[:control.shape[0], :control.shape[1]], vec)

    def control_block(self, index: int, control: torch.Tensor, x: torch.Tensor, freqs: torch.Tensor,
                      vec: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.control_layers[index].control(control, x, freqs[:control.shape[0], :control.shape[1]], vec)


class ZImageFunControlPatch:
    """Z-Image `noise_refiner` and `double_block` patch (ComfyUI's `ZImageControlPatch`; see the
    module docstring). The control latent is computed once per pixel size and kept; the control
    stream's state runs through one model call (reset when a call starts again at block 0 or
    the refiner)."""

    def __init__(self, model_patch: Any, vae: Any, image: torch.Tensor | None, strength: float,
                 inpaint_image: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> None:
        self.model_patch = model_patch
        self.vae = vae
        self.image = image  # [B, H, W, 3] or None
        self.inpaint_image = inpaint_image
        self.mask = mask  # [B, H, W], 1 = keep (the node inverts ComfyUI's MASK)
        self.strength = float(strength)
        self._latents: dict[tuple[int, int], torch.Tensor] = {}
        self._state: tuple[int, torch.Tensor | None, torch.Tensor] | None = None  # (layer, skip, control)

    def __deepcopy__(self, memo: dict) -> "ZImageFunControlPatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the network and VAE)

    def _encode(self, pixels: torch.Tensor) -> torch.Tensor:
        return flux_latent_format().process_in(self.vae.encode(pixels))

    def control_latent(self, height: int, width: int) -> torch.Tensor:
        """`[B, 16 (+17), h, w]` in model space for a latent of `height` x `width` pixels."""
        from comfy_core.image.resize import upscale_samples

        def sized(image: torch.Tensor | None) -> torch.Tensor | None:
            if image is None or tuple(image.shape[1:3]) == (height, width):
                return image
            return upscale_samples(image.movedim(-1, 1), width, height, "area", "center").movedim(1, -1)

        key = (height, width)
        if key in self._latents:
            return self._latents[key]
        image, inpaint = sized(self.image), sized(self.inpaint_image)
        latent = None if image is None else self._encode(image)
        if self.model_patch.model.additional_in_dim > 0:
            if inpaint is None:
                inpaint = torch.ones_like(image) * 0.5
            if self.mask is not None:
                keep = upscale_samples(self.mask.unsqueeze(1).to(inpaint), inpaint.shape[2], inpaint.shape[1],
                                       "bilinear", "center").movedim(1, -1).round()  # [B, H, W, 1]
                inpaint = (inpaint - 0.5) * keep + 0.5
            inpaint_latent = self._encode(inpaint)
            if self.mask is None:
                mask = torch.zeros_like(inpaint_latent[:, :1])
            else:
                mask = upscale_samples(self.mask.unsqueeze(1).to(inpaint_latent), inpaint_latent.shape[-1],
                                       inpaint_latent.shape[-2], "nearest", "center")
            if latent is None:
                latent = self._encode(torch.ones_like(inpaint) * 0.5)
            latent = torch.cat([latent, mask, inpaint_latent], dim=1)
        if latent is None:
            raise ModelPatchError("Z-Image Fun ControlNet: no control image (only inpaint models take an inpaint "
                                  "image alone)")
        self._latents[key] = latent
        return latent

    def __call__(self, kwargs: dict) -> dict:
        x, img, img_input = kwargs["x"], kwargs["img"], kwargs["img_input"]
        freqs, vec, index = kwargs["pe"], kwargs["vec"], kwargs["block_index"]
        refiner = kwargs.get("block_type") == "noise_refiner"
        network = self.model_patch.model
        layers = network.n_control_layers
        div = max(1, round(ZIMAGE_DEPTH / layers))
        position, exact = index // div, index / div
        if exact > layers - 1:
            self._state = None
            return kwargs
        ratio = int(self.vae.spacial_compression_encode())
        with torch.no_grad(), self.model_patch.applied(img.device) as net:
            if self._state is None or self._state[0] > (-3 + index if refiner else position):
                latent = self.control_latent(x.shape[-2] * ratio, x.shape[-1] * ratio)
                start = -3 if refiner else -1
                self._state = (start, None, net.embed(latent.to(device=img.device, dtype=img.dtype), freqs, vec))
            layer, _, control = self._state
            n = control.shape[1]
            if refiner:
                skip, control = net.refiner_block(index, control, img_input[:, :n], freqs, vec)
                self._state = (layer + 1, skip, control)
                if skip is None:
                    return kwargs
                return {**kwargs, "img": self._add(img, skip)}
            while layer < position and layer + 1 < layers:
                layer += 1
                skip, control = net.control_block(layer, control, img_input[:, :n], freqs, vec)
                self._state = (layer, skip, control)
        if exact != layer:
            return kwargs
        out = {**kwargs, "img": self._add(img, self._state[1])}
        if layer + 1 == layers:
            self._state = None
        return out

    def _add(self, img: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        n = skip.shape[1]
        return torch.cat([img[:, :n] + skip.to(img.dtype) * self.strength, img[:, n:]], dim=1)

    def to(self, device_or_dtype: Any) -> "ZImageFunControlPatch":
        """ComfyUI's `model_patches_to`: the control stream's state is dropped on a move."""
        if isinstance(device_or_dtype, torch.device):
            self._state = None
        return self

    def models(self) -> list[Any]:
        """The patcher to load beside the model (ComfyUI's `model_patches_models`)."""
        return [self.model_patch]


__all__ = ["ZIMAGE_FUN_MARKER", "ZImageControlBlock", "ZImageFunControlConfig", "ZImageFunControlNet",
           "ZImageFunControlPatch", "convert_zimage_fun_keys"]
