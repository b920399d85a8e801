"""Ming-Image's DiT: Z-Image's NextDiT (comfy_core/families/zimage/nextdit.py: the same blocks,
refiners, modulation and RoPE, 30 layers of 3840 in the release) with what Ming adds, as today's
ComfyUI's `comfy/ldm/lumina/model.py` runs a NextDiT built with `image_model="ming_image"`
(written here):

- no learned pad tokens; the caption is not padded, but the image's sequence position starts past
  the caption length rounded up to a multiple of 32 (ComfyUI's `masked_pad_multiple`);
- `direct_context` [B, n, dim] (the text encoder's `proj_directvlm` output, already at the DiT's
  width) appended to the embedded caption (after `cap_embedder`), taking caption positions after it;
- latents with a frame axis `[B, C, F, H, W]` (one frame for an image): each frame patched 2x2 with
  its own sequence position (`caption + 1 + f`), and the output with the frame axis again;
- `ref_frames`: clean reference latents (the edit's input images in model space) patched by the
  same `x_embedder` and appended to the image tokens as further frames (`caption + 1 + F + k`),
  rows and columns from 0; they are not in the output.

Everything else (timesteps = sigma, the negated output, the `noise_refiner` / `double_block`
patches) is `NextDiT`'s.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.zimage.nextdit import NextDiT, NextDiTConfig, NextDiTConfigError, rope
from comfy_core.models.comfyui_names import comfyui_name

MASKED_PAD_MULTIPLE = 32
MING_MARKER = "__ming_image__"  # ComfyUI's NextDiT registers this empty buffer for image_model "ming_image"


@dataclass(frozen=True)
class MingDiTConfig(NextDiTConfig):
    """`NextDiTConfig` without pad tokens, plus the caption rounding of the image's position."""

    pad_tokens_multiple: int | None = None
    masked_pad_multiple: int = MASKED_PAD_MULTIPLE
    marker: bool = False  # the file holds ComfyUI's empty `__ming_image__` buffer (kept, so it loads and saves)

    def comfy_unet_config(self) -> dict[str, Any]:
        """ComfyUI's `unet_config` (model_detection's entry for a 3840-wide NextDiT without pad tokens)."""
        config = super().comfy_unet_config()
        config.update(image_model="ming_image", masked_pad_multiple=self.masked_pad_multiple)
        return config

    @classmethod
    def from_nextdit(cls, config: NextDiTConfig, marker: bool = False) -> "MingDiTConfig":
        if config.pad_tokens_multiple is not None:
            raise NextDiTConfigError("Ming-Image: the file has learned pad tokens (cap_pad_token): a Z-Image NextDiT")
        if not config.z_image_modulation:
            raise NextDiTConfigError("Ming-Image: not Z-Image's modulation (no layers.0.adaLN_modulation.0)")
        return cls(**{f.name: getattr(config, f.name) for f in dataclasses.fields(NextDiTConfig)}, marker=marker)


def _patch_tokens(x: torch.Tensor, p: int) -> torch.Tensor:
    """[B, C, H, W] (multiples of p) -> [B, H/p * W/p, p*p*C] (rows, columns; within a patch row,
    column, channel: ComfyUI's order)."""
    b, c, h, w = x.shape
    return x.view(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).flatten(3).flatten(1, 2)


@comfyui_name("NextDiT")
class MingNextDiT(NextDiT):
    """The NextDiT with Ming-Image's inputs (see the module docstring)."""

    def __init__(self, config: MingDiTConfig, dtype: Any = None, device: Any = None, operations: Any = None,
                 lora_keys: Any = None) -> None:
        super().__init__(config, dtype=dtype, device=device, operations=operations, lora_keys=lora_keys)
        if config.marker:
            self.register_buffer(MING_MARKER, torch.empty(0, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor, timesteps: torch.Tensor, context: torch.Tensor, num_tokens: Any = None,
                attention_mask: torch.Tensor | None = None, transformer_options: Mapping[str, Any] | None = None,
                direct_context: torch.Tensor | None = None, ref_frames: Sequence[torch.Tensor] = (),
                **kwargs: Any) -> torch.Tensor:
        """x `[B, C, F, H, W]` (or `[B, C, H, W]`), timesteps (sigma) `[B]`, context `[B, Lt,
        cap_feat_dim]`, direct_context `[B, n, dim]`, ref_frames: latents `[1, C, (1,) h, w]` -> the
        negated prediction, shaped as x."""
        to = dict(transformer_options or {})
        config = self.config
        frames = x.shape[2] if x.ndim == 5 else None
        h, w = x.shape[-2:]
        orig_x = x
        p = self.patch_size
        x5 = x if frames else x[:, :, None]
        x5 = pad_to_patch_size(x5, (1, p, p))
        bsz, channels, nframes, hh, ww = x5.shape
        hp, wp = hh // p, ww // p
        vec = self.modulation_input(timesteps, x5, kwargs)  # [B, adaln_dim]

        cap = self.cap_embedder(context)  # [B, Lc, dim]
        if direct_context is not None:
            cap = torch.cat([cap, direct_context.to(device=cap.device, dtype=cap.dtype).expand(bsz, -1, -1)
                             if direct_context.shape[0] == 1 else direct_context.to(cap)], dim=1)
        cap_len = cap.shape[1]
        cap_ids = torch.zeros((bsz, cap_len, 3), dtype=torch.float32, device=x.device)
        cap_ids[:, :, 0] = torch.arange(cap_len, dtype=torch.float32, device=x.device) + 1.0
        cap_freqs = rope(cap_ids, config.axes_dims, config.rope_theta)
        m = config.masked_pad_multiple
        image_start = -(-cap_len // m) * m  # the caption length rounded up: only the image's positions move

        tokens = [_patch_tokens(x5[:, :, f], p) for f in range(nframes)]
        ids = [self._image_ids(image_start + 1 + f, hp, wp, bsz, x.device, to) for f in range(nframes)]
        for k, ref in enumerate(ref_frames):
            ref = ref.to(device=x.device, dtype=x.dtype)
            if ref.ndim == 5:
                ref = ref[:, :, 0]
            ref = pad_to_patch_size(ref, (p, p))
            rh, rw = ref.shape[-2] // p, ref.shape[-1] // p
            embedded = _patch_tokens(ref, p)
            tokens.append(embedded.expand(bsz, -1, -1) if embedded.shape[0] == 1 else embedded)
            ids.append(self._image_ids(image_start + 1 + nframes + k, rh, rw, bsz, x.device, to))
        img = self.x_embedder(torch.cat(tokens, dim=1))
        img_freqs = rope(torch.cat(ids, dim=1), config.axes_dims, config.rope_theta)

        seq = self.joint_blocks(cap, cap_freqs, img, img_freqs, vec, orig_x, to)

        n = nframes * hp * wp
        out = self.final_layer(seq, vec)[:, cap_len:cap_len + n]  # [B, F*hp*wp, p*p*C]
        out = out.reshape(bsz, nframes, hp, wp, p, p, self.out_channels).permute(0, 6, 1, 2, 4, 3, 5).reshape(
            bsz, self.out_channels, nframes, hp * p, wp * p)[..., :h, :w]
        return -(out if frames else out[:, :, 0])


__all__ = ["MASKED_PAD_MULTIPLE", "MING_MARKER", "MingDiTConfig", "MingNextDiT"]
