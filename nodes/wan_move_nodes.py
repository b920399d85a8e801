"""Wan-Move's nodes with today's ComfyUI's names, V3 schemas and semantics
(comfy_extras/nodes_wanmove.py); the maths in comfy_core/latent/wan_move.py.

Wan-Move (a Wan 2.1 I2V 14B fine-tune, loaded as any Wan I2V diffusion model: ComfyUI needs no
network change for it) is steered by point tracks, the TRACKS wire value
`{"track_path": [T, N, 2] pixels, "track_visibility": bool [T, N]}`:

- GenerateTracks: N parallel tracks along a line or Bezier curve, eased in time (and the frame
  count, `track_length`).
- WanMoveTracksFromCoords: tracks from the JSON of `{"x", "y"}` points the track editors write.
- WanMoveConcatTrack: two sets of tracks side by side.
- WanMoveVisualizeTracks: the tracks drawn over images (a start image is repeated per frame).
- WanMoveTrackToVideo: WanImageToVideo's conditioning (start frames then grey, encoded, and the
  mask of the frames given) with the start latent's features copied along the tracks into the
  later latent frames (`strength` blends them in). ComfyUI's code writes the moved features into
  the encoded latent in place, so its negative conditioning carries them too (as the one `y`
  Wan-Move's own pipeline gives both passes); so here. ComfyUI asserts on `batch_size` > 1 with
  tracks; here the batch items share the one moved latent, as they share the unmoved one.

A mask (`track_mask`) says which frames are visible, for every track: it must have one frame per
track frame (ComfyUI makes a `[frames, 1]` visibility of it that only one-track paths survive).
"""
from __future__ import annotations

from typing import Any

from graph.native import MAX_RESOLUTION
from graph.v3_schema import Boolean, Combo, Float, Int, Output, Socket, String, v3_node
import nodes.checks as checks
import nodes.wan_conditioning as wan
from nodes.errors import NodeInputError, describe

MODULE = "comfy_extras.nodes_wanmove"
CATEGORY = "model/conditioning/video_models"
TRACKS = "TRACKS"
CHANNELS = 16  # Wan 2.1's latent
DOWNSCALE = 8
INTERPOLATIONS = ["linear", "ease_in", "ease_out", "ease_in_out", "constant"]
_NORMALISED = "Normalized {} coordinate (0-1) for {} position."
_BEZIER = "Normalized {} control point for Bezier curve. Only used when 'bezier' is enabled."


def _tracks(value: Any, input_name: str) -> tuple:
    from comfy_core.latent.wan_move import TracksError, checked_tracks

    try:
        return checked_tracks(value)
    except TracksError as exc:
        raise NodeInputError(input_name, "TRACKS (GenerateTracks, WanMoveTracksFromCoords)", str(exc)) from None


def _visibility(track_mask: Any, frames: int, tracks: int) -> Any:
    from comfy_core.latent.wan_move import TracksError, mask_visibility

    if track_mask is None:
        return None
    try:
        return mask_visibility(checks.mask_batch(track_mask, "track_mask"), frames, tracks)
    except TracksError as exc:
        raise NodeInputError("track_mask", f"a MASK of {frames} frames", str(exc)) from None


@v3_node("GenerateTracks", category=CATEGORY, python_module=MODULE,
         search_aliases=["motion paths", "camera movement", "trajectory"],
         inputs=[Int("width", default=832, min=16, max=4096, step=16),
                 Int("height", default=480, min=16, max=4096, step=16),
                 Float("start_x", default=0.0, min=0.0, max=1.0, step=0.01, tooltip=_NORMALISED.format("X", "start")),
                 Float("start_y", default=0.0, min=0.0, max=1.0, step=0.01, tooltip=_NORMALISED.format("Y", "start")),
                 Float("end_x", default=1.0, min=0.0, max=1.0, step=0.01, tooltip=_NORMALISED.format("X", "end")),
                 Float("end_y", default=1.0, min=0.0, max=1.0, step=0.01, tooltip=_NORMALISED.format("Y", "end")),
                 Int("num_frames", default=81, min=1, max=1024),
                 Int("num_tracks", default=5, min=1, max=100),
                 Float("track_spread", default=0.025, min=0.0, max=1.0, step=0.001,
                       tooltip="Normalized distance between tracks. Tracks are spread perpendicular to the motion "
                               "direction."),
                 Boolean("bezier", default=False,
                         tooltip="Enable Bezier curve path using the mid point as control point."),
                 Float("mid_x", default=0.5, min=0.0, max=1.0, step=0.01, tooltip=_BEZIER.format("X")),
                 Float("mid_y", default=0.5, min=0.0, max=1.0, step=0.01, tooltip=_BEZIER.format("Y")),
                 Combo("interpolation", INTERPOLATIONS,
                       tooltip="Controls the timing/speed of movement along the path."),
                 Socket("track_mask", "MASK", optional=True, tooltip="Optional mask to indicate visible frames.")],
         outputs=[Output(TRACKS), Output("INT", "track_length")])
