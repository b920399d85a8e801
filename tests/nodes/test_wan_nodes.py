"""Wan's conditioning nodes (nodes/wan_nodes.py): ComfyUI 0.3.64's /object_info entries, the
latents and conditioning values they make (expected values written here from ComfyUI's
behaviour: which frames the VAE is given, which mask entries are cleared, where latents go),
frame-count validation, typed errors, and CLIP vision (ViT-H geometry, the penultimate states)
carried into the conditioning.

The VAE is mostly `FakeVideoVAE`, a deterministic stand-in with a Wan VAE's encode contract
(pixels `[T, H, W, 3]` -> `[1, C, (T - 1) // 4 + 1, H / s, W / s]`) that records what it was
given; `test_a_real_wan2*_vae_*` run the real Wan 2.1 / 2.2 VAEs (tests/fixtures/wan_vae_files.py).
The last tests sample the conditioning through tiny Wan models (tests/fixtures/wan_files.py):
i2v, TI2V-5B (noise mask), VACE (then TrimVideoLatent), Phantom (t2v) and camera.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.wan.latent_format import wan21_latent_format, wan22_latent_format
from graph.native import spec_of
from graph.registry import Registry
from nodes import wan_nodes
from nodes.environment import Environment
from nodes.errors import NodeInputError
from tests.fixtures.object_info_parity import comfyui_object_info, differences

WAN_NODES = ["WanImageToVideo", "WanFirstLastFrameToVideo", "WanFunInpaintToVideo", "WanFunControlToVideo",
             "Wan22FunControlToVideo", "WanCameraImageToVideo", "WanVaceToVideo", "Wan22ImageToVideoLatent",
             "TrimVideoLatent", "WanTrackToVideo", "WanPhantomSubjectToVideo"]
VIDEO_NODES = WAN_NODES + ["EmptyHunyuanLatentVideo", "WanCameraEmbedding"]


def _diffusers_mean() -> torch.Tensor:
    """diffusers' AutoencoderKLWan default `latents_mean` (Wan 2.1's VAE): the raw latent of
    "nothing" that ComfyUI's Wan21 format gives for a zero model-space latent."""
    import inspect

    from diffusers import AutoencoderKLWan

    return torch.tensor(inspect.signature(AutoencoderKLWan.__init__).parameters["latents_mean"].default)


class FakeVideoVAE:
    """A Wan-like VAE: latent frame 0 is pixel frame 0, latent frame t the mean of pixel frames
    4t-3..4t, each averaged over s x s patches and mapped to C channels by a fixed matrix."""

    def __init__(self, channels: int = 16, downscale: int = 8) -> None:
        self.latent_channels = channels
        self.downscale_ratio = downscale
        self.calls: list[torch.Tensor] = []
        self.weight = torch.linspace(-1.0, 1.0, channels * 3).reshape(channels, 3)

    def spacial_compression_encode(self) -> int:
        return self.downscale_ratio

    def latent_of(self, pixels: torch.Tensor) -> torch.Tensor:
        frames = pixels.shape[0]
        t = (frames - 1) // 4 + 1
        groups = [pixels[:1]] + [pixels[1 + 4 * i:5 + 4 * i].mean(0, keepdim=True) for i in range(t - 1)]
        video = torch.cat(groups).movedim(-1, 1)  # [T, 3, H, W]
        pooled = F.avg_pool2d(video, self.downscale_ratio)  # [T, 3, h, w]
        return torch.einsum("ck,tkhw->cthw", self.weight, pooled).unsqueeze(0)  # [1, C, T, h, w]

    def encode(self, pixels: torch.Tensor) -> torch.Tensor:
        assert pixels.ndim == 4 and pixels.shape[-1] == 3
        self.calls.append(pixels.clone())
        return self.latent_of(pixels)

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the conditioning nodes never decode")


def cond(tag: float = 1.0) -> list:
    return [[torch.full((1, 3, 8), tag), {"keep": tag}]]


def frames(n: int, height: int = 16, width: int = 32, seed: int = 0, channels: int = 3) -> torch.Tensor:
    return torch.rand(n, height, width, channels, generator=torch.Generator().manual_seed(seed))


def grey(n: int, height: int = 16, width: int = 32) -> torch.Tensor:
    return torch.full((n, height, width, 3), 0.5)


