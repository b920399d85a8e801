"""The Wan Animate nodes (Wan 2.2 Animate and Wan-Animate-2), V3 schemas as today's ComfyUI declares
them (`comfy_extras/nodes_wan.py`); the networks in comfy_core/families/wan/animate.py and animate2.py.

- WanAnimateToVideo (Wan 2.2 Animate): the empty 16-channel latent with the reference image's
  latent frames in front (`trim_latent`); into positive and negative: `concat_latent_image` =
  [reference latent, latent of the video frames: mid-grey, the last `continue_motion_max_frames`
  frames of `continue_motion` first, `background_video` frames after those], `concat_mask` (4
  channels, 0 = known: the reference frames, the continued frames; 1 = generate, or the
  `character_mask` per frame: ComfyUI's frame-to-row layout, pixel frame 0 on the 4 rows of latent
  frame 0, frame f >= 1 on row f + 3), `clip_vision_output`, `pose_video_latent` (the pose video from
  `video_frame_offset`, `length` frames, the last held), `face_video_pixels` (the face video from
  the offset, 512 x 512 by area with a centre crop, in -1..1, `[1, C, T, 512, 512]`; all -1 on
  the negative). Every input video is read from `video_frame_offset` (less the continued frames);
  outputs also `trim_image` (the frames the continued motion repeats) and the next offset.
  Today's ComfyUI moved it to `model/conditioning/wan/animate` and fixed the character mask's frame
  layout (0.3.64 copied mask frame f to row f, three rows early); both as today's.

- WanAnimate2ToVideo: the empty 16-channel latent with one extra frame in front (the reference
  slot, `trim_latent` = its latent frames, cut by TrimVideoLatent after sampling); into positive
  and negative: `concat_latent_image` = [reference latent, latent of the video frames: mid-grey, or
  the last frame of `continue_motion` first], a 1-channel `concat_mask` (0 = known: the reference
  slot and the continued frames), `clip_vision_output`, `reference_strength` (when not 1); the pose
  values on both (the pose branch never sees the negative prompt): `pose_video_latent` (the pose
  video from `video_frame_offset`, `length` frames, its last frame held when short, resized by
  area with a centre crop), `clip_vision_output_pose` (default `clip_vision_output`),
  `cross_attn_pose` (the pose prompt's first entry, default positive's), `pose_strength` (when not
  1). A pose window narrower than 0..1 puts the pose values on entries limited to
  `pose_start_percent`..`pose_end_percent` and adds entries without them for the rest.
  Outputs also `trim_image` (frames the continued motion repeats) and the next
  `video_frame_offset`.
- WanAnimate2Cache: a MODEL clone whose transformer_options carry a pose-branch cache (`device`:
  host or compute memory; `dtype`: as computed, int8 or int4 with ConvRot), emptied when a
  sampling run ends.
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Combo, Float, Int, Output, Socket, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError

MODULE = "comfy_extras.nodes_wan"
CATEGORY = "model/conditioning/wan/animate"
CHANNELS = 16
DOWNSCALE = 8
CONTINUE_MOTION_FRAMES = 1  # ComfyUI's WanAnimate2ToVideo.CONTINUE_MOTION_FRAMES
FACE_SIZE = 512  # Wan 2.2 Animate's motion encoder input
CACHE_DEVICES = ("cpu", "gpu")
CACHE_DTYPES = ("default", "int8", "int4")


def _fit(frames: Any, width: int, height: int) -> Any:
    """`[N, H, W, C]` resized by area with a centre crop to `[N, height, width, C]` (ComfyUI's
    `common_upscale(..., "area", "center")`)."""
    from comfy_core.image.resize import upscale_samples

    return upscale_samples(frames.movedim(-1, 1), width, height, "area", "center").movedim(1, -1)


def _strength(value: Any, name: str) -> float:
    return checks.number(value, name, 0.0, 10.0)


@v3_node("WanAnimateToVideo", category=CATEGORY, python_module=MODULE, experimental=True,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 *wan.size_inputs(length=77),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True),
                 Socket("reference_image", "IMAGE", optional=True), Socket("face_video", "IMAGE", optional=True),
                 Socket("pose_video", "IMAGE", optional=True),
                 Int("continue_motion_max_frames", default=5, min=1, max=MAX_RESOLUTION, step=4),
                 Socket("background_video", "IMAGE", optional=True), Socket("character_mask", "MASK", optional=True),
                 Socket("continue_motion", "IMAGE", optional=True),
                 Int("video_frame_offset", default=0, min=0, max=MAX_RESOLUTION, step=1,
                     tooltip=("The amount of frames to seek in all the input videos. Used for generating longer "
                              "videos by chunk. Connect to the video_frame_offset output of the previous node for "
                              "extending a video."))],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent"),
                  Output("INT", "trim_latent"), Output("INT", "trim_image"), Output("INT", "video_frame_offset")])
def wan_animate_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                         batch_size: int, continue_motion_max_frames: int, video_frame_offset: int,
                         reference_image: Any = None, clip_vision_output: Any = None, face_video: Any = None,
                         pose_video: Any = None, continue_motion: Any = None, background_video: Any = None,
                         character_mask: Any = None) -> tuple:
    """See the module docstring (ComfyUI's WanAnimateToVideo, today's)."""
    import torch

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    max_frames = checks.integer(continue_motion_max_frames, "continue_motion_max_frames", 1, MAX_RESOLUTION)
    offset = checks.integer(video_frame_offset, "video_frame_offset", 0, MAX_RESOLUTION)
    reference_image = wan.images(reference_image, "reference_image")
    face_video = wan.images(face_video, "face_video")
    pose_video = wan.images(pose_video, "pose_video")
    continue_motion = wan.images(continue_motion, "continue_motion")
    background_video = wan.images(background_video, "background_video")
    if character_mask is not None:
        character_mask = checks.mask_batch(character_mask, "character_mask", ndims=(2, 3, 4))
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    latent_frames = (length - 1) // 4 + 1
    lh, lw = height // DOWNSCALE, width // DOWNSCALE

    if reference_image is None:
        reference_image = torch.zeros((1, height, width, 3))
    reference = wan.encode_video(vae, _fit(reference_image[:length], width, height)[..., :3], CHANNELS)
    trim_latent = reference.shape[2]

    motion_latent_frames, motion_frames = 0, 0
    if continue_motion is None:
        video = torch.full((length, height, width, 3), 0.5)
    else:
        motion = continue_motion[-max_frames:]
        offset = max(0, offset - motion.shape[0])
        motion = _fit(motion[-length:], width, height)
        video = torch.full((length, height, width, motion.shape[-1]), 0.5, dtype=motion.dtype)
        video[:motion.shape[0]] = motion
        motion_frames = motion.shape[0]
        motion_latent_frames = (motion_frames - 1) // 4 + 1
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})

    if pose_video is not None and pose_video.shape[0] > offset:
        frames = _fit(pose_video[offset:][:length], width, height)
        if frames.shape[0] < length:  # the last frame held
            frames = torch.cat([frames, frames[-1:].expand(length - frames.shape[0], -1, -1, -1)], dim=0)
        positive, negative = wan.both(positive, negative,
                                      {"pose_video_latent": wan.encode_video(vae, frames[..., :3], CHANNELS)})
    if face_video is not None and face_video.shape[0] > offset:
        from comfy_core.image.resize import upscale_samples

        faces = upscale_samples(face_video[offset:][:length].movedim(-1, 1), FACE_SIZE, FACE_SIZE, "area", "center")
        faces = (faces * 2.0 - 1.0).movedim(0, 1).unsqueeze(0)  # [1, C, T, 512, 512] in -1..1
        positive = wan.set_values(positive, {"face_video_pixels": faces})
        negative = wan.set_values(negative, {"face_video_pixels": faces * 0.0 - 1.0})

    known = max(0, motion_latent_frames * 4 - 3)  # pixel frames the continued motion fills
    if background_video is not None and background_video.shape[0] > offset:
        background = _fit(background_video[offset:][:length], width, height)
        if background.shape[0] > known:
            video[known:background.shape[0]] = background[known:].to(video.dtype)[..., :video.shape[-1]]

    rows = torch.ones((1, 1, latent_frames * 4, lh, lw))  # one row per packed frame: 1 = generate
    if continue_motion is not None:
        rows[:, :, :motion_latent_frames * 4] = 0.0
    if character_mask is not None:
        rows = _character_rows(rows, character_mask, offset, length, motion_frames, latent_frames, lh, lw)

    concat = torch.cat((reference, wan.encode_video(vae, video[..., :3], CHANNELS).to(reference)), dim=2)
    rows = rows.to(concat.dtype).view(1, latent_frames, 4, lh, lw).transpose(1, 2)  # [1, 4, T, h, w]
    mask = torch.cat((torch.zeros((1, 4, trim_latent, lh, lw), dtype=concat.dtype), rows), dim=2)
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    latent = torch.zeros([batch_size, CHANNELS, latent_frames + trim_latent, lh, lw])
    return (positive, negative, {"samples": latent}, trim_latent, known, offset + length)


def _character_rows(rows: Any, mask: Any, offset: int, length: int, motion_frames: int, latent_frames: int,
                    lh: int, lw: int) -> Any:
    """The character mask written into the generate-rows (today's ComfyUI layout: mask frame 0 on
    rows 0..3, frame f >= 1 on row f + 3; continued frames stay known). A one-frame mask holds for
    every frame; a mask shorter than the offset is ignored."""
    from comfy_core.image.resize import upscale_samples

    if mask.ndim == 2:
        mask = mask.unsqueeze(0)
    if not (mask.shape[0] > offset or mask.shape[0] == 1):
        return rows
    mask = mask.repeat((length,) + (1,) * (mask.ndim - 1)) if mask.shape[0] == 1 else mask[offset:]
    frames = mask[:length].reshape(-1, 1, *mask.shape[-2:]).float()  # [T, 1, H, W]
    frames = upscale_samples(frames, lw, lh, "nearest-exact", "center").movedim(0, 1).unsqueeze(0)  # [1, 1, T, h, w]
    rows = rows.clone()
    if motion_frames == 0:
        rows[:, :, :4] = frames[:, :, :1]
    else:
        rows[:, :, :motion_frames + 3] = 0.0
    start, end = max(motion_frames, 1), min(frames.shape[2], latent_frames * 4 - 3)
    if end > start:
        rows[:, :, start + 3:end + 3] = frames[:, :, start:end]
    return rows


@v3_node("WanAnimate2ToVideo", category=CATEGORY, python_module=MODULE, experimental=True,
         description=("Animate a character in a reference image using a video, effectively replicating the facial "
                      "animation, body motion and hands gesture from the video."),
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Int("width", default=832, min=16, max=MAX_RESOLUTION, step=16,
                     tooltip="Output video width in pixels."),
                 Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16,
                     tooltip="Output video height in pixels."),
                 Int("length", default=81, min=1, max=MAX_RESOLUTION, step=4, tooltip="Number of frames to generate."),
                 Int("batch_size", default=1, min=1, max=4096, tooltip="Number of videos to generate simultaneously."),
                 Socket("reference_image", "IMAGE", optional=True, tooltip="The character to animate."),
                 Socket("pose_video", "IMAGE", optional=True,
                        tooltip="The video whose motion is transferred to the reference character."),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True,
                        tooltip="CLIP vision of the reference image."),
                 Socket("positive_pose", "CONDITIONING", optional=True,
                        tooltip=("Prompt for the pose-video branch, describing the motion rather than the character. "
                                 "Defaults to positive. Used for both the cond and uncond passes.")),
                 Socket("clip_vision_output_pose", "CLIP_VISION_OUTPUT", optional=True,
                        tooltip="CLIP vision of the pose video's first frame. Defaults to clip_vision_output."),
                 Socket("continue_motion", "IMAGE", optional=True,
                        tooltip="Previous motion sequence to continue from for temporal consistency."),
                 Int("video_frame_offset", default=0, min=0, max=MAX_RESOLUTION, step=1,
                     tooltip=("Frames to seek into the pose video. Connect to the video_frame_offset output of the "
                              "previous node when extending.")),
                 Float("pose_strength", default=1.0, min=0.0, max=10.0, step=0.01,
                       tooltip=("Scales the pose video's influence on the motion. 1.0 is the trained behavior; below "
                                "weakens adherence, above amplifies. 0.0 mutes it but does not fully remove it.")),
                 Float("pose_start_percent", default=0.0, min=0.0, max=1.0, step=0.01,
                       tooltip=("Sampling percent at which the pose influence starts. Outside the window the pose "
                                "branch is skipped entirely, which also speeds those steps up.")),
                 Float("pose_end_percent", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip=("Sampling percent at which the pose influence ends. Motion is mostly established "
                                "early, so e.g. 0.7 can loosen fine detail while keeping the choreography.")),
                 Float("reference_image_strength", default=1.0, min=0.0, max=10.0, step=0.01,
                       tooltip=("Scales how strongly generated frames attend to the reference image's latent frame. "
                                "Below 1.0 loosens identity/appearance adherence (e.g. to let the prompt restyle), "
                                "above tightens it against drift."))],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"), Output("LATENT", "latent"),
                  Output("INT", "trim_latent",
                         tooltip="Number of latent frames that should be trimmed before decoding."),
                  Output("INT", "trim_image", tooltip="Number of overlapping image frames when extending a video."),
                  Output("INT", "video_frame_offset", tooltip="Frames to seek into the pose video.")])
def wan_animate2_to_video(positive: list, negative: list, vae: Any, width: int, height: int, length: int,
                          batch_size: int, video_frame_offset: int, reference_image: Any = None, pose_video: Any = None,
                          clip_vision_output: Any = None, positive_pose: Any = None,
                          clip_vision_output_pose: Any = None, continue_motion: Any = None,
                          pose_strength: float = 1.0, pose_start_percent: float = 0.0, pose_end_percent: float = 1.0,
                          reference_image_strength: float = 1.0) -> tuple:
    """See the module docstring (ComfyUI's WanAnimate2ToVideo)."""
    import torch

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    offset = checks.integer(video_frame_offset, "video_frame_offset", 0, MAX_RESOLUTION)
    pose_strength = _strength(pose_strength, "pose_strength")
    reference_image_strength = _strength(reference_image_strength, "reference_image_strength")
    start = checks.number(pose_start_percent, "pose_start_percent", 0.0, 1.0)
    end = checks.number(pose_end_percent, "pose_end_percent", 0.0, 1.0)
    if start > end:
        raise NodeInputError("pose_start_percent", f"at most pose_end_percent ({end})", repr(start))
    reference_image = wan.images(reference_image, "reference_image")
    pose_video = wan.images(pose_video, "pose_video")
    continue_motion = wan.images(continue_motion, "continue_motion")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    clip_vision_output_pose = wan.clip_vision_states(clip_vision_output_pose, "clip_vision_output_pose")
    if positive_pose is not None:
        positive_pose = checks.conditioning(positive_pose, "positive_pose")

    latent_frames = (length - 1) // 4 + 1
    if reference_image is None:
        reference_image = torch.zeros((1, height, width, 3))
    reference = wan.encode_video(vae, _fit(reference_image[:1], width, height)[..., :3], CHANNELS)
    trim_latent = reference.shape[2]

    motion_latent_frames = 0
    if continue_motion is None:
        video = torch.full((length, height, width, 3), 0.5)
    else:
        motion = continue_motion[-CONTINUE_MOTION_FRAMES:]
        offset = max(0, offset - motion.shape[0])
        motion = _fit(motion[-length:], width, height)
        video = torch.full((length, height, width, motion.shape[-1]), 0.5, dtype=motion.dtype)
        video[:motion.shape[0]] = motion
        motion_latent_frames = (motion.shape[0] - 1) // 4 + 1
    concat = torch.cat((reference, wan.encode_video(vae, video[..., :3], CHANNELS).to(reference)), dim=2)
    mask = torch.ones((1, 1, latent_frames + trim_latent, height // DOWNSCALE, width // DOWNSCALE),
                      dtype=concat.dtype)
    mask[:, :, :trim_latent + motion_latent_frames] = 0.0  # 0: known (the reference slot, continued frames)
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    if reference_image_strength != 1.0:  # every step: the reference slot is part of the latent throughout
        positive, negative = wan.both(positive, negative, {"reference_strength": reference_image_strength})

    pose_values: dict[str, Any] = {}
    if pose_video is not None:
        if pose_video.shape[0] <= offset:
            raise NodeInputError("video_frame_offset", f"less than the pose video's {pose_video.shape[0]} frames",
                                 repr(offset))
        frames = _fit(pose_video[offset:][:length], width, height)
        if frames.shape[0] < length:  # the last frame held, as Wan-Animate-2 pads its clips
            frames = torch.cat([frames, frames[-1:].expand(length - frames.shape[0], -1, -1, -1)], dim=0)
        pose_values["pose_video_latent"] = wan.encode_video(vae, frames[..., :3], CHANNELS)
    pose_clip = clip_vision_output_pose if clip_vision_output_pose is not None else clip_vision_output
    if pose_clip is not None:
        pose_values["clip_vision_output_pose"] = pose_clip
    pose_cond = positive_pose if positive_pose is not None else positive
    if len(pose_cond) > 0:
        pose_values["cross_attn_pose"] = pose_cond[0][0]
    if pose_strength != 1.0:
        pose_values["pose_strength"] = pose_strength
    if start > 0.0 or end < 1.0:
        positive, negative = _windowed(positive, pose_values, start, end), _windowed(negative, pose_values, start, end)
    else:
        positive, negative = wan.both(positive, negative, pose_values)

    latent = torch.zeros([batch_size, CHANNELS, latent_frames + trim_latent, height // DOWNSCALE, width // DOWNSCALE])
    return (positive, negative, {"samples": latent}, trim_latent, max(0, motion_latent_frames * 4 - 3),
            offset + length)


def _windowed(conditioning: list, pose_values: dict, start: float, end: float) -> list:
    """The entries with the pose values limited to start..end, plus entries without them for
    0..start and end..1 (the model runs without the pose branch there)."""
    parts = wan.set_values(conditioning, {**pose_values, "start_percent": start, "end_percent": end})
    if start > 0.0:
        parts = parts + wan.set_values(conditioning, {"start_percent": 0.0, "end_percent": start})
    if end < 1.0:
        parts = parts + wan.set_values(conditioning, {"start_percent": end, "end_percent": 1.0})
    return parts


def _free_cache(patcher: Any) -> None:
    """ON_CLEANUP: empty the pose cache the patcher's options carry (the run is over)."""
    from comfy_core.families.wan.animate2 import CACHE_OPTION

    cache = (patcher.model_options.get("transformer_options") or {}).get(CACHE_OPTION)
    if cache is not None:
        cache.free()


@v3_node("WanAnimate2Cache", category=CATEGORY, python_module=MODULE, experimental=True,
         description=("Caches the pose-video's per-block activations so it runs once instead of on every sampling "
                      "step. Roughly halves generation time Tradeoff is ~12.5 GB of system RAM at 480x832/81 frames "
                      "in bf16 (scales with resolution and length). With context windows each window is cached "
                      "separately, so RAM scales with the window count; use the static_standard schedule, as "
                      "uniform schedules shift the windows every step and nothing ever recurs to hit the cache."),
         inputs=[Socket("model", "MODEL"),
                 Combo("device", list(CACHE_DEVICES), default="cpu",
                       tooltip=("Where to keep the cache. cpu (RAM) is the safe choice, the cache will not fit in "
                                "VRAM alongside the model at typical sizes. gpu (VRAM) can be faster if it fits.")),
                 Combo("dtype", list(CACHE_DTYPES), default="default",
                       tooltip=("Storage precision. default stores the activations in the model's compute dtype. "
                                "int8 halves the cache, int4 quarters it, convrot is used to retain accuracy."))],
         outputs=[Output("MODEL")])
def wan_animate2_cache(model: Any, device: str, dtype: str = "default") -> tuple[Any]:
    """A clone of `model` carrying a pose-branch cache (module docstring)."""
    from comfy_core.families.wan.animate2 import CACHE_OPTION, PoseBranchCache
    from comfy_core.wrappers import CallbacksMP

    model = checks.model(model)
    device = checks.choice(device, CACHE_DEVICES, "device")
    dtype = checks.choice(dtype, CACHE_DTYPES, "dtype")
    store = getattr(model, "load_device", None) if device == "gpu" else "cpu"
    patched = model.clone()
    options = dict(patched.model_options.get("transformer_options") or {})
    options[CACHE_OPTION] = PoseBranchCache(store or "cpu", dtype)
    patched.model_options["transformer_options"] = options
    patched.callbacks.setdefault(CallbacksMP.ON_CLEANUP, {}).setdefault(CACHE_OPTION, []).append(_free_cache)
    return (patched,)
