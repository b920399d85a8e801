"""MiniMax H3 nodes of ComfyUI's `comfy_extras/nodes_minimax_h3.py` and its BlockSparseAttention
(`comfy_extras/nodes_sparse_attention.py`), today's V3 schemas; written here.

- EmptyMiniMaxH3LatentAV: the nested [video, audio] latent, zeros: video `[1, 24, T, H/16, W/16]`,
  audio `[1, 32, 2, round(frames / 24 * 40)]`, `length` snapped up to 17k + 5 frames at 24 fps
  (T = 2 for 5 frames, else 5 per 17 frames after the first 5, plus 2).
- MiniMaxH3ImageToVideo (t2va / fl2va): the prompt (with the first / last frames as
  `<Picture i>` vision blocks) encoded, the frames VAE-encoded as keyframes (`minimax_keyframes`:
  the first at frame 0 stretched to the canvas, the last at the final frame cover-cropped).
- MiniMaxH3AddGuide: one more keyframe at `frame_idx` (negative from the end): an image, a clip
  cropped to 17k + 5 frames (fewer than 5: its first image) and / or audio encoded by the audio VAE
  and cut to the audio left after that frame.
- MiniMaxH3ReferenceToVideo (ref2va): reference images ("match": scaled down to the generation's
  area, "max": to a 2048 short edge; multiples of 32), videos (on a 768-short-edge canvas capped at
  768 x 1344, at most the generation's frames, cropped to 17k + 5, shown to Qwen at 2 fps) with
  their soundtracks, and audio, in the presentation order images, videos, audio; the VAE-encoded
  blocks go to the DiT as `minimax_refs`.
- MiniMaxH3SigmaShift: the video / audio flow shifts (the model sampling and the DiT's own map).
- MiniMaxH3FunControlNetApply: the Fun ControlNet-Union MODEL_PATCH (ModelPatchLoader) as a
  `dit` block replacement at its injection blocks (comfy_core/families/minimax_h3/fun_control.py):
  the control video and / or the mask (1 = regenerate) with its source video, VAE-encoded on the
  17k + 5 frame grid of the latent being sampled, active between start and end percent, eased in
  over the output's first `fade_in_frames` frames and out over its last `fade_out_frames`.
- BlockSparseAttention: ComfyUI's kernels (Sol-Attn, SLA, VSA) are comfy-kitchen CUDA kernels;
  ComfyUI keeps any call they cannot take dense (not on CUDA, under `min_tokens`, outside the
  start / end window, `dense_blocks`). This engine has no such kernel, so every call is dense:
  the same result ComfyUI computes on the CPU. The node checks its inputs as ComfyUI does (VSA
  needs a MiniMax H3 model) and records its options on the clone.
"""
from __future__ import annotations

import math
import re
from typing import Any

from graph.v3_schema import (Autogrow, Boolean, Combo, ComboOption, DynamicCombo, Float, Int, Output, Socket, String,
                             v3_node)
import nodes.checks as checks
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_minimax_h3"
SPARSE_MODULE = "comfy_extras.nodes_sparse_attention"
CONDITIONING_CATEGORY = "model/conditioning/minimax"
MAX_RESOLUTION = 16384
CANVAS_MULTIPLE = 32
BASE_SHORT_EDGE = 768
MAX_PIXELS = 768 * 1344
REF_IMAGE_SHORT_EDGE = 2048
FPS = 24
AUDIO_LATENT_FPS = 40
LENGTH_TOOLTIP = ("Frame count at 24 fps, snapped up to the model's 17k+5 grid (124 = ~5s; trained range is ~124-362, "
                  "longer is untested)")
SPARSE_OPTIONS = "block_sparse_attention"  # transformer_options key of BlockSparseAttention's settings


# --- geometry (pure) ---

def align_frame_count(frames: int) -> int:
    """Up to the next 17k + 5 frame count."""
    return frames + (5 - frames) % 17