@pytest.fixture(scope="module")
def object_info(tmp_path_factory) -> dict:
    from nodes import register_builtin_nodes

    registry = Registry()
    register_builtin_nodes(registry)
    return registry.object_info(Environment.rooted_at(tmp_path_factory.mktemp("base")))


def test_every_video_node_is_declared_as_comfyui_declares_it(object_info):
    theirs = comfyui_object_info()
    assert set(VIDEO_NODES) <= set(object_info)
    assert differences({n: object_info[n] for n in VIDEO_NODES}, {n: theirs[n] for n in VIDEO_NODES}) == {}
    assert object_info["WanVaceToVideo"]["output_name"] == ["positive", "negative", "latent", "trim_latent"]


# --- WanImageToVideo --------------------------------------------------------------------------

def test_image_to_video_encodes_the_start_frames_then_grey_and_masks_their_latent_frames():
    vae, positive, negative = FakeVideoVAE(), cond(1.0), cond(2.0)
    start = frames(5)
    pos, neg, latent = wan_nodes.wan_image_to_video(positive, negative, vae, 32, 16, 9, 2, start_image=start)
    assert latent["samples"].shape == (2, 16, 3, 2, 4) and not latent["samples"].any()
    (given,) = vae.calls
    assert torch.equal(given[:5], start) and torch.equal(given[5:], grey(4))
    for out, tag in ((pos, 1.0), (neg, 2.0)):
        values = out[0][1]
        assert values["keep"] == tag and torch.equal(out[0][0], torch.full((1, 3, 8), tag))
        assert torch.allclose(values["concat_latent_image"], vae.latent_of(given))
        # Five start frames cover latent frames 0 (frame 0) and 1 (frames 1-4).
        expected = torch.ones(1, 1, 3, 2, 4)
        expected[:, :, :2] = 0.0
        assert torch.equal(values["concat_mask"], expected)
    assert positive[0][1] == {"keep": 1.0}  # inputs are never mutated


def test_image_to_video_without_a_start_image_only_passes_the_clip_vision_output():
    vae, clip_out = FakeVideoVAE(), _states(5)
    pos, neg, latent = wan_nodes.wan_image_to_video(cond(), cond(), vae, 64, 32, 1, 1, clip_vision_output=clip_out)
    assert latent["samples"].shape == (1, 16, 1, 4, 8) and vae.calls == []
    assert pos[0][1]["clip_vision_output"] is clip_out and neg[0][1]["clip_vision_output"] is clip_out
    assert "concat_latent_image" not in pos[0][1]


def test_start_images_are_centre_cropped_and_resized_bilinearly():
    vae = FakeVideoVAE()
    start = frames(1, height=24, width=32)  # 4:3 into 2:1: rows 4..19 are kept
    wan_nodes.wan_image_to_video(cond(), cond(), vae, 32, 16, 1, 1, start_image=start)
    assert torch.equal(vae.calls[0], start[:, 4:20])
    vae = FakeVideoVAE()
    small = frames(1, height=8, width=16, channels=4)  # RGBA, upscaled
    wan_nodes.wan_image_to_video(cond(), cond(), vae, 32, 16, 1, 1, start_image=small)
    expected = F.interpolate(small.movedim(-1, 1), size=(16, 32), mode="bilinear").movedim(1, -1)[..., :3]
    assert torch.allclose(vae.calls[0], expected)


def test_frames_past_the_length_are_dropped():
    vae = FakeVideoVAE()
    start = frames(7)
    _, _, latent = wan_nodes.wan_image_to_video(cond(), cond(), vae, 32, 16, 5, 1, start_image=start)
    assert torch.equal(vae.calls[0], start[:5]) and latent["samples"].shape[2] == 2


# --- first/last frame, Fun inpaint ------------------------------------------------------------

def _states(tokens: int, seed: int = 0):
    from comfy_core.clip_vision.output import ClipVisionOutput

    out = ClipVisionOutput()
    out.penultimate_hidden_states = torch.rand(1, tokens, 8, generator=torch.Generator().manual_seed(seed))
    return out


