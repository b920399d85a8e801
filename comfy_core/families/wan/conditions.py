"""What the Wan DiT receives besides the noisy latent and the umT5 context: ComfyUI's
`comfy/model_base.py` `WAN21.concat_cond` / `extra_conds`, `WAN21_Vace`, `WAN21_Camera` and
`WAN22.extra_conds`, from the conditioning keys ComfyUI's Wan nodes set; written here.

- Extra input channels (`concat_cond`, the network's `in_dim` minus the latent's channels):
  `concat_latent_image` (a VAE latent, brought into model space chunk by latent-width chunk,
  resized per frame to the latent and to the batch) after a 4-channel mask; the mask is
  `concat_mask` (else the sampler's denoise mask), averaged to one channel unless it has 4,
  inverted (1 = the given frames), resized, padded with zeros to the latent's frames, repeated
  to 4 channels; `concat_mask_index` puts the mask after that many image channels. Without an
  image, zeros; a model whose extra channels are not image + 4 (Fun control's 48 on an i2v
  model, or a non-i2v model) takes the image alone, as ComfyUI.
- `clip_vision_output.penultimate_hidden_states` -> `clip_fea`; `time_dim_concat` (model
  space); the last of `reference_latents`, first frame -> `reference_latent`.
- VACE: `vace_frames` (each `[B, 32, T, H, W]`, two 16-channel latents) in model space plus
  `vace_mask` (64 channels) -> `vace_context` `[B, n, 96, T, H, W]`, zeros / ones when absent;
  `vace_strength` (one float per hint set, default 1.0).
- Camera: `camera_conditions` as given.
- Wan 2.2 S2V (`WAN22_S2V.extra_conds`): `audio_embed` as given; the last of `reference_latents`
  whole (all its frames) in model space -> `reference_latent`; `reference_motion` and
  `control_video` in model space.
- Wan HuMo (`WAN21_HuMo.extra_conds`): `audio_embed` as given. The 17B model (20 extra input
  channels) takes 4 zero mask channels and, per frame, a fixed 16-channel latent (ComfyUI's
  constants: first frame, second frame, the rest), and the last of `reference_latents` in model
  space behind 16 zero and 4 one channels -> `reference_latent`; the 1.7B model (no extra
  channels) that reference in model space as it is.
- Wan 2.2 TI2V: the denoise mask (`denoise_mask`), which the network turns into per-frame
  timesteps (the clean first frame gets timestep 0).
- Every kind (ComfyUI's `WAN21.extra_conds`): Bernini's `context_latents`, each in model space
  (comfy_core/families/wan/bernini.py).
"""
from __future__ import annotations

from typing import Any

import torch

from comfy_core.families.wan import bernini
from comfy_core.image.resize import upscale_samples
from comfy_core.models.concat_inputs import resize_to_batch_size
from comfy_core.models.model_conditions import ConditioningError, ModelConditions

MASK_CHANNELS = 4  # Wan's i2v mask: the 4 frames a latent frame stands for
VACE_FRAME_CHANNELS = 32
VACE_MASK_CHANNELS = 64
KINDS = ("wan21", "vace", "camera", "wan22", "s2v", "humo")
# HuMo 17B's extra input channels after the 4 mask channels: ComfyUI's fixed latent values for
# its first latent frame, its second, and every later one (WAN21_HuMo.extra_conds)
HUMO_FILL_FIRST = (0.8660, -0.4326, -0.0017, -0.4884, -0.5283, 0.9207, -0.9896, 0.4433, -0.5543, -0.0113, 0.5753,
                   -0.6000, -0.8346, -0.3497, -0.1926, -0.6938)
HUMO_FILL_SECOND = (1.0869, -1.2370, 0.0206, -0.4357, -0.6411, 2.0307, -1.5972, 1.2659, -0.8595, -0.4654, 0.9638,
                    -1.6330, -1.4310, -0.1098, -0.3856, -1.4583)
HUMO_FILL_REST = (0.8642, -1.8583, 0.1577, 0.1350, -0.3641, 2.5863, -1.9670, 1.6065, -1.0475, -0.8678, 1.1734,
                  -1.8138, -1.5933, -0.7721, -0.3289, -1.3745)


