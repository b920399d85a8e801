"""Wan's audio-driven conditioning nodes, V3 schemas as today's ComfyUI declares them
(`comfy_extras/nodes_wan.py`); the maths in comfy_core/families/wan/s2v_audio.py.

- WanSoundImageToVideo (Wan 2.2 S2V): the empty 16-channel video latent; into positive and
  negative: `audio_embed` (the audio encoder's hidden states on the video clock, one clip of
  `4 * latent_frames` frames; zeros for the negative), the reference image's latent appended to
  `reference_latents`, the motion frames' latent (`reference_motion`: the last 73 frames, grey
  in front when fewer, encoded; its last 19 latent frames) and `control_video` (the control
  frames' latent, the latent of nothing after them and when there is none).
- WanSoundImageToVideoExtend: the next clip after `video_latent`: its size, its latent as the
  motion reference, the audio from where that latent's frames end.
- WanHuMoImageToVideo (Wan HuMo): the empty latent; the reference image's latent, Whisper's
  layer-grouped audio features in 8-frame windows per latent frame (`audio_embed`).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Int, Output, Socket, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_wan"
SOUND_CATEGORY = "model/conditioning/wan/sound"
CHANNELS = 16
DOWNSCALE = 8
MOTION_FRAMES = 73          # pixel frames of the motion reference (19 latent frames)
MOTION_LATENT_FRAMES = 19

_PAIR = [Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE")]
_OUTPUTS = [Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent")]


def _length() -> Any:
    return Int("length", default=77, min=1, max=MAX_RESOLUTION, step=4)


def _audio_states(value: Any, input_name: str = "audio_encoder_output") -> Any:
    """The hidden states of an AUDIO_ENCODER_OUTPUT (AudioEncoderEncode's dict)."""
    import torch

    if value is None:
        return None
    states = value.get("encoded_audio_all_layers") if isinstance(value, dict) else None
    if (not isinstance(states, (tuple, list)) or not states
            or not all(isinstance(s, torch.Tensor) and s.ndim == 3 for s in states)):
        raise NodeInputError(input_name, "an AUDIO_ENCODER_OUTPUT (from AudioEncoderEncode) with "
                                         "encoded_audio_all_layers", describe(value))
    return states


def _sound_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                    batch_size: int, frame_offset: int = 0, ref_image: Any = None, audio_states: Any = None,
                    control_video: Any = None, ref_motion: Any = None, ref_motion_latent: Any = None) -> tuple:
    """ComfyUI's `wan_sound_to_video` (see the module docstring)."""
    import torch

    from comfy_core.families.wan.s2v_audio import s2v_audio_embed
    from comfy_core.latent.video import empty_video_latent, fit_frames, grey_video
    from nodes.wan_nodes import _format

    latent = empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)
    latent_t = latent.shape[2]
    if audio_states is not None:
        embed, frame_offset = s2v_audio_embed(audio_states, latent_t, frame_offset)
        if embed is not None:
            positive = wan.set_values(positive, {"audio_embed": embed})
            negative = wan.set_values(negative, {"audio_embed": embed * 0.0})
    if ref_image is not None:
        reference = wan.encode_video(vae, fit_frames(ref_image[:1], width, height), CHANNELS)
        positive, negative = wan.both(positive, negative, {"reference_latents": [reference]}, append=True)
    if ref_motion is not None:
        motion = fit_frames(ref_motion[-MOTION_FRAMES:], width, height)[..., :3]
        if motion.shape[0] < MOTION_FRAMES:
            padded = grey_video(MOTION_FRAMES, height, width, dtype=motion.dtype)
            padded[-motion.shape[0]:] = motion
            motion = padded
        ref_motion_latent = wan.encode_video(vae, motion, CHANNELS)
    if ref_motion_latent is not None:
        positive, negative = wan.both(positive, negative,
                                      {"reference_motion": ref_motion_latent[:, :, -MOTION_LATENT_FRAMES:]})
    control = _format(CHANNELS).process_out(torch.zeros_like(latent))
    if control_video is not None:
        encoded = wan.encode_video(vae, fit_frames(control_video[:length], width, height), CHANNELS)
        control[:, :, :encoded.shape[2]] = encoded[:, :, :latent_t].to(control.dtype)
    positive, negative = wan.both(positive, negative, {"control_video": control})
    return positive, negative, {"samples": latent}


@v3_node("WanSoundImageToVideo", category=SOUND_CATEGORY, python_module=MODULE,
         inputs=[*_PAIR, Int("width", default=832, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16), _length(),
                 Int("batch_size", default=1, min=1, max=4096),
                 Socket("audio_encoder_output", "AUDIO_ENCODER_OUTPUT", optional=True),
                 Socket("ref_image", "IMAGE", optional=True), Socket("control_video", "IMAGE", optional=True),
                 Socket("ref_motion", "IMAGE", optional=True)],
         outputs=_OUTPUTS)
