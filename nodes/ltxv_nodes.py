"""LTX-Video nodes (ComfyUI's `comfy_extras/nodes_lt.py`, V3 schemas as today's ComfyUI declares
them); written here:

- EmptyLTXVLatentVideo: zeros `[B, 128, (length - 1) // 8 + 1, height // 32, width // 32]`.
- LTXVConditioning: `frame_rate` on both conditionings (the DiT's RoPE time scale).
- LTXVImgToVideo / LTXVImgToVideoInplace: the image's latent (resized, centre crop, bilinear) put
  at the start of the video latent, and a `noise_mask` `[B, 1, T, 1, 1]` of `1 - strength` over
  those frames (the DiT then sees them as clean through its per-token timesteps).
- LTXVAddGuide: an image or clip (8k + 1 frames) encoded and appended after the latent's frames,
  its tokens' pixel positions recorded in `keyframe_idxs` (start / end) and a
  `guide_attention_entries` entry (strength, optional pixel mask) on both conditionings, the
  noise mask extended with `max(0, 1 - strength)`; IC-LoRA downscaled guides are dilated onto a
  sparse grid whose padding the mask marks -1. LTXVCropGuides cuts the appended frames off again.
- LTXVScheduler: `steps + 1` sigmas from 1 to 0, Flux's exponential shift with a mu linear in the
  latent's token count (0.95 at 1024, 2.05 at 4096), optionally stretched so the last non-zero
  sigma is `terminal`. ModelSamplingLTXV: the model's sampling with that shift.
- LTXVPreprocess: each image through one H.264 frame at CRF `img_compression` (PyAV, libx264,
  yuv420p), as the model was trained on compressed frames.
- LTXAVTextEncoderLoader (`comfy_extras/nodes_lt_audio.py`): a Gemma 3 file of the
  text_encoders folders plus an LTX-2 checkpoint (its text projection and connectors) -> CLIP
  (`comfy_core/families/ltx2/encoders.py`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from graph.native import MAX_RESOLUTION
from graph.spec import InputSpec, REQUIRED
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

MODULE = "comfy_extras.nodes_lt"
LATENT_CHANNELS = 128
SCALE_FACTORS = (8, 32, 32)  # ComfyUI's LTXV VAE downscale_index_formula
_PAIR = [Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING")]
_PAIR_OUT = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")]


def _int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise NodeInputError(name, f"an INT >= {low}", repr(value))
    return value


def _float(value: Any, name: str, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) \
            or (low is not None and value < low) or (high is not None and value > high):
        raise NodeInputError(name, f"a FLOAT in [{low}, {high}]", repr(value))
    return float(value)


def _empty(batch_size: int, length: int, height: int, width: int) -> Any:
    import torch

    return torch.zeros([batch_size, LATENT_CHANNELS, (length - 1) // 8 + 1, height // 32, width // 32])


@v3_node("EmptyLTXVLatentVideo", display_name="Empty LTXV Latent Video", category="model/latent/ltxv",
         python_module=MODULE,
         inputs=[Int("width", default=768, min=64, max=MAX_RESOLUTION, step=32),
                 Int("height", default=512, min=64, max=MAX_RESOLUTION, step=32),
                 Int("length", default=97, min=1, max=MAX_RESOLUTION, step=8),
                 Int("batch_size", default=1, min=1, max=4096)],
         outputs=[Output("LATENT")])
def empty_ltxv_latent_video(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict]:
    for name, value, low in (("width", width, 1), ("height", height, 1), ("length", length, 1),
                             ("batch_size", batch_size, 1)):
        _int(value, name, low)
    return ({"samples": _empty(batch_size, length, height, width), "downscale_ratio_spacial": 32},)


@v3_node("LTXVConditioning", category="model/conditioning/ltxv", python_module=MODULE,
         inputs=[*_PAIR, Float("frame_rate", default=25.0, min=0.0, max=1000.0, step=0.01)], outputs=_PAIR_OUT)
def ltxv_conditioning(positive: list, negative: list, frame_rate: float) -> tuple[list, list]:
    rate = _float(frame_rate, "frame_rate", 0.0)
    return (set_values(checks.conditioning(positive, "positive"), {"frame_rate": rate}),
            set_values(checks.conditioning(negative, "negative"), {"frame_rate": rate}))


def _encode(vae: Any, image: Any, width: int, height: int) -> Any:
    """The frames resized (centre crop, bilinear) when their size differs, RGB encoded."""
    from comfy_core.latent.video import fit_frames

    if image.shape[1] != height or image.shape[2] != width:
        image = fit_frames(image, width, height)
    return vae.encode(image[:, :, :, :3])


def _image(value: Any, name: str = "image") -> Any:
    import torch

    if not isinstance(value, torch.Tensor) or value.ndim != 4:
        raise NodeInputError(name, "an IMAGE [N, H, W, C]", describe(value))
    return value


def _video_latent(value: Any, name: str = "latent") -> Any:
    samples = checks.latent(value, name, ndims=(5,))
    return samples


def noise_mask_of(latent: dict) -> Any:
    """The latent's `noise_mask` (copied), else ones `[B, 1, T, 1, 1]` (ComfyUI's `get_noise_mask`)."""
    import torch

    mask = latent.get("noise_mask")
    if mask is None:
        samples = latent["samples"]
        return torch.ones((samples.shape[0], 1, samples.shape[2], 1, 1), dtype=torch.float32, device=samples.device)
    return mask.clone()


@v3_node("LTXVImgToVideo", category="model/conditioning/ltxv", python_module=MODULE,
         inputs=[*_PAIR, Socket("vae", "VAE"), Socket("image", "IMAGE"),
                 Int("width", default=768, min=64, max=MAX_RESOLUTION, step=32),
                 Int("height", default=512, min=64, max=MAX_RESOLUTION, step=32),
                 Int("length", default=97, min=9, max=MAX_RESOLUTION, step=8),
                 Int("batch_size", default=1, min=1, max=4096),
                 Float("strength", default=1.0, min=0.0, max=1.0)],
         outputs=[*_PAIR_OUT, Output("LATENT", "latent")])
def ltxv_img_to_video(positive: list, negative: list, vae: Any, image: Any, width: int, height: int, length: int,
                      batch_size: int, strength: float) -> tuple[list, list, dict]:
    import torch

    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    vae, image = checks.vae(vae), _image(image)
    for name, value, low in (("width", width, 32), ("height", height, 32), ("length", length, 1),
                             ("batch_size", batch_size, 1)):
        _int(value, name, low)
    strength = _float(strength, "strength", 0.0, 1.0)
    encoded = _encode(vae, image, width, height)
    latent = _empty(batch_size, length, height, width)
    frames = _fits(encoded, latent)
    latent[:, :, :frames] = encoded.to(latent)
    mask = torch.ones((batch_size, 1, latent.shape[2], 1, 1), dtype=torch.float32)
    mask[:, :, :frames] = 1.0 - strength
    return positive, negative, {"samples": latent, "noise_mask": mask}


@v3_node("LTXVImgToVideoInplace", category="model/conditioning/ltxv", python_module=MODULE,
         inputs=[Socket("vae", "VAE"), Socket("image", "IMAGE"), Socket("latent", "LATENT"),
                 Float("strength", default=1.0, min=0.0, max=1.0),
                 Boolean("bypass", default=False, tooltip="Bypass the conditioning.")],
         outputs=[Output("LATENT", "latent")])
def ltxv_img_to_video_inplace(vae: Any, image: Any, latent: dict, strength: float, bypass: bool = False) -> tuple[dict]:
    if bypass:
        return (latent,)
    samples = _video_latent(latent).clone()
    vae, image = checks.vae(vae), _image(image)
    strength = _float(strength, "strength", 0.0, 1.0)
    _, scale_h, scale_w = _scale_factors(vae)
    encoded = _encode(vae, image, samples.shape[4] * scale_w, samples.shape[3] * scale_h)
    frames = _fits(encoded, samples)
    samples[:, :, :frames] = encoded.to(samples)
    mask = noise_mask_of(latent)
    mask[:, :, :frames] = 1.0 - strength
    return ({"samples": samples, "noise_mask": mask},)


def _fits(encoded: Any, latent: Any) -> int:
    """The image latent's frame count, refused when it is longer than the video latent."""
    if encoded.shape[2] > latent.shape[2]:
        raise NodeInputError("image", f"at most {latent.shape[2]} latent frames of images (the video's length)",
                             f"{encoded.shape[2]} latent frames")
    return encoded.shape[2]


