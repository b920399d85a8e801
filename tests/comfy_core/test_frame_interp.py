"""Frame interpolation networks (comfy_core/models/frame_interp/): both backward warps against a
bilinear sample written out here, FILM's and RIFE's layouts (ComfyUI's default widths, detection
from the weights, RIFE's raw names), and the frame loop: count, the input frames kept exactly, the
model's frames at t = k / multiplier, features reused, RIFE's reflection padding cropped back."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.models.frame_interp import film, rife
from comfy_core.models.frame_interp.film import FilmConfig, FILMNet
from comfy_core.models.frame_interp.model import (FrameInterpolationWeightsError, InterpolationModel,
                                                  network_from_state_dict, pad_to_multiple)
from comfy_core.models.frame_interp.rife import IFNet, RifeConfig, convert_rife_keys
from tests.fixtures.template_models_bgremoval import (tiny_film_config, tiny_film_state_dict, tiny_rife_config,
                                                      tiny_rife_state_dict)


def _direct_warp(image: torch.Tensor, flow: torch.Tensor) -> torch.Tensor:
    """out[b, c, y, x] = image bilinearly at (x + fx, y + fy), the position clamped to the image."""
    b, c, h, w = image.shape
    out = torch.empty_like(image)
    for n in range(b):
        for y in range(h):
            for x in range(w):
                sx = min(max(x + float(flow[n, 0, y, x]), 0.0), w - 1.0)
                sy = min(max(y + float(flow[n, 1, y, x]), 0.0), h - 1.0)
                x0, y0 = math.floor(sx), math.floor(sy)
                x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
                ax, ay = sx - x0, sy - y0
                out[n, :, y, x] = ((1 - ay) * ((1 - ax) * image[n, :, y0, x0] + ax * image[n, :, y0, x1])
                                   + ay * ((1 - ax) * image[n, :, y1, x0] + ax * image[n, :, y1, x1]))
    return out


@pytest.mark.parametrize("warp", [film.backward_warp, rife.backward_warp], ids=["film", "rife"])
def test_backward_warp_is_a_bilinear_sample_at_the_flow(warp):
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(2, 3, 7, 9, generator=gen)
    flow = 4.0 * torch.randn(2, 2, 7, 9, generator=gen)  # some samples leave the image: border repeated
    torch.testing.assert_close(warp(image, flow), _direct_warp(image, flow), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(warp(image, torch.zeros_like(flow)), image, atol=1e-6, rtol=1e-6)


def test_film_default_widths_are_comfyuis():
    state = FILMNet(FilmConfig()).state_dict()
    assert FilmConfig.detect_from_weights(state) == FilmConfig()
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    assert shapes["extract.extract_sublevels.convs.3.1.conv.weight"] == (512, 512, 3, 3)
    # flow predictors read (a, warped b): 2 x (64, 64+128, +256, +512) channels
    assert shapes["predict_flow._predictors.2._convs.0.conv.weight"] == (32, 128, 3, 3)
    assert shapes["predict_flow._predictors.1._convs.0.conv.weight"] == (64, 384, 3, 3)
    assert shapes["predict_flow._predictors.0._convs.0.conv.weight"] == (128, 896, 3, 3)
    assert shapes["predict_flow._predictor._convs.0.conv.weight"] == (256, 1920, 3, 3)
    assert shapes["predict_flow._predictor._convs.3.conv.weight"] == (128, 256, 1, 1)
    assert shapes["predict_flow._predictor._convs.4.conv.weight"] == (2, 128, 1, 1)
    # fusion: (3 + features) x 2 + 4 flow channels per level; 2x2 then two 3x3 per level
    assert shapes["fuse.convs.0.0.conv.weight"] == (512, 1930, 2, 2)
    assert shapes["fuse.convs.0.1.conv.weight"] == (512, 1930 + 512, 3, 3)
    assert shapes["fuse.convs.1.1.conv.weight"] == (256, (64 + 128 + 256 + 5) * 2 + 256, 3, 3)
    assert shapes["fuse.convs.3.1.conv.weight"] == (64, (64 + 5) * 2 + 64, 3, 3)
    assert shapes["fuse.output_conv.weight"] == (3, 64, 1, 1)


def test_rife_default_widths_and_raw_names():
    config = RifeConfig()
    state = IFNet(config).state_dict()
    assert RifeConfig.detect_from_weights(state) == config
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    assert shapes["encode.cnn3.weight"] == (16, 4, 4, 4)
    assert shapes["blocks.0.conv0.0.0.weight"] == (96, 7 + 8, 3, 3)
    assert shapes["blocks.1.conv0.0.0.weight"] == (64, 8 + 4 + 8 + 8, 3, 3)
    assert shapes["blocks.4.lastconv.0.weight"] == (32, 52, 4, 4)
    state = tiny_rife_state_dict()
    raw = {("module.block" + k[len("blocks."):]) if k.startswith("blocks.") else "module." + k: v
           for k, v in state.items()}
    raw["module.teacher.conv.weight"] = torch.zeros(1)
    assert convert_rife_keys(raw).keys() == state.keys()
    assert RifeConfig.detect_from_weights(state) == tiny_rife_config()


def test_detection_and_errors():
    assert isinstance(network_from_state_dict(tiny_film_state_dict()), FILMNet)
    assert network_from_state_dict(tiny_film_state_dict()).config == tiny_film_config()
    assert isinstance(network_from_state_dict(tiny_rife_state_dict()), IFNet)
    with pytest.raises(FrameInterpolationWeightsError, match="not a FILM or RIFE"):
        network_from_state_dict({"x.weight": torch.zeros(1)})
    broken = tiny_rife_state_dict()
    del broken["blocks.2.convblock.3.beta"]
    with pytest.raises(FrameInterpolationWeightsError, match="beta"):
        network_from_state_dict(broken)


def test_film_features_concatenate_sub_levels():
    net = network_from_state_dict(tiny_film_state_dict())
    image = torch.rand(1, 3, 64, 72)
    pyramid, feats = net.extract_features(image)
    assert [tuple(p.shape[2:]) for p in pyramid] == [(64 >> i, 72 >> i) for i in range(7)]
    assert [f.shape[1] for f in feats] == [8, 24, 56, 120, 120, 120, 120]
    torch.testing.assert_close(pyramid[1], F.avg_pool2d(image, 2))
    sub0 = net.extract.extract_sublevels(pyramid[0], 4)
    torch.testing.assert_close(feats[2][:, 8 + 16:], sub0[2])  # level 2 ends with level 0's sub-level 2


def _frames(count: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(count, h, w, 3, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", ["film", "rife"])
def test_frame_loop_keeps_inputs_and_places_model_frames(kind):
    state = tiny_film_state_dict() if kind == "film" else tiny_rife_state_dict()
    model = InterpolationModel(network_from_state_dict(state))
    assert model.kind == kind
    images = _frames(3, 64, 72)
    seen = []
    out = model.interpolate(images, 3, on_frame=lambda d, t: seen.append((d, t)))
    assert out.shape == (7, 64, 72, 3) and out.dtype == torch.float32
    assert seen == [(2, 4), (4, 4)]
    for k in range(3):
        assert torch.equal(out[3 * k], images[k])
    x0, x1 = images[1:2].movedim(-1, 1), images[2:3].movedim(-1, 1)
    with torch.no_grad():
        for j, t in enumerate((1 / 3, 2 / 3)):
            if kind == "film":
                want = model.model(x0, x1, [t])
            else:
                p0, p1 = pad_to_multiple(x0, 64), pad_to_multiple(x1, 64)
                want = model.model(p0, p1, torch.full((1, 1, *p0.shape[2:]), t))[:, :, :64, :72]
            torch.testing.assert_close(out[4 + j], want[0].movedim(0, -1).clamp(0, 1), atol=1e-5, rtol=1e-5)


def test_unchanged_for_one_frame_or_multiplier_one():
    model = InterpolationModel(network_from_state_dict(tiny_rife_state_dict()))
    one = _frames(1, 64, 64)
    assert model.interpolate(one, 4) is one
    two = _frames(2, 64, 64)
    assert model.interpolate(two, 1) is two


def test_rife_times_batched_equal_one_at_a_time():
    net = network_from_state_dict(tiny_rife_state_dict())
    x0, x1 = torch.rand(1, 3, 64, 64), torch.rand(1, 3, 64, 64)
    times = torch.tensor([0.25, 0.5, 0.75]).view(3, 1, 1, 1).expand(-1, 1, 64, 64)
    with torch.no_grad():
        batched = net(x0.expand(3, -1, -1, -1), x1.expand(3, -1, -1, -1), times)
        for i in range(3):
            torch.testing.assert_close(batched[i:i + 1], net(x0, x1, times[i:i + 1]), atol=1e-5, rtol=1e-5)


def test_reflection_padding_to_64():
    x = torch.arange(2 * 3 * 40 * 50, dtype=torch.float32).view(2, 3, 40, 50)
    padded = pad_to_multiple(x, 64)
    assert padded.shape == (2, 3, 64, 64)
    assert torch.equal(padded[..., :40, :50], x)
    assert torch.equal(padded[..., :40, 50], x[..., :40, 48])  # reflection: the edge column not repeated
    assert torch.equal(padded[..., 40, :50], x[..., 38, :50])


def test_padding_beyond_comfyui_for_small_frames():
    from comfy_core.models.frame_interp.model import pad_frames

    x = torch.rand(1, 3, 48, 20)
    padded = pad_frames(x, 1, 64)  # FILM's minimum: 16 rows by reflection would fit, 44 columns would not
    assert padded.shape == (1, 3, 64, 64) and torch.equal(padded[..., :48, :20], x)
    assert torch.equal(padded[..., 10, 20:], x[..., 10, 19:20].expand(-1, -1, 44))  # edge repeated
    model = InterpolationModel(network_from_state_dict(tiny_film_state_dict()))
    frames = _frames(2, 48, 40)
    out = model.interpolate(frames, 2)
    assert out.shape == (3, 48, 40, 3) and torch.equal(out[2], frames[1])
    with torch.no_grad():
        want = model.model(pad_frames(frames[:1].movedim(-1, 1), 1, 64), pad_frames(frames[1:].movedim(-1, 1), 1, 64),
                           [0.5])[:, :, :48, :40]
    torch.testing.assert_close(out[1], want[0].movedim(0, -1).clamp(0, 1), atol=1e-5, rtol=1e-5)