def video_latent_t(frame_count: int) -> int:
    return 2 if frame_count <= 5 else ((frame_count - 5) // 17) * 5 + 2


def temporal_shape(length: int) -> tuple[int, int, int]:
    """`length` -> (frames on the 17k + 5 grid, latent frames, audio latent frames at 40 Hz)."""
    frames = align_frame_count(max(5, int(length)))
    return frames, video_latent_t(frames), round(frames / FPS * AUDIO_LATENT_FPS)


def adapt_canvas(width: int, height: int) -> tuple[int, int]:
    """A 768-short-edge canvas of the same aspect, area capped at 768 x 1344, sides rounded to 32."""
    ratio = width / height
    nom_w, nom_h = (BASE_SHORT_EDGE * ratio, BASE_SHORT_EDGE) if ratio >= 1.0 else (BASE_SHORT_EDGE,
                                                                                    BASE_SHORT_EDGE / ratio)
    if nom_w * nom_h > MAX_PIXELS:
        s = math.sqrt(MAX_PIXELS / (nom_w * nom_h))
        nom_w, nom_h = nom_w * s, nom_h * s
    return (max(CANVAS_MULTIPLE, round(nom_w / CANVAS_MULTIPLE) * CANVAS_MULTIPLE),
            max(CANVAS_MULTIPLE, round(nom_h / CANVAS_MULTIPLE) * CANVAS_MULTIPLE))


def _multiple(value: float) -> int:
    return max(CANVAS_MULTIPLE, round(value / CANVAS_MULTIPLE) * CANVAS_MULTIPLE)


def _resize(image: Any, width: int, height: int, crop: str) -> Any:
    """IMAGE [B, H, W, C] -> [B, height, width, 3] (lanczos; crop "disabled" stretches, "center" covers)."""
    from comfy_core.image.resize import upscale_samples

    samples = image[..., :3].movedim(-1, 1)
    return upscale_samples(samples, width, height, "lanczos", crop).movedim(1, -1)


def empty_av_latent(width: int, height: int, length: int, batch_size: int = 1) -> tuple[dict, int]:
    import torch

    from comfy_core.latent.nested import NestedTensor

    frames, latent_t, audio_t = temporal_shape(length)
    video = torch.zeros([batch_size, 24, latent_t, height // 16, width // 16])
    audio = torch.zeros([batch_size, 32, 2, audio_t])
    return {"samples": NestedTensor((video, audio))}, frames


def _encode_audio(audio_vae: Any, audio: Any, name: str) -> tuple[Any, int]:
    """AUDIO -> (latent [1, 32, 2, T] of its first clip at the VAE's rate, T)."""
    from nodes.ltx_audio_nodes import encode_audio

    clip = {**audio, "waveform": audio["waveform"][:1]} if isinstance(audio, dict) and "waveform" in audio else audio
    latent = encode_audio(checks.vae(audio_vae, "audio_vae"), clip, name)["samples"]
    if latent.ndim != 4 or latent.shape[1] != 32 or latent.shape[2] != 2:
        raise NodeInputError("audio_vae", "MiniMax H3's audio VAE (latents [1, 32, 2, T])", describe(latent))
    return latent, int(latent.shape[-1])


def _int(value: Any, name: str, low: int, high: int, step: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise NodeInputError(name, f"an INT in {low}..{high}", repr(value))
    return value


def _canvas(width: Any, height: Any, length: Any) -> tuple[int, int, int]:
    return (_int(width, "width", 32, MAX_RESOLUTION), _int(height, "height", 32, MAX_RESOLUTION),
            _int(length, "length", 5, 3600))


def _encode_prompt(clip: Any, prompt: Any, **tokenize: Any) -> list:
    clip = checks.clip(clip)
    if not isinstance(prompt, str):
        raise NodeInputError("prompt", "a STRING", describe(prompt))
    return clip.encode_from_tokens_scheduled(clip.tokenize(prompt, **tokenize))


def _set(conditioning: list, values: dict) -> list:
    from nodes.flux_nodes import set_values

    return set_values(conditioning, values)


def _size_inputs() -> list:
    return [Int("width", default=1344, min=32, max=MAX_RESOLUTION, step=32),
            Int("height", default=768, min=32, max=MAX_RESOLUTION, step=32),
            Int("length", default=124, min=5, max=3600, step=17, tooltip=LENGTH_TOOLTIP)]


@v3_node("EmptyMiniMaxH3LatentAV", display_name="Empty MiniMax H3 AV Latent", category="model/latent/minimax",
         python_module=MODULE,
         description=("Joint video+audio latent for MiniMax H3. Duration snaps to the model's 17k+5 frame grid "
                      "at 24 fps."),
         inputs=_size_inputs(), outputs=[Output("LATENT")])
def empty_minimax_h3_latent_av(width: int, height: int, length: int) -> tuple[dict]:
    width, height, length = _canvas(width, height, length)
    return (empty_av_latent(width, height, length)[0],)


@v3_node("MiniMaxH3ImageToVideo", display_name="MiniMax H3 Image to Video", category=CONDITIONING_CATEGORY,
         python_module=MODULE,
         inputs=[Socket("clip", "CLIP"), Socket("vae", "VAE"),
                 String("prompt", multiline=True, dynamicPrompts=True), *_size_inputs(),
                 Socket("first_frame", "IMAGE", optional=True), Socket("last_frame", "IMAGE", optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("LATENT")])
def minimax_h3_image_to_video(clip: Any, vae: Any, prompt: str, width: int, height: int, length: int,
                              first_frame: Any = None, last_frame: Any = None) -> tuple[list, dict]:
    """t2va / fl2va: the prompt with the frames as vision blocks; the frames as keyframes."""
    width, height, length = _canvas(width, height, length)
    latent, frames = empty_av_latent(width, height, length)
    images, keyframes = [], []
    if first_frame is not None:  # the geometry anchor: stretched to the canvas
        image = _resize(checks.image_batch(first_frame, "first_frame")[:1], width, height, "disabled")
        images.append(image)
        keyframes.append({"resolved_frame_index": 0, "image": image})
    if last_frame is not None:  # a follower: aspect kept, cover-cropped
        image = _resize(checks.image_batch(last_frame, "last_frame")[:1], width, height, "center")
        images.append(image)
        keyframes.append({"resolved_frame_index": frames - 1, "image": image})
    conditioning = _encode_prompt(clip, prompt, images=images)
    if keyframes:
        vae = checks.vae(vae)
        for keyframe in keyframes:
            keyframe["latent"] = vae.encode(keyframe.pop("image"))
        conditioning = _set(conditioning, {"minimax_keyframes": keyframes})
    return conditioning, latent


def _av_latent(latent: Any) -> Any:
    samples = latent.get("samples") if isinstance(latent, dict) else None
    parts = samples.unbind() if getattr(samples, "is_nested", False) else None
    if parts is None or len(parts) != 2 or parts[0].ndim != 5 or parts[0].shape[1] != 24:
        raise NodeInputError("latent", "a MiniMax H3 AV latent (EmptyMiniMaxH3LatentAV / MiniMaxH3ImageToVideo)",
                             describe(samples))
    return parts


@v3_node("MiniMaxH3AddGuide", display_name="Add Guide for MiniMax H3", category=CONDITIONING_CATEGORY,
         python_module=MODULE,
         description=("Anchor an image, a short clip, audio, or a clip with its soundtrack at any frame of a "
                      "MiniMax H3 video. Chain several nodes to anchor several frames."),
         inputs=[Socket("positive", "CONDITIONING"),
                 Socket("vae", "VAE", optional=True, tooltip="Video VAE, needed when an image is connected."),
                 Socket("audio_vae", "VAE", optional=True, tooltip="Audio VAE, needed when an audio is connected."),
                 Socket("latent", "LATENT"),
                 Socket("image", "IMAGE", optional=True,
                        tooltip=("Image or video frames to anchor. Multi-frame batches are anchored as a clip and "
                                 "cropped down to the model's valid clip lengths: 5, 22, 39... (17k + 5) frames. "
                                 "Batches shorter than 5 frames use only the first image.")),
                 Socket("audio", "AUDIO", optional=True,
                        tooltip="Soundtrack to anchor starting at the same frame index, cropped to the video's "
                                "remaining duration."),
                 Int("frame_idx", default=0, min=-9999, max=9999,
                     tooltip=("Frame index to anchor the image or the clip's first frame at. Negative values are "
                              "counted from the end of the video."))],
         outputs=[Output("CONDITIONING", "positive")])
def minimax_h3_add_guide(positive: list, latent: dict, frame_idx: int, vae: Any = None, audio_vae: Any = None,
                         image: Any = None, audio: Any = None) -> tuple[list]:
    from comfy_core.families.minimax_h3.layout import FRAME_RESCALE, pixel_frames

    positive = checks.conditioning(positive, "positive", non_empty=True)
    video, audio_part = _av_latent(latent)
    if image is None and audio is None:
        raise NodeInputError("image", "an image or an audio to anchor", "neither connected")
    frame_idx = _int(frame_idx, "frame_idx", -9999, 9999)
    height, width = video.shape[3] * 16, video.shape[4] * 16
    frame_count = pixel_frames(video.shape[2])
    guide_frames = 1
    if image is not None:
        if vae is None:
            raise NodeInputError("vae", "the video VAE to encode the guide frames", "not connected")
        image = checks.image_batch(image, "image")
        guide_frames = image.shape[0] if image.shape[0] >= 5 else 1
        guide_frames -= (guide_frames - 5) % 17 if guide_frames >= 5 else 0
    index = frame_idx if frame_idx >= 0 else frame_count + frame_idx
    if index < 0 or index + guide_frames > frame_count:
        what = "frame_idx" if guide_frames == 1 else f"a {guide_frames} frame guide clip at frame_idx"
        raise NodeInputError("frame_idx", f"{what} inside the video's {frame_count} frames", str(frame_idx))
    keyframe: dict[str, Any] = {"resolved_frame_index": index}
    if image is not None:
        keyframe["latent"] = checks.vae(vae).encode(_resize(image[:guide_frames], width, height, "center"))
    if audio is not None:
        if audio_vae is None:
            raise NodeInputError("audio_vae", "the audio VAE to encode the guide audio", "not connected")
        audio_latent, frames = _encode_audio(audio_vae, audio, "audio")
        room = math.floor(audio_part.shape[-1] - FRAME_RESCALE * index)
        if room < 1:
            raise NodeInputError("frame_idx", "a frame before the end of the video's audio track", str(frame_idx))
        keyframe["audio_latent"] = audio_latent[..., :room].clone() if frames > room else audio_latent
    keyframes = list(positive[0][1].get("minimax_keyframes", [])) + [keyframe]
    return (_set(positive, {"minimax_keyframes": keyframes}),)


def _ordered(group: dict | None, prefix: str) -> list[tuple[str, Any]]:
    items = [(name, value) for name, value in (group or {}).items() if value is not None]
    return sorted(items, key=lambda item: int(item[0][len(prefix):]) if item[0][len(prefix):].isdigit() else 0)


@v3_node("MiniMaxH3ReferenceToVideo", display_name="MiniMax H3 Reference to Video", category=CONDITIONING_CATEGORY,
         python_module=MODULE,
         description=("<Picture i> / <Video k> / <Audio j> reference conditioning for MiniMax H3. Use the same tags "
                      "when prompting."),
         inputs=[Socket("clip", "CLIP"),
                 Socket("vae", "VAE", optional=True,
                        tooltip="Video VAE. Without it reference images/videos only condition the text encoder."),
                 Socket("audio_vae", "VAE", optional=True,
                        tooltip="Audio VAE. Without it reference audio only conditions the text encoder."),
                 String("prompt", multiline=True, dynamicPrompts=True),
                 Int("width", default=1344, min=32, max=MAX_RESOLUTION, step=32),
                 Int("height", default=768, min=32, max=MAX_RESOLUTION, step=32),
                 Int("length", default=124, min=5, max=3600, step=17,
                     tooltip="Frame count at 24 fps, (124 = ~5s, trained range is ~124-362)"),
                 Combo("ref_image_size", ["match", "max"], default="match",
                       tooltip=("Reference image sizing. 'match' scales each ref (down only, keeping aspect) to the "
                                "generation's pixel area; 'max' uses the reference pipeline's 2048px short edge for "
                                "best identity fidelity. Reference tokens ride through every sampling step, so 'max' "
                                "can be several times slower.")),
                 Autogrow("ref_images", Socket("ref_image", "IMAGE",
                                               tooltip="Reference image (downscaled to 2048 short edge if larger, "
                                                       "never upscaled)"),
                          prefix="ref_image_", min=0, max=9, optional=True),
                 Autogrow("ref_videos",
                          Socket("ref_video", "IMAGE", tooltip="Reference video frames at 24 fps (2-15s)"),
                          prefix="ref_video_", min=0, max=3, optional=True),
                 Autogrow("ref_video_audios", Socket("ref_video_audio", "AUDIO",
                                                     tooltip="Soundtrack of the same-numbered reference video"),
                          prefix="ref_video_audio_", min=0, max=3, optional=True),
                 Autogrow("ref_audios", Socket("ref_audio", "AUDIO", tooltip="Standalone reference audio"),
                          prefix="ref_audio_", min=0, max=3, optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("LATENT")])
def minimax_h3_reference_to_video(clip: Any, prompt: str, width: int, height: int, length: int,
                                  ref_image_size: str = "match", vae: Any = None, audio_vae: Any = None,
                                  ref_images: dict | None = None, ref_videos: dict | None = None,
                                  ref_video_audios: dict | None = None,
                                  ref_audios: dict | None = None) -> tuple[list, dict]:
    """ref2va: references in the presentation (images, videos with their soundtracks, audio) and,
    VAE-encoded, as the DiT's reference blocks."""
    width, height, length = _canvas(width, height, length)
    if ref_image_size not in ("match", "max"):
        raise NodeInputError("ref_image_size", "'match' or 'max'", repr(ref_image_size))
    latent, frame_count = empty_av_latent(width, height, length)
    vae = None if vae is None else checks.vae(vae)
    items, blocks = [], []
    for name, image in _ordered(ref_images, "ref_image_"):
        image = checks.image_batch(image, f"ref_images.{name}")
        h, w = image.shape[1], image.shape[2]
        if ref_image_size == "match":
            scale = min(1.0, math.sqrt((width * height) / (w * h)))
        else:
            scale = min(1.0, REF_IMAGE_SHORT_EDGE / min(w, h))
        tw, th = _multiple(w * scale), _multiple(h * scale)
        resized = _resize(image[:1], tw, th, "disabled")
        items.append({"type": "image", "data": resized})
        if vae is not None:
            blocks.append({"kind": "image", "latent_h": th // 16, "latent_w": tw // 16, "latent": vae.encode(resized)})
    soundtracks = dict(ref_video_audios or {})
    for name, frames in _ordered(ref_videos, "ref_video_"):
        frames = checks.image_batch(frames, f"ref_videos.{name}")
        soundtrack = soundtracks.get("ref_video_audio_" + name.rsplit("_", 1)[-1])
        vh, vw = frames.shape[1], frames.shape[2]
        cw, ch = adapt_canvas(vw, vh)
        if vw * vh < cw * ch:
            cw, ch = _multiple(vw), _multiple(vh)
        frames = _resize(frames, cw, ch, "disabled")[:frame_count]
        n = frames.shape[0]
        if n < 5:
            raise NodeInputError(f"ref_videos.{name}", "a reference video of at least 5 frames (~0.2s at 24 fps)",
                                 f"{n} frames")
        frames = frames[:n - (n - 5) % 17]
        if soundtrack is not None:
            items.append({"type": "audio"})  # its <Audio j> label comes before <Video k>
        picks = list(range(0, frames.shape[0], FPS // 2))
        items.append({"type": "video", "data": frames[picks], "timestamps": [i / 2.0 for i in range(len(picks))]})
        if vae is None:
            continue
        z = vae.encode(frames)
        audio_latent, audio_t = None, 0
        if soundtrack is not None and audio_vae is not None:
            audio_latent, audio_t = _encode_audio(audio_vae, soundtrack, f"ref_video_audios.{name}")
        blocks.append({"kind": "video_audio" if audio_t else "video", "latent_t": int(z.shape[2]),
                       "latent_h": ch // 16, "latent_w": cw // 16, "ref_audio_t": audio_t, "latent": z,
                       "audio_latent": audio_latent})
    for name, audio in _ordered(ref_audios, "ref_audio_"):
        items.append({"type": "audio"})
        if audio_vae is not None:
            audio_latent, audio_t = _encode_audio(audio_vae, audio, f"ref_audios.{name}")
            blocks.append({"kind": "audio", "ref_audio_t": audio_t, "audio_latent": audio_latent})
    conditioning = _encode_prompt(clip, prompt, minimax_ref_items=items)
    if blocks:
        conditioning = _set(conditioning, {"minimax_refs": blocks})
    return conditioning, latent


@v3_node("MiniMaxH3SigmaShift", display_name="ModelSamplingMiniMaxH3", category="model/patch/minimax",
         python_module=MODULE, description="Set the video/audio flow shifts.",
         search_aliases=["sigma shift", "minimax shift"],
         inputs=[Socket("model", "MODEL"),
                 Float("shift_video", default=12.0, min=0.01, max=100.0, step=0.01),
                 Float("shift_audio", default=3.0, min=0.01, max=100.0, step=0.01)],
         outputs=[Output("MODEL")])
def minimax_h3_sigma_shift(model: Any, shift_video: float, shift_audio: float) -> tuple[Any]:
    """The video shift drives the sampler's schedule; both go to the DiT, which maps the video
    sigma to the audio schedule's."""
    from comfy_core.families.minimax_h3.dit import SHIFT_AUDIO_OPTION, SHIFT_VIDEO_OPTION
    from comfy_core.families.minimax_h3.sampling import AVFlowModelSampling

    model = checks.model(model)
    shift_video = checks.number(shift_video, "shift_video", 0.01, 100.0)
    shift_audio = checks.number(shift_audio, "shift_audio", 0.01, 100.0)
    patched = model.clone()
    patched.add_object_patch("model_sampling", AVFlowModelSampling(shift=shift_video, audio_shift=shift_audio))
    options = patched.model_options.setdefault("transformer_options", {})
    patched.model_options["transformer_options"] = {**options, SHIFT_VIDEO_OPTION: shift_video,
                                                    SHIFT_AUDIO_OPTION: shift_audio}
    return (patched,)


def parse_block_list(text: str) -> set[int]:
    """'0, 1, 47-49' -> {0, 1, 47, 48, 49}."""
    blocks: set[int] = set()
    for part in re.findall(r"\d+\s*-\s*\d+|\d+", text or ""):
        if "-" in part:
            a, b = (int(x) for x in part.split("-"))
            blocks.update(range(min(a, b), max(a, b) + 1))
        else:
            blocks.add(int(part))
    return blocks


KEEP_PERCENT = {"default": 10.0, "min": 0.5, "max": 95.0, "step": 0.5}
SPARSE_SELECTION = DynamicCombo("selection", display_name="method", options=(
    ComboOption("sol-attn", (Float("tau", default=1.3, min=0.0, max=4.0, step=0.05,
                                   tooltip="Threshold in score-distribution sigmas. Higher is sparser: 1.0 keeps ~16% "
                                           "of key blocks exact, 1.5 ~7%, 2.0 ~2.7%."),)),
    ComboOption("sla", (Float("keep_percent", **KEEP_PERCENT,
                              tooltip="Percent of key blocks each query block keeps exactly (sinks and the diagonal "
                                      "ride on top). The selection SLA-style LoRAs are distilled against; without "
                                      "such a LoRA higher is closer to dense."),)),
    ComboOption("vsa", (Float("keep_percent", **KEEP_PERCENT,
                              tooltip="Percent of video cubes each query cube keeps; FastH3-VSA checkpoints are "
                                      "trained at 10. Uses the model's to_gate_compress layers for the coarse branch "
                                      "when present."),)),
), tooltip=("Method used to choose key blocks for full token-level attention. sol-attn: Sparsifying Online Attention "
            "uses a training-free adaptive threshold for each attention head and query block. sla: Sparse-Linear "
            "Attention keeps a fixed percentage of the highest-scoring key blocks; use only with model weights trained "
            "for this pattern. vsa: Video Sparse Attention (FastVideo) uses 3D video-cube tiling and a learned coarse "
            "attention branch; requires FastH3 model weights."))


@v3_node("BlockSparseAttention", display_name="Model Sparse Attention", category="model/patch",
         python_module=SPARSE_MODULE, experimental=True, search_aliases=["Block Sparse Attention"],
         description=("Applies block-sparse attention to eligible model attention layers, reducing compute for long "
                      "sequences. The speed gain grows with sequence length since short sequences are usually faster "
                      "dense. Outside the start/end_percent, dense_blocks and under min_tokens, the model uses the "
                      "dense model attention backend. Use the node Model Attention Backend to select that fallback."),
         inputs=[Socket("model", "MODEL", tooltip="The model to patch."), SPARSE_SELECTION,
                 Float("start_percent", default=0.2, min=0.0, max=1.0, step=0.01,
                       tooltip="Percentage point when sparse attention begins. Before this point, attention stays "
                               "dense."),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.01,
                       tooltip="Percentage point when sparse attention ends. After this point, attention returns to "
                               "dense."),
                 String("dense_blocks", default="", advanced=True,
                        tooltip="Transformer blocks that always run dense, e.g. '0, 1, 47-49'."),
                 Int("min_tokens", default=12288, min=0, max=1 << 20, step=512, advanced=True,
                     tooltip="Sequences shorter than this stay dense."),
                 Int("extra_tokens", default=256, min=0, max=256, step=64, advanced=True,
                     tooltip=("Extra top-scoring tokens each query block attends beyond its selected blocks. Closer "
                              "to dense for more attention time; 256 recommended, 0 disables. Ignored for VSA.")),
                 Combo("sink_conditioning", ["exact_kv", "exact_kv_and_rows", "off"], default="exact_kv_and_rows",
                       advanced=True,
                       tooltip=("MiniMax-H3 only. exact_kv: every query attends the packed text/audio/reference rows "
                                "exactly (~3% cost). exact_kv_and_rows: additionally runs the target-audio query rows "
                                "dense (keeps generated audio intact).")),
                 Boolean("verbose", default=False, advanced=True,
                         tooltip="Logs whether each attention shape used sparse attention or why it stayed dense.")],
         outputs=[Output("MODEL", "model", tooltip="The model with block-sparse attention applied.")])
def block_sparse_attention(model: Any, selection: dict, start_percent: float, end_percent: float,
                           dense_blocks: str = "", min_tokens: int = 12288, extra_tokens: int = 0,
                           sink_conditioning: str = "exact_kv_and_rows", verbose: bool = False) -> tuple[Any]:
    """A clone carrying the options; attention stays dense here (see the module doc)."""
    model = checks.model(model)
    mode = (selection or {}).get("selection")
    if mode not in ("sol-attn", "sla", "vsa"):
        raise NodeInputError("selection", "'sol-attn', 'sla' or 'vsa'", repr(mode))
    if mode == "sol-attn":
        tau, ratio = checks.number(selection.get("tau", 1.3), "selection.tau", 0.0, 4.0), 0.0
    else:
        tau, ratio = 1.3, checks.number(selection.get("keep_percent", 10.0), "selection.keep_percent", 0.5, 95.0) / 100
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    if not isinstance(dense_blocks, str):
        raise NodeInputError("dense_blocks", "a STRING", describe(dense_blocks))
    min_tokens = _int(min_tokens, "min_tokens", 0, 1 << 20)
    extra_tokens = _int(extra_tokens, "extra_tokens", 0, 256)
    if sink_conditioning not in ("exact_kv", "exact_kv_and_rows", "off"):
        raise NodeInputError("sink_conditioning", "'exact_kv', 'exact_kv_and_rows' or 'off'", repr(sink_conditioning))
    if mode == "vsa":
        if getattr(getattr(model.model, "family", None), "name", None) != "minimax_h3":
            raise NodeInputError("selection", "a MiniMax H3 model for VSA selection",
                                 getattr(getattr(model.model, "family", None), "name", "another model"))
        extra_tokens = 0  # VSA's trained pattern is the target
    sampling = model.get_model_object("model_sampling")
    patched = model.clone()
    options = patched.model_options.setdefault("transformer_options", {})
    patched.model_options["transformer_options"] = {**options, SPARSE_OPTIONS: {
        "mode": mode, "tau": tau, "topk_ratio": ratio, "sigma_start": float(sampling.percent_to_sigma(start)),
        "sigma_end": float(sampling.percent_to_sigma(end)), "min_tokens": min_tokens,
        "dense_blocks": sorted(parse_block_list(dense_blocks)), "extra_tokens": extra_tokens,
        "sink_conditioning": sink_conditioning, "verbose": bool(verbose)}}
    return (patched,)


@v3_node("MiniMaxH3FunControlNetApply", display_name="Apply MiniMax H3 Fun ControlNet", category="model/patch/minimax",
         python_module=MODULE,
         description="Apply a MiniMax H3 Fun ControlNet to a text-to-video model as a model patch.",
         search_aliases=["minimax controlnet", "h3 controlnet", "video inpaint controlnet"],
         inputs=[Socket("model", "MODEL"), Socket("model_patch", "MODEL_PATCH"), Socket("vae", "VAE"),
                 Float("strength", default=1.0, min=0.0, max=10.0, step=0.01),
                 Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001, advanced=True),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001, advanced=True),
                 Int("fade_in_frames", default=0, min=0, max=3600, step=1, advanced=True,
                     tooltip="Ease Fun ControlNet from 0 to full strength over this many output-video frames."),
                 Int("fade_out_frames", default=0, min=0, max=3600, step=1, advanced=True,
                     tooltip="Ease Fun ControlNet from full strength to 0 over this many output-video frames."),
                 Socket("control_video", "IMAGE", optional=True),
                 Socket("mask", "MASK", optional=True, tooltip="1 marks the regions to regenerate."),
                 Socket("source_video", "IMAGE", optional=True,
                        tooltip="Video behind the mask; only read when a mask is given.")],
         outputs=[Output("MODEL")])
def minimax_h3_fun_controlnet_apply(model: Any, model_patch: Any, vae: Any, strength: float, start_percent: float,
                                    end_percent: float, fade_in_frames: int = 0, fade_out_frames: int = 0,
                                    control_video: Any = None, mask: Any = None,
                                    source_video: Any = None) -> tuple[Any]:
    """A clone of the MiniMax H3 MODEL with the Fun ControlNet-Union's control stream beside its
    injection blocks (comfy_core/families/minimax_h3/fun_control.py); the MODEL itself with
    strength 0 or neither a control video nor a mask (as ComfyUI). `fade_in_frames` /
    `fade_out_frames` (today's, comfy_extras/nodes_minimax_h3.py@542de101) ease the control in over
    the output video's first frames and out over its last (`fade_envelope`)."""
    from comfy_core.families.minimax_h3.fun_control import MiniMaxH3FunControl, MiniMaxH3FunControlPatch

    model = checks.model(model)
    strength = checks.number(strength, "strength", 0.0, 10.0)
    start = checks.number(start_percent, "start_percent", 0.0, 1.0)
    end = checks.number(end_percent, "end_percent", 0.0, 1.0)
    fade_in = checks.integer(fade_in_frames, "fade_in_frames", 0, 3600)
    fade_out = checks.integer(fade_out_frames, "fade_out_frames", 0, 3600)
    if strength == 0 or (control_video is None and mask is None):
        return (model,)
    network = getattr(model_patch, "model", None)
    if not isinstance(network, MiniMaxH3FunControl) or not hasattr(model_patch, "applied"):
        raise NodeInputError("model_patch", "a MiniMax H3 Fun ControlNet MODEL_PATCH (ModelPatchLoader)",
                             describe(network if network is not None else model_patch))
    vae = checks.vae(vae)
    family = getattr(getattr(model.model, "family", None), "name", None)
    dit = getattr(model.model, "diffusion_model", None)
    width = getattr(getattr(dit, "config", None), "hidden_size", None)
    depth = len(getattr(dit, "blocks", ()))
    if family != "minimax_h3" or width != network.config.hidden_size or depth <= network.injection_layers[-1]:
        raise NodeInputError("model", f"a MiniMax H3 model of width {network.config.hidden_size} with more than "
                             f"{network.injection_layers[-1]} blocks (the ControlNet's)",
                             f"a {family} model of width {width} and {depth} blocks")
    control_video = None if control_video is None else checks.image_batch(control_video, "control_video")[..., :3]
    if mask is not None:
        mask = checks.mask_batch(mask, "mask")
        source_video = None if source_video is None else checks.image_batch(source_video, "source_video")[..., :3]
    else:
        source_video = None
    sampling = model.get_model_object("model_sampling")
    patch = MiniMaxH3FunControlPatch(model_patch, vae, control_video, mask, source_video, strength,
                                     float(sampling.percent_to_sigma(start)), float(sampling.percent_to_sigma(end)),
                                     fade_in_frames=fade_in, fade_out_frames=fade_out)
    patched = model.clone()
    replaced = patched.model_options.get("transformer_options", {}).get("patches_replace", {}).get("dit", {})
    for layer in network.injection_layers:
        patched.set_block_replace("dit", ("double_block", layer), patch.block_patch(layer, replaced.get(
            ("double_block", layer))))
    return (patched,)
