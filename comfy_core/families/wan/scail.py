"""SCAIL and SCAIL-2 (Zhipu's character animation on the Wan 2.1 14B i2v DiT; Yan et al. 2026,
"SCAIL-2: Unifying Controlled Character Animation with End-to-End In-Context Conditioning", arXiv
2606.10804): the network, and its detection fields for `WanConfig`.

Behaviour as ComfyUI's `comfy/ldm/wan/model.py` `SCAILWanModel` / `SCAIL2WanModel` (written here):

- Weights: the i2v DiT (CLIP-vision cross-attention, `img_emb`) with 20 input channels (the
  16-channel latent + a 4-channel history mask) plus `patch_embedding_pose` (a second 1x2x2 patch
  convolution, 20 in) and, for SCAIL-2, `patch_embedding_mask` (28 in: 7 colour-identity masks x 4
  frames). Detected by those two keys (ComfyUI's model_detection: `scail2` when the mask embedding
  is there, else `scail`).
- `reference_latent` `[B, 20, Tr, H, W]` (the reference latents in model space + 4 ones, additional
  references first, the primary last) is put in front of the video along time; its tokens are cut
  off after the head.
- `ref_mask_latents` `[B, 28, Tr + T, H, W]` (SCAIL-2): its mask embedding is added to the patch
  embedding of [references, video].
- `pose_latents` `[B, 20, Tp, Hp, Wp]` (usually half the video's size): embedded by the pose patch
  convolution (plus the mask embedding of `sam_latents` `[B, 28, Tp, Hp, Wp]`, SCAIL-2) and appended
  after the video tokens; they are dropped after the head.
- RoPE: animation mode (`ref_mask_flag` absent or true): the main grid [references, video] at
  frames 0.., the pose grid from the first video frame, its rows / columns stretched to the main
  grid (scale h / Hp, w / Wp, shifted to the cell midpoints (scale - 1) / 2) and moved 120 columns
  right. Replacement mode (`ref_mask_flag` false): the references at frames 0.. moved 120 rows down,
  the video from the primary reference's frame (`Tr - 1`), the pose as above from that frame; the
  caller's ScaleROPE options reach the video grid only.
"""
from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.attention.rope import ROPE_OPTIONS
from comfy_core.families.flux.dit import pad_to_patch_size
from comfy_core.families.wan.causal import frame_offset
from comfy_core.families.wan.dit import WanModel, _conv_in
from comfy_core.models.unet_blocks import operations_or_default

from comfy_core.families.wan.scail_config import MASK_IN_DIM, MODEL_TYPES
ROPE_OFFSET = 120.0  # ComfyUI's REF_ROPE_H / POSE_ROPE_W: the reference rows / pose columns moved this far


