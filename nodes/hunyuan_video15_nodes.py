"""HunyuanVideo 1.5's nodes with today's ComfyUI's names, V3 schemas and semantics
(`comfy_extras/nodes_hunyuan.py`), written here; the model side is comfy_core/families/hunyuan_video15.

- EmptyHunyuanVideo15Latent: zeros `[batch_size, 32, (length - 1) // 4 + 1, height // 16, width // 16]`
  with `downscale_ratio_spacial` 16 (EmptyHunyuanLatentVideo's schema, its own name and category).
- HunyuanVideo15ImageToVideo: that latent; with `start_image` (its first `length` frames resized to
  the size, centre crop, bilinear) its VAE latent in the first frames of a zero `concat_latent_image`
  and a `concat_mask` `[1, 1, T, h, w]` of ones, zero over the latent frames the image covers; the
  CLIP vision output as `clip_vision_output`; written into both conditionings.
- HunyuanVideo15SuperResolution: the latent passes through; both conditionings get the SR block
  `[B, 2C + 2, T, h, w]` as `concat_latent_image` (channels C+1..2C the latent, channel 2C+1 ones;
  with `start_image` resized to 16x the latent and encoded, its latent in channels 0..C-1 and ones in
  channel C of the first frame) and `noise_augmentation`, plus the CLIP vision output.
- HunyuanVideo15LatentUpscaleWithModel: the latent resized per frame to `width // 16 x height // 16`
  (both 0: unchanged; one 0: kept in proportion; each at least 64) with `upscale_method` and `crop`,
  then the model's `resample_latent`; returned as float32 on the CPU.

Frame counts must be `4k + 1` and sizes within ComfyUI's widget ranges (nodes/wan_conditioning.py);
a start image needs the VAE (SuperResolution's is optional otherwise), as ComfyUI would fail.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_hunyuan"
LATENT_CATEGORY = "model/latent/hunyuan video"
CONDITIONING_CATEGORY = "model/conditioning/hunyuan video"
CHANNELS = 32
DOWNSCALE = 16
UPSCALE_METHODS = ("nearest-exact", "bilinear", "area", "bicubic", "bislerp")
CROP_METHODS = ("disabled", "center")
MIN_UPSCALE_SIDE = 64

_PAIR_OUTPUTS = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")]


def _size_inputs(length: int) -> list:
    return [Int("width", default=848, min=16, max=MAX_RESOLUTION, step=16),
            Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16),
            Int("length", default=length, min=1, max=MAX_RESOLUTION, step=4),
            Int("batch_size", default=1, min=1, max=4096)]


def _empty(batch_size: int, length: int, height: int, width: int) -> Any:
    from comfy_core.latent.video import empty_video_latent

    return empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)


def _clip_vision(value: Any, input_name: str = "clip_vision_output") -> Any:
    """A CLIP_VISION_OUTPUT with `last_hidden_state` (what the model's vision input reads)."""
    if value is not None and getattr(value, "last_hidden_state", None) is None:
        raise NodeInputError(input_name, "a CLIP_VISION_OUTPUT (from CLIPVisionEncode)", describe(value))
    return value


def _encode(vae: Any, frames: Any) -> Any:
    """The video VAE's latent of `frames` `[N, H, W, C]`: `[1, 32, T, h, w]`."""
    return wan.encode_video(vae, frames, CHANNELS)


@v3_node("EmptyHunyuanVideo15Latent", display_name="Empty Hunyuan Video 1.5 Latent", category=LATENT_CATEGORY,
         python_module=MODULE, inputs=_size_inputs(25),
         outputs=[Output("LATENT")])
def empty_hunyuan_video15_latent(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict]:
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    return ({"samples": _empty(batch_size, length, height, width), "downscale_ratio_spacial": DOWNSCALE},)


@v3_node("HunyuanVideo15ImageToVideo", category=CONDITIONING_CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 *_size_inputs(33), Socket("start_image", "IMAGE", optional=True),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True)],
         outputs=_PAIR_OUTPUTS)
def hunyuan_video15_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                                   batch_size: int, start_image: Any = None, clip_vision_output: Any = None) -> tuple:
    import torch

    from comfy_core.latent.video import fit_frames, latent_frames

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image = wan.images(start_image, "start_image")
    clip_vision_output = _clip_vision(clip_vision_output)
    latent = _empty(batch_size, length, height, width)
    if start_image is not None:
        start = fit_frames(start_image[:length], width, height)
        encoded = _encode(vae, start)
        concat = torch.zeros_like(latent)
        frames = min(encoded.shape[2], concat.shape[2])
        concat[:, :, :frames] = encoded[:, :, :frames].to(concat)
        mask = torch.ones((1, 1, latent.shape[2], latent.shape[-2], latent.shape[-1]), dtype=start.dtype)
        mask[:, :, :latent_frames(start.shape[0])] = 0.0
        positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}


