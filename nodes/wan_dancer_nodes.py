"""Wan Dancer's nodes, V3 schemas as today's ComfyUI declares them (`comfy_extras/nodes_wandancer.py`);
the music features in comfy_core/families/wan/dancer_audio.py, the network in comfy_core/families/wan/dancer.py.

- WanDancerEncodeAudio: the song's music features `[1, frames, 35]` at 30 frames a second, the video's
  frame rate `30 / round(frames / video_frames)` and `audio_inject_scale` as an AUDIO_ENCODER_OUTPUT
  (`{"audio_feature", "fps", "audio_inject_scale"}`), and the text the template appends to the prompt
  (`fps_string`: ", 帧率是30fps。" at 30 fps, else " 帧率是<fps to 4 places>").
- WanDancerVideo: the empty 16-channel latent (batch 1); with `start_image`, its frames (fitted, then
  black up to `length`) VAE-encoded as `concat_latent_image` and a `concat_mask` `[1, 1, T, h, w]` of
  ones with zeros over the given frames' latent frames, or, from a `mask` (white = keep), `1 - mask`
  resized nearest to the latent (ComfyUI passes the latent's height as the width and its width as the
  height, then views the result as height x width: kept, so the mask values land where ComfyUI's do),
  its first frame repeated 4 times and every 4 frames made the 4 channels of a latent frame
  (`[1, 4, T, h, w]`); with `clip_vision_output`, it and `clip_vision_output_ref` (the reference image's,
  which is dropped without the first); with `audio_encoder_output`: `audio_embed`, `fps`,
  `audio_inject_scale`. Into positive and negative alike.
- WanDancerPadKeyframes: for segment `segment_index` of `segment_length` frames (30 fps), the song's
  length in whole segments (a segment per `segment_length / 30` s after the first 0.2 s) spread evenly
  over the keyframe images: each image at frame `ceil(i * total / images)` of the whole video, the last
  one of a segment at its last frame (the video's last frame for the last segment); the segment's
  keyframes (black elsewhere), a mask of ones at them, and the segment's audio.
- WanDancerPadKeyframesList: the first `num_segments` of those, as lists (one run of a consumer each).
"""
from __future__ import annotations

import math
from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Float, Int, Output, Socket, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes._media_files import media_errors
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_wandancer"
CATEGORY = "model/conditioning/wan/dancer"
CHANNELS = 16
DOWNSCALE = 8
SEGMENT_FPS = 30
AUDIO_TAIL_SECONDS = 0.2  # audio under this after the last whole segment starts no new one


def _audio(audio: Any, name: str = "audio") -> tuple[Any, int]:
    from comfy_core.video.audio_frames import check_audio

    with media_errors(name):
        return check_audio(audio, name)


@v3_node("WanDancerEncodeAudio", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("audio", "AUDIO"),
                 Int("video_frames", default=149, min=1, max=MAX_RESOLUTION, step=4),
                 Float("audio_inject_scale", default=1.0, min=0.0, max=10.0, step=0.01,
                       tooltip="The scale for the audio features when injected into the video model.")],
         outputs=[Output("AUDIO_ENCODER_OUTPUT", "audio_encoder_output"),
                  Output("STRING", "fps_string", tooltip="The calculated fps based on the audio length and the "
                                                         "number of video frames. Used in the prompt.")])
def wan_dancer_encode_audio(audio: Any, video_frames: int, audio_inject_scale: float) -> tuple:
    """See the module docstring (the first clip of the batch)."""
    from comfy_core.families.wan.dancer_audio import DancerAudioError, dancer_fps, fps_prompt, wan_dancer_features

    waveform, rate = _audio(audio)
    video_frames = checks.integer(video_frames, "video_frames", 1, MAX_RESOLUTION)
    scale = checks.number(audio_inject_scale, "audio_inject_scale", 0.0, 10.0)
    try:
        features = wan_dancer_features(waveform[0], rate)
        fps = dancer_fps(features.shape[1], video_frames)
    except DancerAudioError as error:
        raise NodeInputError("audio", "a clip of at least half a video frame per feature frame (30 a second)",
                             str(error)) from error
    return {"audio_feature": features, "fps": fps, "audio_inject_scale": scale}, fps_prompt(fps)