def test_first_last_frame_fills_both_ends_and_clears_their_mask_slots():
    vae = FakeVideoVAE()
    start, end = frames(1, seed=1), frames(2, seed=2)
    first, last = _states(3, 1), _states(4, 2)
    pos, neg, latent = wan_nodes.wan_first_last_frame_to_video(
        cond(), cond(), vae, 32, 16, 9, 1, clip_vision_start_image=first, clip_vision_end_image=last,
        start_image=start, end_image=end)
    assert latent["samples"].shape == (1, 16, 3, 2, 4)
    (given,) = vae.calls
    assert torch.equal(given[0], start[0]) and torch.equal(given[1:7], grey(6)) and torch.equal(given[7:], end)
    values = pos[0][1]
    assert torch.allclose(values["concat_latent_image"], vae.latent_of(given))
    mask = values["concat_mask"]
    # 12 slots (3 latent frames x 4): the start frame clears slots 0-3, the two end frames 10-11.
    assert mask.shape == (1, 4, 3, 2, 4)
    assert not mask[:, :, 0].any() and mask[:, :, 1].all()
    assert mask[:, :2, 2].all() and not mask[:, 2:, 2].any()
    joined = values["clip_vision_output"].penultimate_hidden_states
    assert torch.equal(joined, torch.cat([first.penultimate_hidden_states, last.penultimate_hidden_states], 1))
    assert neg[0][1]["clip_vision_output"] is values["clip_vision_output"]


def test_first_last_frame_follows_the_vae_geometry_and_takes_one_clip_output():
    vae = FakeVideoVAE(channels=48, downscale=16)
    only_end = _states(3)
    pos, _, latent = wan_nodes.wan_first_last_frame_to_video(cond(), cond(), vae, 64, 32, 5, 2,
                                                             clip_vision_end_image=only_end)
    assert latent["samples"].shape == (2, 48, 2, 2, 4)
    assert torch.equal(vae.calls[0], grey(5, 32, 64)) and pos[0][1]["concat_mask"].all()
    assert pos[0][1]["clip_vision_output"] is only_end


def test_fun_inpaint_is_first_last_frame_with_the_start_clip_output():
    start, end, clip_out = frames(1), frames(1, seed=3), _states(2)
    a = wan_nodes.wan_fun_inpaint_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 9, 1, clip_vision_output=clip_out,
                                           start_image=start, end_image=end)
    b = wan_nodes.wan_first_last_frame_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 9, 1,
                                                clip_vision_start_image=clip_out, start_image=start, end_image=end)
    for key in ("concat_latent_image", "concat_mask"):
        assert torch.equal(a[0][0][1][key], b[0][0][1][key])
    assert a[0][0][1]["clip_vision_output"] is clip_out


# --- Fun control ------------------------------------------------------------------------------

def test_fun_control_puts_the_control_then_the_start_latent_over_the_empty_latent():
    fmt = wan21_latent_format()
    vae = FakeVideoVAE()
    start, control = frames(1, seed=4), frames(9, seed=5)
    pos, neg, latent = wan_nodes.wan_fun_control_to_video(cond(), cond(), vae, 32, 16, 9, 2, start_image=start,
                                                          control_video=control)
    assert latent["samples"].shape == (2, 16, 3, 2, 4) and not latent["samples"].any()
    concat = pos[0][1]["concat_latent_image"]
    assert concat.shape == (2, 32, 3, 2, 4) and "concat_mask" not in pos[0][1]
    nothing = fmt.process_out(torch.zeros(1, 16, 1, 1, 1))
    assert torch.allclose(nothing.flatten(), _diffusers_mean(), atol=1e-6)  # the latent of "nothing"
    assert torch.allclose(concat[:, :16], vae.latent_of(control).expand(2, -1, -1, -1, -1))
    assert torch.allclose(concat[:, 16:, :1], vae.latent_of(start).expand(2, -1, -1, -1, -1))
    assert torch.allclose(concat[:, 16:, 1:], nothing.expand(2, -1, 2, 2, 4))
    assert neg[0][1]["concat_latent_image"] is concat