def _scale_factors(vae: Any) -> tuple[int, int, int]:
    formula = getattr(vae, "downscale_index_formula", None)
    if formula is None:
        raise NodeInputError("vae", "a video VAE (LTX-Video's: 8x in time, 32x in space)", describe(vae))
    return tuple(int(v) for v in formula)  # type: ignore[return-value]


# --- guides ---

def _conditioning_value(conditioning: list, key: str) -> Any:
    for _, options in conditioning:
        if key in options:
            return options[key]
    return None


def keyframe_count(cond: list, latent_shape: Any = None) -> tuple[Any, int]:
    """(`keyframe_idxs`, how many latent frames the guides appended): from the token count and the
    latent's frame size, else the guides' entries, else the distinct start times (ComfyUI's
    `get_keyframe_idxs`)."""
    import torch

    keyframes = _conditioning_value(cond, "keyframe_idxs")
    if keyframes is None:
        return None, 0
    if latent_shape is not None and len(latent_shape) == 5:
        return keyframes, keyframes.shape[2] // (latent_shape[-2] * latent_shape[-1])
    entries = _conditioning_value(cond, "guide_attention_entries")
    if entries:
        return keyframes, sum(e["latent_shape"][0] for e in entries)
    starts = keyframes[:, 0, :, 0] if keyframes.ndim == 4 else keyframes[:, 0]
    return keyframes, torch.unique(starts).shape[0]


