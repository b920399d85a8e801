"""Today's ComfyUI LTX nodes beyond nodes/ltxv_nodes.py; behaviour read from ComfyUI's files, code
written here:

- LTXVFreezeLatent (`comfy_extras/nodes_lt_keyframes.py`): a zero `noise_mask` (`[B, 1, T, 1, 1]`
  for video, `[B, 1, T, 1]` for audio) so the sampler keeps the latent as it is.
- LTXVAddGeneratedKeyframes / LTXVSeparateGeneratedKeyframes / LTXVGeneratedKeyframesToGuides
  (`nodes_lt_keyframes.py`, LTX-2.5's "detailing frame" keyframes): extra latent frames appended
  after the video, each one whose RoPE span is a single pixel frame `[t, t + 1)`, denoised with
  the video (noise mask 1) and recorded on both conditionings (`keyframe_idxs`, one
  `guide_attention_entries` entry that grows as more are added, and a `generated_keyframes`
  record: first latent frame, count, pixel indices, canvas length, entry index, tokens per
  frame). Auto placement: `max(1, round((N - 1) / interval))` positions
  `round(linspace(0, N - 1, count + 1))[1:]`, frame 0 and pixel frames already held by an image
  (noise mask < 1 - 1e-4, else non-zero latent frames), a guide or a keyframe skipped. Separate
  cuts them back out (optionally as a batch of single frames) with their indices; ToGuides pins
  them on a later canvas as frozen guides (LTXVAddGuide's append, re-encoded through the VAE when
  the spatial size changed), indices scaled by `(N_new - 1) / (N_old - 1)` when the canvas length
  changed.
- LTXVModalityGuidance (`comfy_extras/nodes_lt.py`): a `sampler_post_cfg_function` running one
  more positive pass with the audio<->video cross-attention off (`a2v_cross_attn` /
  `v2a_cross_attn` False) and adding `(cond - that) * (modality_scale - 1)`.
- LTXVContextWindows (`comfy_extras/nodes_context_windows.py`): ContextWindowsManual on the frame
  axis (dim 2) with lengths in video frames (`(n - 1) // 8 + 1` latent frames, overlap `n // 8`);
  `retain_first_frame` keeps latent frame 0 in every window, in the conds and in the latent.

Not here: LTXVDurationPredictor needs LTX 2.4's duration head (a MODEL_PATCH network,
`comfy/ldm/lightricks/duration_head.py`) that this engine has no loader or network for.
"""
from __future__ import annotations

import math
import re
from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
import nodes.ltxv_nodes as lt
from nodes.context_windows import FUSE_METHODS, FUSE_TIP, FREENOISE_TIP, LOOP_TIP, MODEL_TIP, OUTPUTS, \
    SCHEDULES, SCHEDULE_TIP, SPLIT_TIP, STRIDE_TIP, _flag, _patched
from nodes.errors import NodeInputError, describe
from nodes.flux_nodes import set_values