def test_wan22_fun_control_adds_the_mask_index_and_appends_the_reference():
    fmt = wan22_latent_format()
    vae = FakeVideoVAE(channels=48, downscale=16)
    ref, control = frames(2, 32, 64, seed=6), frames(5, 32, 64, seed=7)
    earlier = torch.zeros(1, 48, 1, 2, 4)
    positive = [[torch.zeros(1, 3, 8), {"reference_latents": [earlier]}]]
    pos, neg, latent = wan_nodes.wan22_fun_control_to_video(positive, cond(), vae, 64, 32, 5, 1, ref_image=ref,
                                                            control_video=control)
    assert latent["samples"].shape == (1, 48, 2, 2, 4)
    values = pos[0][1]
    assert values["concat_latent_image"].shape == (1, 96, 2, 2, 4) and values["concat_mask_index"] == 48
    assert torch.equal(values["concat_mask"], torch.ones(1, 4, 2, 2, 4))
    assert torch.allclose(values["concat_latent_image"][:, :48], vae.latent_of(control))
    assert torch.allclose(values["concat_latent_image"][:, 48:], fmt.process_out(torch.zeros(1, 48, 2, 2, 4)))
    assert torch.equal(vae.calls[0], ref[:1])  # only the first reference frame
    assert len(values["reference_latents"]) == 2 and values["reference_latents"][0] is earlier
    assert torch.allclose(values["reference_latents"][1], vae.latent_of(ref[:1]))
    assert len(neg[0][1]["reference_latents"]) == 1
    assert positive[0][1]["reference_latents"] == [earlier]


# --- camera -----------------------------------------------------------------------------------

def test_camera_image_to_video_sets_the_start_latent_mask_and_camera():
    fmt = wan21_latent_format()
    vae, start, camera = FakeVideoVAE(), frames(1, seed=8), torch.rand(1, 24, 3, 16, 32)
    pos, _, latent = wan_nodes.wan_camera_image_to_video(cond(), cond(), vae, 32, 16, 9, 1, start_image=start,
                                                         camera_conditions=camera)
    values = pos[0][1]
    assert latent["samples"].shape == (1, 16, 3, 2, 4)
    assert torch.allclose(values["concat_latent_image"][:, :, :1], vae.latent_of(start))
    assert torch.allclose(values["concat_latent_image"][:, :, 1:], fmt.process_out(torch.zeros(1, 16, 2, 2, 4)))
    assert not values["concat_mask"][:, :, 0].any() and values["concat_mask"][:, :, 1:].all()
    assert values["camera_conditions"] is camera
    with pytest.raises(NodeInputError, match="camera_conditions"):
        wan_nodes.wan_camera_image_to_video(cond(), cond(), vae, 32, 16, 9, 1, camera_conditions="pan")


# --- VACE -------------------------------------------------------------------------------------

def test_vace_without_inputs_encodes_grey_twice_with_a_full_mask():
    vae = FakeVideoVAE()
    pos, neg, latent, trim = wan_nodes.wan_vace_to_video(cond(), cond(), vae, 32, 16, 9, 1, 1.5)
    assert trim == 0 and latent["samples"].shape == (1, 16, 3, 2, 4)
    assert len(vae.calls) == 2 and all(torch.equal(c, grey(9)) for c in vae.calls)
    values = pos[0][1]
    assert values["vace_strength"] == [1.5]
    (vace,) = values["vace_frames"]
    assert vace.shape == (1, 32, 3, 2, 4) and torch.allclose(vace, vae.latent_of(grey(9)).repeat(1, 2, 1, 1, 1))
    assert torch.equal(values["vace_mask"][0], torch.ones(1, 64, 3, 2, 4))
    assert neg[0][1]["vace_frames"][0] is vace


