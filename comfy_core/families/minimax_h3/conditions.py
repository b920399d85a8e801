"""What the MiniMax H3 DiT receives besides the noisy latent: ComfyUI's `comfy/model_base.py`
`MiniMaxH3.extra_conds` and its latent in / out, from the conditioning keys its nodes set;
written here.

- `c_crossattn`: the Qwen3-VL states through the network's condition projection and token
  refiner, once per run (`MiniMaxH3Model.preprocess_text_embeds`);
- `latent_shapes`: the [video, audio] shapes of the packed nested latent;
- `minimax_payload`, one dict (so no dtype cast flattens its float32 latents and integer tags):
  `text_token_tags` (the text encoder's `minimax_token_tags`: 0 for the vision block tokens, 1 for
  text), `keyframes` (MiniMaxH3ImageToVideo / MiniMaxH3AddGuide's `minimax_keyframes`) and
  `refs` (MiniMaxH3ReferenceToVideo's `minimax_refs`) with their latents gathered in layout order
  (`cond_video_latents`, `cond_audio_latents`: keyframes' first), the condition noise
  augmentation when set (`minimax_visual_cond_noise_aug`, `minimax_audio_cond_noise_aug`), the
  run's `seed`, the `audio_scale` the latent was carried at, and the packed `layout`.
- The model's latent in / out scales the audio part of a packed latent by `audio_scale`
  (`packed_part_scales`): shift_video / shift_audio of the model sampling in force.

- A denoise mask (partial re-generation: SetLatentNoiseMask on the AV latent) becomes per-row
  labels: `denoise_mask` [1, 1, T, H, W] / `audio_denoise_mask` [1, 1, 2, T] at the DiT's label grid
  (`token_grid_masks`), the kept region injected near clean (`scale_latent_inpaint`). A mask that
  varies inside a 2x2 patch (which ComfyUI blends back into the sampler's latent) is refused.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F

from comfy_core.families.minimax_h3.layout import VISUAL_COND_TIMESTEP, build_layout, time_shift_sigma
from comfy_core.latent.nested import pack_latents, unpack_latents
from comfy_core.models.model_conditions import ConditioningError, ModelConditions


def audio_scale(model: Any, latent_shapes: Sequence[Any] | None) -> float:
    """The factor the sampler carries the audio part at: the model sampling's `audio_scale` for a
    packed [video, audio] latent, else 1 (ComfyUI's `MiniMaxH3.audio_scale`)."""
    if latent_shapes is None or len(latent_shapes) < 2:
        return 1.0
    return float(getattr(model.model_sampling, "audio_scale", 1.0))


class MiniMaxH3Payload(dict):
    """The payload dict, equal only to itself: two conditionings' payloads (their tags, latents and
    layouts: tensors) never share a forward pass, and comparing them never compares tensors."""

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def token_grid_masks(mask: torch.Tensor, latent_shapes: Sequence[Any]) -> list[torch.Tensor]:
    """A packed denoise mask -> [video, audio] masks at the DiT's label grid: the video's largest value
    per 2x2 patch (edges replicated), the audio's largest over its channels, both rounded up to
    1/256 (ComfyUI's `MiniMaxH3._token_grid_masks`), at the latents' shapes."""
    video, audio = unpack_latents(mask, latent_shapes)
    h, w = video.shape[-2:]
    lead = video.shape[:-2]
    padded = F.pad(video.reshape((-1,) + tuple(video.shape[-3:])), (0, -w % 2, 0, -h % 2), mode="replicate")
    padded = padded.reshape(lead + padded.shape[-2:])
    pooled = padded.reshape(padded.shape[:-2] + (padded.shape[-2] // 2, 2, padded.shape[-1] // 2, 2)).amax(dim=(-3, -1))
    video = pooled.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)[..., :h, :w]
    audio = audio.amax(dim=1, keepdim=True).expand_as(audio)
    return [torch.ceil(m * 256.0) / 256.0 for m in (video, audio)]


class MiniMaxH3Conditions(ModelConditions):
    name = "minimax_h3"

    def _mask_conds(self, model: Any, mask: torch.Tensor, shapes: Sequence[Any] | None) -> dict[str, Any]:
        """The denoise mask's per-stream label masks (only for a stream it keeps part of): the video's
        [1, 1, T, H, W], the audio's [1, 1, 2, T]. A mask that varies inside a 2x2 patch or between
        1/256 steps (which ComfyUI blends back into the sampler's latent) is refused."""
        if shapes is None or len(shapes) < 2:
            raise ConditioningError("MiniMax H3: a denoise mask needs the nested [video, audio] latent")
        grid = token_grid_masks(mask, shapes)
        if not torch.allclose(pack_latents(grid)[0].to(mask.dtype), mask.to(mask.dtype), atol=1e-6):
            raise ConditioningError("MiniMax H3: the denoise mask varies inside the DiT's 2x2 patches (32 px) or "
                                    "between 1/256 steps; give a mask constant over each patch")
        model.__dict__["latent_shapes"] = [list(s) for s in shapes]  # ComfyUI's BaseModel.latent_shapes
        out: dict[str, Any] = {}
        if float(grid[0].min()) < 1.0 - 1e-3:
            out["denoise_mask"] = grid[0][:1, :1].clone()
        if float(grid[1].min()) < 1.0 - 1e-3:
            out["audio_denoise_mask"] = grid[1][:1].amax(dim=1, keepdim=True)
        return out

    @property
    def scale_latent_inpaint(self) -> Any:
        """What a kept region is set to at sigma (ComfyUI's `MiniMaxH3.scale_latent_inpaint`): the
        video near clean (its rows run at the condition label 0.999: 0.999 latent + 0.001 noise), the
        audio clean at the scale the sampler carries it at sigma (sigma_v / sigma_a / audio_scale)."""
        return _scale_latent_inpaint

    def packed_part_scales(self, model: Any, latent_shapes: Sequence[Any] | None) -> list[float] | None:
        """The factors the latent's parts take into model space (video 1, audio `audio_scale`), None
        when nothing is scaled."""
        scale = audio_scale(model, latent_shapes)
        return None if scale == 1.0 else [1.0, scale]

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        network = model.diffusion_model
        cross_attn = kwargs.get("cross_attn")
        if cross_attn is not None:
            dtype = getattr(model, "manual_cast_dtype", None) or model.get_dtype()
            device = kwargs.get("device") or cross_attn.device
            with torch.no_grad():
                cross_attn = network.preprocess_text_embeds(cross_attn.to(device=device, dtype=dtype))
            out["c_crossattn"] = cross_attn
        shapes = kwargs.get("latent_shapes")
        if shapes is not None:
            out["latent_shapes"] = shapes
        mask = kwargs.get("denoise_mask")
        if mask is not None:
            out.update(self._mask_conds(model, mask, shapes))
        payload: dict[str, Any] = MiniMaxH3Payload()
        if kwargs.get("minimax_token_tags") is not None:
            payload["text_token_tags"] = kwargs["minimax_token_tags"]
        keyframes = kwargs.get("minimax_keyframes")
        if keyframes is not None:
            payload["keyframes"] = keyframes
            payload["cond_video_latents"] = [k["latent"] for k in keyframes if k.get("latent") is not None]
            payload["cond_audio_latents"] = [k["audio_latent"] for k in keyframes if k.get("audio_latent") is not None]
        refs = kwargs.get("minimax_refs")
        if refs is not None:
            payload["refs"] = refs
            payload["cond_video_latents"] = (payload.get("cond_video_latents", [])
                                             + [r["latent"] for r in refs if r.get("latent") is not None])
            payload["cond_audio_latents"] = (payload.get("cond_audio_latents", [])
                                             + [r["audio_latent"] for r in refs if r.get("audio_latent") is not None])
        for key in ("visual_cond_noise_aug", "audio_cond_noise_aug"):
            if kwargs.get("minimax_" + key) is not None:
                payload[key] = kwargs["minimax_" + key]
        payload["seed"] = kwargs.get("seed") or 0
        payload["audio_scale"] = audio_scale(model, shapes)
        if cross_attn is not None and shapes is not None and len(shapes) > 1:
            video = shapes[0]
            payload["layout"] = build_layout(int(cross_attn.shape[1]), int(video[2]), (int(video[3]) + 1) // 2 * 2,
                                             (int(video[4]) + 1) // 2 * 2, int(shapes[1][-1]),
                                             keyframes=payload.get("keyframes"), refs=payload.get("refs"))
        out["minimax_payload"] = payload
        return out


def _scale_latent_inpaint(model: Any, sigma: torch.Tensor, noise: torch.Tensor, latent_image: torch.Tensor) -> Any:
    shapes = model.__dict__.get("latent_shapes")
    if shapes is None or len(shapes) < 2:
        raise ConditioningError("MiniMax H3: a denoise mask needs the nested [video, audio] latent")
    cleans, noises = unpack_latents(latent_image, shapes), unpack_latents(noise, shapes)
    video = VISUAL_COND_TIMESTEP * cleans[0] + (1.0 - VISUAL_COND_TIMESTEP) * noises[0]
    audio = cleans[1]
    scale = audio_scale(model, shapes)
    if scale != 1.0:
        sampling = model.model_sampling
        sigma_v = sigma.reshape(-1).to(torch.float32).clamp(min=1e-6)
        sigma_a = time_shift_sigma(sigma_v, float(sampling.shift), float(sampling.audio_shift))
        factor = (sigma_v / sigma_a) / scale
        audio = audio * factor.view((-1,) + (1,) * (audio.ndim - 1)).to(audio.dtype)
    return pack_latents([video, audio])[0]