def generate_tracks(width: int, height: int, start_x: float, start_y: float, end_x: float, end_y: float,
                    num_frames: int, num_tracks: int, track_spread: float, bezier: bool, mid_x: float, mid_y: float,
                    interpolation: str, track_mask: Any = None) -> tuple:
    """Tracks along a line (or a Bezier curve through the mid point's pull), spread across it."""
    from comfy_core.latent.wan_move import generate_tracks as make, tracks_value

    width, height = checks.integer(width, "width", 16, 4096), checks.integer(height, "height", 16, 4096)
    coords = {name: checks.number(value, name, 0.0, 1.0) for name, value in
              (("start_x", start_x), ("start_y", start_y), ("end_x", end_x), ("end_y", end_y),
               ("mid_x", mid_x), ("mid_y", mid_y))}
    num_frames = checks.integer(num_frames, "num_frames", 1, 1024)
    num_tracks = checks.integer(num_tracks, "num_tracks", 1, 100)
    track_spread = checks.number(track_spread, "track_spread", 0.0, 1.0)
    if not isinstance(bezier, bool):
        raise NodeInputError("bezier", "a BOOLEAN", repr(bezier))
    interpolation = checks.choice(interpolation, INTERPOLATIONS, "interpolation")
    path = make(width, height, (coords["start_x"], coords["start_y"]), (coords["end_x"], coords["end_y"]),
                num_frames, num_tracks, track_spread,
                mid=(coords["mid_x"], coords["mid_y"]) if bezier else None, interpolation=interpolation)
    return tracks_value(path, _visibility(track_mask, num_frames, num_tracks)), num_frames


@v3_node("WanMoveTracksFromCoords", category=CATEGORY, python_module=MODULE,
         inputs=[String("track_coords", default="[]", optional=True, forceInput=True),
                 Socket("track_mask", "MASK", optional=True)],
         outputs=[Output(TRACKS), Output("INT", "track_length")])
def wan_move_tracks_from_coords(track_coords: Any = "[]", track_mask: Any = None) -> tuple:
    """Tracks from `[{"x": .., "y": ..}, ...]` (one track) or a list of such lists, single quotes
    read as double (as ComfyUI's parser); T is the first track's length."""
    from comfy_core.latent.motion_tracks import TrackFormatError, parse_tracks
    from comfy_core.latent.wan_move import TracksError, path_from_points, tracks_value

    expected = 'a JSON track of {"x": ..., "y": ...} points, or a list of such tracks'
    try:
        batches = parse_tracks(checks.text(track_coords, "track_coords"))
    except TrackFormatError as exc:
        raise NodeInputError("track_coords", expected, str(exc)) from None
    if len(batches) != 1:
        raise NodeInputError("track_coords", expected, "no tracks" if not batches else f"{len(batches)} lists of tracks")
    try:
        path = path_from_points(batches[0])
    except TracksError as exc:
        raise NodeInputError("track_coords", expected, str(exc)) from None
    return tracks_value(path, _visibility(track_mask, path.shape[0], path.shape[1])), int(path.shape[0])


@v3_node("WanMoveConcatTrack", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("tracks_1", TRACKS), Socket("tracks_2", TRACKS, optional=True)],
         outputs=[Output(TRACKS)])
def wan_move_concat_track(tracks_1: Any, tracks_2: Any = None) -> tuple:
    """`tracks_1`'s tracks then `tracks_2`'s (the same frames); `tracks_1` alone when there is no second."""
    from comfy_core.latent.wan_move import TracksError, concat_tracks

    _tracks(tracks_1, "tracks_1")
    if tracks_2 is None:
        return (tracks_1,)
    _tracks(tracks_2, "tracks_2")
    try:
        return (concat_tracks(tracks_1, tracks_2),)
    except TracksError as exc:
        raise NodeInputError("tracks_2", "tracks of as many frames as tracks_1", str(exc)) from None


@v3_node("WanMoveVisualizeTracks", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("images", "IMAGE"), Socket("tracks", TRACKS, optional=True),
                 Int("line_resolution", default=24, min=1, max=1024),
                 Int("circle_size", default=12, min=1, max=128, advanced=True),
                 Float("opacity", default=0.75, min=0.0, max=1.0, step=0.01),
                 Int("line_width", default=16, min=1, max=128, advanced=True)],
         outputs=[Output("IMAGE")])