def _add_keyframe_index(conditioning: list, frame_idx: int, guide: Any, scale_factors: tuple[int, int, int],
                        downscale: int, causal_fix: bool) -> list:
    """`keyframe_idxs` extended by the guide tokens' pixel positions `[B, 3, N, 2]` (start, end)."""
    import torch

    from comfy_core.families.ltxv.dit import latent_coords, latent_to_pixel_coords

    existing, _ = keyframe_count(conditioning)
    b, _, f, h, w = guide.shape
    start = latent_coords(f, h, w, b, guide.device)
    coords = torch.stack([start, start + 1], dim=-1)  # [B, 3, N, 2]
    pixel = latent_to_pixel_coords(coords, scale_factors, causal_fix=causal_fix)
    pixel[:, 0] += frame_idx
    # a dilated (IC-LoRA) guide: each token spans `downscale` times the pixels; its end moves, not its start
    offset = (downscale - 1) * torch.tensor(scale_factors[1:], device=pixel.device).view(1, -1, 1, 1)
    pixel[:, 1:, :, 1:] += offset.to(pixel.dtype)
    keyframes = pixel if existing is None else torch.cat([existing, pixel.to(existing)], dim=2)
    return set_values(conditioning, {"keyframe_idxs": keyframes})


def _append_entry(conditioning: list, entry: dict) -> list:
    existing = _conditioning_value(conditioning, "guide_attention_entries") or []
    return set_values(conditioning, {"guide_attention_entries": [*existing, entry]})


def append_guide_attention_entry(positive: list, negative: list, pre_filter_count: int, latent_shape: Any,
                                 strength: float = 1.0, attention_mask: Any = None) -> tuple[list, list]:
    """Both conditionings with one more guide's attention entry (how many tokens it had before any
    filtering, its self-attention strength, an optional `[F, H, W]` pixel mask, its latent
    `[F, H, W]`), each extending its own list (ComfyUI's `_append_guide_attention_entry`)."""
    entry = {"pre_filter_count": pre_filter_count, "strength": strength,
             "pixel_mask": attention_mask.unsqueeze(0).unsqueeze(0) if attention_mask is not None else None,
             "latent_shape": latent_shape}
    return _append_entry(positive, entry), _append_entry(negative, entry)


def _dilate(guide: Any, factor: int) -> tuple[Any, Any]:
    """A guide latent spread onto a grid `factor` times larger (zeros between), with a mask of 1 on
    its tokens and -1 on the padding (the DiT drops those)."""
    import torch

    if factor <= 1:
        return guide, None
    b, c, f, h, w = guide.shape
    dilated = torch.zeros((b, c, f, h * factor, w * factor), dtype=guide.dtype, device=guide.device)
    dilated[..., ::factor, ::factor] = guide
    mask = torch.full((b, 1, f, h * factor, w * factor), -1.0, dtype=guide.dtype, device=guide.device)
    mask[..., ::factor, ::factor] = 1.0
    return dilated, mask


