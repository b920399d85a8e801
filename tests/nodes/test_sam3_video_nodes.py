"""SAM3_VideoTrack and SAM3_TrackPreview (nodes/sam3_nodes.py) on the tiny SAM 3.1 file: the track data
SCAIL2ColoredMask and SAM3_TrackToMask read, the inputs' checks, and the preview video (its frames:
colour overlay at the opacity, the object's index drawn at its centroid)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.checkpoint.reader import CheckpointFile
from comfy_core.families.wan.scail_masks import PALETTE, pack_masks
from comfy_core.loading import load_sam3
from nodes.errors import NodeInputError
from nodes.sam3_nodes import COLORS, preview_frames, sam3_track_preview, sam3_track_to_mask, sam3_video_track
from nodes.wan_scail_nodes import scail2_colored_mask
from tests.fixtures.template_models_sam3 import tiny_sam3_file_state
from tests.nodes.node_context import folders_env, running_node

H, W = 48, 64
VIT_DIM = 48  # one ViT head (Sam3Config's reading): see `loaded_one_head`


@pytest.fixture(scope="module")
def loaded():
    with CheckpointFile(tiny_sam3_file_state(seed=4)) as file:
        return load_sam3(file)


@pytest.fixture(scope="module")
def loaded_one_head():
    """The tiny file with a one-head ViT (vit_dim 48, text tower as wide): tracking from an initial mask
    does not depend on the trunk's heads, and the 1008-pixel trunk runs ~10x faster on every frame.
    (Text detection keeps `loaded`: its random 16-head detector gives two frame-0 objects.)"""
    with CheckpointFile(tiny_sam3_file_state(seed=4, vit_dim=VIT_DIM)) as file:
        return load_sam3(file)


@pytest.fixture(scope="module")
def video():
    return torch.rand(3, H, W, 3, generator=torch.Generator().manual_seed(5))


def test_video_track_from_an_initial_mask_feeds_track_to_mask_and_scail(loaded_one_head, video):
    model, _clip = loaded_one_head
    mask = torch.zeros(1, H, W)
    mask[0, 8:32, 16:48] = 1.0
    (track,) = sam3_video_track(video, model, initial_mask=mask, detection_threshold=0.5, max_objects=0,
                                detect_interval=1)
    assert track["orig_size"] == (H, W) and track["n_frames"] == 3 and track["scores"] == [1.0]
    assert track["packed_masks"].shape == (3, 1, 1008, 126) and track["packed_masks"].dtype == torch.uint8
    (union,) = sam3_track_to_mask(track, "")
    assert union.shape == (3, H, W)
    # frame 0 is the initial mask (through 1008 x 1008 and back): inside 1, outside 0
    assert (union[0, 10:30, 18:46] == 1).all() and union[0, 34:, :].sum() == 0 and union[0, :, :14].sum() == 0
    driving, reference = scail2_colored_mask(track, "", "left_to_right", True, ref_track_data=track)
    assert driving.shape == (3, H, W, 3) and reference.shape == (3, H, W, 3)
    assert torch.equal(driving[0, 20, 30], torch.tensor(PALETTE[0]))  # object 0 painted blue on white
    assert torch.equal(driving[0, 40, 5], torch.ones(3))


def test_video_track_detects_from_text_each_interval(loaded, video):
    model, clip = loaded
    cond = clip.encode_from_tokens_scheduled(clip.tokenize("cat"))
    (track,) = sam3_video_track(video, model, conditioning=cond, detection_threshold=0.0, max_objects=2,
                                detect_interval=2)
    # every query of the random detector scores above 0: the first frame's detections (mask NMS, best
    # first) start the tracks, at most max_objects, each with its detection probability
    packed = track["packed_masks"]
    assert packed is not None and packed.shape[0] == 3 and 1 <= packed.shape[1] <= 2
    assert len(track["scores"]) == packed.shape[1] and all(0.0 < s < 1.0 for s in track["scores"])
    assert track["scores"] == sorted(track["scores"], reverse=True)
    (nothing,) = sam3_video_track(video, model, conditioning=cond, detection_threshold=1.0)
    assert nothing["packed_masks"] is None and nothing["n_frames"] == 3 and nothing["orig_size"] == (H, W)
    (zeros,) = sam3_track_to_mask(nothing, "")
    assert zeros.shape == (3, H, W) and zeros.sum() == 0


def test_video_track_needs_something_to_track_and_the_video_tracker(loaded, video):
    model, _ = loaded
    with pytest.raises(NodeInputError, match="initial_mask"):
        sam3_video_track(video, model)
    state = {k: v for k, v in tiny_sam3_file_state(seed=4).items() if not k.startswith("tracker.transformer.")}
    with CheckpointFile(state) as file:
        detection_only = load_sam3(file)[0]
    with pytest.raises(NodeInputError, match="video tracker"):
        sam3_video_track(video, detection_only, initial_mask=torch.ones(1, H, W))
    with pytest.raises(NodeInputError, match="detect_interval"):
        sam3_video_track(video, model, initial_mask=torch.ones(1, H, W), detect_interval=0)


def _track(masks: torch.Tensor, scores=None) -> dict:
    """Hand-made track data: masks `[T, N, h, w]` (w a multiple of 8)."""
    data = {"packed_masks": pack_masks(masks), "orig_size": (masks.shape[-2], masks.shape[-1]), "n_frames": masks.shape[0]}
    if scores is not None:
        data["scores"] = scores
    return data


def test_preview_frames_blend_each_object_and_draw_its_index():
    masks = torch.zeros(2, 2, 64, 64)
    masks[:, 0, 4:40, 4:40] = 1  # object 0
    masks[1, 1, 30:60, 30:60] = 1  # object 1, frame 1 only, overlapping object 0
    images = torch.full((2, 64, 64, 3), 0.5)
    frames = preview_frames(_track(masks, [1.0, 0.42]), images, opacity=0.25)
    assert frames.shape == (2, 64, 64, 3)
    c0, c1 = torch.tensor(COLORS[0]), torch.tensor(COLORS[1])
    assert torch.allclose(frames[0, 5, 5], 0.5 * 0.75 + c0 * 0.25)
    assert torch.allclose(frames[0, 62, 62], torch.full((3,), 0.5))
    assert torch.allclose(frames[1, 35, 35], 0.5 * 0.75 + c0 * 0.25)  # overlap: the lower index
    assert torch.allclose(frames[1, 58, 58], 0.5 * 0.75 + c1 * 0.25)
    # the "0" at object 0's centroid (21, 21): 9 x 15 pixels in its colour, a black outline around it
    glyph = (frames[0] == c0).all(-1)
    assert glyph[14:29, 17:26].sum() == 9 * 15 - 3 * 3 * 3  # the 3 x 5 zero has a 1 x 3 hole (x 3 scale)
    assert (frames[0, 13, 17:26] == 0).all()
    # object 1's score below 1 drawn too (42, scale 2) under its index
    assert (frames[1] == c1).all(-1).sum() > (frames[0] == c1).all(-1).sum()
    black = preview_frames({"packed_masks": None, "orig_size": (8, 16), "n_frames": 3})
    assert black.shape == (3, 8, 16, 3) and black.sum() == 0


def test_track_preview_writes_a_temp_video(tmp_path):
    import av

    masks = torch.zeros(3, 1, 32, 48)
    masks[:, 0, 8:24, 8:24] = 1
    env = folders_env(tmp_path)
    with running_node("SAM3_TrackPreview", env=env):
        out = sam3_track_preview(_track(masks), None, 0.5, 12.0)
    (saved,) = out["ui"]["images"]
    assert saved["type"] == "temp" and saved["subfolder"] == "" and out["ui"]["animated"] == (True,)
    assert saved["filename"].startswith("sam3_track_preview_") and saved["filename"].endswith(".mp4")
    with av.open(str(env.temp_dir / saved["filename"])) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == 3 and frames[0].shape == (32, 48, 3)
