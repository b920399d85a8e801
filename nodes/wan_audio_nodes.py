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
- WanInfiniteTalkToVideo (Wan 2.1 I2V + the MultiTalk / InfiniteTalk patch of ModelPatchLoader):
  the start image's I2V conditioning and a clone of the MODEL with the projected audio of one or
  two speakers and the patch's audio cross-attention (comfy_core/model_patches/multitalk.py).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import ComboOption, DynamicCombo, Float, Int, Output, Socket, v3_node
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


# -- InfiniteTalk (Wan 2.1 I2V with the MultiTalk audio patch) ----------------------------------------

INFINITE_TALK_MODE = DynamicCombo("mode", options=(
    ComboOption("single_speaker"),
    ComboOption("two_speakers", (
        Socket("audio_encoder_output_2", "AUDIO_ENCODER_OUTPUT", optional=True),
        Socket("mask_1", "MASK", optional=True, tooltip="Mask for the first speaker, required if using two audio "
                                                         "inputs."),
        Socket("mask_2", "MASK", optional=True, tooltip="Mask for the second speaker, required if using two audio "
                                                         "inputs."))),
))


def _multitalk_patch(model_patch: Any) -> Any:
    from comfy_core.families.wan.multitalk import MultiTalkPatchNetwork

    if not isinstance(getattr(model_patch, "model", None), MultiTalkPatchNetwork) or not hasattr(model_patch,
                                                                                                 "applied"):
        raise NodeInputError("model_patch", "a MultiTalk / InfiniteTalk MODEL_PATCH (ModelPatchLoader)",
                             describe(getattr(model_patch, "model", model_patch)))
    return model_patch