def append_guide_frames(latent: Any, noise_mask: Any, guide: Any, guide_mask: Any,
                        strength: float) -> tuple[Any, Any]:
    """The guide's frames after the latent's, and the noise mask extended for them (ComfyUI's
    `LTXVAddGuide.append_keyframe`): `guide_mask - strength` where the guide carries a mask (both
    masks broadcast to the larger spatial size), else `1 - strength` (at least 0)."""
    import torch

    if guide_mask is not None:
        h, w = max(noise_mask.shape[3], guide_mask.shape[3]), max(noise_mask.shape[4], guide_mask.shape[4])
        if noise_mask.shape[3] == 1 or noise_mask.shape[4] == 1:
            noise_mask = noise_mask.expand(-1, -1, -1, h, w)
        if guide_mask.shape[3] == 1 or guide_mask.shape[4] == 1:
            guide_mask = guide_mask.expand(-1, -1, -1, h, w)
        mask = guide_mask - strength
    else:
        mask = torch.full((noise_mask.shape[0], 1, guide.shape[2], noise_mask.shape[3], noise_mask.shape[4]),
                          max(0.0, 1.0 - strength), dtype=noise_mask.dtype, device=noise_mask.device)
    return torch.cat([latent, guide.to(latent)], dim=2), torch.cat([noise_mask, mask.to(noise_mask)], dim=2)


def attach_guide(positive: list, negative: list, latent: Any, noise_mask: Any, guide: Any, frame_idx: int,
                 strength: float, scale_factors: tuple[int, int, int], downscale: int = 1,
                 causal_fix: bool | None = None, attention_mask: Any = None) -> tuple[list, list, Any, Any]:
    """Append the guide latent (dilated when `downscale` > 1) after the latent's frames, record its
    positions and attention entry on both conditionings, extend the noise mask."""
    if latent.shape[1] != LATENT_CHANNELS or guide.shape[1] != LATENT_CHANNELS:
        raise NodeInputError("latent", f"a {LATENT_CHANNELS}-channel LTX-Video latent", describe(latent))
    shape = list(guide.shape[2:])  # before dilation
    guide, guide_mask = _dilate(guide, downscale)
    if causal_fix is None:
        causal_fix = frame_idx == 0 or guide.shape[2] == 1
    positive = _add_keyframe_index(positive, frame_idx, guide, scale_factors, downscale, causal_fix)
    negative = _add_keyframe_index(negative, frame_idx, guide, scale_factors, downscale, causal_fix)
    latent, noise_mask = append_guide_frames(latent, noise_mask, guide, guide_mask, strength)
    positive, negative = append_guide_attention_entry(
        positive, negative, guide.shape[2] * guide.shape[3] * guide.shape[4], shape, strength, attention_mask)
    return positive, negative, latent, noise_mask


def _downscale_factor(parameters: Any) -> int:
    if not parameters:
        return 1
    try:
        return max(1, round(float(parameters.get("reference_downscale_factor", 1))))
    except (TypeError, ValueError, AttributeError):
        return 1


@v3_node("LTXVAddGuide", category="model/conditioning/ltxv", python_module=MODULE,
         inputs=[*_PAIR, Socket("vae", "VAE"), Socket("latent", "LATENT"),
                 Socket("image", "IMAGE", tooltip="Image or video to condition the latent video on. Must be 8*n + 1 "
                                                  "frames. If the video is not 8*n + 1 frames, it will be cropped to "
                                                  "the nearest 8*n + 1 frames."),
                 Int("frame_idx", default=0, min=-9999, max=9999,
                     tooltip="Frame index to start the conditioning at. For single-frame images or videos with 1-8 "
                             "frames, any frame_idx value is acceptable. For videos with 9+ frames, frame_idx must be "
                             "divisible by 8, otherwise it will be rounded down to the nearest multiple of 8. "
                             "Negative values are counted from the end of the video."),
                 Float("strength", default=1.0, min=0.0, max=10.0, step=0.01),
                 Socket("attention_mask", "MASK", optional=True,
                        tooltip="Optional pixel-space spatial mask. Controls per-region conditioning influence via "
                                "self-attention, multiplied by strength."),
                 Socket("iclora_parameters", "IC_LORA_PARAMETERS", optional=True,
                        tooltip="Optional IC-LoRA parameters from a Get IC-LoRA Parameters node. Used for adjusting "
                                "guide processing as required by certain IC-LoRAs (eg. those with a "
                                "reference_downscale_factor > 1). When chained, each LTXVAddGuide uses only the "
                                "parameters connected to it.")],
         outputs=[*_PAIR_OUT, Output("LATENT", "latent")])
