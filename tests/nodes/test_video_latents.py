"""Video latent nodes: EmptyHunyuanLatentVideo (nodes/video_latents.py), TrimVideoLatent and
Wan22ImageToVideoLatent (nodes/wan_nodes.py), WanCameraEmbedding (nodes/camera_nodes.py) and
the helpers behind them (comfy_core/latent/video.py, camera_trajectory.py). Expected values are
written here from ComfyUI's behaviour; the camera rays from the geometry, pixel by pixel."""
from __future__ import annotations

import json
import math

import pytest
import torch

from comfy_core.latent import video
from comfy_core.latent.camera_trajectory import camera_motion, pack_camera_frames
from comfy_core.families.wan.latent_format import wan21_latent_format, wan22_latent_format
from nodes import camera_nodes, video_latents, wan_nodes
from nodes.errors import NodeInputError
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def test_empty_hunyuan_latent_video_is_16_channels_over_latent_frames():
    (latent,) = video_latents.empty_hunyuan_latent_video(848, 480, 25, 2)
    assert latent["samples"].shape == (2, 16, 7, 60, 106) and not latent["samples"].any()
    (one,) = video_latents.empty_hunyuan_latent_video(832, 480, 1)
    assert one["samples"].shape == (1, 16, 1, 60, 104)
    with pytest.raises(NodeInputError, match="nearest are 21 and 25, received 24"):
        video_latents.empty_hunyuan_latent_video(848, 480, 24, 1)


def test_frame_counts_and_mask_slots():
    assert [video.latent_frames(n) for n in (1, 5, 9, 81, 121)] == [1, 2, 3, 21, 31]
    assert [n for n in range(1, 14) if video.is_packable_length(n)] == [1, 5, 9, 13]
    slots = torch.arange(12.0).reshape(1, 1, 12, 1, 1)
    packed = video.frames_to_mask_slots(slots)  # slot k of latent frame t -> channel k, time t
    assert packed.shape == (1, 4, 3, 1, 1) and packed[0, 2, 1, 0, 0] == 6.0 and packed[0, 3, 2, 0, 0] == 11.0
    mask = video.known_frames_mask(3, 1, 1, first=2)  # two start frames: slots 0-4 cleared
    assert mask.flatten().tolist() == [0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1]  # [4, 3]: slot 4t + k at [k, t]
    with pytest.raises(ValueError, match="not multiples of 8"):
        video.vace_mask_latent(torch.ones(5, 12, 16, 1), 2)


# --- TrimVideoLatent --------------------------------------------------------------------------

def test_trim_video_latent_cuts_leading_frames_and_keeps_other_keys():
    samples = torch.rand(2, 16, 5, 2, 4)
    mask = torch.ones(2, 1, 5, 2, 4)
    (out,) = wan_nodes.trim_video_latent({"samples": samples, "noise_mask": mask}, 2)
    assert torch.equal(out["samples"], samples[:, :, 2:]) and out["noise_mask"] is mask
    (same,) = wan_nodes.trim_video_latent({"samples": samples}, 0)
    assert torch.equal(same["samples"], samples)
    with pytest.raises(NodeInputError, match="'trim_amount' expected fewer than the latent's 5 frames, received 5"):
        wan_nodes.trim_video_latent({"samples": samples}, 5)
    with pytest.raises(NodeInputError, match=r"'samples' expected LATENT samples \[B, C, t, h, w\]"):
        wan_nodes.trim_video_latent({"samples": torch.zeros(1, 4, 8, 8)}, 1)


# --- Wan22ImageToVideoLatent ------------------------------------------------------------------

def test_wan22_latent_without_a_start_image_is_one_empty_latent():
    (latent,) = wan_nodes.wan22_image_to_video_latent(FakeVideoVAE(48, 16), 64, 32, 9, 3)
    # ComfyUI makes one latent whatever batch_size says when there is no start image.
    assert latent["samples"].shape == (1, 48, 3, 2, 4) and not latent["samples"].any() and "noise_mask" not in latent