def upscale_frames(x: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """`[B, C, T, H, W]` resized bilinearly per frame (centre crop to the target aspect) to
    `[B, C, T, height, width]`, as ComfyUI's `common_upscale` on 5-D latents."""
    if x.ndim == 4:
        return upscale_samples(x, width, height, "bilinear", "center")
    b, c, t = x.shape[:3]
    if x.shape[-2:] == (height, width):
        return x
    frames = x.movedim(2, 1).reshape(b * t, c, x.shape[-2], x.shape[-1])
    out = upscale_samples(frames, width, height, "bilinear", "center")
    return out.reshape(b, t, c, height, width).movedim(1, 2)


def _latent_channels(model: Any) -> int:
    fmt = model.latent_format
    return getattr(fmt, "channels", None) or getattr(fmt, "latent_channels")


def _in_model_space(model: Any, latent: torch.Tensor) -> torch.Tensor:
    """A latent made of latent-width chunks, each brought into model space."""
    width = _latent_channels(model)
    out = latent.clone()
    for i in range(0, latent.shape[1], width):
        out[:, i:i + width] = model.process_latent_in(latent[:, i:i + width])
    return out



def i2v_concat_mask(mask: torch.Tensor | None, noise: torch.Tensor, device: Any) -> torch.Tensor:
    """The 4 mask channels Wan's i2v network takes beside the latent `noise` [B, C, T, h, w]
    (ComfyUI's `WAN21.concat_cond`): zeros without a mask; else 1 - mask (a frame mask [B, 1, H, W]
    counts as one frame, several channels are averaged), scaled to the latent, padded with zeros
    to its frames, repeated to the 4 channels and to its batch."""
    if mask is None:
        return torch.zeros_like(noise)[:, :MASK_CHANNELS]
    mask = mask.to(device)
    if mask.ndim == 4:  # [B, 1, H, W] image mask: one frame
        mask = mask.unsqueeze(2)
    if mask.shape[1] != MASK_CHANNELS:
        mask = torch.mean(mask, dim=1, keepdim=True)
    mask = upscale_frames(1.0 - mask, noise.shape[-1], noise.shape[-2])
    if mask.shape[-3] < noise.shape[-3]:
        mask = torch.nn.functional.pad(mask, (0, 0, 0, 0, 0, noise.shape[-3] - mask.shape[-3]), value=0)
    if mask.shape[1] == 1:
        mask = mask.repeat(1, MASK_CHANNELS, 1, 1, 1)
    return resize_to_batch_size(mask, noise.shape[0])

class WanConditions(ModelConditions):
    """Wan's model inputs (see the module docstring); `image_to_video`: ComfyUI's flag of the
    same name (i2v / TI2V models take image + mask channels, zeros when no image is given)."""

    name = "wan"

    def __init__(self, kind: str = "wan21", image_to_video: bool = False) -> None:
        if kind not in KINDS:
            raise ValueError(f"WanConditions: kind must be one of {KINDS}, got {kind!r}")
        self.kind = kind
        self.image_to_video = image_to_video

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and other.kind == self.kind  # type: ignore[attr-defined]
                and other.image_to_video == self.image_to_video)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.kind, self.image_to_video))

    def __repr__(self) -> str:
        return f"WanConditions(kind={self.kind!r}, image_to_video={self.image_to_video})"

    def concat_cond(self, model: Any, **kwargs: Any) -> torch.Tensor | None:
        noise = kwargs["noise"]  # [B, C, T, H, W]
        device = kwargs.get("device") or noise.device
        extra = model.diffusion_model.patch_embedding.weight.shape[1] - noise.shape[1]
        if extra == 0:
            return None
        if self.kind == "humo":
            return self._humo_concat(noise, extra)
        image = kwargs.get("concat_latent_image")
        if image is None:
            image = torch.zeros((noise.shape[0], extra, *noise.shape[2:]), dtype=noise.dtype, device=noise.device)
        else:
            if image.ndim != 5:
                raise ConditioningError(f"Wan: concat_latent_image must be a 5-D video latent, got "
                                        f"{tuple(image.shape)}")
            image = upscale_frames(image.to(device), noise.shape[-1], noise.shape[-2])
            image = resize_to_batch_size(_in_model_space(model, image), noise.shape[0])
        if extra != image.shape[1] + MASK_CHANNELS:
            if not self.image_to_video or extra == image.shape[1]:
                return self._checked(image, extra)
        image = image[:, :extra - MASK_CHANNELS]
        mask = i2v_concat_mask(kwargs.get("concat_mask", kwargs.get("denoise_mask")), noise, device)
        index = int(kwargs.get("concat_mask_index", 0) or 0)
        mask = mask.to(image.dtype)
        if index:
            out = torch.cat((image[:, :index], mask, image[:, index:]), dim=1)
        else:
            out = torch.cat((mask, image), dim=1)
        return self._checked(out, extra)

    @staticmethod
    def _humo_concat(noise: torch.Tensor, extra: int) -> torch.Tensor:
        fill = len(HUMO_FILL_REST)
        if extra != MASK_CHANNELS + fill:
            raise ConditioningError(f"Wan HuMo: the model takes {extra} extra input channels, expected "
                                    f"{MASK_CHANNELS + fill} (mask + latent)")
        out = torch.zeros((noise.shape[0], extra, *noise.shape[2:]), dtype=noise.dtype, device=noise.device)
        for frames, values in ((slice(None), HUMO_FILL_REST), (slice(0, 1), HUMO_FILL_FIRST),
                               (slice(1, 2), HUMO_FILL_SECOND)):
            out[:, MASK_CHANNELS:, frames] = torch.tensor(values, dtype=noise.dtype,
                                                          device=noise.device).view(1, fill, 1, 1, 1)
        return out

    @staticmethod
    def _checked(out: torch.Tensor, extra: int) -> torch.Tensor:
        if out.shape[1] != extra:
            raise ConditioningError(f"Wan: the conditioning gives {out.shape[1]} extra input channels, the model "
                                    f"takes {extra} besides the latent (wrong image latent for this model?)")
        return out

    @property
    def scale_latent_inpaint(self) -> Any:
        """Wan 2.2 TI2V keeps the masked-out (given) frames clean instead of re-noising them
        (ComfyUI's `WAN22.scale_latent_inpaint`); the other kinds: None (the default re-noising)."""
        if self.kind != "wan22":
            return None
        return lambda model, sigma, noise, latent_image: latent_image

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        clip_vision_output = kwargs.get("clip_vision_output")
        if clip_vision_output is not None:
            states = getattr(clip_vision_output, "penultimate_hidden_states", None)
            if states is None:
                raise ConditioningError("Wan: clip_vision_output has no penultimate_hidden_states")
            out["clip_fea"] = states
        time_dim_concat = kwargs.get("time_dim_concat")
        if time_dim_concat is not None:
            out["time_dim_concat"] = model.process_latent_in(time_dim_concat)
        references = kwargs.get("reference_latents")
        if references is not None:
            out["reference_latent"] = model.process_latent_in(references[-1])[:, :, 0]
        if kwargs.get(bernini.CONTEXT_LATENTS) is not None:  # Bernini's in-context streams (wan/bernini.py)
            out[bernini.CONTEXT_LATENTS] = bernini.context_latents_in(model, kwargs[bernini.CONTEXT_LATENTS])
        if self.kind == "vace":
            out.update(self._vace(model, kwargs))
        elif self.kind == "camera":
            if kwargs.get("camera_conditions") is not None:
                out["camera_conditions"] = kwargs["camera_conditions"]
        elif self.kind == "wan22":
            if kwargs.get("denoise_mask") is not None:
                out["denoise_mask"] = kwargs["denoise_mask"]
        elif self.kind == "s2v":
            out.update(self._s2v(model, kwargs))
        elif self.kind == "humo":
            out.update(self._humo(model, kwargs))
        return out

    @staticmethod
    def _s2v(model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if kwargs.get("audio_embed") is not None:
            out["audio_embed"] = kwargs["audio_embed"]
        references = kwargs.get("reference_latents")
        if references is not None:
            out["reference_latent"] = model.process_latent_in(references[-1])
        for key in ("reference_motion", "control_video"):
            if kwargs.get(key) is not None:
                out[key] = model.process_latent_in(kwargs[key])
        return out

    @staticmethod
    def _humo(model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if kwargs.get("audio_embed") is not None:
            out["audio_embed"] = kwargs["audio_embed"]
        references = kwargs.get("reference_latents")
        if references is None:
            return out
        reference = model.process_latent_in(references[-1])
        extra = model.diffusion_model.patch_embedding.weight.shape[1] - reference.shape[1]
        if extra:  # 17B: [zeros (latent width), ones (mask), reference]
            shape = list(reference.shape)
            shape[1] += extra
            full = torch.zeros(shape, dtype=reference.dtype, device=reference.device)
            full[:, extra:] = reference
            full[:, extra - MASK_CHANNELS:extra] = 1.0
            reference = full
        out["reference_latent"] = reference
        return out

    def _vace(self, model: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        noise = kwargs["noise"]
        shape = list(noise.shape)
        frames = kwargs.get("vace_frames")
        if frames is None:
            shape[1] = VACE_FRAME_CHANNELS
            frames = [torch.zeros(shape, device=noise.device, dtype=noise.dtype)]
        masks = kwargs.get("vace_mask")
        if masks is None:
            shape[1] = VACE_MASK_CHANNELS
            masks = [torch.ones(shape, device=noise.device, dtype=noise.dtype)] * len(frames)
        if len(masks) != len(frames):
            raise ConditioningError(f"Wan VACE: {len(frames)} vace_frames but {len(masks)} vace_mask entries")
        hints = []
        for frame, mask in zip(frames, masks):
            frame = _in_model_space(model, frame.to(device=noise.device, dtype=noise.dtype))
            hints.append(torch.cat([frame, mask.to(device=noise.device, dtype=noise.dtype)], dim=1))
        strength = kwargs.get("vace_strength", [1.0] * len(hints))
        return {"vace_context": torch.stack(hints, dim=1), "vace_strength": list(strength)}