def encode_guide(vae: Any, latent_width: int, latent_height: int, images: Any, scale_factors: Any,
                 latent_downscale_factor: int = 1) -> tuple[Any, Any]:
    """LTXVAddGuide's guide frames and their latent (ComfyUI's `LTXVAddGuide.encode`): `images`
    cut to `(n - 1) // t * t + 1` frames, fitted (centre crop, bilinear) to the latent's pixel size
    over `latent_downscale_factor`, RGB, encoded; `scale_factors` the VAE's `(time, height, width)`."""
    from comfy_core.latent.video import fit_frames

    ratio = int(scale_factors[0])
    images = images[:((images.shape[0] - 1) // ratio) * ratio + 1]
    pixels = fit_frames(images, int(latent_width * scale_factors[2] / latent_downscale_factor),
                        int(latent_height * scale_factors[1] / latent_downscale_factor))[..., :3]
    return pixels, vae.encode(pixels)


def ltxv_add_guide(positive: list, negative: list, vae: Any, latent: dict, image: Any, frame_idx: int, strength: float,
                   attention_mask: Any = None, iclora_parameters: Any = None) -> tuple[list, list, dict]:
    import torch

    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    vae, image, samples = checks.vae(vae), _image(image), _video_latent(latent)
    strength = _float(strength, "strength", 0.0)
    scale_factors = _scale_factors(vae)
    noise_mask = noise_mask_of(latent)
    _, _, length, height, width = samples.shape
    factor = _downscale_factor(iclora_parameters)
    if factor > 1 and (width % factor or height % factor):
        raise NodeInputError("iclora_parameters", f"a reference_downscale_factor dividing the latent's {width}x{height}",
                             str(factor))
    ratio = scale_factors[0]
    keep = ((image.shape[0] - 1) // ratio) * ratio + 1
    resolved = frame_idx
    if frame_idx < 0:
        _, guides = keyframe_count(positive, samples.shape)
        resolved = max((length - guides - 1) * ratio + 1 + frame_idx, 0)
    causal_fix = resolved == 0 or keep == 1
    if not causal_fix:  # a throwaway first frame takes the VAE's one-frame first latent
        image = torch.cat([image[:1], image], dim=0)
    pixels, encoded = encode_guide(vae, width, height, image, scale_factors, factor)
    if not causal_fix:
        encoded, pixels = encoded[:, :, 1:], pixels[1:]
    _, guides = keyframe_count(positive, samples.shape)
    count = length - guides
    index = frame_idx if frame_idx >= 0 else max((count - 1) * ratio + 1 + frame_idx, 0)
    if len(pixels) > 1 and index != 0:
        index = (index - 1) // ratio * ratio + 1
    latent_idx = (index + ratio - 1) // ratio
    if latent_idx + encoded.shape[2] > length:
        raise NodeInputError("frame_idx", f"a frame whose guide ({encoded.shape[2]} latent frames) fits the "
                                          f"{length}-frame latent", str(frame_idx))
    positive, negative, samples, noise_mask = attach_guide(positive, negative, samples, noise_mask, encoded, index,
                                                           strength, scale_factors, factor, causal_fix,
                                                           attention_mask)
    return positive, negative, {"samples": samples, "noise_mask": noise_mask}


@v3_node("LTXVCropGuides", category="model/conditioning/ltxv", python_module=MODULE,
         inputs=[*_PAIR, Socket("latent", "LATENT")], outputs=[*_PAIR_OUT, Output("LATENT", "latent")])
def ltxv_crop_guides(positive: list, negative: list, latent: dict) -> tuple[list, list, dict]:
    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    samples = _video_latent(latent).clone()
    noise_mask = noise_mask_of(latent)
    _, guides = keyframe_count(positive, samples.shape)
    if guides == 0:
        return positive, negative, {"samples": samples, "noise_mask": noise_mask}
    cleared = {"keyframe_idxs": None, "guide_attention_entries": None}
    return (set_values(positive, cleared), set_values(negative, cleared),
            {"samples": samples[:, :, :-guides], "noise_mask": noise_mask[:, :, :-guides]})


@v3_node("LTXVAddLatentGuide", display_name="LTXV Add Latent Guide", category="model/conditioning/ltxv",
         python_module=MODULE,
         description="Pins an already-encoded latent as a guide, for when the guide comes out of an earlier stage "
                     "rather than an image. Same effect as LTXV Add Guide without the VAE decode/encode round trip. A "
                     "guide that is spatially smaller than the target (an IC-LoRA or detailing reference) is dilated "
                     "onto a sparse grid, and its RoPE end positions are expanded by the same ratio so it covers the "
                     "target canvas instead of addressing only the top-left corner of it.",
         search_aliases=["latent guide", "add latent guide", "guide latent"],
         inputs=[*_PAIR, Socket("vae", "VAE"),
                 Socket("latent", "LATENT", tooltip="Target video latent the guide is pinned onto."),
                 Socket("guiding_latent", "LATENT",
                        tooltip="Guide latent. Its spatial size must divide the target's by the same whole number on "
                                "both axes; equal size pins it as-is, half size is treated as an x2 IC-LoRA reference."),
                 Int("latent_idx", default=0, min=-9999, max=9999,
                     tooltip="Latent frame index to start the guide at, counted in latent frames rather than pixel "
                             "frames. Negative values place the guide on frames before the start of the latent, not "
                             "counted back from its end."),
                 Float("strength", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip="Capped at 1.0. A dilated guide marks its padding positions with a negative denoise "
                               "mask so the model drops them; above 1.0 the kept positions would go negative too and "
                               "the whole guide would be dropped. Amplify beyond 1.0 with attention_mask instead."),
                 Socket("attention_mask", "MASK", optional=True,
                        tooltip="Optional pixel-space spatial mask. Controls per-region conditioning influence via "
                                "self-attention, multiplied by strength.")],
         outputs=[*_PAIR_OUT, Output("LATENT", "latent")])
def ltxv_add_latent_guide(positive: list, negative: list, vae: Any, latent: dict, guiding_latent: dict,
                          latent_idx: int, strength: float, attention_mask: Any = None) -> tuple[list, list, dict]:
    """A latent guide appended as LTXVAddGuide appends an encoded image: at pixel frame
    `8 (latent_idx - 1) + 1` (0 and below: `8 latent_idx`), dilated by the target / guide size ratio."""
    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    vae, samples = checks.vae(vae), _video_latent(latent)
    guide = _video_latent(guiding_latent, "guiding_latent")
    strength = _float(strength, "strength", 0.0, 1.0)
    scale_factors = _scale_factors(vae)
    if isinstance(latent_idx, bool) or not isinstance(latent_idx, int):
        raise NodeInputError("latent_idx", "an INT", repr(latent_idx))
    if latent_idx + guide.shape[2] > samples.shape[2]:
        raise NodeInputError("latent_idx", f"a start whose {guide.shape[2]}-frame guide fits the {samples.shape[2]}-"
                                           "frame latent (negative values start before the latent)", str(latent_idx))
    if samples.shape[3] % guide.shape[3] or samples.shape[4] % guide.shape[4]:
        raise NodeInputError("guiding_latent", f"a latent whose size divides {samples.shape[3]}x{samples.shape[4]}",
                             f"{guide.shape[3]}x{guide.shape[4]}")
    height_ratio, width_ratio = samples.shape[3] // guide.shape[3], samples.shape[4] // guide.shape[4]
    if height_ratio != width_ratio:
        raise NodeInputError("guiding_latent", "the same size ratio on both axes",
                             f"x{height_ratio} in height, x{width_ratio} in width")
    ratio = scale_factors[0]
    frame_idx = latent_idx * ratio if latent_idx <= 0 else 1 + (latent_idx - 1) * ratio
    positive, negative, samples, noise_mask = attach_guide(positive, negative, samples, noise_mask_of(latent), guide,
                                                           frame_idx, strength, scale_factors, width_ratio,
                                                           attention_mask=attention_mask)
    out = dict(latent)
    out["samples"], out["noise_mask"] = samples, noise_mask
    return positive, negative, out


# --- sampling ---

def token_shift(latent: dict | None, max_shift: float, base_shift: float) -> float:
    """mu linear in the latent's token count (4096 without a latent): `base_shift` at 1024 tokens,
    `max_shift` at 4096. A nested [video, audio] latent counts its video part (ComfyUI's
    NestedTensor.shape is its first tensor's)."""
    if latent is None:
        tokens = 4096
    else:
        from comfy_core.latent.nested import is_nested

        samples = latent.get("samples") if isinstance(latent, dict) else None
        shape = samples.shape if is_nested(samples) else checks.latent(latent, "latent").shape
        tokens = math.prod(shape[2:])
    slope = (max_shift - base_shift) / (4096 - 1024)
    return tokens * slope + base_shift - slope * 1024


@v3_node("ModelSamplingLTXV", category="model/patch/ltxv", python_module=MODULE,
         inputs=[Socket("model", "MODEL"),
                 Float("max_shift", default=2.05, min=0.0, max=100.0, step=0.01),
                 Float("base_shift", default=0.95, min=0.0, max=100.0, step=0.01),
                 Socket("latent", "LATENT", optional=True)],
         outputs=[Output("MODEL")])
def model_sampling_ltxv(model: Any, max_shift: float, base_shift: float, latent: dict | None = None) -> tuple[Any]:
    from comfy_core.models.model_sampling import FluxModelSampling

    model = checks.model(model)
    shift = token_shift(latent, _float(max_shift, "max_shift"), _float(base_shift, "base_shift"))
    patched = model.clone()
    patched.add_object_patch("model_sampling", FluxModelSampling(shift))
    return (patched,)


def ltxv_sigmas(steps: int, max_shift: float, base_shift: float, stretch: bool, terminal: float,
                latent: dict | None = None) -> Any:
    """LTXVScheduler's schedule (see the module doc), float32 `[steps + 1]`."""
    import torch

    mu = token_shift(latent, max_shift, base_shift)
    sigmas = torch.linspace(1.0, 0.0, steps + 1)
    shifted = torch.where(sigmas != 0, math.exp(mu) / (math.exp(mu) + (1 / sigmas - 1)), torch.zeros(()))
    if stretch:
        nonzero = shifted != 0
        one_minus = 1.0 - shifted[nonzero]
        scale = one_minus[-1] / (1.0 - terminal)
        shifted[nonzero] = 1.0 - one_minus / scale
    return shifted


@v3_node("LTXVScheduler", category="model/sampling/schedulers", python_module=MODULE,
         inputs=[Int("steps", default=20, min=1, max=10000),
                 Float("max_shift", default=2.05, min=0.0, max=100.0, step=0.01),
                 Float("base_shift", default=0.95, min=0.0, max=100.0, step=0.01),
                 Boolean("stretch", default=True, tooltip="Stretch the sigmas to be in the range [terminal, 1].",
                         advanced=True),
                 Float("terminal", default=0.1, min=0.0, max=0.99, step=0.01,
                       tooltip="The terminal value of the sigmas after stretching.", advanced=True),
                 Socket("latent", "LATENT", optional=True)],
         outputs=[Output("SIGMAS")])
def ltxv_scheduler(steps: int, max_shift: float, base_shift: float, stretch: bool, terminal: float,
                   latent: dict | None = None) -> tuple[Any]:
    _int(steps, "steps", 1)
    return (ltxv_sigmas(steps, _float(max_shift, "max_shift"), _float(base_shift, "base_shift"), bool(stretch),
                        _float(terminal, "terminal", 0.0, 0.99), latent),)


@dataclass(frozen=True)
class SpatioTemporalGuidance:
    """`sampler_post_cfg_function` of LTXVSpatioTemporalGuidance (STG, Hyung et al. 2024,
    "Spatiotemporal Skip Guidance", arXiv 2411.18664): while `sigma_end < sigma <= sigma_start`,
    one more pass of the positive with the listed blocks' self-attention passing the values
    through (`transformer_options["stg_self_attn_blocks"]`), and `cfg + (cond - perturbed) * scale`."""

    blocks: frozenset
    scale: float
    sigma_start: float
    sigma_end: float

    def __call__(self, args: dict) -> Any:
        from comfy_core.sampling import cond_batch

        guided = args["denoised"]
        if self.scale == 0 or not self.blocks:
            return guided
        sigma = float(args["sigma"][0])
        if sigma > self.sigma_start or sigma <= self.sigma_end:
            return guided
        options = dict(args["model_options"])
        options["transformer_options"] = {**options.get("transformer_options", {}), "stg_self_attn_blocks": self.blocks}
        (perturbed,) = cond_batch.calc_cond_batch_in_force()(args["model"], [args["cond"]], args["input"],
                                                              args["sigma"], options)
        return guided + (args["cond_denoised"] - perturbed) * self.scale

    def cache_signature(self) -> tuple:
        return ("SpatioTemporalGuidance", tuple(sorted(self.blocks)), self.scale, self.sigma_start, self.sigma_end)


@v3_node("LTXVSpatioTemporalGuidance", display_name="LTXV Spatio-Temporal Guidance (STG)", category="advanced/guidance",
         python_module=MODULE,
         description="Runs one extra pass per step with the self-attention of the selected blocks degraded to a "
                     "value-passthrough, then guides away from it - improving spatial detail and motion coherence.",
         inputs=[Socket("model", "MODEL"),
                 Float("scale", default=1.0, min=0.0, max=100.0, step=0.01, round=0.01),
                 String("blocks", default="29", tooltip="Comma-separated transformer block indices to perturb."),
                 Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001, advanced=True),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001, advanced=True)],
         outputs=[Output("MODEL")])
def ltxv_spatio_temporal_guidance(model: Any, scale: float, blocks: str, start_percent: float,
                                  end_percent: float) -> tuple[Any]:
    import re

    model = checks.model(model)
    scale = _float(scale, "scale", 0.0)
    block_set = frozenset(int(b) for b in re.findall(r"\d+", checks.text(blocks, "blocks")))
    sampling = model.get_model_object("model_sampling")
    start = float(sampling.percent_to_sigma(_float(start_percent, "start_percent", 0.0, 1.0)))
    end = float(sampling.percent_to_sigma(_float(end_percent, "end_percent", 0.0, 1.0)))
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function", SpatioTemporalGuidance(block_set, scale, start, end))
    return (patched,)


# --- preprocessing ---

def compress_frame(image: Any, crf: int) -> Any:
    """One `[H, W, 3]` frame through H.264 at CRF `crf` (sides cut to even, 0..255 by truncation),
    back as floats in 0..1; CRF 0: the frame as it is."""
    import av
    import numpy as np
    import torch

    if crf == 0:
        return image
    pixels = (image[:(image.shape[0] // 2) * 2, :(image.shape[1] // 2) * 2] * 255.0).byte().cpu().numpy()
    buffer = BytesIO()
    container = av.open(buffer, "w", format="mp4")
    try:
        stream = container.add_stream("libx264", rate=1, options={"crf": str(crf), "preset": "veryfast"})
        stream.height, stream.width = pixels.shape[0], pixels.shape[1]
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(pixels[..., :3]), format="rgb24").reformat(
            format="yuv420p")
        container.mux(stream.encode(frame))
        container.mux(stream.encode())
    finally:
        container.close()
    with av.open(BytesIO(buffer.getvalue())) as decoded:
        stream = next(s for s in decoded.streams if s.type == "video")
        out = next(decoded.decode(stream)).to_ndarray(format="rgb24")
    return torch.tensor(out, dtype=image.dtype, device=image.device) / 255.0


@v3_node("LTXVPreprocess", display_name="LTXV Preprocess", category="video/preprocessors", python_module=MODULE,
         inputs=[Socket("image", "IMAGE"),
                 Int("img_compression", default=35, min=0, max=100, tooltip="Amount of compression to apply on image.")],
         outputs=[Output("IMAGE", "output_image")])
def ltxv_preprocess(image: Any, img_compression: int) -> tuple[Any]:
    import torch

    image = _image(image)
    crf = _int(img_compression, "img_compression", 0)
    if crf > 100:
        raise NodeInputError("img_compression", "an INT in [0, 100]", repr(img_compression))
    if image.shape[1] < 2 or image.shape[2] < 2:
        raise NodeInputError("image", "frames at least 2x2 (H.264 halves the colour planes)", describe(image))
    return (torch.stack([compress_frame(image[i], crf) for i in range(image.shape[0])]),)


def _files_of(kind: str) -> Any:
    def options(env: Any = None) -> list[str]:
        from nodes.environment import Environment, current_env

        return (env if isinstance(env, Environment) else current_env()).folders.filenames(kind)
    return options


@v3_node("LTXAVTextEncoderLoader", display_name="Load LTXV Audio Text Encoder", category="model/loaders",
         python_module="comfy_extras.nodes_lt_audio",
         description="Recipes:\nltxav: gemma 3 12B or matching gemma 4 model",
         inputs=[InputSpec("text_encoder", _files_of("text_encoders"), REQUIRED, {"multiselect": False}),
                 InputSpec("ckpt_name", _files_of("checkpoints"), REQUIRED, {"multiselect": False}),
                 Combo("device", ["default", "cpu"], advanced=True)],
         outputs=[Output("CLIP")])
def ltxav_text_encoder_loader(text_encoder: str, ckpt_name: str, device: str = "default") -> tuple[Any]:
    """LTX-2's text encoder: the Gemma 3 file and the checkpoint's projection / connectors."""
    from comfy_core.families.ltx2.ltxav_loader import load_ltxav_text_encoder
    from nodes.loaders import _embedding_lookup, _options, _track
    from nodes.environment import model_file
    from comfy_core.checkpoint.dtype import TEXT

    if device not in ("default", "cpu"):
        raise NodeInputError("device", "one of ['default', 'cpu']", repr(device))
    gemma = model_file("text_encoders", text_encoder, "text_encoder")
    checkpoint = model_file("checkpoints", ckpt_name, "ckpt_name")
    options = _options()
    clip = load_ltxav_text_encoder(gemma, checkpoint, options.dtype_policy.dtype_for(TEXT),
                                   load_device="cpu" if device == "cpu" else options.device)
    _embedding_lookup(clip)
    _track(clip)
    return (clip,)

