"""SCAIL's nodes (nodes/wan_scail_nodes.py) and the identity masks (comfy_core/families/wan/scail_masks.py):
SCAIL2ColoredMask on hand-built SAM3_TRACK_DATA (bit-packed masks in the layout ComfyUI's tracker
writes), the 28-channel mask stream, and WanSCAILToVideo's conditioning values with a recording VAE."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.wan.scail_masks import mask_to_28ch, pack_masks, unpack_masks
from nodes.errors import NodeInputError
from nodes.wan_scail_nodes import scail2_colored_mask, set_values_in_range, wan_scail_to_video

BLUE, RED, GREEN = (0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)


def test_bit_packing_is_little_endian_along_columns():
    masks = torch.zeros(1, 2, 16, dtype=torch.bool)
    masks[0, 0, 0] = True  # byte 0, bit 0
    masks[0, 1, 9] = True  # byte 1, bit 1
    packed = pack_masks(masks)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 2, 2)
    assert packed[0].tolist() == [[1, 0], [0, 2]]
    random = torch.rand(3, 2, 5, 24) > 0.5
    assert torch.equal(unpack_masks(pack_masks(random)), random)


def _track(frames: int = 5) -> dict:
    """Two people in a 8 x 16 mask of a 16 x 32 video: object 0 on the right from frame 0, object 1
    on the left from frame 0 and larger; they overlap on column 8..9 of rows 0..1."""
    masks = torch.zeros(frames, 2, 8, 16, dtype=torch.bool)
    masks[:, 0, 0:4, 8:12] = True
    masks[:, 1, 0:6, 2:10] = True
    return {"packed_masks": pack_masks(masks), "orig_size": (16, 32), "n_frames": frames, "scores": [0.9, 0.8],
            "extra": "kept"}


def _colour_at(video: torch.Tensor, y: int, x: int) -> tuple:
    return tuple(video[0, y, x].tolist())


def test_colored_mask_sorting_backgrounds_and_overlap():
    video, ref = scail2_colored_mask(_track(), "", "left_to_right", False)
    assert video.shape == (5, 16, 32, 3) and ref.shape == (1, 16, 32, 3)
    # left_to_right: object 1 (left) gets blue, object 0 red; the mask is upscaled x2 (nearest)
    assert _colour_at(video, 2, 6) == BLUE and _colour_at(video, 2, 22) == RED
    assert _colour_at(video, 2, 17) == BLUE  # the overlap: the lower index after sorting wins
    assert _colour_at(video, 15, 31) == (0.0, 0.0, 0.0) and torch.equal(ref, torch.ones(1, 16, 32, 3))
    none, _ = scail2_colored_mask(_track(), "", "none", False)
    assert _colour_at(none, 2, 22) == BLUE and _colour_at(none, 2, 6) == RED and _colour_at(none, 2, 17) == BLUE
    area, _ = scail2_colored_mask(_track(), "", "area", True)  # the larger object 1 first; white background
    assert _colour_at(area, 2, 6) == BLUE and _colour_at(area, 15, 31) == (1.0, 1.0, 1.0)
    only, _ = scail2_colored_mask(_track(), "1, x, 7", "left_to_right", False)  # sorted index 1: object 0
    assert _colour_at(only, 2, 22) == BLUE and _colour_at(only, 2, 6) == (0.0, 0.0, 0.0)


def test_first_appearance_orders_before_position():
    masks = torch.zeros(5, 2, 8, 16, dtype=torch.bool)
    masks[:, 0, 0:2, 12:16] = True  # on the right, from frame 0
    masks[2:, 1, 0:2, 0:4] = True  # on the left, appearing in frame 2
    track = {"packed_masks": pack_masks(masks), "orig_size": (8, 16)}
    video, _ = scail2_colored_mask(track, "", "left_to_right", False)
    assert tuple(video[3, 0, 14].tolist()) == BLUE and tuple(video[3, 0, 1].tolist()) == RED


def test_reference_track_mask_and_empty_tracks():
    ref_masks = torch.zeros(1, 3, 8, 8, dtype=torch.bool)
    ref_masks[0, 0, :, 4:] = True
    ref_masks[0, 1, :, :2] = True
    ref_masks[0, 2, :1, 2:3] = True
    ref_track = {"packed_masks": pack_masks(ref_masks), "orig_size": (8, 8)}
    _, ref = scail2_colored_mask(_track(), "", "left_to_right", True, ref_track)
    assert tuple(ref[0, 5, 1].tolist()) == BLUE and tuple(ref[0, 5, 6].tolist()) == GREEN  # 3 objects sorted
    assert tuple(ref[0, 0, 2].tolist()) == RED and tuple(ref[0, 5, 2].tolist()) == (0.0, 0.0, 0.0)
    plain = torch.zeros(2, 4, 4)
    plain[:, 1:3, 1:3] = 1.0
    _, ref = scail2_colored_mask(_track(), "", "none", False, plain)
    assert ref.shape == (2, 4, 4, 3) and tuple(ref[1, 1, 1].tolist()) == BLUE and tuple(ref[1, 0, 0].tolist()) == (
        1.0, 1.0, 1.0)
    empty = {"packed_masks": None, "orig_size": (4, 8), "n_frames": 3}
    video, ref = scail2_colored_mask(empty, "", "left_to_right", False)
    assert torch.equal(video, torch.zeros(3, 4, 8, 3)) and torch.equal(ref, torch.ones(1, 4, 8, 3))
    video, _ = scail2_colored_mask(_track(), "5", "left_to_right", True)  # nothing selected: background only
    assert torch.equal(video, torch.ones(5, 16, 32, 3))
    with pytest.raises(NodeInputError, match="driving_track_data"):
        scail2_colored_mask({"masks": 1}, "", "none", False)


def test_mask_to_28ch_classes_resize_and_frame_groups():
    rgb = torch.zeros(5, 16, 16, 3)
    rgb[0, :8] = torch.tensor(BLUE)
    rgb[1:, :, 8:] = torch.tensor((1.0, 1.0, 1.0))
    rgb[4, :, :8] = torch.tensor((0.9, 0.88, 0.0))  # 0.88 * 255 < 225: red, not yellow
    out = mask_to_28ch(rgb)
    assert out.shape == (1, 2, 28, 2, 2)
    first = out[0, 0].view(4, 7, 2, 2)
    assert all(torch.equal(first[i], first[0]) for i in range(4))  # the first frame repeated to 4
    assert torch.equal(first[0, 3], torch.tensor([[1.0, 1.0], [0.0, 0.0]]))  # blue: the top half
    group = out[0, 1].view(4, 7, 2, 2)
    assert torch.equal(group[0, 0], torch.tensor([[0.0, 1.0], [0.0, 1.0]]))  # white on the right
    assert torch.equal(group[3, 1], torch.tensor([[1.0, 0.0], [1.0, 0.0]]))  # frame 4: red on the left
    assert mask_to_28ch(torch.zeros(1, 12, 20, 3)).shape == (1, 1, 28, 2, 3)  # 12 -> 2, 20 -> 3 (rounding up)


def test_timestep_range_split():
    cond = [[torch.zeros(1), {"start_percent": 0.0, "end_percent": 0.8, "k": 1}]]
    out = set_values_in_range(cond, {"pose_video_latent": "p"}, 0.2, 1.0)
    assert [(e[1]["start_percent"], e[1]["end_percent"], "pose_video_latent" in e[1]) for e in out] == [
        (0.0, 0.2 - 1e-5, False), (0.2, 0.8, True)]
    assert set_values_in_range(cond, {"x": 1}, 0.9, 1.0)[0] is cond[0]
    assert set_values_in_range(cond, {"x": 1}, 0.6, 0.5) is cond


class RecordingVAE:
    """Encodes `[N, H, W, 3]` to `[1, 16, (N - 1) / 4 + 1, H / 8, W / 8]` filled with the pixels' mean."""

    def __init__(self) -> None:
        self.calls: list[torch.Tensor] = []

    def encode(self, frames: torch.Tensor) -> torch.Tensor:
        self.calls.append(frames)
        n, h, w, _ = frames.shape
        return torch.full((1, 16, (n - 1) // 4 + 1, h // 8, w // 8), float(frames.mean()))

    def decode(self, latent):  # pragma: no cover - never called
        raise AssertionError


def _cond():
    return [[torch.ones(1, 3, 8), {}]]


def test_wan_scail_to_video_values():
    vae = RecordingVAE()
    refs = torch.stack([torch.full((32, 64, 3), 0.2), torch.full((32, 64, 3), 0.6)])
    ref_masks = torch.zeros(2, 32, 64, 3)
    ref_masks[0, :, :32] = torch.tensor(BLUE)
    ref_masks[1] = torch.tensor(RED)
    pose = torch.rand(13, 32, 64, 3, generator=torch.Generator().manual_seed(0))
    pose_mask = torch.zeros(11, 32, 64, 3)
    pose_mask[:, :16] = torch.tensor(BLUE)
    clip = type("Clip", (), {"penultimate_hidden_states": torch.zeros(1, 3, 8)})()
    pos, neg, latent, next_offset = wan_scail_to_video(
        _cond(), _cond(), vae, 64, 32, 9, 1, 0.5, 0.0, 0.6, 2, 5, replacement_mode=True, reference_image=refs,
        clip_vision_output=clip, pose_video=pose, pose_video_mask=pose_mask, reference_image_mask=ref_masks)
    assert latent["samples"].shape == (1, 16, 3, 4, 8) and "noise_mask" not in latent and next_offset == 11
    assert len(pos) == 2 and len(neg) == 2  # the pose window 0..0.6 and the rest without the pose
    inside, outside = pos
    assert (inside[1]["start_percent"], inside[1]["end_percent"]) == (0.0, 0.6)
    assert outside[1]["start_percent"] == pytest.approx(0.6 + 1e-5) and "pose_video_latent" not in outside[1]
    values = inside[1]
    assert values["ref_mask_flag"] is False and values["clip_vision_output"] is clip
    assert len(values["reference_latents"]) == 2
    # replacement mode: each reference blacked out where its mask has no colour above 0.1
    assert vae.calls[0].shape == (1, 32, 64, 3) and float(vae.calls[0][0, 0, 40, 0]) == 0.0
    assert float(vae.calls[0][0, 0, 10, 0]) == pytest.approx(0.2, abs=1e-6)
    assert torch.allclose(vae.calls[1], torch.full((1, 32, 64, 3), 0.6))
    # pose: frames from offset 2, cut to the shorter (11 - 2 = 9) and to length, half size, times strength
    pose_frames = vae.calls[2]
    assert pose_frames.shape == (9, 16, 32, 3)
    assert torch.allclose(values["pose_video_latent"], torch.full((1, 16, 3, 2, 4), float(pose_frames.mean()) * 0.5))
    assert values["driving_mask_28ch"].shape == (1, 3, 28, 2, 4)
    ref_mask = values["ref_mask_28ch"]
    assert ref_mask.shape == (1, 2 + 3, 28, 4, 8)  # the additional reference's mask, the primary's, the video
    assert torch.equal(ref_mask[0, 0].view(4, 7, 4, 8)[0, 1], torch.ones(4, 8))  # additional: red everywhere
    assert torch.equal(ref_mask[0, 1].view(4, 7, 4, 8)[0, 3][:, :4], torch.ones(4, 4))  # primary: blue left
    assert torch.count_nonzero(ref_mask[0, 2:]) == 0
    assert neg[0][1]["ref_mask_flag"] is False and "pose_video_latent" in neg[0][1]


def test_wan_scail_to_video_continues_from_previous_frames():
    vae = RecordingVAE()
    previous = torch.cat([torch.zeros(10, 32, 32, 3), torch.full((5, 32, 32, 3), 0.75)])
    pose = torch.rand(40, 32, 32, 3)
    pos, _neg, latent, next_offset = wan_scail_to_video(
        _cond(), _cond(), vae, 32, 32, 13, 2, 1.0, 0.0, 1.0, 20, 5, previous_frames=previous, pose_video=pose)
    samples, mask = latent["samples"], latent["noise_mask"]
    assert samples.shape == (2, 16, 4, 4, 4) and next_offset == 15 + 13  # offset 20 - 5 anchored frames
    assert torch.allclose(samples[:, :, :2], torch.full((2, 16, 2, 4, 4), 0.75))  # 5 frames -> 2 latent frames
    assert torch.count_nonzero(samples[:, :, 2:]) == 0
    assert mask.shape == (1, 1, 4, 4, 4) and mask[:, :, :2].sum() == 0 and bool((mask[:, :, 2:] == 1).all())
    assert pos[0][1]["ref_mask_flag"] is True and len(pos) == 1
    assert torch.allclose(vae.calls[0], torch.nn.functional.interpolate(  # the pose, then the anchor
        pose[15:28].movedim(-1, 1), size=(16, 16), mode="area").movedim(1, -1))
    with pytest.raises(NodeInputError, match="length"):
        wan_scail_to_video(_cond(), _cond(), vae, 32, 32, 12, 1, 1.0, 0.0, 1.0, 0, 5)


def test_zero_pose_strength_still_sends_a_pose_latent():
    """As ComfyUI: strength 0 scales the pose latent to zeros but keeps it (the network still appends pose
    tokens: zeros become the latent format's shifted values in model space), so it is not the plain i2v run."""
    pos, _neg, _latent, _offset = wan_scail_to_video(_cond(), _cond(), RecordingVAE(), 32, 32, 5, 1, 0.0, 0.0, 1.0, 0,
                                                     5, pose_video=torch.rand(5, 32, 32, 3))
    assert len(pos) == 1 and torch.count_nonzero(pos[0][1]["pose_video_latent"]) == 0
    assert pos[0][1]["pose_video_latent"].shape == (1, 16, 2, 2, 2)
