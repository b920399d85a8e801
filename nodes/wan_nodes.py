"""Wan's video conditioning nodes with ComfyUI 0.3.64's names, sockets and semantics
(comfy_extras/nodes_wan.py): each makes the empty video latent to sample and writes what the
Wan model concatenates or reads into copies of the positive and negative conditioning, under
ComfyUI's keys (comfy/model_base.py WAN21 / WAN22 / WAN21_Vace / WAN21_Camera):

- WanImageToVideo: `concat_latent_image` = the VAE latent of the start frames followed by grey
  (0.5) frames, `concat_mask` `[1, 1, T, h, w]` zero over the latent frames the start frames
  cover; `clip_vision_output` for the image embedding.
- WanFirstLastFrameToVideo / WanFunInpaintToVideo: start and/or end frames, grey between,
  `concat_mask` `[1, 4, T, h, w]` (four pixel-frame slots per latent frame); two CLIP vision
  outputs are joined along the tokens.
- WanFunControlToVideo / Wan22FunControlToVideo: a two-part `concat_latent_image`, the control
  video's latent then the start image's, empty parts the latent of nothing (the format's mean);
  the 2.2 node adds an all-ones `concat_mask` at `concat_mask_index` and a reference image as
  `reference_latents`.
- WanCameraImageToVideo: as WanImageToVideo with the camera embedding (`camera_conditions`).
- WanVaceToVideo: the control video split by the mask into inactive and reactive latents
  (`vace_frames`), the mask folded to `[1, 64, T, h, w]` (`vace_mask`), `vace_strength`, each
  appended so chained nodes stack; a reference image is prepended in time, and `trim_latent`
  says how many latent frames to cut afterwards (TrimVideoLatent).
- WanPhantomSubjectToVideo: subject images' latents appended in time (`time_dim_concat`), with a
  second negative holding the latent of nothing instead.
- WanTrackToVideo (Wan ATI): the start latent's features dragged along point tracks.
- Wan22ImageToVideoLatent: Wan 2.2 TI2V's latent, the start frames' latent in place and a
  `noise_mask` keeping them.

Images are resized as ComfyUI does (centre crop, bilinear) and encoded with `vae.encode`, which
a Wan VAE returns as `[1, C, T, h, w]`. Frame counts must be `4k + 1` (nodes/wan_conditioning.py).
"""
from __future__ import annotations

from typing import Any

from graph.native import Float, Input, Int, Output, String, node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_wan"
CATEGORY = "conditioning/video_models"
WAN21_CHANNELS = 16
WAN22_CHANNELS = 48
WAN21_DOWNSCALE = 8
WAN22_DOWNSCALE = 16

_PAIR = [Input("positive", "CONDITIONING"), Input("negative", "CONDITIONING"), Input("vae", "VAE")]
_OUTPUTS = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")]


def _format(channels: int) -> Any:
    """The latent format whose `process_out(0)` is the latent of nothing: Wan 2.2's for 48 channels."""
    from comfy_core.families.wan.latent_format import wan21_latent_format, wan22_latent_format

    return wan22_latent_format() if channels == WAN22_CHANNELS else wan21_latent_format()


def _empty(batch_size: int, channels: int, length: int, height: int, width: int, downscale: int):
    from comfy_core.latent.video import empty_video_latent

    return empty_video_latent(batch_size, channels, length, height, width, downscale)


def _fit(frames, width: int, height: int):
    from comfy_core.latent.video import fit_frames

    return fit_frames(frames, width, height)


@node("WanImageToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
              Input("start_image", "IMAGE", optional=True)],
      outputs=_OUTPUTS)