def test_vace_splits_the_control_video_by_the_mask_and_folds_the_mask():
    vae = FakeVideoVAE()
    control = frames(6, seed=9)  # shorter than the 9 frames: padded with grey
    masks = (torch.rand(9, 16, 32, generator=torch.Generator().manual_seed(10)) > 0.5).float()
    pos, _, _, _ = wan_nodes.wan_vace_to_video(cond(), cond(), vae, 32, 16, 9, 1, 1.0, control_video=control,
                                               control_masks=masks)
    video = torch.cat([control, grey(3)])
    m = masks.unsqueeze(-1)
    inactive, reactive = vae.calls
    assert torch.allclose(inactive, (video - 0.5) * (1 - m) + 0.5)
    assert torch.allclose(reactive, (video - 0.5) * m + 0.5)
    folded = pos[0][1]["vace_mask"][0]
    assert folded.shape == (1, 64, 3, 2, 4)
    # Latent frame t reads pixel frame 3t + 1 (nearest-exact from 9 to 3); channel = row * 8 + column in the patch.
    for t in range(3):
        for y in range(16):
            for x in range(32):
                assert folded[0, (y % 8) * 8 + x % 8, t, y // 8, x // 8] == masks[3 * t + 1, y, x]


def test_vace_reference_image_is_prepended_and_trimmed_and_nodes_chain():
    fmt = wan21_latent_format()
    vae = FakeVideoVAE()
    ref = frames(2, seed=11)
    pos, neg, latent, trim = wan_nodes.wan_vace_to_video(cond(), cond(), vae, 32, 16, 5, 2, 1.0,
                                                         reference_image=ref)
    assert trim == 1 and latent["samples"].shape == (2, 16, 3, 2, 4)
    assert torch.equal(vae.calls[0], ref[:1])
    (vace,) = pos[0][1]["vace_frames"]
    assert vace.shape == (1, 32, 3, 2, 4)
    assert torch.allclose(vace[:, :16, :1], vae.latent_of(ref[:1]))
    assert torch.allclose(vace[:, 16:, :1], fmt.process_out(torch.zeros(1, 16, 1, 2, 4)))
    mask = pos[0][1]["vace_mask"][0]
    assert mask.shape == (1, 64, 3, 2, 4) and not mask[:, :, 0].any() and mask[:, :, 1:].all()
    pos2, _, _, _ = wan_nodes.wan_vace_to_video(pos, neg, FakeVideoVAE(), 32, 16, 5, 2, 0.5)
    assert pos2[0][1]["vace_strength"] == [1.0, 0.5] and len(pos2[0][1]["vace_frames"]) == 2
    (trimmed,) = wan_nodes.trim_video_latent(latent, trim)
    assert trimmed["samples"].shape == (2, 16, 2, 2, 4)


def test_vace_needs_sides_in_whole_mask_patches():
    with pytest.raises(NodeInputError, match="'width' expected a multiple of 8"):
        wan_nodes.wan_vace_to_video(cond(), cond(), FakeVideoVAE(), 36, 16, 5, 1, 1.0)


# --- Phantom ----------------------------------------------------------------------------------

def test_phantom_appends_each_subject_latent_in_time_with_two_negatives():
    fmt = wan21_latent_format()
    vae, subjects = FakeVideoVAE(), frames(2, seed=14)
    pos, neg_text, neg_img_text, latent = wan_nodes.wan_phantom_subject_to_video(cond(1.0), cond(2.0), vae, 32, 16,
                                                                                 9, 2, images=subjects)
    assert latent["samples"].shape == (2, 16, 3, 2, 4)
    assert len(vae.calls) == 2 and all(torch.equal(c, s[None]) for c, s in zip(vae.calls, subjects))  # one by one
    concat = pos[0][1]["time_dim_concat"]
    expected = torch.cat([vae.latent_of(s[None]) for s in subjects], dim=2)
    assert concat.shape == (1, 16, 2, 2, 4) and torch.allclose(concat, expected)
    assert neg_text[0][1]["time_dim_concat"] is concat and neg_text[0][1]["keep"] == 2.0
    assert torch.allclose(neg_img_text[0][1]["time_dim_concat"], fmt.process_out(torch.zeros(1, 16, 2, 2, 4)))
    pos, neg_text, neg_img_text, _ = wan_nodes.wan_phantom_subject_to_video(cond(), cond(2.0), vae, 32, 16, 9, 1)
    assert "time_dim_concat" not in pos[0][1] and neg_text[0][1] == neg_img_text[0][1] == {"keep": 2.0}


# --- validation and errors --------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda n: wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, n, 1),
    lambda n: wan_nodes.wan_first_last_frame_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, n, 1),
    lambda n: wan_nodes.wan_vace_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, n, 1, 1.0),
    lambda n: wan_nodes.wan22_image_to_video_latent(FakeVideoVAE(48, 16), 32, 32, n, 1),
])
def test_a_frame_count_the_model_cannot_take_is_refused(call):
    with pytest.raises(NodeInputError, match=r"'length' expected a frame count of the form 4k \+ 1 .* the nearest "
                                             r"are 81 and 85, received 82"):
        call(82)