def test_wan22_latent_keeps_the_start_frames_under_a_noise_mask():
    fmt = wan22_latent_format()
    vae = FakeVideoVAE(48, 16)
    start = frames(5, 32, 64, seed=1)
    (latent,) = wan_nodes.wan22_image_to_video_latent(vae, 64, 32, 9, 2, start_image=start)
    samples, noise_mask = latent["samples"], latent["noise_mask"]
    assert samples.shape == (2, 48, 3, 2, 4) and noise_mask.shape == (2, 1, 3, 2, 4)
    assert torch.equal(vae.calls[0], start)
    assert torch.allclose(samples[:, :, :2], vae.latent_of(start).expand(2, -1, -1, -1, -1))
    assert torch.allclose(samples[:, :, 2:], fmt.process_out(torch.zeros(2, 48, 1, 2, 4)))
    assert not noise_mask[:, :, :2].any() and noise_mask[:, :, 2:].all()


def test_wan22_latent_sides_step_by_32():
    with pytest.raises(NodeInputError, match="'width' expected an INT in 32..16384, received 16"):
        wan_nodes.wan22_image_to_video_latent(FakeVideoVAE(48, 16), 16, 32, 9, 1)


# --- WanCameraEmbedding -----------------------------------------------------------------------

def _pixel_rays(u: int, v: int, width: int, height: int, fx: float, fy: float, cx: float, cy: float):
    """The unit camera-space direction through pixel (u, v)'s centre, with the focal length
    along the wider side rescaled from the presets' 1280 x 720 frame."""
    if 1280 / 720 > width / height:
        fx = height * (1280 / 720) * fx / width
    else:
        fy = width / (1280 / 720) * fy / height
    d = ((u + 0.5 - cx * width) / (fx * width), (v + 0.5 - cy * height) / (fy * height), 1.0)
    n = math.sqrt(sum(x * x for x in d))
    return tuple(x / n for x in d)


def _frame_of(t: int, k: int) -> int:
    """The pixel frame at slot k of latent frame t: the first frame fills latent frame 0's four slots."""
    return max(0, 4 * t + k - 3)


@pytest.mark.parametrize("width,height", [(48, 32), (32, 48)])
def test_pan_right_rays_start_at_the_moving_camera(width, height):
    length, speed, fx, fy, cx, cy = 9, 2.0, 0.4, 0.6, 0.45, 0.55
    embedding, w, h, n = camera_nodes.wan_camera_embedding("Pan Right", width, height, length, speed, fx, fy, cx, cy)
    assert (w, h, n) == (width, height, length) and embedding.shape == (1, 24, 3, height, width)
    for t in range(3):
        for k in range(4):
            f = _frame_of(t, k)
            tx = f / length * speed * 1.5
            for u, v in ((0, 0), (width - 1, 5), (7, height - 1)):
                dx, dy, dz = _pixel_rays(u, v, width, height, fx, fy, cx, cy)
                plucker = (0.0, -tx * dz, tx * dy, dx, dy, dz)  # (o x d, d) with o = (tx, 0, 0)
                got = [embedding[0, c * 4 + k, t, v, u].item() for c in range(6)]
                assert got == pytest.approx(plucker, abs=1e-5)


def test_clockwise_rays_turn_about_the_optical_axis():
    width, height, length, speed = 32, 16, 5, 1.0
    (embedding, *_) = camera_nodes.wan_camera_embedding("ClockWise (CW)", width, height, length, speed)
    for t in range(2):
        for k in range(4):
            f = _frame_of(t, k)
            theta = f / length * speed * math.pi / 3
            for u, v in ((3, 4), (31, 15)):
                dx, dy, dz = _pixel_rays(u, v, width, height, 0.5, 0.5, 0.5, 0.5)
                turned = (math.cos(theta) * dx - math.sin(theta) * dy, math.sin(theta) * dx + math.cos(theta) * dy, dz)
                got = [embedding[0, c * 4 + k, t, v, u].item() for c in range(6)]
                assert got == pytest.approx((0.0, 0.0, 0.0, *turned), abs=1e-5)