def wan_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                       batch_size: int, clip_vision_output: Any = None, start_image: Any = None) -> tuple:
    """Wan 2.1 i2v: the start frames' latent (grey after them) and mask, the CLIP vision output."""
    import torch

    from comfy_core.latent.video import grey_video, latent_frames

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image = wan.images(start_image, "start_image")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    latent = _empty(batch_size, WAN21_CHANNELS, length, height, width, WAN21_DOWNSCALE)
    if start_image is not None:
        start = _fit(start_image[:length], width, height)
        video = grey_video(length, height, width, start.shape[-1], dtype=start.dtype, device=start.device)
        video[:start.shape[0]] = start
        concat = wan.encode_video(vae, video)
        mask = torch.ones((1, 1, latent.shape[2], concat.shape[-2], concat.shape[-1]), dtype=start.dtype)
        mask[:, :, :latent_frames(start.shape[0])] = 0.0
        positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}


def _first_last(positive: list, negative: list, vae: Any, width: int, height: int, length: int, batch_size: int,
                start_image: Any, end_image: Any, clip_vision_start: Any, clip_vision_end: Any) -> tuple:
    """WanFirstLastFrameToVideo's work (WanFunInpaintToVideo is the same with one CLIP vision input)."""
    import torch

    from comfy_core.clip_vision.output import ClipVisionOutput
    from comfy_core.latent.video import grey_video, known_frames_mask

    positive, negative = wan.conditionings(positive, negative)
    vae = wan.video_vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image, end_image = wan.images(start_image, "start_image"), wan.images(end_image, "end_image")
    scale = vae.spacial_compression_encode()
    latent = _empty(batch_size, vae.latent_channels, length, height, width, scale)
    video = grey_video(length, height, width)
    first = last = 0
    if start_image is not None:
        start = _fit(start_image[:length], width, height)[..., :3]
        video[:start.shape[0]] = start
        first = start.shape[0]
    if end_image is not None:
        end = _fit(end_image[-length:], width, height)[..., :3]
        video[-end.shape[0]:] = end
        last = end.shape[0]
    concat = wan.encode_video(vae, video)
    mask = known_frames_mask(latent.shape[2], latent.shape[-2], latent.shape[-1], first=first, last=last)
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    clip_vision_output = clip_vision_start
    if clip_vision_end is not None:
        if clip_vision_output is not None:
            # Both frames' image tokens, one after the other, for the model's image cross-attention.
            clip_vision_output = ClipVisionOutput()
            clip_vision_output.penultimate_hidden_states = torch.cat(
                [clip_vision_start.penultimate_hidden_states, clip_vision_end.penultimate_hidden_states], dim=-2)
        else:
            clip_vision_output = clip_vision_end
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}


@node("WanFirstLastFrameToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("clip_vision_start_image", "CLIP_VISION_OUTPUT", optional=True),
              Input("clip_vision_end_image", "CLIP_VISION_OUTPUT", optional=True),
              Input("start_image", "IMAGE", optional=True),
              Input("end_image", "IMAGE", optional=True)],
      outputs=_OUTPUTS)
def wan_first_last_frame_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                                  batch_size: int, clip_vision_start_image: Any = None,
                                  clip_vision_end_image: Any = None, start_image: Any = None,
                                  end_image: Any = None) -> tuple:
    """Wan FLF2V: first and/or last frames given, the model fills in between."""
    return _first_last(positive, negative, vae, width, height, length, batch_size, start_image, end_image,
                       wan.clip_vision_states(clip_vision_start_image, "clip_vision_start_image"),
                       wan.clip_vision_states(clip_vision_end_image, "clip_vision_end_image"))


@node("WanFunInpaintToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
              Input("start_image", "IMAGE", optional=True),
              Input("end_image", "IMAGE", optional=True)],
      outputs=_OUTPUTS)
def wan_fun_inpaint_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                             batch_size: int, clip_vision_output: Any = None, start_image: Any = None,
                             end_image: Any = None) -> tuple:
    """Wan Fun InP: WanFirstLastFrameToVideo with one CLIP vision output (the start image's)."""
    return _first_last(positive, negative, vae, width, height, length, batch_size, start_image, end_image,
                       wan.clip_vision_states(clip_vision_output, "clip_vision_output"), None)