@v3_node("HunyuanVideo15SuperResolution", display_name="Hunyuan Video 1.5 Super Resolution",
         category=CONDITIONING_CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"),
                 Socket("vae", "VAE", optional=True), Socket("start_image", "IMAGE", optional=True),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True), Socket("latent", "LATENT"),
                 Float("noise_augmentation", default=0.70, min=0.0, max=1.0, step=0.01, advanced=True)],
         outputs=_PAIR_OUTPUTS)
def hunyuan_video15_super_resolution(positive: list, negative: list, latent: dict, noise_augmentation: float,
                                     vae: Any = None, start_image: Any = None, clip_vision_output: Any = None) -> tuple:
    import torch

    from comfy_core.latent.video import fit_frames

    positive, negative = wan.conditionings(positive, negative)
    samples = checks.latent(latent, "latent", ndims=(5,))
    augmentation = checks.number(noise_augmentation, "noise_augmentation", 0.0, 1.0)
    start_image = wan.images(start_image, "start_image")
    clip_vision_output = _clip_vision(clip_vision_output)
    channels = samples.shape[1]
    block = torch.zeros((samples.shape[0], 2 * channels + 2, *samples.shape[2:]))
    block[:, channels + 1:2 * channels + 1] = samples.float()
    block[:, 2 * channels + 1] = 1.0
    if start_image is not None:
        if vae is None:
            raise NodeInputError("vae", "a VAE to encode start_image with", "nothing connected")
        vae = checks.vae(vae)
        start = fit_frames(start_image, samples.shape[-1] * DOWNSCALE, samples.shape[-2] * DOWNSCALE)
        encoded = wan.encode_video(vae, start, channels)
        frames = min(encoded.shape[2], block.shape[2])
        block[:, :channels, :frames] = encoded[:, :, :frames].float()
        block[:, channels, 0] = 1.0
    values = {"concat_latent_image": block, "noise_augmentation": augmentation}
    positive, negative = wan.both(positive, negative, values)
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, latent


def _resize_frames(samples: Any, width: int, height: int, method: str, crop: str) -> Any:
    """ComfyUI's `common_upscale` on a 5-D latent: every frame resized alike."""
    from comfy_core.image.resize import center_crop, upscale_samples
    from comfy_core.models.latent_resize import bislerp

    b, c, t = samples.shape[:3]
    frames = samples.movedim(2, 1).reshape(b * t, c, samples.shape[-2], samples.shape[-1])
    if method == "bislerp":
        out = bislerp(center_crop(frames, width, height) if crop == "center" else frames, width, height)
    else:
        out = upscale_samples(frames, width, height, method, crop)
    return out.reshape(b, t, c, height, width).movedim(1, 2)


def _latent_upscale_model(value: Any) -> Any:
    if not callable(getattr(value, "resample_latent", None)):
        raise NodeInputError("model", "a LATENT_UPSCALE_MODEL (from LatentUpscaleModelLoader)", describe(value))
    return value


@v3_node("HunyuanVideo15LatentUpscaleWithModel", display_name="Hunyuan Video 1.5 Latent Upscale With Model",
         category=LATENT_CATEGORY, python_module=MODULE,
         inputs=[Socket("model", "LATENT_UPSCALE_MODEL"), Socket("samples", "LATENT"),
                 Combo("upscale_method", UPSCALE_METHODS, default="bilinear"),
                 Int("width", default=1280, min=0, max=16384, step=8),
                 Int("height", default=720, min=0, max=16384, step=8),
                 Combo("crop", CROP_METHODS)],
         outputs=[Output("LATENT")])
def hunyuan_video15_latent_upscale_with_model(model: Any, samples: dict, upscale_method: str, width: int,
                                              height: int, crop: str) -> tuple[dict]:
    model = _latent_upscale_model(model)
    latent = checks.latent(samples, "samples", ndims=(5,))
    method = checks.choice(upscale_method, UPSCALE_METHODS, "upscale_method")
    crop = checks.choice(crop, CROP_METHODS, "crop")
    width = checks.integer(width, "width", 0, MAX_RESOLUTION)
    height = checks.integer(height, "height", 0, MAX_RESOLUTION)
    if width == 0 and height == 0:
        return (samples,)
    if width == 0:
        height = max(MIN_UPSCALE_SIDE, height)
        width = max(MIN_UPSCALE_SIDE, round(latent.shape[-1] * height / latent.shape[-2]))
    elif height == 0:
        width = max(MIN_UPSCALE_SIDE, width)
        height = max(MIN_UPSCALE_SIDE, round(latent.shape[-2] * width / latent.shape[-1]))
    else:
        width, height = max(MIN_UPSCALE_SIDE, width), max(MIN_UPSCALE_SIDE, height)
    resized = _resize_frames(latent, width // DOWNSCALE, height // DOWNSCALE, method, crop)
    out = model.resample_latent(resized)
    return ({"samples": out.cpu().float()},)
