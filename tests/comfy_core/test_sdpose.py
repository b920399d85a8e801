"""SDPose (comfy_core/families/sdpose): its checkpoint is told from SD 2 by the heatmap head and
loads through the checkpoint and diffusion-model loaders; the head matches its equations; the
heatmap decoding (UDP + DARK) matches a reference written here; the UNet calls `output_block_patch`
where the extractor captures the head's feature."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.sdpose.head import INPUT_SIZE, SDPoseConfig, decode_heatmaps
from tests.fixtures.checkpoints import tiny_state_dict
from tests.fixtures.dit_checkpoints import save, under
from tests.fixtures.template_models_sdpose import HEAD_WIDTH, KEYPOINTS, head_shapes, tiny_sdpose_state_dict


@pytest.fixture(scope="module")
def sdpose_file(tmp_path_factory):
    return save(tiny_sdpose_state_dict(seed=1), tmp_path_factory.mktemp("sdpose") / "sdpose_wholebody.safetensors")


@pytest.fixture(scope="module")
def loaded(sdpose_file):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(sdpose_file)


def test_the_checkpoint_is_sdpose_with_its_head_read_from_the_weights():
    detection = default_registry().detect(tiny_sdpose_state_dict(seed=0))
    config = detection.config
    assert detection.family.name == "sdpose" and isinstance(config, SDPoseConfig)
    assert (config.head_in_channels, config.head_deconv, config.head_conv) == (HEAD_WIDTH, ((HEAD_WIDTH, 4),),
                                                                               ((HEAD_WIDTH, 1),))
    assert (config.keypoints, config.final_kernel, config.num_head_channels) == (KEYPOINTS, 1, 64)
    assert config.heatmap_size == (192, 256) and config.context_dim == 1024


def test_sd2_without_the_head_stays_sd2_and_with_an_sd2_text_encoder_the_head_decides():
    registry = default_registry()
    sd2 = tiny_state_dict("sd2")
    assert registry.detect(sd2).family.name == "sd2"
    with_head = {**sd2, **{name: torch.zeros(shape) for name, shape in head_shapes(width=64).items()}}
    assert registry.detect(with_head).family.name == "sdpose"


def test_the_diffusion_model_alone_is_sdpose(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = under(tiny_sdpose_state_dict(seed=2), "model.diffusion_model.")
    model = load_diffusion_model(save(state, tmp_path / "sdpose_unet.safetensors"))
    head = model.model.diffusion_model.heatmap_head
    assert head.in_channels == HEAD_WIDTH and head.final_layer.weight.shape[0] == KEYPOINTS


def test_the_checkpoint_loads_model_and_vae_without_clip(loaded, sdpose_file):
    from safetensors import safe_open

    model, clip, vae = loaded
    assert clip is None and vae is not None
    head = model.model.diffusion_model.heatmap_head
    with safe_open(str(sdpose_file), "pt") as f:
        stored = f.get_tensor("model.diffusion_model.heatmap_head.final_layer.weight")
    assert torch.equal(head.final_layer.weight.detach().float(), stored.float())


def _deconv_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Stride-2 transposed convolution (kernel 4, padding 1) as zero insertion + a convolution with
    the flipped, in/out-swapped kernel over a (k - 1 - p)-wide zero border."""
    b, c, h, w = x.shape
    up = torch.zeros(b, c, 2 * h - 1, 2 * w - 1, dtype=x.dtype)
    up[:, :, ::2, ::2] = x
    k = weight.shape[-1]
    pad = k - 1 - 1
    kernel = weight.flip(-1, -2).transpose(0, 1)  # [out, in, k, k]
    return F.conv2d(F.pad(up, (pad, pad, pad, pad)), kernel)


def _norm_silu(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean(dim=(2, 3), keepdim=True)
    y = (x - mean) / torch.sqrt(var + 1e-5)
    return y * torch.sigmoid(y)


def test_the_head_is_transposed_conv_norm_silu_conv_norm_silu_projection(loaded):
    head = loaded[0].model.diffusion_model.heatmap_head
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, HEAD_WIDTH, 6, 5, generator=gen)
    d = head.deconv_layers[0].weight.detach().float()
    c_w, c_b = head.conv_layers[0].weight.detach().float(), head.conv_layers[0].bias.detach().float()
    f_w, f_b = head.final_layer.weight.detach().float(), head.final_layer.bias.detach().float()
    y = _norm_silu(_deconv_reference(x, d))  # [2, 64, 12, 10]
    y = _norm_silu(torch.einsum("oi,bihw->bohw", c_w[:, :, 0, 0], y) + c_b[None, :, None, None])
    want = torch.einsum("oi,bihw->bohw", f_w[:, :, 0, 0], y) + f_b[None, :, None, None]
    got = head.heatmaps(x)
    assert got.shape == (2, KEYPOINTS, 12, 10)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _gaussian_reflect(image: np.ndarray, sigma: float) -> np.ndarray:
    """A separable Gaussian (radius int(4 sigma + 0.5), normalised) over half-sample mirrored edges."""
    radius = int(4 * sigma + 0.5)
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    out = image.astype(np.float64)
    for axis in (0, 1):
        padded = np.pad(out, [(radius, radius) if a == axis else (0, 0) for a in (0, 1)], mode="symmetric")
        out = sum(t * np.take(padded, np.arange(i, i + out.shape[axis]), axis=axis) for i, t in enumerate(taps))
    return out