@node("WanFunControlToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
              Input("start_image", "IMAGE", optional=True),
              Input("control_video", "IMAGE", optional=True)],
      outputs=_OUTPUTS)
def wan_fun_control_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                             batch_size: int, clip_vision_output: Any = None, start_image: Any = None,
                             control_video: Any = None) -> tuple:
    """Wan 2.1 Fun Control: `concat_latent_image` [B, 32, T, h, w], control latent then start latent."""
    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image, control_video = wan.images(start_image, "start_image"), wan.images(control_video, "control_video")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    c = WAN21_CHANNELS
    latent = _empty(batch_size, c, length, height, width, WAN21_DOWNSCALE)
    concat = _format(c).process_out(_empty(batch_size, c, length, height, width, WAN21_DOWNSCALE)).repeat(1, 2, 1, 1, 1)
    frames = concat.shape[2]
    if start_image is not None:
        encoded = wan.encode_video(vae, _fit(start_image[:length], width, height), c)
        concat[:, c:, :encoded.shape[2]] = encoded[:, :, :frames]
    if control_video is not None:
        encoded = wan.encode_video(vae, _fit(control_video[:length], width, height), c)
        concat[:, :c, :encoded.shape[2]] = encoded[:, :, :frames]
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}


@node("Wan22FunControlToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("ref_image", "IMAGE", optional=True),
              Input("control_video", "IMAGE", optional=True)],
      outputs=_OUTPUTS)
def wan22_fun_control_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                               batch_size: int, ref_image: Any = None, control_video: Any = None,
                               start_image: Any = None) -> tuple:
    """Wan 2.2 Fun Control (either VAE): control latent and an empty start part, an all-ones
    `concat_mask` placed after the first `latent_channels` channels, the reference image's latent.

    `start_image` is an argument of today's ComfyUI's `execute` (comfy_extras/nodes_wan.py@ee54641d,
    not a socket of its schema; packs pass it): its frames (at most `length`, fitted as the control
    video) encoded into the start part, and the mask's first `frames + 3` pixel-frame slots zero."""
    import torch

    from comfy_core.latent.video import frames_to_mask_slots

    positive, negative = wan.conditionings(positive, negative)
    vae = wan.video_vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    ref_image, control_video = wan.images(ref_image, "ref_image"), wan.images(control_video, "control_video")
    start_image = wan.images(start_image, "start_image")
    scale, c = vae.spacial_compression_encode(), int(vae.latent_channels)
    latent = _empty(batch_size, c, length, height, width, scale)
    concat = _format(c).process_out(_empty(batch_size, c, length, height, width, scale)).repeat(1, 2, 1, 1, 1)
    frames = concat.shape[2]
    # ComfyUI's schema has no start image socket: without `start_image` no frame is marked known.
    slots = torch.ones((1, 1, frames * 4, latent.shape[-2], latent.shape[-1]))
    if start_image is not None:
        start = _fit(start_image[:length], width, height)
        encoded = wan.encode_video(vae, start, c)
        concat[:, c:, :encoded.shape[2]] = encoded[:, :, :frames]
        slots[:, :, :start.shape[0] + 3] = 0.0
    mask = frames_to_mask_slots(slots)
    reference = None
    if ref_image is not None:
        reference = wan.encode_video(vae, _fit(ref_image[:1], width, height), c)
    if control_video is not None:
        encoded = wan.encode_video(vae, _fit(control_video[:length], width, height), c)
        concat[:, :c, :encoded.shape[2]] = encoded[:, :, :frames]
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask,
                                                       "concat_mask_index": c})
    if reference is not None:
        positive, negative = wan.both(positive, negative, {"reference_latents": [reference]}, append=True)
    return positive, negative, {"samples": latent}


@node("WanCameraImageToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
              Input("start_image", "IMAGE", optional=True),
              Input("camera_conditions", "WAN_CAMERA_EMBEDDING", optional=True)],
      outputs=_OUTPUTS)