async def test_the_validator_checks_the_range_and_the_node_the_step():
    from graph.executor import Executor
    from graph.validation import validate_prompt
    from nodes import register_builtin_nodes

    registry = Registry()
    register_builtin_nodes(registry)
    empty = {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 32, "height": 16, "length": 0,
                                                                  "batch_size": 1}}
    result = await validate_prompt({"1": empty, "2": {"class_type": "TrimVideoLatent",
                                                      "inputs": {"samples": ["1", 0], "trim_amount": 0}},
                                    "3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}}}, registry)
    assert not result.ok and result.node_errors["1"]["errors"][0]["type"] == "value_smaller_than_min"
    empty["inputs"]["length"] = 82  # within min..max: ComfyUI's validator lets it through, the node refuses it
    events = []
    outcome = await Executor(registry).execute({"5": empty, "6": {"class_type": "PreviewAny",
                                                                  "inputs": {"source": ["5", 0]}}}, "p",
                                               outputs=["6"], extra_data={}, sink=events.append, interrupt=None)
    assert outcome.status == "error"
    error = next(e.data for e in events if e.type == "execution_error")
    assert error["node_id"] == "5"
    assert error["exception_message"].startswith("EmptyHunyuanLatentVideo (node 5): input 'length' expected a "
                                                 "frame count of the form 4k + 1")


def test_bad_inputs_get_typed_errors():
    class ImageVAE(FakeVideoVAE):
        def encode(self, pixels):
            return torch.zeros(pixels.shape[0], 4, 2, 4)  # an SD VAE's [B, 4, h, w]

    with pytest.raises(NodeInputError, match=r"'vae' expected a video VAE .* received one returning Tensor"):
        wan_nodes.wan_image_to_video(cond(), cond(), ImageVAE(), 32, 16, 5, 1, start_image=frames(1))
    with pytest.raises(NodeInputError, match=r"'vae' expected a video VAE \(Wan's\) whose encode returns a latent "
                                             r"\[1, 16, T, h, w\]"):
        wan_nodes.wan_vace_to_video(cond(), cond(), FakeVideoVAE(48, 8), 32, 16, 5, 1, 1.0)
    with pytest.raises(NodeInputError, match="'start_image' expected an IMAGE"):
        wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 5, 1, start_image=torch.zeros(16, 32))
    with pytest.raises(NodeInputError, match="'positive' expected a CONDITIONING"):
        wan_nodes.wan_image_to_video("a cat", cond(), FakeVideoVAE(), 32, 16, 5, 1)
    with pytest.raises(NodeInputError, match="'vae' expected a VAE"):
        wan_nodes.wan_image_to_video(cond(), cond(), None, 32, 16, 5, 1)
    with pytest.raises(NodeInputError, match="'width' expected an INT in 16..16384"):
        wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 8, 16, 5, 1)
    with pytest.raises(NodeInputError, match="'clip_vision_output' expected a CLIP_VISION_OUTPUT with penultimate"):
        wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 5, 1, clip_vision_output=object())


def test_declared_inputs_follow_comfyuis_order_and_optionals():
    spec = spec_of(wan_nodes.wan_vace_to_video)
    assert [i.name for i in spec.inputs] == ["positive", "negative", "vae", "width", "height", "length", "batch_size",
                                             "strength", "control_video", "control_masks", "reference_image"]


# --- CLIP vision into the conditioning --------------------------------------------------------

class _Shape:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


def test_clip_vision_h_is_detected_with_257_tokens_of_1280():
    """ComfyUI's repackaged clip_vision_h.safetensors: LAION's CLIP-ViT-H-14 in transformers'
    names (ComfyUI tells it by `vision_model.encoder.layers.30.*`): 32 layers of width 1280,
    224 px in 14 px patches, so 16 x 16 patches plus the class token."""
    from comfy_core.clip_vision.config import find_clip_vision

    header = {"vision_model.embeddings.class_embedding": _Shape(1280),
              "vision_model.embeddings.patch_embedding.weight": _Shape(1280, 3, 14, 14),
              "vision_model.embeddings.position_embedding.weight": _Shape(257, 1280),
              "visual_projection.weight": _Shape(1024, 1280)}
    for i in range(32):
        header[f"vision_model.encoder.layers.{i}.mlp.fc1.weight"] = _Shape(5120, 1280)
    config = find_clip_vision(header)
    assert (config.name, config.width, config.layers, config.num_positions) == ("CLIP ViT-H/14 (OpenCLIP)", 1280, 32,
                                                                                257)
    assert (config.image_size, config.activation, config.heads) == (224, "gelu", 16)