def test_static_camera_has_the_same_rays_in_every_frame_and_zoom_moves_along_z():
    (static, *_) = camera_nodes.wan_camera_embedding("Static", 32, 16, 9)
    assert not static[:, :12].any()  # no moment: the camera sits at the origin
    directions = static[0, 12:].reshape(3, 4, 3, 16, 32)  # [ray channel, slot, latent frame, H, W]
    assert torch.equal(directions, directions[:, :1, :1].expand(-1, 4, 3, -1, -1))
    poses = camera_motion("Zoom In", 1.0, 5)
    # Frame i of n moves i / n * 1.5 * (0, 0, 2) along the optical axis, without turning.
    assert torch.allclose(torch.from_numpy(poses[:, :3, 3]), torch.tensor([[0, 0, i / 5 * 3.0] for i in range(5)],
                                                                          dtype=torch.float64))
    assert torch.equal(torch.from_numpy(poses[:, :3, :3]), torch.eye(3, dtype=torch.float64).expand(5, 3, 3))


def test_camera_frames_pack_like_the_video_vae():
    rays = torch.arange(5.0).view(5, 1, 1, 1).expand(5, 1, 1, 6)  # each frame's rays = its index
    packed = pack_camera_frames(rays)
    assert packed.shape == (1, 24, 2, 1, 1)
    assert packed[0, :4, :, 0, 0].tolist() == [[0, 1], [0, 2], [0, 3], [0, 4]]  # channel 0 of slots 0..3
    with pytest.raises(ValueError, match="not 4k"):
        pack_camera_frames(rays[:4])


def test_camera_embedding_refuses_what_it_cannot_embed():
    with pytest.raises(NodeInputError, match="'length' expected a frame count"):
        camera_nodes.wan_camera_embedding("Static", 32, 16, 8)
    with pytest.raises(NodeInputError, match="'camera_pose' expected one of"):
        camera_nodes.wan_camera_embedding("Dolly", 32, 16, 9)
    with pytest.raises(NodeInputError, match="'fx' expected a focal length above 0"):
        camera_nodes.wan_camera_embedding("Static", 32, 16, 9, fx=0.0)
    assert not torch.isnan(camera_nodes.wan_camera_embedding("Pan Up", 32, 16, 9, speed=0.0)[0]).any()


# --- WanTrackToVideo (comfy_core/latent/motion_tracks.py) -------------------------------------

def test_tracks_parse_as_one_track_many_tracks_or_batches():
    from comfy_core.latent.motion_tracks import TrackFormatError, parse_tracks

    point = {"x": 1, "y": 2}
    assert parse_tracks("[]") == []
    assert parse_tracks("[{'x': 1, 'y': 2}]") == [[[point]]]  # single quotes, as the editor may write them
    assert parse_tracks(json.dumps([[point], [point, point]])) == [[[point], [point, point]]]
    assert parse_tracks(json.dumps([[[point]], [[point]]])) == [[[point]], [[point]]]
    for bad in ("not json", '{"x": 1}', "[[1, 2]]", '[[{"x": 1}]]', '[{"x": "left", "y": 2}]', '[{"x": true, "y": 2}]'):
        with pytest.raises(TrackFormatError):
            parse_tracks(bad)