def wan_camera_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                              batch_size: int, clip_vision_output: Any = None, start_image: Any = None,
                              camera_conditions: Any = None) -> tuple:
    """Wan Fun Camera: the start frames' latent in an empty latent, its mask, the camera embedding."""
    import torch

    from comfy_core.latent.video import known_frames_mask

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image = wan.images(start_image, "start_image")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    if camera_conditions is not None and not (isinstance(camera_conditions, torch.Tensor)
                                              and camera_conditions.ndim == 5):
        raise NodeInputError("camera_conditions", "a WAN_CAMERA_EMBEDDING [1, 24, T, H, W]",
                             describe(camera_conditions))
    c = WAN21_CHANNELS
    latent = _empty(batch_size, c, length, height, width, WAN21_DOWNSCALE)
    if start_image is not None:
        concat = _format(c).process_out(_empty(batch_size, c, length, height, width, WAN21_DOWNSCALE))
        start = _fit(start_image[:length], width, height)
        encoded = wan.encode_video(vae, start, c)
        concat[:, :, :encoded.shape[2]] = encoded[:, :, :concat.shape[2]]
        mask = known_frames_mask(latent.shape[2], latent.shape[-2], latent.shape[-1], first=start.shape[0])
        positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if camera_conditions is not None:
        positive, negative = wan.both(positive, negative, {"camera_conditions": camera_conditions})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}


@node("WanVaceToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(),
              Float("strength", default=1.0, min=0.0, max=1000.0, step=0.01),
              Input("control_video", "IMAGE", optional=True),
              Input("control_masks", "MASK", optional=True),
              Input("reference_image", "IMAGE", optional=True)],
      outputs=[*_OUTPUTS, Output("INT", "trim_latent")])
def wan_vace_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                      batch_size: int, strength: float, control_video: Any = None, control_masks: Any = None,
                      reference_image: Any = None) -> tuple:
    """Wan VACE: `vace_frames` [1, 32, T(+1), h, w], `vace_mask` [1, 64, T(+1), h, w],
    `vace_strength`, appended; `trim_latent` = the reference's latent frames (0 without one)."""
    import torch
    import torch.nn.functional as F

    from comfy_core.latent.video import grey_video, latent_frames, vace_mask_latent

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    if width % 8 or height % 8:
        raise NodeInputError("width" if width % 8 else "height", "a multiple of 8 (VACE folds its mask in "
                                                                 "8 x 8 patches)", repr(width if width % 8 else height))
    strength = checks.number(strength, "strength")
    control_video = wan.images(control_video, "control_video")
    reference_image = wan.images(reference_image, "reference_image")
    if control_masks is not None:
        control_masks = checks.mask_batch(control_masks, "control_masks", ndims=(3, 2, 4))
    c = WAN21_CHANNELS
    latent_length = latent_frames(length)
    if control_video is not None:
        video = _fit(control_video[:length], width, height)[..., :3]
        if video.shape[0] < length:  # missing frames are grey: nothing to follow there
            video = F.pad(video, (0, 0, 0, 0, 0, 0, 0, length - video.shape[0]), value=0.5)
    else:
        video = grey_video(length, height, width)
    reference = None
    if reference_image is not None:
        encoded = wan.encode_video(vae, _fit(reference_image[:1], width, height), c)
        reference = torch.cat([encoded, _format(c).process_out(torch.zeros_like(encoded))], dim=1)
    if control_masks is None:
        mask = torch.ones((length, height, width, 1))
    else:
        mask = _fit(control_masks[:length].unsqueeze(-1), width, height)  # [N, H, W, 1]
        if mask.shape[0] < length:  # missing frames are wholly to be generated
            mask = F.pad(mask, (0, 0, 0, 0, 0, 0, 0, length - mask.shape[0]), value=1.0)
    centred = video - 0.5
    inactive = wan.encode_video(vae, centred * (1 - mask) + 0.5, c)  # what to keep
    reactive = wan.encode_video(vae, centred * mask + 0.5, c)  # what to regenerate
    frames = torch.cat((inactive, reactive), dim=1)
    mask = vace_mask_latent(mask, latent_length)
    trim_latent = 0
    if reference is not None:
        frames = torch.cat((reference, frames), dim=2)
        trim_latent = reference.shape[2]
        mask = torch.cat((torch.zeros_like(mask[:, :trim_latent]), mask), dim=1)
        latent_length += trim_latent
    positive, negative = wan.both(positive, negative, {"vace_frames": [frames], "vace_mask": [mask.unsqueeze(0)],
                                                       "vace_strength": [strength]}, append=True)
    latent = torch.zeros([batch_size, c, latent_length, height // WAN21_DOWNSCALE, width // WAN21_DOWNSCALE])
    return positive, negative, {"samples": latent}, trim_latent


@node("WanPhantomSubjectToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, *wan.size_inputs(), Input("images", "IMAGE", optional=True)],
      outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative_text"),
               Output("CONDITIONING", "negative_img_text"), Output("LATENT", "latent")])
def wan_phantom_subject_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                                 batch_size: int, images: Any = None) -> tuple:
    """Wan Phantom: subject images, each encoded on its own, appended in time (`time_dim_concat`)
    to the positive and to one negative ("negative_text"); the other negative
    ("negative_img_text") gets the latent of nothing in their place, so CFG can push from both."""
    import torch

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    images = wan.images(images, "images")
    c = WAN21_CHANNELS
    latent = _empty(batch_size, c, length, height, width, WAN21_DOWNSCALE)
    negative_text = negative
    if images is not None:
        subjects = _fit(images[:length], width, height)
        concat = torch.cat([wan.encode_video(vae, image[None], c) for image in subjects], dim=2)  # [1, 16, N, h, w]
        positive = wan.set_values(positive, {"time_dim_concat": concat})
        negative_text = wan.set_values(negative, {"time_dim_concat": concat})
        negative = wan.set_values(negative, {"time_dim_concat": _format(c).process_out(torch.zeros_like(concat))})
    return positive, negative_text, negative, {"samples": latent}