def _decode_reference(maps: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One image's `[K, H, W]` heatmaps -> (x, y) and scores: argmax, the blurred log map's Newton
    step through a flat index into the edge-padded maps (MMPose's `refine_keypoints_dark_udp`)."""
    count, h, w = maps.shape
    flat = maps.reshape(count, -1)
    index = flat.argmax(1)
    scores = flat[np.arange(count), index]
    points = np.stack([index % w, index // w], 1).astype(np.float64)
    blurred = np.empty_like(maps, dtype=np.float64)
    for k in range(count):
        border = np.zeros((h + 10, w + 10))
        border[5:-5, 5:-5] = maps[k]
        smooth = _gaussian_reflect(border, 2.0)[5:-5, 5:-5]
        blurred[k] = smooth * (maps[k].max() / smooth.max()) if smooth.max() > 0 else smooth
    logs = np.log(np.clip(blurred, 1e-3, 50.0))
    pad = np.pad(logs, ((0, 0), (1, 1), (1, 1)), mode="edge").ravel()
    stride = w + 2
    for k in range(count):
        if scores[k] <= 0:
            points[k] = -1
            continue
        i = int(points[k, 0] + 1 + (points[k, 1] + 1) * stride + k * stride * (h + 2))
        g = np.array([0.5 * (pad[i + 1] - pad[i - 1]), 0.5 * (pad[i + stride] - pad[i - stride])])
        dxx = pad[i + 1] - 2 * pad[i] + pad[i - 1]
        dyy = pad[i + stride] - 2 * pad[i] + pad[i - stride]
        dxy = 0.5 * (pad[i + stride + 1] - pad[i + 1] - pad[i + stride] + 2 * pad[i] - pad[i - 1]
                     - pad[i - stride] + pad[i - stride - 1])
        hess = np.array([[dxx, dxy], [dxy, dyy]]) + np.finfo(np.float32).eps * np.eye(2)
        points[k] = (points[k] - np.linalg.solve(hess, g)) * scale
    return points, scores


def test_decoding_matches_the_reference_and_finds_sub_pixel_peaks():
    h, w = 40, 30
    yy, xx = np.mgrid[0:h, 0:w]
    centres = [(7.3, 11.6), (20.0, 30.5), (22.7, 5.2), (0.4, 38.9)]  # (x, y); the last at the border
    maps = [np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * 2.0 ** 2)) for cx, cy in centres]
    maps.append(-np.ones((h, w)))  # no peak above 0: missing
    rng = np.random.default_rng(0)
    maps.append(0.3 * rng.random((h, w)))  # noise: decoded all the same
    heatmaps = np.stack([np.stack(maps), np.stack(maps[::-1])]).astype(np.float32)  # [2, 6, H, W]
    scale = np.array([(INPUT_SIZE[0] - 1) / (w - 1), (INPUT_SIZE[1] - 1) / (h - 1)], dtype=np.float32)
    points, scores = decode_heatmaps(heatmaps, scale)
    assert len(points) == 2 and points[0].shape == (6, 2) and scores[0].shape == (6,)
    for image in range(2):
        want_points, want_scores = _decode_reference(heatmaps[image], scale)
        np.testing.assert_allclose(points[image], want_points, rtol=1e-4, atol=1e-2)
        np.testing.assert_allclose(scores[image], want_scores, rtol=1e-6)
    assert (points[0][4] == -1).all() and (points[1][1] == -1).all()
    for k, (cx, cy) in enumerate(centres[:3]):  # inside: the true centre within a tenth of a heatmap pixel
        assert np.allclose(points[0][k] / scale, (cx, cy), atol=0.1), (points[0][k] / scale, (cx, cy))


def test_the_unet_calls_output_block_patch_before_each_output_block(loaded):
    """ComfyUI's order: the patch sees h (the previous block's output) and the skip before they are
    joined; the last h as wide as the head's input has the latent's size (SD 2: 640 channels)."""
    unet = loaded[0].model.diffusion_model
    seen: list[tuple[tuple, tuple, tuple]] = []

    def patch(h, skip, options):
        seen.append((options["block"], tuple(h.shape), tuple(skip.shape)))
        return h, skip

    x = torch.randn(1, 4, 16, 12)
    context = torch.randn(1, 2, 1024)
    with torch.no_grad():
        plain = unet(x, torch.tensor([999.0]), context)
        same = unet(x, torch.tensor([999.0]), context, transformer_options={"patches": {"output_block_patch": [patch]}})
        changed = unet(x, torch.tensor([999.0]), context, transformer_options={"patches": {"output_block_patch": [
            lambda h, skip, options: (h * 0 if options["block"] == ("output", 11) else h, skip)]}})
    torch.testing.assert_close(plain, same)
    assert not torch.allclose(plain, changed)
    assert [b for b, _, _ in seen] == [("output", i) for i in range(12)]
    wide = [(b, shape) for b, shape, _ in seen if shape[1] == unet.heatmap_head.in_channels]
    assert wide[-1] == (("output", 9), (1, HEAD_WIDTH, 16, 12))
    assert math.prod(wide[0][1][2:]) < 16 * 12  # the earlier ones are a level down