def _keyframe_mask(mask: Any, length: int, latent: Any) -> Any:
    """`[1, 4, T, h, w]` from a keyframe MASK (module docstring)."""
    import torch

    from comfy_core.image.resize import upscale_samples

    mask = checks.mask_batch(mask, "mask", ndims=(3,))[:length]
    if (mask.shape[0] + 3) % 4:
        raise NodeInputError("mask", "a mask of 4k + 1 frames (one per video frame)", describe(mask))
    h, w = latent.shape[-2:]
    keep = upscale_samples(1.0 - mask.unsqueeze(0).float(), h, w, "nearest-exact", "disabled")  # [1, F, w, h]
    keep = torch.cat([keep[:, :1].repeat_interleave(4, dim=1), keep[:, 1:]], dim=1)            # [1, F + 3, ...]
    return keep.reshape(1, keep.shape[1] // 4, 4, h, w).transpose(1, 2).contiguous()


@v3_node("WanDancerVideo", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Int("width", default=480, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=832, min=16, max=MAX_RESOLUTION, step=16),
                 Int("length", default=149, min=1, max=MAX_RESOLUTION, step=4,
                     tooltip="The number of frames in the generated video. Should stay 149 for WanDancer."),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True,
                        tooltip="The CLIP vision embeds for the first frame."),
                 Socket("clip_vision_output_ref", "CLIP_VISION_OUTPUT", optional=True,
                        tooltip="The CLIP vision embeds for the reference image."),
                 Socket("start_image", "IMAGE", optional=True,
                        tooltip="The initial image(s) to be encoded, can be any number of frames."),
                 Socket("mask", "MASK", optional=True,
                        tooltip="Image conditioning mask for the start image(s). White is kept, black is generated. "
                                "Used for the local generations."),
                 Socket("audio_encoder_output", "AUDIO_ENCODER_OUTPUT", optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "latent", tooltip="Empty latent.")])