@node("Wan22ImageToVideoLatent", display_name=None, category="conditioning/inpaint", python_module=MODULE,
      inputs=[Input("vae", "VAE"), *wan.size_inputs(1280, 704, 49, side_min=32, side_step=32),
              Input("start_image", "IMAGE", optional=True)],
      outputs=[Output("LATENT")])
def wan22_image_to_video_latent(vae: Any, width: int, height: int, length: int, batch_size: int,
                                start_image: Any = None) -> tuple[dict]:
    """Wan 2.2 TI2V-5B: the start frames' latent in place, the rest the latent of nothing, and a
    `noise_mask` [B, 1, T, h, w] that is 0 over the start frames (kept) and 1 elsewhere."""
    import torch

    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size, side_min=32)
    start_image = wan.images(start_image, "start_image")
    c = WAN22_CHANNELS
    latent = _empty(1, c, length, height, width, WAN22_DOWNSCALE)
    if start_image is None:
        # As ComfyUI: one latent whatever batch_size says (the sampler's noise has this shape).
        return ({"samples": latent},)
    mask = torch.ones([1, 1, latent.shape[2], latent.shape[-2], latent.shape[-1]])
    encoded = wan.encode_video(vae, _fit(start_image[:length], width, height), c)
    latent[:, :, :encoded.shape[2]] = encoded[:, :, :latent.shape[2]]
    mask[:, :, :encoded.shape[2]] = 0.0
    latent = _format(c).process_out(latent) * mask + latent * (1.0 - mask)
    return ({"samples": latent.repeat(batch_size, 1, 1, 1, 1), "noise_mask": mask.repeat(batch_size, 1, 1, 1, 1)},)


@node("TrimVideoLatent", display_name=None, category="latent/video", python_module=MODULE,
      inputs=[Input("samples", "LATENT"), Int("trim_amount", default=0, min=0, max=99999)],
      outputs=[Output("LATENT")])