def wan_move_visualize_tracks(images: Any, line_resolution: int, circle_size: int, opacity: float, line_width: int,
                              tracks: Any = None) -> tuple:
    """The tracks drawn over the frames: one image per track frame, or fewer images repeated to
    that count (a start image alone is drawn on in every frame); `line_resolution` is how many
    past points a trail reaches back."""
    from comfy_core.latent.wan_move import draw_tracks

    images = checks.image_batch(images, "images")
    if tracks is None:
        return (images,)
    path, visibility = _tracks(tracks, "tracks")
    history = checks.integer(line_resolution, "line_resolution", 1, 1024)
    radius = checks.integer(circle_size, "circle_size", 1, 128)
    opacity = checks.number(opacity, "opacity", 0.0, 1.0)
    line_width = checks.integer(line_width, "line_width", 1, 128)
    frames = path.shape[0]
    if images.shape[-1] != 3:
        raise NodeInputError("images", "RGB images (3 channels)", describe(images))
    if frames % images.shape[0]:
        raise NodeInputError("images", f"the tracks' {frames} frames, or a number of images that divides it "
                                       "(repeated to that count)", describe(images))
    images = images.repeat(frames // images.shape[0], 1, 1, 1)
    return (draw_tracks(images, path, visibility, history=history, radius=radius, opacity=opacity,
                        line_width=line_width),)


@v3_node("WanMoveTrackToVideo", category=CATEGORY, python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"), Socket("vae", "VAE"),
                 Socket("tracks", TRACKS, optional=True),
                 Float("strength", default=1.0, min=0.0, max=100.0, step=0.01,
                       tooltip="Strength of the track conditioning."),
                 Int("width", default=832, min=16, max=MAX_RESOLUTION, step=16),
                 Int("height", default=480, min=16, max=MAX_RESOLUTION, step=16),
                 Int("length", default=81, min=1, max=MAX_RESOLUTION, step=4),
                 Int("batch_size", default=1, min=1, max=4096),
                 Socket("start_image", "IMAGE"),
                 Socket("clip_vision_output", "CLIP_VISION_OUTPUT", optional=True)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative"),
                  Output("LATENT", "latent")])
def wan_move_track_to_video(positive: Any, negative: Any, vae: Any, strength: float, width: int, height: int,
                            length: int, batch_size: int, start_image: Any, tracks: Any = None,
                            clip_vision_output: Any = None) -> tuple:
    """Wan 2.1 I2V conditioning with the start latent's features moved along the tracks
    (module docstring); `strength` 0 (or no tracks) is WanImageToVideo's conditioning."""
    import torch

    from comfy_core.latent.video import empty_video_latent, fit_frames, grey_video, latent_frames
    from comfy_core.latent.wan_move import TracksError, latent_track_positions, move_features

    positive, negative = wan.conditionings(positive, negative)
    vae = checks.vae(vae)
    width, height, length, batch_size = wan.video_size(width, height, length, batch_size)
    strength = checks.number(strength, "strength", 0.0, 100.0)
    start_image = checks.image_batch(start_image, "start_image")
    clip_vision_output = wan.clip_vision_states(clip_vision_output, "clip_vision_output")
    moving = tracks is not None and strength > 0.0
    if moving:
        path, visibility = _tracks(tracks, "tracks")
        for name, side in (("width", width), ("height", height)):
            if side % DOWNSCALE:
                raise NodeInputError(name, f"a multiple of {DOWNSCALE} when tracks are given (a track's pixel "
                                           "falls in the latent cell of its 8 x 8 block)", repr(side))
    latent = empty_video_latent(batch_size, CHANNELS, length, height, width, DOWNSCALE)
    start = fit_frames(start_image[:length], width, height)
    video = grey_video(length, height, width, start.shape[-1], dtype=start.dtype, device=start.device)
    video[:start.shape[0]] = start
    concat = wan.encode_video(vae, video, CHANNELS)  # [1, 16, T, h, w]
    mask = torch.ones((1, 1, latent.shape[2], concat.shape[-2], concat.shape[-1]), dtype=start.dtype)
    mask[:, :, :latent_frames(start.shape[0])] = 0.0
    if moving:
        positions = latent_track_positions(path[:length], visibility[:length], width, height)
        try:
            concat = move_features(concat, positions, strength)
        except TracksError as exc:
            raise NodeInputError("vae", f"a VAE whose latent is the {width} x {height} frame in 8 x 8 cells",
                                 str(exc)) from None
    positive, negative = wan.both(positive, negative, {"concat_latent_image": concat, "concat_mask": mask})
    if clip_vision_output is not None:
        positive, negative = wan.both(positive, negative, {"clip_vision_output": clip_vision_output})
    return positive, negative, {"samples": latent}