def test_clip_vision_encode_output_reaches_the_conditioning_as_the_penultimate_states(tmp_path):
    from safetensors.torch import load_file
    from transformers import CLIPVisionModelWithProjection

    from comfy_core.clip_vision.preprocess import clip_preprocess
    from graph.context import NodeContext, reset_current, set_current
    from nodes import clip_vision as cv_nodes
    from tests.fixtures.clip_vision import write_tiny_clip_vision

    path = write_tiny_clip_vision(tmp_path / "models" / "clip_vision" / "clip_vision_h.safetensors")
    environment = Environment.rooted_at(tmp_path, dtype_policy={"text": "fp32"})
    token = set_current(NodeContext("p", "1", "1", None, environment))
    try:
        (clip_vision,) = cv_nodes.load_clip("clip_vision_h.safetensors")
        image = frames(1, 40, 30, seed=12)
        (encoded,) = cv_nodes.encode(clip_vision, image, "none")
    finally:
        reset_current(token)
    pos, _, _ = wan_nodes.wan_image_to_video(cond(), cond(), FakeVideoVAE(), 32, 16, 5, 1, clip_vision_output=encoded,
                                             start_image=image)
    states = pos[0][1]["clip_vision_output"].penultimate_hidden_states
    config = clip_vision.config
    assert states.shape == (1, config.num_positions, config.width)
    reference = CLIPVisionModelWithProjection(config.to_transformers()).eval()
    reference.load_state_dict(load_file(str(path)), strict=False)
    pixels = clip_preprocess(image, config.image_size, config.image_mean, config.image_std, crop=False)
    with torch.no_grad():
        expected = reference(pixel_values=pixels, output_hidden_states=True).hidden_states[-2]
    assert torch.allclose(states, expected, atol=1e-5)


# --- the real Wan VAEs (tests/fixtures/wan_vae_files.py) ------------------------------------------

def _real_wan_vae(tmp_path, version: str):
    from comfy_core.loading import load_vae
    from tests.fixtures.wan_vae_files import write_wan_vae

    return load_vae(write_wan_vae(tmp_path, version, "comfy"))


def test_a_real_wan21_vae_encodes_the_start_frames_then_grey(tmp_path):
    vae = _real_wan_vae(tmp_path, "2.1")  # tiny: 4 latent channels (the real one has 16)
    start = frames(1, 16, 32, seed=13)
    pos, _, latent = wan_nodes.wan_image_to_video(cond(), cond(), vae, 32, 16, 5, 1, start_image=start)
    concat = pos[0][1]["concat_latent_image"]
    assert concat.shape == (1, vae.latent_channels, 2, 2, 4) and latent["samples"].shape[-2:] == (2, 4)
    expected = vae.encode(torch.cat([start, grey(4)]))
    assert torch.allclose(concat, expected, atol=1e-5)
    assert pos[0][1]["concat_mask"].shape == (1, 1, 2, 2, 4)


def test_a_real_wan22_vae_sets_the_first_last_frame_geometry(tmp_path):
    vae = _real_wan_vae(tmp_path, "2.2")  # 16x spatial; tiny: 8 latent channels (the real one has 48)
    start, end = frames(1, 32, 64, seed=14), frames(1, 32, 64, seed=15)
    pos, _, latent = wan_nodes.wan_first_last_frame_to_video(cond(), cond(), vae, 64, 32, 5, 1, start_image=start,
                                                             end_image=end)
    c = vae.latent_channels
    assert latent["samples"].shape == (1, c, 2, 2, 4)
    expected = vae.encode(torch.cat([start, grey(3, 32, 64), end]))
    assert torch.allclose(pos[0][1]["concat_latent_image"], expected, atol=1e-5)
    assert pos[0][1]["concat_mask"].shape == (1, 4, 2, 2, 4)


# --- the conditioning sampled through tiny Wan models (comfy_core/families/wan*.py) -----------

def _tiny_model(tmp_path, variant: str):
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.wan_files import write_tiny_wan

    return load_diffusion_model(write_tiny_wan(tmp_path / f"{variant}.safetensors", variant))


def _text(width: int = 32) -> tuple[list, list]:
    generator = torch.Generator().manual_seed(5)
    return [[torch.randn(1, 8, width, generator=generator), {}]], [[torch.zeros(1, 8, width), {}]]