def wan_dancer_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                     clip_vision_output: Any = None, clip_vision_output_ref: Any = None, start_image: Any = None,
                     mask: Any = None, audio_encoder_output: Any = None) -> tuple:
    """See the module docstring."""
    import torch

    from comfy_core.latent.video import empty_video_latent, fit_frames

    positive, negative = wan.conditionings(positive, negative)
    width, height, length, _ = wan.video_size(width, height, length)
    latent = empty_video_latent(1, CHANNELS, length, height, width, DOWNSCALE)
    start_image = wan.images(start_image, "start_image")
    values: dict[str, Any] = {}
    if start_image is not None:
        vae = checks.vae(vae)
        frames = fit_frames(start_image[:length], width, height)
        image = torch.zeros((length, height, width, frames.shape[-1]), dtype=frames.dtype)
        image[:frames.shape[0]] = frames
        concat = wan.encode_video(vae, image, CHANNELS)
        if mask is None:
            concat_mask = torch.ones((1, 1, latent.shape[2], *concat.shape[-2:]), dtype=frames.dtype)
            concat_mask[:, :, :(frames.shape[0] - 1) // 4 + 1] = 0.0
        else:
            concat_mask = _keyframe_mask(mask, length, concat)
        values.update(concat_latent_image=concat, concat_mask=concat_mask)
    if clip_vision_output is not None:
        values.update(clip_vision_output=wan.clip_vision_states(clip_vision_output, "clip_vision_output"),
                      clip_vision_output_ref=wan.clip_vision_states(clip_vision_output_ref,
                                                                    "clip_vision_output_ref"))
    if audio_encoder_output is not None:
        feature = audio_encoder_output.get("audio_feature") if isinstance(audio_encoder_output, dict) else None
        if not isinstance(feature, torch.Tensor) or feature.ndim != 3 or "fps" not in audio_encoder_output:
            raise NodeInputError("audio_encoder_output", "WanDancerEncodeAudio's output (audio_feature [1, N, 35], "
                                                         "fps)", describe(audio_encoder_output))
        values.update(audio_embed=feature, fps=float(audio_encoder_output["fps"]),
                      audio_inject_scale=float(audio_encoder_output.get("audio_inject_scale", 1.0)))
    if values:
        positive, negative = wan.both(positive, negative, values)
    return positive, negative, {"samples": latent}


def _images_before(segment: int, total: int, length: int, interval: float, segments: int) -> int:
    """How many keyframe images the segments before `segment` place (all but each one's last)."""
    used = 0
    for index in range(segment):
        end = total - length * index - 1 if index == segments - 1 else length - 1
        used += _count_before(end, interval)
    return used


def _count_before(end: int, interval: float) -> int:
    """The images spaced `interval` apart strictly before one interval ahead of frame `end`."""
    count = 0
    while count * interval < end - interval:
        count += 1
    return count


def pad_keyframes(images: Any, segment_length: int, segment_index: int, audio: Any) -> tuple:
    """One segment's (keyframes `[L, H, W, C]`, mask `[L, H, W]`, audio segment) (module docstring)."""
    import torch

    waveform, rate = _audio(audio)
    count, h, w, c = images.shape
    duration = waveform.shape[-1] / rate
    segment_seconds = segment_length / SEGMENT_FPS
    segments = int((duration - AUDIO_TAIL_SECONDS) / segment_seconds) + 1 if duration > AUDIO_TAIL_SECONDS else 0
    total = segments * segment_length
    mask = torch.zeros((segment_length, h, w), dtype=images.dtype, device=images.device)
    keyframes = torch.zeros((segment_length, h, w, c), dtype=images.dtype, device=images.device)
    if total > 0 and count > 0:
        interval = total / count
        segment_count = math.ceil(total / segment_length)
        first = _images_before(segment_index, total, segment_length, interval, segment_count)
        end = total - segment_length * segment_index - 1 if segment_index == segment_count - 1 else segment_length - 1
        places = [(int(math.ceil(interval * i)), first + i) for i in range(_count_before(end, interval))]
        places.append((end, first + len(places)))
        places = [(frame, image) for frame, image in places if image < count and 0 <= frame < segment_length]
        if places:
            frames = torch.tensor([p[0] for p in places], dtype=torch.long, device=images.device)
            chosen = torch.tensor([p[1] for p in places], dtype=torch.long, device=images.device)
            mask[frames] = 1
            keyframes[frames] = images[chosen]
    start_time = segment_index * segment_seconds
    end_time = min(start_time + segment_seconds, duration)
    piece = waveform[:, :, int(start_time * rate):int(end_time * rate)]
    return keyframes, mask, {"waveform": piece, "sample_rate": rate}


_PAD_OUTPUTS = ("keyframes_sequence", "keyframes_mask", "audio_segment")
_PAD_TOOLTIPS = ("Padded keyframe sequence", "Mask indicating valid frames", "Audio segment for this video segment")


@v3_node("WanDancerPadKeyframes", category="image/video", python_module=MODULE,
         inputs=[Socket("images", "IMAGE"),
                 Int("segment_length", default=149, min=1, max=10000,
                     tooltip="Length of this segment (usually 149 frames)"),
                 Int("segment_index", default=0, min=0, max=100,
                     tooltip="Which segment this is (0 for first, 1 for second, etc.)"),
                 Socket("audio", "AUDIO", tooltip="Audio to calculate total output frames from and extract segment "
                                                  "audio.")],
         outputs=[Output(t, n, tooltip=tip) for t, n, tip in zip(("IMAGE", "MASK", "AUDIO"), _PAD_OUTPUTS,
                                                                  _PAD_TOOLTIPS)])
def wan_dancer_pad_keyframes(images: Any, segment_length: int, segment_index: int, audio: Any) -> tuple:
    images = checks.image_batch(images, "images")
    return pad_keyframes(images, checks.integer(segment_length, "segment_length", 1, 10000),
                         checks.integer(segment_index, "segment_index", 0, 100), audio)


_LIST_TOOLTIPS = ("Padded keyframe sequences", "Masks indicating valid frames", "Audio segment for each video segment")


@v3_node("WanDancerPadKeyframesList", category="image/video", python_module=MODULE,
         inputs=[Socket("images", "IMAGE"),
                 Int("segment_length", default=149, min=1, max=10000,
                     tooltip="Length of each segment (usually 149 frames)"),
                 Int("num_segments", default=1, min=1, max=100, tooltip="How many padded segments to emit as lists."),
                 Socket("audio", "AUDIO", tooltip="Audio to slice for each emitted segment.")],
         outputs=[Output(t, n, tooltip=tip, is_list=True)
                  for t, n, tip in zip(("IMAGE", "MASK", "AUDIO"), _PAD_OUTPUTS, _LIST_TOOLTIPS)])
def wan_dancer_pad_keyframes_list(images: Any, segment_length: int, num_segments: int, audio: Any) -> tuple:
    images = checks.image_batch(images, "images")
    segment_length = checks.integer(segment_length, "segment_length", 1, 10000)
    num_segments = checks.integer(num_segments, "num_segments", 1, 100)
    parts = [pad_keyframes(images, segment_length, i, audio) for i in range(num_segments)]
    return tuple(list(column) for column in zip(*parts))
