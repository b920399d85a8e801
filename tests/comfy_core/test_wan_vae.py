"""The Wan 2.1 and 2.2 video VAEs: numerics against diffusers' `AutoencoderKLWan` on the same tiny
random weights, both file layouts, detection from the weights, the VAE object's video API as
ComfyUI's (`encode` of frames, `decode` to videos, ratios, tiled and memory-chunked decode), the
VAE nodes on video latents, the Wan latent formats and previews of 5-D latents."""
from __future__ import annotations

import pytest
import torch

from comfy_core.checkpoint.errors import ShapeMismatchError
from comfy_core.models.vae import VAEConfigError
from comfy_core.models.wan_vae import WanVAE, latent_frames, pixel_frames
from comfy_core.models.wan_vae_config import WAN21_VAE, WAN22_VAE, WanVAEConfig
from comfy_core.patching.vae import VaePatcher
from comfy_core.patching.vae_build import vae_module_from
from tests.fixtures.wan_vae_files import (TINY, VERSIONS, diffusers_reference, diffusers_state_dict,
                                          original_shapes, original_state_dict, write_wan_vae)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The tiny 3-D convolutions gain nothing from threads, and on a shared machine OpenMP's
    waiting threads make them ten times slower: run this module on one, then put it back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{(version, layout): path} of the tiny VAEs."""
    root = tmp_path_factory.mktemp("wan_vae")
    return {(v, layout): write_wan_vae(root / f"{v}_{layout}", v, layout)
            for v in VERSIONS for layout in ("comfy", "diffusers")}


@pytest.fixture(scope="module")
def modules(files):
    return {v: vae_module_from(files[(v, "comfy")]) for v in VERSIONS}


@pytest.fixture(scope="module")
def references():
    return {v: diffusers_reference(v) for v in VERSIONS}


def _side(version: str) -> int:
    return 16 * TINY[version][3]  # 16 px for 2.1 (2x2 latent), 32 px for 2.2


def _video(frames: int, side: int, seed: int = 0) -> torch.Tensor:
    """Frames [T, H, W, 3] in 0..1."""
    return torch.rand(frames, side, side, 3, generator=torch.Generator().manual_seed(seed))


# --- numerics against diffusers ------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("frames", [1, 5, 9])
def test_encode_mean_matches_diffusers(modules, references, version, frames):
    side = _side(version)
    x = _video(frames, side).permute(3, 0, 1, 2).unsqueeze(0) * 2 - 1  # [1, 3, T, H, W]
    with torch.no_grad():
        theirs = references[version].encode(x).latent_dist.mode()
        ours = modules[version].encode_raw(x)
    assert ours.shape == theirs.shape == (1, TINY[version][2], 1 + (frames - 1) // 4, side // (8 * TINY[version][3]),
                                          side // (8 * TINY[version][3]))
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("latent_t", [1, 2, 3])  # 1, 5 and 9 frames
def test_decode_matches_diffusers(modules, references, version, latent_t):
    z = torch.randn(1, TINY[version][2], latent_t, 2, 2, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        theirs = references[version].decode(z).sample  # clamped to -1..1
        ours = modules[version].decode_raw(z)
    assert ours.shape == theirs.shape == (1, 3, 1 + 4 * (latent_t - 1), 2 * 8 * TINY[version][3],
                                          2 * 8 * TINY[version][3])
    torch.testing.assert_close(ours.clamp(-1, 1), theirs, atol=2e-5, rtol=1e-4)


# --- layouts and detection -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", VERSIONS)
def test_both_layouts_load_to_the_same_module(files, version):
    comfy = vae_module_from(files[(version, "comfy")]).state_dict()
    diffusers = vae_module_from(files[(version, "diffusers")]).state_dict()
    assert comfy.keys() == diffusers.keys() == set(original_shapes(version))
    assert all(torch.equal(comfy[k], diffusers[k]) for k in comfy)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_state_dict_in_memory_and_a_prefix_load_too(modules, version):
    state = original_state_dict(version)
    for source in (state, {f"vae.{k}": v for k, v in state.items()}, diffusers_state_dict(version)):
        module = vae_module_from(source)
        assert module.config == modules[version].config
        assert torch.equal(module.state_dict()["decoder.head.2.weight"], state["decoder.head.2.weight"])
    # ComfyUI's `comfy.sd.VAE(sd=...)`, as packs build one from a state dict they loaded.
    vae = VaePatcher(sd=state)
    assert isinstance(vae.first_stage_model, WanVAE) and vae.latent_dim == 3


def test_detection_reads_each_version_from_names_and_shapes(modules):
    tiny21, tiny22 = modules["2.1"].config, modules["2.2"].config
    assert isinstance(modules["2.1"], WanVAE) and isinstance(modules["2.2"], WanVAE)
    assert (tiny21.dim, tiny21.decoder_dim, tiny21.z_dim, tiny21.patch_size, tiny21.residual) == (8, 8, 4, 1, False)
    assert (tiny22.dim, tiny22.decoder_dim, tiny22.z_dim, tiny22.patch_size, tiny22.residual) == (8, 12, 8, 2, True)
    for config in (tiny21, tiny22):
        assert (config.dim_mult, config.num_res_blocks, config.temporal_downsample) == ((1, 2, 4, 4), 2,
                                                                                         (False, True, True))
    assert (tiny21.spatial_ratio, tiny21.temporal_ratio, tiny22.spatial_ratio) == (8, 4, 16)
    # Shapes only: the real files' configurations, detected from meta tensors of their shapes.
    for real in (WAN21_VAE, WAN22_VAE):
        with torch.device("meta"):
            meta = WanVAE(real).state_dict()
        assert WanVAEConfig.detect_from_weights(meta) == real


def test_a_file_missing_a_tensor_is_a_typed_load_error():
    state = original_state_dict("2.1")
    del state["decoder.upsamples.4.shortcut.weight"]
    with pytest.raises(ShapeMismatchError, match="shortcut"):
        vae_module_from(state)
    state = original_state_dict("2.2")
    del state["encoder.conv1.weight"]
    with pytest.raises(ShapeMismatchError, match="encoder.conv1.weight"):
        vae_module_from(state)


def test_an_unknown_diffusers_tensor_is_a_typed_load_error():
    state = diffusers_state_dict("2.1")
    state["decoder.extra_block.weight"] = torch.zeros(1)
    with pytest.raises(ShapeMismatchError, match="extra_block"):
        vae_module_from(state)


# --- the VAE object (ComfyUI's comfy.sd.VAE for Wan) ---------------------------------------------------

@pytest.fixture(scope="module")
def patchers(modules):
    return {v: VaePatcher(m) for v, m in modules.items()}


@pytest.mark.parametrize("version", VERSIONS)
def test_vae_object_answers_as_comfyuis_wan_vae(patchers, version):
    vae = patchers[version]
    f = 8 * TINY[version][3]
    assert (vae.latent_dim, vae.latent_channels, vae.temporal_compression_decode()) == (3, TINY[version][2], 4)
    assert vae.spacial_compression_decode() == vae.spacial_compression_encode() == f
    down, up = vae.downscale_ratio, vae.upscale_ratio
    assert down[1:] == up[1:] == (f, f)
    assert [down[0](n) for n in (1, 4, 5, 8, 9, 81)] == [1, 1, 2, 2, 3, 21]
    assert [up[0](n) for n in (1, 2, 3, 21)] == [1, 5, 9, 81]


def test_frame_counts_follow_wans_4k_plus_1_rule():
    assert [latent_frames(n) for n in (0, 1, 2, 5, 7, 9, 81)] == [0, 1, 1, 2, 2, 3, 21]
    assert [pixel_frames(n) for n in (0, 1, 2, 21)] == [0, 1, 5, 81]


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_of_frames_gives_one_video_latent_and_drops_frames_past_4k_plus_1(patchers, version):
    vae, side = patchers[version], _side(version)
    frames = _video(7, side)
    latent = vae.encode(frames)
    assert latent.shape == (1, TINY[version][2], 2, side // (8 * TINY[version][3]), side // (8 * TINY[version][3]))
    torch.testing.assert_close(latent, vae.encode(frames[:5]), atol=0, rtol=0)
    # Sides that are not a multiple of the factor are centre-cropped, as ComfyUI does.
    padded = torch.nn.functional.pad(frames.movedim(-1, 1), (1, 2, 1, 2)).movedim(1, -1)  # [7, side+3, side+3, 3]
    torch.testing.assert_close(vae.encode(padded), latent, atol=0, rtol=0)


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_gives_videos_of_4k_plus_1_frames_in_0_1(patchers, version):
    vae = patchers[version]
    z = torch.randn(2, TINY[version][2], 2, 2, 2, generator=torch.Generator().manual_seed(2))
    videos = vae.decode(z)
    side = 2 * 8 * TINY[version][3]
    assert videos.shape == (2, 5, side, side, 3)
    assert float(videos.min()) >= 0.0 and float(videos.max()) <= 1.0
    with torch.no_grad():
        raw = vae.model.decode_raw(z[1:])
    torch.testing.assert_close(videos[1], ((raw[0] + 1) / 2).clamp(0, 1).permute(1, 2, 3, 0))


def test_decode_refuses_a_latent_of_the_wrong_shape(patchers):
    with pytest.raises(VAEConfigError, match=r"\[B, 4, T, h, w\]"):
        patchers["2.1"].decode(torch.zeros(1, 4, 2, 2))
    with pytest.raises(VAEConfigError, match=r"\[B, 4, T, h, w\]"):
        patchers["2.1"].decode(torch.zeros(1, 16, 1, 2, 2))


def test_decode_runs_as_many_videos_at_once_as_free_memory_holds(patchers, monkeypatch):
    import comfy_core.patching.vae as vae_module

    vae = patchers["2.1"]
    z = torch.randn(3, 4, 2, 2, 2, generator=torch.Generator().manual_seed(3))
    per_video = vae.memory_used_decode((1, 4, 2, 2, 2), vae.vae_dtype)
    assert per_video == vae.memory_used_decode((1, 4, 21, 2, 2), vae.vae_dtype)  # streamed: any length
    batches: list[int] = []
    real = vae.model.decode_raw

    def counting(latent, output_device=None):
        batches.append(latent.shape[0])
        return real(latent, output_device=output_device)

    monkeypatch.setattr(vae.model, "decode_raw", counting)
    monkeypatch.setattr(vae_module, "device_free_memory", lambda device: 2 * per_video + 1)
    chunked = vae.decode(z)
    assert batches == [2, 1]
    monkeypatch.setattr(vae_module, "device_free_memory", lambda device: None)  # the CPU: all at once
    torch.testing.assert_close(vae.decode(z), chunked)
    assert batches == [2, 1, 3]


def test_decode_out_of_memory_falls_back_to_tiles(patchers, monkeypatch):
    vae = patchers["2.1"]
    z = torch.randn(1, 4, 2, 2, 2, generator=torch.Generator().manual_seed(4))
    expected = vae.decode(z)
    real = vae.model.decode_raw
    calls: list[tuple[int, ...]] = []

    def failing_whole(latent, output_device=None):
        calls.append(tuple(latent.shape))
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(latent, output_device=output_device)

    monkeypatch.setattr(vae.model, "decode_raw", failing_whole)
    # The fallback tile (256 px = 32 latent px) covers this latent: one tile, the plain result.
    torch.testing.assert_close(vae.decode(z), expected)
    assert len(calls) == 2


# --- tiled decode / encode -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def long_latent():
    return torch.randn(1, 4, 3, 4, 4, generator=torch.Generator().manual_seed(5))  # 9 frames of 32x32


def test_tiles_covering_the_latent_give_the_plain_decode(patchers, long_latent):
    vae = patchers["2.1"]
    torch.testing.assert_close(vae.decode_tiled(long_latent, tile_x=4, tile_y=4, overlap=1, tile_t=8, overlap_t=1),
                               vae.decode(long_latent), atol=0, rtol=0)


def test_tiled_nd_places_time_and_space_as_comfyui():
    """A local map (each latent pixel to an 8x8 block; the first latent frame of a tile to one
    frame, the others to four, as the Wan decoder's time axis) tiled in time and space equals
    the untiled map exactly: the tiles land where the index formulas put them."""
    from comfy_core.models.vae_tiling import Axis, tiled_nd

    def local(z):  # [1, C, t, h, w] -> [1, C, 4t - 3, 8h, 8w]
        frames = torch.cat([z[:, :, :1], z[:, :, 1:].repeat_interleave(4, dim=2)], dim=2)
        return frames.repeat_interleave(8, dim=3).repeat_interleave(8, dim=4)

    z = torch.randn(2, 3, 7, 6, 5, generator=torch.Generator().manual_seed(12))
    axes = (Axis(3, 1, pixel_frames, lambda p: 4 * p), Axis(4, 2, lambda n: 8 * n, lambda p: 8 * p),
            Axis(3, 1, lambda n: 8 * n, lambda p: 8 * p))
    seen: list[tuple[int, int]] = []
    tiled = tiled_nd(z, local, axes, 3, progress=lambda done, total: seen.append((done, total)))
    torch.testing.assert_close(tiled, local(z), atol=1e-6, rtol=1e-6)
    assert seen[-1] == (2 * 3 * 2 * 2, 2 * 3 * 2 * 2)  # time starts 0, 2, 4; rows 0, 2; columns 0, 2


def test_temporal_tiles_restart_the_causal_decode_and_average_the_overlap(patchers, long_latent):
    """ComfyUI's temporal tiling: a tile starting at latent frame p decodes it as a first frame,
    placed at frame 4p; overlapping frames are averaged (an overlap of one latent frame has no
    ramp); the frames before the second tile are the plain decode's."""
    vae = patchers["2.1"]
    tiled = vae.decode_tiled(long_latent, tile_x=4, tile_y=4, overlap=1, tile_t=2, overlap_t=1)
    with torch.no_grad():
        first, second = vae.model.decode_raw(long_latent[:, :, :2]), vae.model.decode_raw(long_latent[:, :, 1:])
    expected = torch.cat([first[:, :, :4], (first[:, :, 4:] + second[:, :, :1]) / 2, second[:, :, 1:]], dim=2)
    assert tiled.shape == (1, 9, 32, 32, 3)
    torch.testing.assert_close(tiled, vae.process_output(expected).permute(0, 2, 3, 4, 1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(tiled[:, :4], vae.decode(long_latent)[:, :4], atol=1e-6, rtol=1e-5)


@pytest.fixture(scope="module")
def damped():
    """The tiny Wan 2.1 VAE with its residual branches and attention damped (x0.05): a decoder
    whose output depends mostly on nearby latent pixels, as a trained one's does; random
    weights otherwise make every pixel depend on the whole latent and no tiling is close."""
    state = {k: v * 0.05 if k.endswith(("residual.6.weight", "1.proj.weight")) else v
             for k, v in original_state_dict("2.1").items()}
    return VaePatcher(vae_module_from(state))


def test_spatial_and_temporal_tiles_decode_close_to_the_plain_decode(damped):
    z = torch.randn(1, 4, 3, 6, 6, generator=torch.Generator().manual_seed(5))
    other = damped.decode(torch.randn(1, 4, 3, 6, 6, generator=torch.Generator().manual_seed(6)))
    temporal_only = damped.decode_tiled(z, tile_x=6, tile_y=6, overlap=1, tile_t=2, overlap_t=1)
    seen: list[tuple[int, int]] = []
    tiled = damped.decode_tiled(z, tile_x=4, tile_y=4, overlap=2, tile_t=2, overlap_t=1,
                                progress=lambda done, total: seen.append((done, total)))
    assert tiled.shape == temporal_only.shape == (1, 9, 48, 48, 3)
    assert seen[-1] == (8, 8)  # 2 x 2 spatial tiles x 2 temporal tiles
    unrelated = float((other - temporal_only).abs().mean())
    assert float((tiled - temporal_only).abs().mean()) < 0.15 * unrelated
    # Spatial tiles alone, one latent frame: close to the plain decode.
    single = z[:, :, :1]
    spatial = damped.decode_tiled(single, tile_x=4, tile_y=4, overlap=2)
    assert float((spatial - damped.decode(single)).abs().mean()) < 0.15 * unrelated


def test_encode_tiled_covering_everything_equals_encode_and_crops_frames(patchers):
    vae = patchers["2.1"]
    frames = _video(11, 32, seed=6)
    tiled = vae.encode_tiled(frames, tile_x=512, tile_y=512, overlap=64)
    torch.testing.assert_close(tiled, vae.encode(frames[:9]), atol=1e-6, rtol=1e-5)
    split = vae.encode_tiled(frames, tile_x=512, tile_y=512, overlap=64, tile_t=8, overlap_t=4)
    assert split.shape == tiled.shape == (1, 4, 3, 4, 4)


# --- nodes --------------------------------------------------------------------------------------------

def test_vae_decode_node_gives_one_image_batch_of_all_frames(patchers):
    from nodes.latent import vae_decode

    z = torch.randn(2, 8, 2, 2, 2, generator=torch.Generator().manual_seed(7))
    (images,) = vae_decode({"samples": z}, patchers["2.2"])
    assert images.shape == (10, 32, 32, 3)
    torch.testing.assert_close(images[5:], patchers["2.2"].decode(z[1:])[0])


def test_vae_encode_node_gives_a_video_latent(patchers):
    from nodes.latent import vae_encode

    (latent,) = vae_encode(_video(5, 32, seed=8), patchers["2.2"])
    assert latent["samples"].shape == (1, 8, 2, 2, 2)


def test_vae_decode_node_refuses_a_latent_the_vae_cannot_take(patchers):
    from nodes.errors import NodeInputError
    from nodes.latent import vae_decode

    with pytest.raises(NodeInputError, match="video latent"):
        vae_decode({"samples": torch.zeros(1, 4, 2, 2)}, patchers["2.1"])


class _Recording:
    """A Wan VAE object that records what the tiled nodes hand it."""

    def __init__(self, vae):
        self.vae, self.calls = vae, []

    def __getattr__(self, name):
        return getattr(self.vae, name)

    def decode_tiled(self, samples, **kwargs):
        self.calls.append(kwargs)
        return self.vae.decode_tiled(samples, **kwargs)

    def encode_tiled(self, pixels, **kwargs):
        self.calls.append(kwargs)
        return self.vae.encode_tiled(pixels, **kwargs)


def test_vae_decode_tiled_node_converts_frames_to_latent_frames_as_comfyui(patchers, long_latent):
    from nodes.vae_ops import vae_decode_tiled

    vae = _Recording(patchers["2.1"])
    (images,) = vae_decode_tiled({"samples": long_latent}, vae, tile_size=64, overlap=64, temporal_size=8,
                                 temporal_overlap=8)
    call = vae.calls[0]
    # overlap 64 > 64 / 4 -> 16 px -> 2 latent; 8 < 2 * 8 -> overlap 4 frames; 8 // 4 = 2, 4 // 4 = 1.
    assert (call["tile_x"], call["tile_y"], call["overlap"], call["tile_t"], call["overlap_t"]) == (8, 8, 2, 2, 1)
    assert images.shape == (9, 32, 32, 3)
    (whole,) = vae_decode_tiled({"samples": long_latent}, vae, tile_size=512, overlap=64, temporal_size=64,
                                temporal_overlap=8)
    torch.testing.assert_close(whole, patchers["2.1"].decode(long_latent).reshape(9, 32, 32, 3))


def test_vae_encode_tiled_node_hands_frames_on(patchers):
    from nodes.vae_ops import vae_encode_tiled

    vae = _Recording(patchers["2.1"])
    (latent,) = vae_encode_tiled(_video(9, 64, seed=9), vae, tile_size=64, overlap=32, temporal_size=8,
                                 temporal_overlap=4)
    assert (vae.calls[0]["tile_t"], vae.calls[0]["overlap_t"]) == (8, 4)
    assert latent["samples"].shape == (1, 4, 3, 8, 8)


# --- latent formats and previews -----------------------------------------------------------------------

def test_wan21_format_normalises_as_diffusers_config_says():
    import inspect

    from diffusers import AutoencoderKLWan

    from comfy_core.families.wan.latent_format import Wan21, wan21_latent_format

    fmt = wan21_latent_format()
    defaults = inspect.signature(AutoencoderKLWan.__init__).parameters  # the Wan 2.1 VAE's config
    z = torch.randn(1, 16, 3, 2, 2, generator=torch.Generator().manual_seed(10))
    mean = torch.tensor(defaults["latents_mean"].default).view(1, 16, 1, 1, 1)
    std = torch.tensor(defaults["latents_std"].default).view(1, 16, 1, 1, 1)
    torch.testing.assert_close(fmt.process_in(z), (z - mean) / std)
    torch.testing.assert_close(fmt.process_out(fmt.process_in(z)), z)
    assert isinstance(fmt, Wan21) and (fmt.latent_channels, fmt.latent_dimensions) == (16, 3)
    torch.testing.assert_close(fmt.latents_mean, mean)
    # An image latent [B, C, h, w] (one frame) broadcasts per channel too.
    torch.testing.assert_close(fmt.process_in(z[:, :, 0]), fmt.process_in(z)[:, :, 0])


def test_wan22_format_is_a_wan21_with_48_channels():
    from comfy_core.families.wan.latent_format import Wan21, wan22_latent_format

    fmt = wan22_latent_format()
    assert isinstance(fmt, Wan21) and fmt.latent_channels == 48 and len(fmt.latent_rgb_factors) == 48
    z = torch.randn(1, 48, 2, 2, 2)
    torch.testing.assert_close(fmt.process_out(fmt.process_in(z)), z)
    with pytest.raises(ValueError, match="48"):
        fmt.process_in(torch.zeros(1, 16, 1, 2, 2))


def test_previews_of_video_latents_show_the_first_frame():
    from comfy_core.families.wan.latent_format import wan21_latent_format
    from comfy_core.sampling.preview import latent_to_rgb, make_previewer

    fmt = wan21_latent_format()
    previewer = make_previewer("auto", fmt, None)
    x0 = torch.randn(1, 16, 3, 6, 10, generator=torch.Generator().manual_seed(11))
    kind, image, _ = previewer.preview(x0)
    assert kind == "JPEG" and image.size == (10, 6)
    first = latent_to_rgb(x0[:, :, 0], fmt.latent_rgb_factors, fmt.latent_rgb_factors_bias)
    assert image.tobytes() == first.tobytes()
    assert image.tobytes() != latent_to_rgb(x0[:, :, 1], fmt.latent_rgb_factors, fmt.latent_rgb_factors_bias).tobytes()
    frames = fmt.latent_to_rgb(x0)
    assert frames.shape == (1, 3, 6, 10, 3)
