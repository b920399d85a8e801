"""DiffSynth-Studio's block-wise ControlNets for Qwen-Image (ModelScope 2025, the
`Qwen-Image-Blockwise-ControlNet-{Canny,Depth,Inpaint}` releases; ComfyUI's
`QwenImageBlockWiseControlNet` and `DiffSynthCnetPatch` in `comfy_extras/nodes_model_patch.py`,
behaviour read there, code written here).

Not a copy of the transformer (as a classic ControlNet is): one small block per Qwen-Image block,
each mixing the image stream with the control image's tokens after that block:

    y      = img_in(patchify_2x2([process_in(vae(image)), mask]))       [B, N, D]
    img_i += strength * output_proj(GELU(input_proj(RMS_x(img_i) + RMS_y(y))))   after block i

- the control image is VAE-encoded at the latent's pixel size (resized "area" with a centred
  crop when it differs, as ComfyUI re-encodes), its first 16 channels brought into model space
  with Wan 2.1's latent normalisation (Qwen-Image's), and patchified as the DiT patchifies the
  latent (`families/qwen_image/dit.image_tokens`);
- the Inpaint release takes `additional_in_dim` = 4 more token channels: one mask channel per
  latent pixel (x 2x2), the node's mask inverted (1 = keep) and resized bilinearly to the latent,
  or ones without a mask;
- the residual is added to the first N image tokens (the main image's, before any reference
  latents), for every block index (`num_layers` must cover the model's blocks).

Files (`model_patches/qwen_image_*_diffsynth_controlnet.safetensors`): `img_in.{weight,bias}`
`[D, 64 + additional_in_dim]`, `controlnet_blocks.N.{x_rms,y_rms}.weight` `[D]`,
`controlnet_blocks.N.{input_proj,output_proj}.{weight [D, D], bias [D]}`. Every width and the
block count are read from the names and shapes (ComfyUI fixes 60 blocks of 3072).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.qwen_image.dit import PATCH, image_tokens
from comfy_core.families.sd3.mmdit_blocks import RMSNorm
from comfy_core.families.wan.latent_format import wan21_latent_format
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.models.weight_shapes import count_numbered, shape_reader

DIFFSYNTH_MARKER = "controlnet_blocks.0.y_rms.weight"  # ComfyUI's test for this patch kind
LATENT_TOKEN_WIDTH = 64  # 16 latent channels x 2x2 patch
MASK_TOKEN_WIDTH = PATCH * PATCH  # one mask channel per latent pixel, patchified


@dataclass(frozen=True)
class DiffSynthControlNetConfig:
    """The block-wise ControlNet's shape: blocks, width, and the extra token channels (0, or 4 for
    the Inpaint release's mask)."""

    num_layers: int = 60
    dim: int = 3072
    additional_in_dim: int = 0

    @property
    def mask_channels(self) -> int:
        return self.additional_in_dim // MASK_TOKEN_WIDTH

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "DiffSynthControlNetConfig":
        """From `img_in.weight` `[D, 64 + extra]` and the numbered `controlnet_blocks.N` (every
        block's shapes checked). Raises `ModelPatchError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, ModelPatchError, "DiffSynth ControlNet")
        dim, fan_in = shape("img_in.weight")
        extra = fan_in - LATENT_TOKEN_WIDTH
        if extra < 0 or extra % MASK_TOKEN_WIDTH:
            raise ModelPatchError(f"DiffSynth ControlNet: {prefix}img_in.weight takes {fan_in} channels, expected "
                                  f"{LATENT_TOKEN_WIDTH} plus a multiple of {MASK_TOKEN_WIDTH}")
        layers = count_numbered(tensors, prefix, "controlnet_blocks", ModelPatchError, "DiffSynth ControlNet")
        if layers == 0:
            raise ModelPatchError(f"DiffSynth ControlNet: no {prefix}controlnet_blocks.N")
        expected: dict[str, tuple[int, ...]] = {"img_in.bias": (dim,)}
        for i in range(layers):
            block = f"controlnet_blocks.{i}."
            for norm in ("x_rms", "y_rms"):
                expected[f"{block}{norm}.weight"] = (dim,)
            for proj in ("input_proj", "output_proj"):
                expected[f"{block}{proj}.weight"] = (dim, dim)
                expected[f"{block}{proj}.bias"] = (dim,)
        for key, want in expected.items():
            if shape(key) != want:
                raise ModelPatchError(f"DiffSynth ControlNet: {prefix}{key} has shape {shape(key)}, expected {want}")
        return cls(num_layers=layers, dim=dim, additional_in_dim=extra)


class BlockWiseControlBlock(nn.Module):
    """`output_proj(GELU(input_proj(x_rms(x) + y_rms(y))))` (exact GELU, RMS norms with weights)."""

    def __init__(self, dim: int, dtype: torch.dtype | None = None, device: Any = None) -> None:
        super().__init__()
        factory = {"dtype": dtype, "device": device}
        self.x_rms = RMSNorm(dim, elementwise_affine=True, eps=1e-6, **factory)
        self.y_rms = RMSNorm(dim, elementwise_affine=True, eps=1e-6, **factory)
        self.input_proj = nn.Linear(dim, dim, **factory)
        self.output_proj = nn.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """x (image tokens) `[B, N, D]`, y (control tokens) `[B or 1, N, D]` -> residual `[B, N, D]`."""
        return self.output_proj(F.gelu(self.input_proj(self.x_rms(x) + self.y_rms(y))))


class QwenImageBlockWiseControlNet(nn.Module):
    """`img_in` and one `BlockWiseControlBlock` per Qwen-Image block (see the module docstring)."""

    def __init__(self, config: DiffSynthControlNetConfig, dtype: torch.dtype | None = None,
                 device: Any = None) -> None:
        super().__init__()
        self.config = config
        self.additional_in_dim = config.additional_in_dim
        self.img_in = nn.Linear(LATENT_TOKEN_WIDTH + config.additional_in_dim, config.dim, dtype=dtype, device=device)
        self.controlnet_blocks = nn.ModuleList(BlockWiseControlBlock(config.dim, dtype, device)
                                               for _ in range(config.num_layers))

    def process_input_latent_image(self, latent: torch.Tensor) -> torch.Tensor:
        """latent `[B, 16 + mask, (1,) h, w]` (VAE scale) -> control tokens `[B, N, D]`: the 16
        latent channels to model space (Wan 2.1's normalisation), 2x2 patches, `img_in`."""
        if latent.shape[1] * MASK_TOKEN_WIDTH != LATENT_TOKEN_WIDTH + self.additional_in_dim:
            raise ModelPatchError(f"DiffSynth ControlNet: {latent.shape[1]} latent channels, the patch takes "
                                  f"{(LATENT_TOKEN_WIDTH + self.additional_in_dim) // MASK_TOKEN_WIDTH}")
        if latent.ndim == 5 and latent.shape[2] != 1:
            raise ModelPatchError(f"DiffSynth ControlNet: the control image's latent has {latent.shape[2]} frames")
        fmt = wan21_latent_format()
        latent = torch.cat([fmt.process_in(latent[:, :fmt.channels]), latent[:, fmt.channels:]], dim=1)
        tokens, _, _ = image_tokens(latent, PATCH)  # [B, N, (16 + mask) * 4]
        weight = self.img_in.weight
        return self.img_in(tokens.to(device=weight.device, dtype=weight.dtype))

    def control_block(self, img: torch.Tensor, control: torch.Tensor, block_id: int) -> torch.Tensor:
        if not 0 <= block_id < len(self.controlnet_blocks):
            raise ModelPatchError(f"DiffSynth ControlNet: the model's block {block_id} has no control block (the "
                                  f"patch has {len(self.controlnet_blocks)}; it was made for another model)")
        block = self.controlnet_blocks[block_id]
        dtype = block.input_proj.weight.dtype
        return block(img.to(dtype), control.to(dtype)).to(img.dtype)


class DiffSynthControlNetPatch:
    """Qwen-Image `double_block` patch (ComfyUI's `DiffSynthCnetPatch`): after block i, the image
    tokens gain `strength` x control block i's residual.

    The control tokens depend only on the image, mask, the VAE and the latent's size, so they are
    computed once per pixel size, device and dtype and kept (ComfyUI encodes at the node and
    again when the latent's size differs, with the same result)."""

    def __init__(self, model_patch: Any, vae: Any, image: torch.Tensor, strength: float,
                 mask: torch.Tensor | None = None) -> None:
        self.model_patch = model_patch
        self.vae = vae
        self.image = image  # [B, H, W, 3] in 0..1
        self.strength = float(strength)
        self.mask = mask  # [B, H, W], 1 = keep (the node inverts ComfyUI's MASK)
        self._tokens: dict[tuple[int, int, torch.device, torch.dtype], torch.Tensor] = {}

    def __deepcopy__(self, memo: dict) -> "DiffSynthControlNetPatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the network and VAE)

    def control_latent(self, height: int, width: int) -> torch.Tensor:
        """The image at `height` x `width` pixels encoded, with the mask channels when the patch
        has them: `[B, 16 + mask, 1, h, w]`."""
        from comfy_core.image.resize import upscale_samples

        image = self.image
        if tuple(image.shape[1:3]) != (height, width):
            image = upscale_samples(image.movedim(-1, 1), width, height, "area", "center").movedim(1, -1)
        latent = self.vae.encode(image)  # [B, 16, 1, h, w] (the Wan VAE's) or [B, 16, h, w]
        latent = latent if latent.ndim == 5 else latent.unsqueeze(2)
        channels = self.model_patch.model.config.mask_channels
        if channels == 0:
            return latent
        if self.mask is None:
            mask = torch.ones_like(latent[:, :channels])
        else:
            flat = self.mask.reshape(self.mask.shape[0], -1, *self.mask.shape[-2:]).mean(dim=1, keepdim=True)
            mask = F.interpolate(flat.to(latent), size=latent.shape[-2:], mode="bilinear").unsqueeze(2)
            if mask.shape[0] != latent.shape[0]:
                if mask.shape[0] != 1:
                    raise ModelPatchError(f"DiffSynth ControlNet: {mask.shape[0]} masks for {latent.shape[0]} images")
                mask = mask.expand(latent.shape[0], -1, -1, -1, -1)
            mask = mask.expand(-1, channels, -1, -1, -1)
        return torch.cat([latent, mask], dim=1)

    def control_tokens(self, height: int, width: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        key = (height, width, torch.device(device), dtype)
        if key not in self._tokens:
            latent = self.control_latent(height, width)
            with torch.no_grad(), self.model_patch.applied(device) as network:
                self._tokens[key] = network.process_input_latent_image(latent.to(device)).to(dtype)
        return self._tokens[key]

    def __call__(self, kwargs: dict) -> dict:
        x, img, block_index = kwargs["x"], kwargs["img"], kwargs["block_index"]
        ratio = int(self.vae.spacial_compression_encode())
        control = self.control_tokens(x.shape[-2] * ratio, x.shape[-1] * ratio, img.device, img.dtype)
        n = control.shape[1]
        if n > img.shape[1] or (control.shape[0] != img.shape[0] and img.shape[0] % control.shape[0]):
            raise ModelPatchError(f"DiffSynth ControlNet: {control.shape[0]} x {n} control tokens do not fit the "
                                  f"image stream {tuple(img.shape[:2])}")
        if control.shape[0] != img.shape[0]:
            control = control.repeat(img.shape[0] // control.shape[0], 1, 1)
        with torch.no_grad(), self.model_patch.applied(img.device) as network:
            residual = network.control_block(img[:, :n], control, block_index)
        return {**kwargs, "img": torch.cat([img[:, :n] + residual * self.strength, img[:, n:]], dim=1)}

    def to(self, device_or_dtype: Any) -> "DiffSynthControlNetPatch":
        """ComfyUI's `model_patches_to`: nothing device-bound is kept outside the per-device cache."""
        return self

    def models(self) -> list[Any]:
        """The patcher to load beside the model (ComfyUI's `model_patches_models`)."""
        return [self.model_patch]


__all__ = ["DIFFSYNTH_MARKER", "BlockWiseControlBlock", "DiffSynthControlNetConfig", "DiffSynthControlNetPatch",
           "QwenImageBlockWiseControlNet"]