def test_image_to_video_conditioning_samples_through_a_wan_i2v_model(tmp_path):
    from comfy_core.clip_vision.output import ClipVisionOutput
    from nodes.sampling import ksampler

    model = _tiny_model(tmp_path, "i2v")
    clip_out = ClipVisionOutput()
    clip_out.penultimate_hidden_states = torch.randn(1, 257, 48, generator=torch.Generator().manual_seed(6))
    runs = []
    for seed in (1, 2):
        pos, neg, latent = wan_nodes.wan_image_to_video(*_text(), FakeVideoVAE(), 48, 32, 5, 1,
                                                        clip_vision_output=clip_out,
                                                        start_image=frames(1, 32, 48, seed=seed))
        runs.append(ksampler(model, 3, 2, 4.0, "euler", "simple", pos, neg, latent)[0]["samples"])
    assert runs[0].shape == (1, 16, 2, 4, 6) and torch.isfinite(runs[0]).all()
    assert (runs[0] - runs[1]).abs().max() > 1e-3  # the start image reaches the model


def test_wan22_latent_noise_mask_keeps_the_start_frame_through_sampling(tmp_path):
    from nodes.sampling import ksampler

    model = _tiny_model(tmp_path, "ti2v")
    (latent,) = wan_nodes.wan22_image_to_video_latent(FakeVideoVAE(48, 16), 96, 64, 9, 1,
                                                      start_image=frames(1, 64, 96, seed=3))
    out = ksampler(model, 1, 3, 5.0, "euler", "simple", *_text(), latent)[0]["samples"]
    assert out.shape == (1, 48, 3, 4, 6)
    torch.testing.assert_close(out[:, :, 0], latent["samples"][:, :, 0], atol=1e-5, rtol=1e-5)
    assert (out[:, :, 1:] - latent["samples"][:, :, 1:]).abs().mean() > 0.1


def test_vace_conditioning_samples_and_the_reference_frame_is_trimmed(tmp_path):
    from nodes.sampling import ksampler

    model = _tiny_model(tmp_path, "vace")
    pos, neg, latent, trim = wan_nodes.wan_vace_to_video(*_text(), FakeVideoVAE(), 48, 32, 5, 1, 1.0,
                                                         control_video=frames(5, 32, 48, seed=4),
                                                         reference_image=frames(1, 32, 48, seed=5))
    out = ksampler(model, 3, 2, 4.0, "euler", "simple", pos, neg, latent)
    (trimmed,) = wan_nodes.trim_video_latent(out[0], trim)
    assert latent["samples"].shape == (1, 16, 3, 4, 6) and trimmed["samples"].shape == (1, 16, 2, 4, 6)
    plain = ksampler(model, 3, 2, 4.0, "euler", "simple", *_text(), latent)[0]["samples"]
    assert (out[0]["samples"] - plain).abs().max() > 1e-3  # the VACE control reaches the model


def test_phantom_subjects_are_appended_to_the_frames_the_model_sees(tmp_path):
    from nodes.sampling import ksampler

    model = _tiny_model(tmp_path, "t2v")
    pos, _, neg, latent = wan_nodes.wan_phantom_subject_to_video(*_text(), FakeVideoVAE(), 48, 32, 5, 1,
                                                                 images=frames(1, 32, 48, seed=8))
    out = ksampler(model, 3, 2, 4.0, "euler", "simple", pos, neg, latent)[0]["samples"]
    plain = ksampler(model, 3, 2, 4.0, "euler", "simple", *_text(), latent)[0]["samples"]
    assert out.shape == (1, 16, 2, 4, 6) and (out - plain).abs().max() > 1e-3


def test_camera_embedding_conditions_a_wan_camera_model(tmp_path):
    from comfy_core.clip_vision.output import ClipVisionOutput
    from nodes import camera_nodes
    from nodes.sampling import ksampler

    model = _tiny_model(tmp_path, "camera")
    clip_out = ClipVisionOutput()
    clip_out.penultimate_hidden_states = torch.randn(1, 257, 48, generator=torch.Generator().manual_seed(6))
    runs = []
    for pose in ("Pan Left", "Zoom In"):
        camera, width, height, length = camera_nodes.wan_camera_embedding(pose, 48, 32, 5)
        pos, neg, latent = wan_nodes.wan_camera_image_to_video(*_text(), FakeVideoVAE(), width, height, length, 1,
                                                               clip_vision_output=clip_out,
                                                               start_image=frames(1, 32, 48, seed=7),
                                                               camera_conditions=camera)
        runs.append(ksampler(model, 3, 2, 4.0, "euler", "simple", pos, neg, latent)[0]["samples"])
    assert runs[0].shape == (1, 16, 2, 4, 6) and (runs[0] - runs[1]).abs().max() > 1e-4