def test_tracks_are_padded_centred_and_resampled_to_the_frames():
    from comfy_core.latent.motion_tracks import resample_tracks, track_array

    track = [{"x": 64.0, "y": 16.0}, {"x": 32.0, "y": 16.0}] + [{"x": float(i), "y": 0.0} for i in range(2, 130)]
    points = track_array(track)
    assert points.shape == (121, 3) and points[:, 2].all()  # cut to 121 instants
    short = track_array(track[:2])
    assert short[2:].abs().sum() == 0 and short[:2, 2].tolist() == [1.0, 1.0]  # padded invisible
    rows = resample_tracks(short[None], 64, 32, 9)  # [9, 1, 4]
    assert rows.shape == (9, 1, 4)
    # Positions are centred on (32, 16) and scaled by the short side 32 to +-1 along it: x = 64 is 2.
    assert rows[0, 0].tolist() == [-1.0, 2.0, 0.0, 1.0]
    # Frame 1 takes the third instant (ComfyUI's resampling starts from the second repeat): padding,
    # invisible (-1), at pixel (0, 0).
    assert rows[1:, 0, 3].tolist() == [-1.0] * 8 and rows[1, 0, 1:3].tolist() == [-2.0, -1.0]
    # 120 recorded steps to 8 frames: each step repeated b = 1 time, every a = 15th from the second.
    timeline = torch.linspace(-1, 1, 121)
    steps = list(range(1, 121))[1::15]  # the steps after the first, resampled by hand
    assert torch.allclose(rows[1:, 0, 0], timeline[steps])
    rows81 = resample_tracks(points[None], 64, 32, 81)
    steps81 = [s for s in range(1, 121) for _ in range(2)][1::3]  # 120 -> 80: repeat twice, every third
    assert len(steps81) == 80 and torch.allclose(rows81[1:, 0, 0], timeline[steps81])
    with pytest.raises(ValueError, match="cannot be resampled"):
        resample_tracks(points[None], 64, 32, 121)


def _track_at(i: int, j: int, frames: int, visible_from: int = 0) -> list:
    """A still track over latent pixel (i, j)'s centre (pixel 8i + 4, 8j + 4), `frames` long."""
    return [{"x": 8 * i + 4.0, "y": 8 * j + 4.0} for _ in range(frames)]


def test_a_still_track_carries_the_first_frames_feature_with_gaussian_weights():
    from comfy_core.latent.motion_tracks import resample_tracks, splat_tracks, track_array

    w, h, temperature = 4, 2, 2.0
    latent = torch.rand(3, 3, h, w, generator=torch.Generator().manual_seed(2))  # [C, T, h, w]
    rows = resample_tracks(track_array(_track_at(1, 0, 121))[None], 8 * w, 8 * h, 9)
    mask, out = splat_tracks(rows, latent, temperature, topk=2)
    assert mask.shape == (4, 3, h, w) and torch.equal(out[:, 0], latent[:, 0]) and mask[:, 0].all()
    short = min(w, h)
    # A latent frame's position: the mean of its four frames' (visible) positions, over 4 + 1e-5
    # (ComfyUI's guard against no visible frame).
    shrink = 4 / (4 + 1e-5)
    track_x, track_y = ((2 * 1 + 1) / w - 1) * w / short * shrink, ((2 * 0 + 1) / h - 1) * h / short * shrink
    for t in (1, 2):
        for y in range(h):
            for x in range(w):
                gx = -w / short + x * 2 * (w / short) / (w - 1)
                gy = -h / short + y * 2 * (h / short) / (h - 1)
                weight = math.exp(-temperature * ((gx - track_x) ** 2 + (gy - track_y) ** 2))
                assert mask[0, t, y, x].item() == pytest.approx(weight, abs=1e-6)
                expected = latent[:, 0, 0, 1] * weight + latent[:, t, y, x] * (1 - min(weight, 1.0))
                assert torch.allclose(out[:, t, y, x], expected, atol=1e-6)