def _speaker_masks(mask_1: Any, mask_2: Any, latent_h: int, latent_w: int, where: str = "mode.") -> Any:
    """The two speakers' masks at the first latent frame's token grid (`[2, h/2 * w/2]` bool):
    nearest-neighbour, nonzero counts (ComfyUI's `token_ref_target_masks`)."""
    import torch
    import torch.nn.functional as F

    masks = []
    for name, mask in ((f"{where}mask_1", mask_1), (f"{where}mask_2", mask_2)):
        mask = checks.mask_batch(mask, name)
        if mask.shape[0] != 1:
            raise NodeInputError(name, "one mask (the speaker's region in the start image)", describe(mask))
        masks.append(mask.float())
    if masks[0].shape != masks[1].shape:
        raise NodeInputError(f"{where}mask_2", f"a mask the size of mask_1 {tuple(masks[0].shape[1:])}",
                             describe(masks[1]))
    tokens = F.interpolate(torch.cat(masks)[None], size=(latent_h // 2, latent_w // 2), mode="nearest")[0]
    return (tokens > 0).reshape(2, -1)


@v3_node("WanInfiniteTalkToVideo", category="model/conditioning/wan/infinite talk", python_module=MODULE,
         inputs=[INFINITE_TALK_MODE, Socket("model", "MODEL"), Socket("model_patch", "MODEL_PATCH"), *_PAIR,
                 Int("width", default=832, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16),
                 Int("length", default=81, min=1, max=MAX_RESOLUTION, step=4),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
                 Socket("start_image", "IMAGE", optional=True),
                 Socket("audio_encoder_output_1", "AUDIO_ENCODER_OUTPUT"),
                 Int("motion_frame_count", default=9, min=1, max=33, step=1,
                     tooltip="Number of previous frames to use as motion context.", advanced=True),
                 Float("audio_scale", default=1.0, min=-10.0, max=10.0, step=0.01),
                 Socket("previous_frames", "IMAGE", optional=True)],
         outputs=[Output("MODEL", "model"), *_OUTPUTS, Output("INT", "trim_image")])
def wan_infinite_talk_to_video(mode: dict, model: Any, model_patch: Any, positive: list, negative: list, vae: Any,
                               width: int, height: int, length: int, audio_encoder_output_1: Any,
                               motion_frame_count: int, start_image: Any = None, previous_frames: Any = None,
                               audio_scale: float = 1.0, clip_vision_output: Any = None,
                               audio_encoder_output_2: Any = None, mask_1: Any = None, mask_2: Any = None) -> tuple:
    """Wan InfiniteTalk (ComfyUI's WanInfiniteTalkToVideo): the empty 16-channel latent (batch 1);
    the start image's latent and mask as Wan 2.1 I2V's (WanImageToVideo's); a clone of the MODEL
    with the MultiTalk patch (comfy_core/model_patches/multitalk.py): the audio of video frames
    `start .. start + length` projected by the patch (`audio_embeds`), its audio cross-attention
    in every block, the two speakers' masks (two_speakers), and the first latent frames held at
    the motion frames' latent during sampling: the start image's first latent frame, or, when
    extending, the last `motion_frame_count` of `previous_frames` (encoded; the audio then starts
    where they start, and `trim_image` = motion_frame_count frames are to be cut from the decoded
    result's front).

    Parameters in today's `execute` order (comfy_extras/nodes_wan.py@ee54641d). The second speaker
    comes from `mode` "two_speakers" (its `audio_encoder_output_2`, `mask_1`, `mask_2`) or, as
    today's execute also takes them, from the keyword arguments of those names, which a call with
    `mode` "single_speaker" (a pack calling `execute`) may pass; "two_speakers" overrides them."""
    import torch

    from comfy_core.families.wan.multitalk import MultiTalkError, combine_speakers, encoder_states, project_audio
    from comfy_core.latent.video import empty_video_latent, fit_frames, grey_video, latent_frames
    from comfy_core.model_patches.multitalk import (AUDIO_EMBEDS, OUTER_SAMPLE_KEY, InfiniteTalkSampleWrapper,
                                                    MultiTalkAttnMapPatch, MultiTalkCrossAttnPatch)
    from comfy_core.wrappers import WrappersMP

    model = checks.model(model)
    model_patch = _multitalk_patch(model_patch)
    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, _ = wan.video_size(width, height, length)
    motion_frame_count = checks.integer(motion_frame_count, "motion_frame_count", 1, 33)
    audio_scale = checks.number(audio_scale, "audio_scale", -10.0, 10.0)
    start_image = wan.images(start_image, "start_image")
    previous_frames = wan.images(previous_frames, "previous_frames")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    network = getattr(getattr(model, "model", None), "diffusion_model", None)
    config = model_patch.model.config
    if getattr(network, "dim", None) != config.dim or len(getattr(network, "blocks", ())) != config.num_layers:
        raise NodeInputError("model", f"a Wan 2.1 model {config.dim} wide with {config.num_layers} blocks (the "
                                      "MultiTalk patch's)",
                             f"{type(network).__name__} of width {getattr(network, 'dim', None)} with "
                             f"{len(getattr(network, 'blocks', ()))} blocks")
    if previous_frames is not None and previous_frames.shape[0] < motion_frame_count:
        raise NodeInputError("previous_frames", f"at least motion_frame_count ({motion_frame_count}) frames",
                             f"{previous_frames.shape[0]} frames")
    if previous_frames is None and start_image is None:
        raise NodeInputError("start_image", "a start image (or previous_frames to extend a video)", "neither")
    choice = (mode or {}).get("mode", "single_speaker")
    if choice not in ("single_speaker", "two_speakers"):
        raise NodeInputError("mode", "'single_speaker' or 'two_speakers'", repr(choice))
    audio_2 = audio_encoder_output_2
    where = ""  # the inputs' names in errors: "mode.<name>" from the mode, else execute's keyword
    if choice == "two_speakers":
        audio_2, mask_1, mask_2 = (mode.get(k) for k in ("audio_encoder_output_2", "mask_1", "mask_2"))
        where = "mode."
    if audio_2 is not None and (mask_1 is None or mask_2 is None):
        raise NodeInputError(f"{where}mask_1", "both speakers' masks when two audio encoder outputs are used",
                             "mask_1 and mask_2 not both connected")
    if mask_1 is not None and mask_2 is not None and audio_2 is None:
        raise NodeInputError(f"{where}audio_encoder_output_2", "the second speaker's audio when two masks are used",
                             "None")

    latent = empty_video_latent(1, CHANNELS, length, height, width, DOWNSCALE)
    concat = None
    if start_image is not None:
        start = fit_frames(start_image[:length], width, height)
        video = grey_video(length, height, width, start.shape[-1], dtype=start.dtype, device=start.device)
        video[:start.shape[0]] = start
        concat = wan.encode_video(vae, video, CHANNELS)
        mask = torch.ones((1, 1, latent.shape[2], concat.shape[-2], concat.shape[-1]), dtype=start.dtype)
        mask[:, :, :latent_frames(start.shape[0])] = 0.0
        positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})

    speakers = []
    for name, output in (("audio_encoder_output_1", audio_encoder_output_1), (f"{where}audio_encoder_output_2", audio_2)):
        if output is None:
            continue
        try:
            speakers.append(encoder_states(_audio_states(output, name)))
        except MultiTalkError as error:
            raise NodeInputError(name, "an audio encoder output of one clip", str(error)) from None
    speakers = combine_speakers(speakers)
    masks = None if mask_1 is None or mask_2 is None else _speaker_masks(mask_1, mask_2, *latent.shape[-2:], where)

    if previous_frames is not None:
        motion = fit_frames(previous_frames[-motion_frame_count:], width, height)
        motion_latent = wan.encode_video(vae, motion, CHANNELS)
        trim_image = motion_frame_count
        audio_start = previous_frames.shape[0] - motion_frame_count
    else:
        motion_latent = concat[:, :, :1]
        trim_image = audio_start = 0
    try:
        with torch.no_grad(), model_patch.applied("cpu") as patch_network:
            embeds = project_audio(patch_network.audio_proj, speakers, audio_start, audio_start + length)
    except MultiTalkError as error:
        raise NodeInputError("audio_encoder_output_1", "audio features the MultiTalk patch takes", str(error)) from None

    patched = model.clone()
    patched.model_options.setdefault("transformer_options", {})[AUDIO_EMBEDS] = embeds.to(patched.model_dtype())
    patched.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, OUTER_SAMPLE_KEY,
                                 InfiniteTalkSampleWrapper(motion_latent, model_patch,
                                                           is_extend=previous_frames is not None))
    patched.add_block_patch("attn2_patch", MultiTalkCrossAttnPatch(model_patch, audio_scale))
    if masks is not None:
        patched.add_block_patch("attn1_patch", MultiTalkAttnMapPatch(masks))
    return patched, positive, negative, {"samples": latent}, trim_image