KEYFRAMES_MODULE = "comfy_extras.nodes_lt_keyframes"
DEFAULT_TEMPORAL_SCALE = 8
OCCUPIED_BELOW = 1.0 - 1e-4  # a noise mask under this marks a frame an image already holds
_PAIR = [Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING")]


# --- freeze ---

@v3_node("LTXVFreezeLatent", display_name="LTXV Freeze Latent", category="model/latent/ltxv",
         python_module=KEYFRAMES_MODULE, search_aliases=["noise mask", "freeze audio", "freeze video"],
         description="Set noise_mask to 0 so this latent is kept clean during sampling. Works on video or audio. "
                     "Typical uses: freeze audio before Concat AV so it only provides cross-attention, or freeze any "
                     "latent that should not be denoised.",
         inputs=[Socket("latent", "LATENT", tooltip="Video or audio latent to freeze. Audio is 4D; video is 5D.")],
         outputs=[Output("LATENT", "latent")])
def ltxv_freeze_latent(latent: dict) -> tuple[dict]:
    import torch

    from comfy_core.latent.nested import is_nested

    samples = latent.get("samples") if isinstance(latent, dict) else None
    if not isinstance(samples, torch.Tensor) or is_nested(samples):
        raise NodeInputError("latent", "a plain video or audio LATENT (split an AV latent with Separate AV Latent "
                                       "first)", describe(latent))
    if samples.ndim not in (4, 5):
        raise NodeInputError("latent", "a 4D audio or 5D video latent", f"shape {list(samples.shape)}")
    shape = (samples.shape[0], 1, samples.shape[2]) + (1,) * (samples.ndim - 3)
    out = dict(latent)
    out["noise_mask"] = torch.zeros(shape, dtype=torch.float32, device=samples.device)
    return (out,)


# --- generated keyframes: placement ---

def parse_frame_index_list(value: str, field: str, expected: int | None, first: int, last: int) -> list[int]:
    """Comma / space separated pixel frames, in the order written: the count (when given), no
    repeats, each in `[first, last]`."""
    parts = [p for p in re.split(r"[,\s]+", str(value).strip()) if p]
    if not parts:
        raise NodeInputError(field, "at least one frame index (or an empty field)", repr(value))
    bad = [p for p in parts if not re.fullmatch(r"-?\d+", p)]
    if bad:
        raise NodeInputError(field, "a comma-separated list of integers", ", ".join(repr(p) for p in bad))
    indices = [int(p) for p in parts]
    if expected is not None and len(indices) != expected:
        raise NodeInputError(field, f"exactly {expected} indices", f"{len(indices)}")
    repeated = sorted({i for i in indices if indices.count(i) > 1})
    if repeated:
        raise NodeInputError(field, "each pixel frame once", f"{repeated} more than once")
    outside = [i for i in indices if not first <= i <= last]
    if outside:
        raise NodeInputError(field, f"indices between {first} and {last}", str(outside))
    return indices


def detailing_positions(num_frames: int, interval: float) -> list[int]:
    """About one keyframe every `interval` pixel frames of an `num_frames` canvas: the last
    `count` of `count + 1` rounded evenly spaced frames over `[0, N - 1]`, frame 0 left out."""
    import torch

    if num_frames <= 1:
        raise NodeInputError("latent", "a video with pixel frames after the first to place keyframes on",
                             f"{num_frames} frame(s)")
    count = max(1, round((num_frames - 1) / interval))
    spaced = torch.linspace(0, num_frames - 1, count + 1).round().to(torch.int64).tolist()[1:]
    return [i for i in spaced if i != 0]


def occupied_pixel_frames(latent: dict, scale: int, num_frames: int, video_frames: int) -> set[int]:
    """Pixel frames an image already holds among the first `video_frames` latent frames: latent
    frame 0 -> 0, the last -> N - 1, others -> `scale * t`; held = noise mask below 1 - 1e-4
    somewhere, or (without a mask) a non-zero latent frame."""
    import torch

    samples = latent["samples"]
    scan = min(max(int(video_frames), 0), samples.shape[2])

    def pixel(index: int) -> int:
        value = 0 if index <= 0 else num_frames - 1 if index >= scan - 1 else index * scale
        return min(max(value, 0), num_frames - 1)

    mask = latent.get("noise_mask")
    if mask is not None and getattr(mask, "ndim", 0) >= 3:
        return {pixel(i) for i in range(min(mask.shape[2], scan)) if bool(torch.any(mask[:, :, i] < OCCUPIED_BELOW))}
    return {pixel(i) for i in range(scan) if bool(torch.any(samples[:, :, i] != 0))}


def keyframe_start_frames(keyframe_idxs: Any) -> set[int]:
    """The distinct start times (pixel frames) of the recorded guide / keyframe tokens."""
    if keyframe_idxs is None:
        return set()
    starts = keyframe_idxs[:, 0, :, 0] if keyframe_idxs.ndim >= 4 else keyframe_idxs[:, 0]
    return {int(round(float(v))) for v in starts.flatten().tolist()}


def scale_frame_indices(indices: list[int], old_frames: int, new_frames: int) -> list[int]:
    """Pixel indices moved from an `old_frames` canvas to a `new_frames` one (same moments)."""
    if old_frames <= 1 or new_frames <= 1:
        raise NodeInputError("keyframes", "keyframes recorded on and moved to canvases of 2 frames or more",
                             f"{old_frames} -> {new_frames} frames")
    factor = (new_frames - 1) / (old_frames - 1)
    moved = [int(round(i * factor)) for i in indices]
    repeated = sorted({i for i in moved if moved.count(i) > 1})
    if repeated:
        raise NodeInputError("keyframes", "indices that stay distinct on the new canvas", f"{repeated} collide")
    return moved


def single_frame_coords(batch: int, height: int, width: int, frame: int, scale_factors: tuple[int, int, int],
                        device: Any = None) -> Any:
    """`[B, 3, h*w, 2]` pixel spans of one latent frame standing for the single pixel frame `frame`
    (the causal first-frame rule: time `[frame, frame + 1)`)."""
    import torch

    from comfy_core.families.ltxv.dit import latent_coords, latent_to_pixel_coords

    start = latent_coords(1, height, width, batch, device)
    pixel = latent_to_pixel_coords(torch.stack([start, start + 1], dim=-1), scale_factors, causal_fix=True)
    pixel[:, 0] += frame
    return pixel


def _plain_video(latent: Any, name: str, hint: str) -> Any:
    import torch

    from comfy_core.latent.nested import is_nested

    samples = latent.get("samples") if isinstance(latent, dict) else None
    if not isinstance(samples, torch.Tensor) or is_nested(samples) or samples.ndim != 5:
        raise NodeInputError(name, f"a plain 5D video latent ({hint})", describe(latent))
    return samples


def _grow_entry(conditioning: list, index: int, extra_tokens: int, extra_frames: int) -> list:
    entries = lt._conditioning_value(conditioning, "guide_attention_entries") or []
    if index >= len(entries):
        raise NodeInputError("positive", f"the guide entry {index} the generated keyframes recorded (the "
                                         "conditioning was rebuilt after they were added)",
                             f"{len(entries)} entries")
    grown = dict(entries[index])
    grown["pre_filter_count"] = grown["pre_filter_count"] + extra_tokens
    shape = list(grown["latent_shape"])
    shape[0] += extra_frames
    grown["latent_shape"] = shape
    return set_values(conditioning, {"guide_attention_entries": [*entries[:index], grown, *entries[index + 1:]]})


def _initial_keyframes(keyframes: dict, samples: Any, indices: list[int], scale: int) -> Any:
    """The content of the new keyframe slots from a connected latent: a batch of single frames
    regrouped per video, a longer video sampled at the nearest latent frame of each index, else
    its frames padded with zeros to the slot count."""
    import torch

    given = keyframes.get("samples") if isinstance(keyframes, dict) else None
    if not isinstance(given, torch.Tensor) or given.ndim != 5:
        raise NodeInputError("keyframes", "a 5D latent", describe(keyframes))
    count = len(indices)
    recorded = keyframes.get("generated_keyframe_indices") is not None
    batch = samples.shape[0]
    if given.shape[2] == 1 and given.shape[0] != batch:  # a batch of single frames, regrouped per video
        if given.shape[0] % batch:
            raise NodeInputError("keyframes", f"a batch that is a multiple of the video's ({batch})",
                                 str(given.shape[0]))
        given = given.reshape(batch, given.shape[0] // batch, given.shape[1], *given.shape[3:]).movedim(1, 2)
    if not recorded and given.shape[2] > count:  # a video: copy its nearest latent frame at each slot
        nearest = [min(max(round(i / scale), 0), given.shape[2] - 1) for i in indices]
        given = given[:, :, nearest]
    given = given.to(samples)
    if given.shape[:2] != samples.shape[:2] or given.shape[3:] != samples.shape[3:]:
        raise NodeInputError("keyframes", f"whole latent frames of {list(samples.shape[:2])} x "
                                          f"{list(samples.shape[3:])}", f"shape {list(given.shape)}")
    if given.shape[2] > count:
        raise NodeInputError("keyframes", f"at most {count} frames (the free slots)", str(given.shape[2]))
    pad = torch.zeros((*samples.shape[:2], count - given.shape[2], *samples.shape[3:]), dtype=samples.dtype,
                      device=samples.device)
    return torch.cat([given, pad], dim=2)


@v3_node("LTXVAddGeneratedKeyframes", display_name="LTXV Add Generated Keyframes",
         category="model/conditioning/ltxv", python_module=KEYFRAMES_MODULE,
         search_aliases=["detailing", "dfr", "generated keyframes"],
         description="Append detailing keyframes to a video latent. Each keyframe is one latent frame of tokens whose "
                     "RoPE position spans a single pixel frame; they are denoised with the video and are not part of "
                     "the decoded output. Placement is one slot every interval_frames pixels, skipping I2V frames, "
                     "existing guides, and detailing keyframes already on the cond. Connected keyframes are content "
                     "only and are re-placed on this canvas unless frame_indices is set. Pull them back out with LTXV "
                     "Separate Generated Keyframes. Requires a checkpoint trained for generated keyframes (one "
                     "carrying keyframes_abs_pos_embedding).",
         inputs=[Socket("positive", "CONDITIONING", tooltip="Positive conditioning the keyframes are attached to."),
                 Socket("negative", "CONDITIONING", tooltip="Negative conditioning the keyframes are attached to."),
                 Socket("vae", "VAE", tooltip="Only used to read the latent scale factors."),
                 Socket("latent", "LATENT", tooltip="Plain 5D video latent to generate keyframes alongside. Add them "
                                                    "before Concat AV Latent."),
                 Int("interval_frames", optional=True, default=24, min=1, max=1024,
                     tooltip="Pixel-frame stride for auto placement. Default 24 is about one keyframe per second at "
                             "24 fps. Occupied pixels are skipped. Ignored when frame_indices is set."),
                 Socket("keyframes", "LATENT", optional=True,
                        tooltip="Optional content to initialize the new keyframes with. Connect keyframes from an "
                                "earlier Separate (same spatial size), or a plain video latent to copy the nearest "
                                "frame at each new slot (e.g. after temporal upscale). These are still denoised, not "
                                "pinned as guides. Recorded indices on a keyframes latent are ignored unless "
                                "frame_indices is set. Only has an effect when sampling starts below sigma 1."),
                 String("frame_indices", optional=True, default="",
                        tooltip="Optional pixel-frame indices. Leave empty to place from interval_frames on the "
                                "current canvas. When set, this list is the placement (connected keyframes are "
                                "matched in order). The last frame is allowed; frame 0 is not (it is already a "
                                "standalone token).")],
         outputs=[Output("CONDITIONING", "positive",
                         tooltip="Positive conditioning with generated-keyframe attention attached."),
                  Output("CONDITIONING", "negative",
                         tooltip="Negative conditioning with generated-keyframe attention attached."),
                  Output("LATENT", "latent", tooltip="Video latent with generated keyframes appended on T.")])
def ltxv_add_generated_keyframes(positive: list, negative: list, vae: Any, latent: dict, interval_frames: int = 24,
                                 keyframes: dict | None = None, frame_indices: str = "") -> tuple[list, list, dict]:
    import torch

    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    samples = _plain_video(latent, "latent", "add keyframes before Concat AV Latent")
    vae = checks.vae(vae)
    batch, _, frames, height, width = samples.shape
    tokens_per_frame = height * width
    record = lt._conditioning_value(positive, "generated_keyframes")
    if record is not None:
        if record["tokens_per_frame"] != tokens_per_frame:
            raise NodeInputError("latent", f"the {record['tokens_per_frame']} tokens per frame the existing keyframes "
                                           "were added at (the latent was rescaled since)", str(tokens_per_frame))
        if record["first_latent_frame"] + record["num_keyframes"] != frames:
            raise NodeInputError("latent", "the existing keyframes last (add every keyframe before any guide)",
                                 f"{frames - record['first_latent_frame'] - record['num_keyframes']} frames after them")
    scale_factors = lt._scale_factors(vae)
    scale = scale_factors[0]
    keyframe_idxs, guides = lt.keyframe_count(positive, samples.shape)
    video_frames = frames - guides
    pixel_frames = (video_frames - 1) * scale + 1
    occupied = occupied_pixel_frames(latent, scale, pixel_frames, video_frames) | keyframe_start_frames(keyframe_idxs)
    previous = list(record["frame_indices"]) if record is not None else []
    occupied |= set(previous)
    if frame_indices and str(frame_indices).strip():
        if pixel_frames < 2:
            raise NodeInputError("latent", "a video with pixel frames after the first", f"{pixel_frames} frame(s)")
        indices = parse_frame_index_list(frame_indices, "frame_indices", None, 1, pixel_frames - 1)
    else:
        if isinstance(interval_frames, bool) or not isinstance(interval_frames, (int, float)) or interval_frames <= 0:
            raise NodeInputError("interval_frames", "a stride > 0", repr(interval_frames))
        indices = [i for i in detailing_positions(pixel_frames, float(interval_frames)) if i not in occupied]
        if not indices:
            raise NodeInputError("interval_frames", "a free pixel frame among the candidates (or frame_indices)",
                                 "every candidate already holds an image, a guide or a keyframe")
    clashes = sorted(set(indices) & occupied)
    if clashes:
        raise NodeInputError("frame_indices", "pixel frames no image, guide or keyframe holds yet", str(clashes))
    count = len(indices)
    if keyframes is not None:
        content = _initial_keyframes(keyframes, samples, indices, scale)
    else:
        content = torch.zeros((batch, samples.shape[1], count, height, width), dtype=samples.dtype,
                              device=samples.device)
    coords = torch.cat([single_frame_coords(batch, height, width, i, scale_factors, samples.device) for i in indices],
                       dim=2)
    if keyframe_idxs is not None:
        coords = torch.cat([keyframe_idxs, coords.to(keyframe_idxs)], dim=2)
    entries = lt._conditioning_value(positive, "guide_attention_entries") or []
    new_record = {"first_latent_frame": record["first_latent_frame"] if record else frames,
                  "num_keyframes": (record["num_keyframes"] if record else 0) + count,
                  "frame_indices": previous + list(indices),
                  "num_pixel_frames": pixel_frames,
                  "guide_entry_index": record["guide_entry_index"] if record else len(entries),
                  "tokens_per_frame": tokens_per_frame}
    values = {"keyframe_idxs": coords, "generated_keyframes": new_record}
    positive, negative = set_values(positive, values), set_values(negative, values)
    if record is not None:
        index = record["guide_entry_index"]
        positive = _grow_entry(positive, index, count * tokens_per_frame, count)
        negative = _grow_entry(negative, index, count * tokens_per_frame, count)
    else:
        positive, negative = lt.append_guide_attention_entry(positive, negative, count * tokens_per_frame,
                                                             [count, height, width], 1.0)
    noise_mask = lt.noise_mask_of(latent)
    ones = torch.ones((noise_mask.shape[0], 1, count, noise_mask.shape[3], noise_mask.shape[4]),
                      dtype=noise_mask.dtype, device=noise_mask.device)
    out = dict(latent)
    out["samples"] = torch.cat([samples, content], dim=2)
    out["noise_mask"] = torch.cat([noise_mask, ones], dim=2)
    return positive, negative, out


@v3_node("LTXVSeparateGeneratedKeyframes", display_name="LTXV Separate Generated Keyframes",
         category="model/conditioning/ltxv", python_module=KEYFRAMES_MODULE,
         search_aliases=["detailing", "dfr", "peel keyframes"],
         description="Split the generated keyframes added by LTXV Add Generated Keyframes back out of a sampled latent, "
                     "and remove them from the conditioning. Separate them before spatially upscaling the video latent. "
                     "Do not run LTXV Crop Guides first — it treats generated keyframes as disposable guides and drops "
                     "them.",
         inputs=[*_PAIR, Socket("latent", "LATENT"),
                 Boolean("keyframes_to_batch", default=False,
                         tooltip="Return the keyframes as a batch of single-frame latents. Leave off to get them as one "
                                 "multi-frame latent, which is what the latent upsampler and a later Add Generated "
                                 "Keyframes expect.")],
         outputs=[Output("CONDITIONING", "positive",
                         tooltip="Positive conditioning with generated-keyframe metadata removed."),
                  Output("CONDITIONING", "negative",
                         tooltip="Negative conditioning with generated-keyframe metadata removed."),
                  Output("LATENT", "latent", tooltip="Video latent with the generated keyframes stripped."),
                  Output("LATENT", "keyframes",
                         tooltip="The peeled keyframes, labeled with generated_keyframe_indices and "
                                 "generated_keyframe_num_frames. Feed these to a later Add Generated Keyframes to "
                                 "initialize new slots, or to Generated Keyframes To Guides to pin them as frozen image "
                                 "guides (indices are remapped if the canvas length changed).")])
def ltxv_separate_generated_keyframes(positive: list, negative: list, latent: dict,
                                      keyframes_to_batch: bool = False) -> tuple[list, list, dict, dict]:
    import torch

    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    record = lt._conditioning_value(positive, "generated_keyframes")
    if record is None:
        raise NodeInputError("positive", "a conditioning with generated keyframes (LTXV Add Generated Keyframes)",
                             "none recorded")
    samples = _plain_video(latent, "latent", "split an AV latent with Separate AV Latent first")
    tokens_per_frame = samples.shape[3] * samples.shape[4]
    if record["tokens_per_frame"] != tokens_per_frame:
        raise NodeInputError("latent", f"the {record['tokens_per_frame']} tokens per frame the keyframes were added "
                                       "at (separate them before upscaling)", str(tokens_per_frame))
    first, count = record["first_latent_frame"], record["num_keyframes"]
    end = first + count
    if end > samples.shape[2]:
        raise NodeInputError("latent", f"a latent holding frames [{first}, {end})", f"{samples.shape[2]} frames")
    peeled = samples[:, :, first:end].clone()
    if keyframes_to_batch:
        b, c, _, h, w = peeled.shape
        peeled = peeled.movedim(2, 1).reshape(b * count, c, 1, h, w)
    noise_mask = lt.noise_mask_of(latent)
    _, guides = lt.keyframe_count(positive, samples.shape)
    first_token = (first - (samples.shape[2] - guides)) * tokens_per_frame
    index = record["guide_entry_index"]

    def stripped(cond: list) -> list:
        idxs = lt._conditioning_value(cond, "keyframe_idxs")
        if idxs is not None:
            idxs = torch.cat([idxs[:, :, :first_token], idxs[:, :, first_token + count * tokens_per_frame:]], dim=2)
            idxs = idxs if idxs.shape[2] > 0 else None
        entries = lt._conditioning_value(cond, "guide_attention_entries")
        if entries and index < len(entries):
            entries = (entries[:index] + entries[index + 1:]) or None
        else:
            entries = None
        return set_values(cond, {"keyframe_idxs": idxs, "guide_attention_entries": entries,
                                 "generated_keyframes": None})

    out = dict(latent)
    out["samples"] = torch.cat([samples[:, :, :first], samples[:, :, end:]], dim=2)
    out["noise_mask"] = torch.cat([noise_mask[:, :, :first], noise_mask[:, :, end:]], dim=2)
    pixel_frames = record.get("num_pixel_frames")
    if pixel_frames is None:
        pixel_frames = (first - 1) * DEFAULT_TEMPORAL_SCALE + 1
    peeled_out = {"samples": peeled, "generated_keyframe_indices": list(record["frame_indices"]),
                  "generated_keyframe_num_frames": int(pixel_frames)}
    return stripped(positive), stripped(negative), out, peeled_out


def _single_frames(samples: Any) -> Any:
    """`[B, C, K, h, w]` -> `[B * K, C, 1, h, w]` (each keyframe its own one-frame latent)."""
    if samples.shape[2] == 1:
        return samples
    b, c, k, h, w = samples.shape
    return samples.movedim(2, 1).reshape(b * k, c, 1, h, w)


@v3_node("LTXVGeneratedKeyframesToGuides", display_name="LTXV Generated Keyframes to Guides",
         category="model/conditioning/ltxv", python_module=KEYFRAMES_MODULE,
         search_aliases=["detailing", "dfr", "keyframe guides"],
         description="Pin generated keyframes from an earlier stage as frozen image guides on a later canvas. They are "
                     "decoded as standalone frames, resized if needed, and written with noise_mask=0 so they are not "
                     "denoised again. After a temporal upscale, recorded indices are scaled from the canvas they were "
                     "generated on onto this one (same moments). Use override_frame_indices to set positions "
                     "explicitly. To keep generating (and denoising) keyframes at new positions, use Add Generated "
                     "Keyframes instead.",
         inputs=[*_PAIR, Socket("vae", "VAE"),
                 Socket("latent", "LATENT",
                        tooltip="The target video latent to add the guides to, e.g. the temporally upscaled one."),
                 Socket("keyframes", "LATENT",
                        tooltip="The keyframes output of LTXV Separate Generated Keyframes, which carries the pixel "
                                "frame index each keyframe was generated at."),
                 Float("strength", default=1.0, min=0.0, max=10.0, step=0.01,
                       tooltip="Guide strength. 1.0 is a hard pin; lower values relax it."),
                 String("override_frame_indices", optional=True, default="",
                        tooltip="Optional — pin at these pixel frames instead of the recorded (or auto-scaled) "
                                "positions. Provide one index per keyframe. Leave empty to reuse recorded positions, "
                                "or to scale them when the target canvas is a different length (e.g. after temporal "
                                "x2).")],
         outputs=[Output("CONDITIONING", "positive",
                         tooltip="Positive conditioning with the keyframes pinned as image guides."),
                  Output("CONDITIONING", "negative",
                         tooltip="Negative conditioning with the keyframes pinned as image guides."),
                  Output("LATENT", "latent", tooltip="Target video latent with the keyframes added as frozen guides.")])
def ltxv_generated_keyframes_to_guides(positive: list, negative: list, vae: Any, latent: dict, keyframes: dict,
                                       strength: float, override_frame_indices: str = "") -> tuple[list, list, dict]:
    checks.conditioning(positive, "positive"), checks.conditioning(negative, "negative")
    indices = keyframes.get("generated_keyframe_indices") if isinstance(keyframes, dict) else None
    if indices is None:
        raise NodeInputError("keyframes", "the keyframes output of LTXV Separate Generated Keyframes (it carries "
                                          "their pixel frames)", describe(keyframes))
    if lt._conditioning_value(positive, "generated_keyframes") is not None:
        raise NodeInputError("positive", "the conditioning out of LTXV Separate Generated Keyframes",
                             "one still carrying generated keyframes")
    samples = _plain_video(latent, "latent", "add guides before Concat AV Latent")
    if samples.shape[0] != 1:
        raise NodeInputError("latent", "a batch of 1 (each guide is one image)", f"batch {samples.shape[0]}")
    vae = checks.vae(vae)
    strength = lt._float(strength, "strength", 0.0)
    frames = _single_frames(_plain_video(keyframes, "keyframes", "LTXV Separate Generated Keyframes' output"))
    resize = tuple(frames.shape[3:]) != tuple(samples.shape[3:])
    if resize:  # decoded one by one, encoded again at this canvas' size by LTXVAddGuide
        images = vae.decode(frames)
        guides = images.reshape(-1, *images.shape[-3:]) if images.ndim == 5 else images
    else:
        guides = frames
    if guides.shape[0] != len(indices):
        raise NodeInputError("keyframes", f"{len(indices)} keyframes (its recorded positions)", str(guides.shape[0]))
    _, guide_frames = lt.keyframe_count(positive, samples.shape)
    scale_factors = lt._scale_factors(vae)
    pixel_frames = (samples.shape[2] - guide_frames - 1) * scale_factors[0] + 1
    indices = list(indices)
    if override_frame_indices and str(override_frame_indices).strip():
        indices = parse_frame_index_list(override_frame_indices, "override_frame_indices", len(indices), 1,
                                         pixel_frames - 1)
    else:
        old = keyframes.get("generated_keyframe_num_frames")
        if old is not None and int(old) != pixel_frames:
            indices = scale_frame_indices(indices, int(old), pixel_frames)
    if indices and max(indices) >= pixel_frames:
        raise NodeInputError("keyframes", f"positions inside this latent's {pixel_frames} frames", str(max(indices)))
    for k, frame in enumerate(indices):
        if resize:
            positive, negative, latent = lt.ltxv_add_guide(positive, negative, vae, latent, guides[k:k + 1],
                                                           int(frame), strength)
        else:
            positive, negative, target, mask = lt.attach_guide(positive, negative, latent["samples"],
                                                               lt.noise_mask_of(latent), guides[k:k + 1], int(frame),
                                                               strength, scale_factors)
            latent = {**latent, "samples": target, "noise_mask": mask}
    return positive, negative, latent


# --- guidance ---

class ModalityGuidance:
    """`sampler_post_cfg_function` of LTXVModalityGuidance (ComfyUI's `comfy_extras/nodes_lt.py`,
    after LTX-2's reference guider): while `sigma_end < sigma <= sigma_start`, one more pass of
    the positive with the audio->video and video->audio cross-attention off, and
    `cfg + (cond - uncoupled) * (modality_scale - 1)`."""

    def __init__(self, scale: float, sigma_start: float, sigma_end: float) -> None:
        self.scale, self.sigma_start, self.sigma_end = scale, sigma_start, sigma_end

    def __call__(self, args: dict) -> Any:
        from comfy_core.sampling import cond_batch

        guided = args["denoised"]
        if math.isclose(self.scale, 1.0):
            return guided
        sigma = float(args["sigma"][0])
        if sigma > self.sigma_start or sigma <= self.sigma_end:
            return guided
        options = dict(args["model_options"])
        options["transformer_options"] = {**options.get("transformer_options", {}),
                                          "a2v_cross_attn": False, "v2a_cross_attn": False}
        (uncoupled,) = cond_batch.calc_cond_batch_in_force()(args["model"], [args["cond"]], args["input"],
                                                              args["sigma"], options)
        return guided + (args["cond_denoised"] - uncoupled) * (self.scale - 1.0)

    def cache_signature(self) -> tuple:
        return ("ModalityGuidance", self.scale, self.sigma_start, self.sigma_end)


@v3_node("LTXVModalityGuidance", display_name="LTXV Modality Guidance (A/V coupling)", category="advanced/guidance",
         python_module=lt.MODULE,
         description="Cross-modal (audio-video) guidance for LTXV-AV. Runs one extra forward pass per step with the "
                     "a2v/v2a cross-attention severed, then pushes the result toward the coupled prediction - "
                     "strengthening audio-visual sync (e.g. lip-sync). Reference default modality_scale is 3.0. Stacks "
                     "with the dual-CFG guider and STG. Set to 1.0 to disable (no extra pass).",
         inputs=[Socket("model", "MODEL"),
                 Float("modality_scale", default=3.0, min=1.0, max=100.0, step=0.1, round=0.01),
                 Float("start_percent", default=0.0, min=0.0, max=1.0, step=0.001, advanced=True),
                 Float("end_percent", default=1.0, min=0.0, max=1.0, step=0.001, advanced=True)],
         outputs=[Output("MODEL")])
def ltxv_modality_guidance(model: Any, modality_scale: float, start_percent: float, end_percent: float) -> tuple[Any]:
    model = checks.model(model)
    scale = lt._float(modality_scale, "modality_scale", 1.0)
    sampling = model.get_model_object("model_sampling")
    start = float(sampling.percent_to_sigma(lt._float(start_percent, "start_percent", 0.0, 1.0)))
    end = float(sampling.percent_to_sigma(lt._float(end_percent, "end_percent", 0.0, 1.0)))
    patched = model.clone()
    patched.add_option_function("sampler_post_cfg_function", ModalityGuidance(scale, start, end))
    return (patched,)


# --- context windows ---

def ltxv_latent_frames(frames: int) -> int:
    """Video frames to LTX latent frames (8x temporal compression, the first frame alone)."""
    return max((frames - 1) // 8 + 1, 1)


@v3_node("LTXVContextWindows", display_name="LTXV Context Windows", category="model/patch",
         python_module="comfy_extras.nodes_context_windows", description="Set context windows for LTXV-like models.",
         experimental=True,
         inputs=[Socket("model", "MODEL", tooltip=MODEL_TIP),
                 Int("context_length", min=1, max=MAX_RESOLUTION, step=8, default=145,
                     tooltip="The length of the context window in real frames. Must be 8*n + 1."),
                 Int("context_overlap", min=0, step=8, default=40,
                     tooltip="The overlap of the context window in real frames."),
                 Combo("context_schedule", SCHEDULES, default="standard_uniform", tooltip=SCHEDULE_TIP),
                 Int("context_stride", min=1, default=1, tooltip=STRIDE_TIP, advanced=True),
                 Boolean("closed_loop", default=False, tooltip=LOOP_TIP, advanced=True),
                 Combo("fuse_method", FUSE_METHODS, default="pyramid", tooltip=FUSE_TIP),
                 Boolean("freenoise", default=True, tooltip=FREENOISE_TIP, advanced=True),
                 Boolean("retain_first_frame", default=False,
                         tooltip="Retain the first latent frame in every context window (may help retain initial "
                                 "reference)."),
                 Boolean("split_conds_to_windows", default=False, tooltip=SPLIT_TIP, advanced=True)],
         outputs=OUTPUTS)
def ltxv_context_windows(model: Any, context_length: int, context_overlap: int, context_schedule: str,
                         fuse_method: str, freenoise: bool = True, retain_first_frame: bool = False,
                         split_conds_to_windows: bool = False, context_stride: int = 1,
                         closed_loop: bool = False) -> tuple[Any]:
    """Context windows along an LTX latent's frame axis, lengths in video frames (145 frames: 19
    latent frames; overlap 40: 5); `retain_first_frame` keeps latent frame 0 (the I2V image, which
    LTX holds in the latent itself) at the start of every window, in the conds and the latent."""
    for name, value in (("context_length", context_length), ("context_overlap", context_overlap)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise NodeInputError(name, "an INT", repr(value))
    retained = "0" if _flag(retain_first_frame, "retain_first_frame") else ""
    return _patched(model, ltxv_latent_frames(context_length), max(context_overlap // 8, 0), context_schedule,
                    context_stride, closed_loop, fuse_method, 2, freenoise, retained, split_conds_to_windows,
                    retained)