def test_an_invisible_track_moves_nothing_and_topk_keeps_the_nearest():
    from comfy_core.latent.motion_tracks import resample_tracks, splat_tracks, track_array

    latent = torch.rand(2, 2, 2, 4, generator=torch.Generator().manual_seed(3))
    hidden = track_array(_track_at(0, 0, 1))  # visible at the first instant only
    rows = resample_tracks(hidden[None], 32, 16, 5)
    mask, out = splat_tracks(rows, latent, 220.0, topk=2)
    assert torch.equal(out, latent) and not mask[:, 1].any()
    two = torch.stack([track_array(_track_at(0, 0, 121)), track_array(_track_at(3, 1, 121))])
    mask, out = splat_tracks(resample_tracks(two, 32, 16, 5), latent, 2.0, topk=1)
    # topk = 1: every pixel takes only the nearer track's start feature, with that track's weight.
    gx, gy = torch.linspace(-2, 2, 4), torch.linspace(-1, 1, 2)
    centres = [((2 * 0 + 1) / 4 - 1) * 2, ((2 * 0 + 1) / 2 - 1)], [((2 * 3 + 1) / 4 - 1) * 2, ((2 * 1 + 1) / 2 - 1)]
    for y in range(2):
        for x in range(4):
            shrink = 4 / (4 + 1e-5)  # the mean over four visible frames, as above
            weights = [math.exp(-2.0 * ((gx[x] - cx * shrink) ** 2 + (gy[y] - cy * shrink) ** 2)) for cx, cy in centres]
            near = max(range(2), key=lambda k: weights[k])
            feature = latent[:, 0, 0, 0] if near == 0 else latent[:, 0, 1, 3]
            expected = feature * weights[near] + latent[:, 1, y, x] * (1 - min(weights[near], 1.0))
            assert torch.allclose(out[:, 1, y, x], expected, atol=1e-5)
            assert mask[0, 1, y, x].item() == pytest.approx(weights[near], abs=1e-6)


def test_track_to_video_conditions_on_the_moved_start_latent():
    fmt = wan21_latent_format()
    from comfy_core.latent.motion_tracks import resample_tracks, splat_tracks, track_array

    vae = FakeVideoVAE()
    start = frames(1, 16, 32, seed=4)
    tracks = json.dumps([_track_at(1, 1, 121), _track_at(3, 0, 60)])
    pos, neg, latent = wan_nodes.wan_track_to_video(cond(), cond(), vae, tracks, 32, 16, 9, 2, 50.0, 2, start)
    assert latent["samples"].shape == (2, 16, 3, 2, 4) and not latent["samples"].any()
    assert len(vae.calls) == 2 and torch.equal(vae.calls[0][0], start[0]) and (vae.calls[0][1:] == 0.5).all()
    rows = resample_tracks(torch.stack([track_array(_track_at(1, 1, 121)), track_array(_track_at(3, 0, 60))]),
                           32, 16, 9)
    weights, moved = splat_tracks(rows, fmt.process_in(vae.latent_of(vae.calls[0]))[0], 50.0, 2)
    values = pos[0][1]
    assert values["concat_latent_image"].shape == (2, 16, 3, 2, 4) and values["concat_mask"].shape == (2, 4, 3, 2, 4)
    assert torch.allclose(values["concat_latent_image"][1], fmt.process_out(moved[None])[0], atol=1e-5)
    assert torch.allclose(values["concat_mask"][0], 1 - weights) and not values["concat_mask"][:, :, 0].any()
    assert neg[0][1]["concat_mask"] is values["concat_mask"]


def test_track_to_video_without_tracks_is_image_to_video_and_bad_tracks_are_refused():
    start = frames(1, 16, 32, seed=5)
    a = wan_nodes.wan_track_to_video(cond(), cond(), FakeVideoVAE(), "[]", 32, 16, 9, 1, 220.0, 2, start)
    b = wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 9, 1, start_image=start)
    for key in ("concat_latent_image", "concat_mask"):
        assert torch.equal(a[0][0][1][key], b[0][0][1][key])
    with pytest.raises(NodeInputError, match="'tracks' expected a JSON list of tracks"):
        wan_nodes.wan_track_to_video(cond(), cond(), FakeVideoVAE(), "[{x: 1}]", 32, 16, 9, 1, 220.0, 2, start)
    with pytest.raises(NodeInputError, match="'length' expected a frame count the tracks can be resampled to"):
        wan_nodes.wan_track_to_video(cond(), cond(), FakeVideoVAE(), json.dumps([_track_at(0, 0, 3)]), 32, 16, 121,
                                     1, 220.0, 2, start)