def wan_sound_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                             batch_size: int, audio_encoder_output: Any = None, ref_image: Any = None,
                             control_video: Any = None, ref_motion: Any = None) -> tuple:
    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    return _sound_to_video(positive, negative, vae, width, height, length, batch_size,
                           ref_image=wan.images(ref_image, "ref_image"),
                           audio_states=_audio_states(audio_encoder_output),
                           control_video=wan.images(control_video, "control_video"),
                           ref_motion=wan.images(ref_motion, "ref_motion"))


@v3_node("WanSoundImageToVideoExtend", category=SOUND_CATEGORY, python_module=MODULE,
         inputs=[*_PAIR, _length(), Socket("video_latent", "LATENT"),
                 Socket("audio_encoder_output", "AUDIO_ENCODER_OUTPUT", optional=True),
                 Socket("ref_image", "IMAGE", optional=True), Socket("control_video", "IMAGE", optional=True)],
         outputs=_OUTPUTS)
def wan_sound_image_to_video_extend(positive: list, negative: list, vae: Any, length: int, video_latent: dict,
                                    audio_encoder_output: Any = None, ref_image: Any = None,
                                    control_video: Any = None) -> tuple:
    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    samples = checks.latent(video_latent, "video_latent", ndims=(5,))
    if samples.shape[1] != CHANNELS:
        raise NodeInputError("video_latent", f"a Wan 2.1 video latent [B, {CHANNELS}, T, h, w]", describe(samples))
    width, height = samples.shape[-1] * DOWNSCALE, samples.shape[-2] * DOWNSCALE
    length = wan.frame_count(length)
    return _sound_to_video(positive, negative, vae, width, height, length, samples.shape[0],
                           frame_offset=samples.shape[-3] * 4, ref_image=wan.images(ref_image, "ref_image"),
                           audio_states=_audio_states(audio_encoder_output),
                           control_video=wan.images(control_video, "control_video"), ref_motion_latent=samples)


@v3_node("WanHuMoImageToVideo", category="model/conditioning/wan/humo", python_module=MODULE,
         inputs=[*_PAIR, Int("width", default=832, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16),
                 Int("length", default=97, min=1, max=MAX_RESOLUTION, step=4),
                 Int("batch_size", default=1, min=1, max=4096),
                 Socket("audio_encoder_output", "AUDIO_ENCODER_OUTPUT", optional=True),
                 Socket("ref_image", "IMAGE", optional=True)],
         outputs=_OUTPUTS, experimental=True)
def wan_humo_image_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                            batch_size: int, audio_encoder_output: Any = None, ref_image: Any = None) -> tuple:
    """Wan HuMo: the empty 16-channel video latent; the reference image's latent appended to
    positive's `reference_latents` (zeros in negative's; zeros in both without an image);
    `audio_embed` `[1, latent_frames, 8, 5, C]` from Whisper large-v3's 33 hidden states
    (comfy_core/families/wan/humo.py; zeros in negative), zeros `[B, latent_frames + 1, 8, 5, 1280]`
    in both without audio (ComfyUI's WanHuMoImageToVideo)."""
    import torch

    from comfy_core.families.wan.humo import WHISPER_WIDTH, humo_audio_features, humo_audio_windows
    from comfy_core.latent.video import empty_video_latent, fit_frames

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    ref_image = wan.images(ref_image, "ref_image")
    states = _audio_states(audio_encoder_output)
    latent = empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)
    latent_t = latent.shape[2]
    if ref_image is not None:
        reference = wan.encode_video(vae, fit_frames(ref_image[:1], width, height), CHANNELS)
        positive = wan.set_values(positive, {"reference_latents": [reference]}, append=True)
        negative = wan.set_values(negative, {"reference_latents": [torch.zeros_like(reference)]}, append=True)
    else:
        zero = torch.zeros([batch_size, CHANNELS, 1, height // DOWNSCALE, width // DOWNSCALE])
        positive, negative = wan.both(positive, negative, {"reference_latents": [zero]}, append=True)
    if states is not None:
        samples = audio_encoder_output.get("audio_samples")
        if not isinstance(samples, int) or isinstance(samples, bool):
            raise NodeInputError("audio_encoder_output", "an AUDIO_ENCODER_OUTPUT with audio_samples (an int)",
                                 describe(samples))
        try:
            features = humo_audio_features(states, samples)
        except ValueError as error:
            raise NodeInputError("audio_encoder_output", "Whisper large-v3's hidden states (33)",
                                 f"{len(states)} hidden states") from error
        embed = humo_audio_windows(features, length).unsqueeze(0)
        positive = wan.set_values(positive, {"audio_embed": embed})
        negative = wan.set_values(negative, {"audio_embed": torch.zeros_like(embed)})
    else:
        zero_audio = torch.zeros([batch_size, latent_t + 1, 8, 5, WHISPER_WIDTH])
        positive, negative = wan.both(positive, negative, {"audio_embed": zero_audio})
    return positive, negative, {"samples": latent}