def trim_video_latent(samples: dict, trim_amount: int) -> tuple[dict]:
    """The latent without its first `trim_amount` frames (VACE's reference frames); other keys kept."""
    video = checks.latent(samples, "samples", ndims=(5,))
    trim_amount = checks.integer(trim_amount, "trim_amount", 0, 99999)
    if trim_amount >= video.shape[2]:
        raise NodeInputError("trim_amount", f"fewer than the latent's {video.shape[2]} frames", repr(trim_amount))
    out = dict(samples)
    out["samples"] = video[:, :, trim_amount:]
    return (out,)


@node("WanTrackToVideo", display_name=None, category=CATEGORY, python_module=MODULE,
      inputs=[*_PAIR, String("tracks", default="[]", multiline=True), *wan.size_inputs(),
              Float("temperature", default=220.0, min=1.0, max=1000.0, step=0.1),
              Int("topk", default=2, min=1, max=10),
              Input("start_image", "IMAGE"),
              Input("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True)],
      outputs=_OUTPUTS)
def wan_track_to_video(positive: list, negative: list, vae: Any, tracks: str, width: int, height: int, length: int,
                       batch_size: int, temperature: float, topk: int, start_image: Any,
                       clip_vision_output: Any = None) -> tuple:
    """Wan ATI: the start image's latent features moved along point tracks
    (comfy_core/latent/motion_tracks.py) as `concat_latent_image`, `concat_mask` = 1 - the track
    weights; with no tracks ("[]") it is WanImageToVideo."""
    import torch

    from comfy_core.latent.motion_tracks import TrackFormatError, parse_tracks, resample_tracks, splat_tracks, \
        track_array
    from comfy_core.latent.video import grey_video
    from comfy_core.models.concat_inputs import resize_to_batch_size

    try:
        batches = parse_tracks(checks.text(tracks, "tracks"))
    except TrackFormatError as exc:
        raise NodeInputError("tracks", 'a JSON list of tracks of {"x": ..., "y": ...} points', str(exc)) from None
    if not batches:
        return wan_image_to_video(positive, negative, vae, width, height, length, batch_size,
                                  clip_vision_output=clip_vision_output, start_image=start_image)
    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    start_image = checks.image_batch(start_image, "start_image")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    temperature = checks.number(temperature, "temperature", 1.0)
    topk = checks.integer(topk, "topk", 1)
    try:
        rows = [resample_tracks(torch.stack([track_array(t) for t in batch]), width, height, length)
                for batch in batches]
    except ValueError as exc:
        raise NodeInputError("length", "a frame count the tracks can be resampled to", str(exc)) from None
    c = WAN21_CHANNELS
    latent = _empty(batch_size, c, length, height, width, WAN21_DOWNSCALE)
    starts = _fit(start_image[:batch_size], width, height)
    videos = grey_video(length, height, width, starts.shape[-1], dtype=starts.dtype).repeat(starts.shape[0], 1, 1, 1, 1)
    videos[:, 0] = starts  # [S, length, H, W, C]: each start image, then grey
    videos = resize_to_batch_size(videos, batch_size)
    fmt = _format(c)
    # The tracks move features in model space (the splat is not linear in the raw latent).
    encoded = fmt.process_in(torch.cat([wan.encode_video(vae, v, c) for v in videos]))  # [B, 16, T, h, w]
    pick = resize_to_batch_size(torch.arange(len(rows)), batch_size).tolist()
    masks, features = zip(*(splat_tracks(rows[i], encoded[b], temperature, topk) for b, i in enumerate(pick)))
    concat = fmt.process_out(torch.stack(features))
    mask = 1.0 - torch.stack(masks)  # [B, 4, T, h, w]: 0 where the tracks (and the start frame) decide
    positive, negative = wan.both(positive, negative, {"concat_mask": mask, "concat_latent_image": concat})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}