class WanSCAILModel(WanModel):
    """SCAIL / SCAIL-2 (module docstring): the i2v DiT plus the pose (and mask) patch embeddings."""

    def __init__(self, model_type: str = "scail", mask_in_dim: int = MASK_IN_DIM, **kwargs: Any) -> None:
        import dataclasses

        if model_type not in MODEL_TYPES:
            raise ValueError(f"Wan SCAIL: model_type must be one of {MODEL_TYPES}, got {model_type!r}")
        super().__init__(model_type=model_type, **kwargs)
        self.config = dataclasses.replace(self.config, mask_in_dim=mask_in_dim)
        ops = operations_or_default(kwargs.get("operations"))
        device = kwargs.get("device")
        self.patch_embedding_pose = ops.Conv3d(self.in_dim, self.dim, kernel_size=self.patch_size,
                                               stride=self.patch_size, device=device, dtype=torch.float32)
        self.patch_embedding_mask: nn.Module | None = None
        if model_type == "scail2":
            self.patch_embedding_mask = ops.Conv3d(mask_in_dim, self.dim, kernel_size=self.patch_size,
                                                   stride=self.patch_size, device=device, dtype=torch.float32)

    def _mask_embedding(self, latents: torch.Tensor, name: str, dtype: torch.dtype) -> torch.Tensor:
        if self.patch_embedding_mask is None:
            raise ValueError(f"Wan SCAIL: '{name}' is a SCAIL-2 input; these weights have no mask embedding")
        return _conv_in(self.patch_embedding_mask, latents).to(dtype)

    # -- positions -------------------------------------------------------------------------------

    def scail_rope(self, t: int, h: int, w: int, t_start: int, rope_options: Mapping[str, Any] | None,
                   pose: torch.Tensor | None, reference: torch.Tensor | None, ref_mask_flag: Any,
                   device: Any, dtype: Any) -> torch.Tensor:
        """RoPE of [references, video] (`t` latent frames in all) and the pose tokens (module
        docstring); `h`, `w`: the video latent's size before padding."""
        pt = self.patch_size[0]
        ref_frames = (reference.shape[2] + pt // 2) // pt if reference is not None else 0
        replacement = ref_mask_flag is not None and not bool(ref_mask_flag)
        parts = []
        if replacement:
            video_start = max(ref_frames - 1, 0)
            if ref_frames > 0:
                parts.append(self.rope_encode(ref_frames, h, w, t_start=0, device=device, dtype=dtype,
                                              rope_options={"shift_y": ROPE_OFFSET}))
            if t - ref_frames > 0:
                parts.append(self.rope_encode(t - ref_frames, h, w, t_start=video_start, device=device, dtype=dtype,
                                              rope_options=rope_options))
            pose_start = video_start
        else:
            parts.append(self.rope_encode(t, h, w, t_start=t_start, device=device, dtype=dtype,
                                          rope_options=rope_options))
            pose_start = t_start + ref_frames
        if pose is not None:
            f_pose, h_pose, w_pose = pose.shape[-3:]
            scale_y, scale_x = h / h_pose, w / w_pose
            options = {"shift_y": (scale_y - 1) / 2, "shift_x": ROPE_OFFSET + (scale_x - 1) / 2,
                       "scale_y": scale_y, "scale_x": scale_x}
            parts.append(self.rope_encode(f_pose, h_pose, w_pose, t_start=pose_start, device=device, dtype=dtype,
                                          rope_options=options))
        return torch.cat(parts, dim=1)

    # -- forward -----------------------------------------------------------------------------------

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, context: torch.Tensor,
                clip_fea: torch.Tensor | None = None, time_dim_concat: torch.Tensor | None = None,
                transformer_options: Mapping[str, Any] | None = None, pose_latents: torch.Tensor | None = None,
                reference_latent: torch.Tensor | None = None, ref_mask_latents: torch.Tensor | None = None,
                sam_latents: torch.Tensor | None = None, ref_mask_flag: Any = None, **kwargs: Any) -> torch.Tensor:
        """x `[B, 20, T, H, W]` (latent + history mask), timestep `[B]` (0..1000), context
        `[B, Nt, text_dim]`; the SCAIL inputs of the module docstring -> `[B, 16, T, H, W]`."""
        if x.ndim != 5:
            raise ValueError(f"Wan SCAIL: the latent must be [batch, channels, frames, height, width], got "
                             f"{tuple(x.shape)}")
        if x.shape[1] != self.in_dim:
            raise ValueError(f"Wan SCAIL: the model takes {self.in_dim} input channels, got {x.shape[1]}")
        if context.shape[-1] != self.text_dim:
            raise ValueError(f"Wan SCAIL: the text conditioning is {context.shape[-1]} wide, the model takes "
                             f"{self.text_dim}")
        for unused in ("y", "control", "denoise_mask"):
            kwargs.pop(unused, None)
        b, c, t, h, w = x.shape
        x = pad_to_patch_size(x, self.patch_size)
        pose = pad_to_patch_size(pose_latents, self.patch_size) if pose_latents is not None else None
        ref_mask = pad_to_patch_size(ref_mask_latents, self.patch_size) if ref_mask_latents is not None else None
        sam = pad_to_patch_size(sam_latents, self.patch_size) if sam_latents is not None else None
        t_len = t
        if time_dim_concat is not None:
            x = torch.cat([x, pad_to_patch_size(time_dim_concat.to(x.dtype), self.patch_size)], dim=2)
            t_len = x.shape[2]
        reference = None
        if reference_latent is not None:
            reference = pad_to_patch_size(reference_latent.to(x.dtype), self.patch_size)
            t_len += reference.shape[2]
        options = transformer_options or {}
        freqs = self.scail_rope(t_len, h, w, frame_offset(transformer_options), options.get(ROPE_OPTIONS), pose,
                                reference, ref_mask_flag, x.device, x.dtype)
        out = self.scail_forward_orig(x, timestep, context, clip_fea, freqs, transformer_options, pose, reference,
                                      ref_mask, sam)
        return out[:, :, :t, :h, :w]

    def scail_forward_orig(self, x: torch.Tensor, t: torch.Tensor, context: torch.Tensor,
                           clip_fea: torch.Tensor | None, freqs: torch.Tensor,
                           transformer_options: Mapping[str, Any] | None, pose: torch.Tensor | None,
                           reference: torch.Tensor | None, ref_mask: torch.Tensor | None,
                           sam: torch.Tensor | None) -> torch.Tensor:
        """Padded inputs -> `[B, out_dim, T, H, W]` of the video frames (references and pose cut off)."""
        if reference is not None:
            x = torch.cat((reference, x), dim=2)  # [B, C, Tr + T, H, W]
        tokens = _conv_in(self.patch_embedding, x)  # [B, dim, T', H', W']
        if ref_mask is not None:
            tokens = tokens + self._mask_embedding(ref_mask, "ref_mask_latents", tokens.dtype)
        grid_sizes = tokens.shape[2:]
        tokens = tokens.flatten(2).transpose(1, 2)  # [B, L, dim]
        pose_len = 0
        if pose is not None:
            pose_tokens = _conv_in(self.patch_embedding_pose, pose.to(x.dtype))
            if sam is not None:
                pose_tokens = pose_tokens + self._mask_embedding(sam, "sam_latents", pose_tokens.dtype)
            pose_tokens = pose_tokens.flatten(2).transpose(1, 2)  # [B, Lp, dim]
            pose_len = pose_tokens.shape[1]
            tokens = torch.cat([tokens, pose_tokens], dim=1)
        e, e0 = self.time_modulation(t, tokens.dtype)
        context = self.text_embedding(context)
        context_img_len = None
        if clip_fea is not None:
            if self.img_emb is not None:
                context = torch.cat([self.img_emb(clip_fea.to(context.dtype)), context], dim=1)
            context_img_len = clip_fea.shape[-2]
        options = {**(transformer_options or {}), "grid_sizes": tuple(grid_sizes)}
        tokens = self.run_blocks(tokens, e0, freqs, context, context_img_len, options)
        tokens = self.head(tokens, e)
        if pose_len:
            tokens = tokens[:, :-pose_len]
        out = self.unpatchify(tokens, grid_sizes)
        if reference is not None:
            out = out[:, :, reference.shape[2]:]
        return out
