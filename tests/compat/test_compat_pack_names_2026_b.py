"""Today's ComfyUI names the round-7 survey's packs need (E5, E7-E11), called the way those packs
call them, checked against our own runtime's numbers or an independent computation:

- E5 `comfy.ldm.models.autoencoder` (spacepxl/ComfyUI-VAE-Utils src/sd.py): `AutoencoderKL(ddconfig=,
  embed_dim=)`, `AutoencodingEngine` from `instantiate_from_config` targets (`Encoder`, `Decoder`,
  `temporal_ae.VideoDecoder`), the regularisers; same numbers as our VAE for the same weights.
- E7 `comfy.taesd.taehv.TAEHV` (stand-in), `latent_preview.TAEHVPreviewerImpl`, `set_preview_method`,
  `default_preview_method`, `VIDEO_TAES`, `preview_to_image(..., do_scale)` (CRT-Nodes).
- E8 `comfy_extras.nodes_lt.LTXVAddGuide.encode` (vrgamedevgirl, CRT): as our LTXVAddGuide node encodes.
- E9 `comfy.ldm.genmo` (ComfyUI_Patches_ll's isinstance tests) and `comfy.ldm.lightricks.model.LTXBaseModel`.
- E10 `comfy.bg_removal_model.load` (LayerForge): the RemoveBackground node's masks.
- E11 `comfy.ldm.minimax.model.time_shift_sigma` / `time_shift_slope` (LanPaint), `comfy.ldm.sam3`,
  `comfy.ldm.pixeldit.model`, `comfy.ldm.seedvr.color_fix` (StarNodes), `comfy_extras.nodes_hunyuan.
  HunyuanVideo15SRModel` / `LatentUpsampler` (CRT's AutoDL loader).
"""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from tests.fixtures.checkpoints import _random_value, _VAEArch, vae_shapes

# ComfyUI-VAE-Utils' default LDM config, at the tiny fixture's widths (tests/fixtures/checkpoints.py).
DDCONFIG = {"double_z": True, "z_channels": 4, "resolution": 256, "in_channels": 3, "out_ch": 3, "ch": 32,
            "ch_mult": [1, 2, 2, 2], "num_res_blocks": 1, "attn_resolutions": [], "dropout": 0.0}


def _tiny_vae_sd(seed: int = 0, quant: bool = True) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    sd = {k: _random_value(k, s, gen) for k, s in sorted(vae_shapes(_VAEArch(), "").items())}
    return sd if quant else {k: v for k, v in sd.items() if "quant_conv" not in k}


def _image(h: int = 32, w: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.rand(1, h, w, 3, generator=torch.Generator().manual_seed(seed))


# --- E5: comfy.ldm.models.autoencoder -----------------------------------------------------------------------


def test_autoencoder_kl_from_ddconfig_has_our_vaes_numbers(session):
    import comfy.sd
    from comfy.ldm.models.autoencoder import AutoencoderKL, AutoencodingEngine, DiagonalGaussianRegularizer

    sd = _tiny_vae_sd()
    ours = comfy.sd.VAE(sd=sd)
    theirs = AutoencoderKL(ddconfig=dict(DDCONFIG), embed_dim=sd["post_quant_conv.weight"].shape[1]).eval()
    missing, unexpected = theirs.load_state_dict(sd, strict=False)  # as VAE-Utils' CustomVAE loads it
    assert missing == [] and unexpected == []
    assert isinstance(theirs.regularization, DiagonalGaussianRegularizer) and not theirs.regularization.sample
    image = _image()
    x = image.movedim(-1, 1) * 2 - 1
    with torch.no_grad():
        z, reg_log = theirs.encode(x, return_reg_log=True)
        # independent: the mean half of quant_conv(encoder(x))
        moments = theirs.quant_conv(theirs.encoder(x))
        decoded = theirs.decode(z)
        z2, dec2, _ = theirs(x)
    assert reg_log is None and z.shape == (1, 4, 4, 5)
    torch.testing.assert_close(z, moments[:, :4])
    torch.testing.assert_close(z, ours.encode(image).to(z.device), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(((decoded + 1) / 2).clamp(0, 1).movedim(1, -1), ours.decode(z), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(dec2, decoded)
    # a pack's type test sees the VAE our loader built (ComfyUI builds every SD VAE as one)
    assert isinstance(ours.first_stage_model, AutoencoderKL)
    assert isinstance(ours.first_stage_model, AutoencodingEngine)
    assert not isinstance(torch.nn.Linear(2, 2), AutoencoderKL)


def test_max_batch_size_slices_give_the_same_latents(session):
    from comfy.ldm.models.autoencoder import AutoencodingEngineLegacy

    sd = _tiny_vae_sd(2)
    whole = AutoencodingEngineLegacy(4, ddconfig=dict(DDCONFIG), regularizer_config={
        "target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"}).eval()
    sliced = AutoencodingEngineLegacy(4, ddconfig=dict(DDCONFIG), max_batch_size=1, regularizer_config={
        "target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"}).eval()
    whole.load_state_dict(sd), sliced.load_state_dict(sd)
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(4)) * 2 - 1
    with torch.no_grad():
        torch.testing.assert_close(sliced.encode(x), whole.encode(x), rtol=1e-4, atol=1e-5)
        z = whole.encode(x)
        torch.testing.assert_close(sliced.decode(z), whole.decode(z), rtol=1e-4, atol=1e-5)


def test_autoencoding_engine_from_vae_utils_configs_without_quant_convs(session):
    import comfy.sd
    from comfy.ldm.models.autoencoder import AutoencodingEngine
    from comfy.ldm.modules.diffusionmodules.model import Decoder, Encoder

    sd = _tiny_vae_sd(3, quant=False)  # SD3 / Flux layout: VAE-Utils' AutoencodingEngine branch
    ours = comfy.sd.VAE(sd=sd)
    engine = AutoencodingEngine(
        regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
        encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": dict(DDCONFIG)},
        decoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Decoder", "params": dict(DDCONFIG)}).eval()
    missing, unexpected = engine.load_state_dict(sd, strict=False)
    assert missing == [] and unexpected == []
    assert isinstance(engine.encoder, Encoder) and isinstance(engine.decoder, Decoder)
    image = _image(24, 16, seed=5)
    with torch.no_grad():
        z = engine.encode(image.movedim(-1, 1) * 2 - 1)
        raw, _ = engine.encode(image.movedim(-1, 1) * 2 - 1, unregularized=True)
        out = ((engine.decode(z) + 1) / 2).clamp(0, 1).movedim(1, -1)
    assert raw.shape == (1, 8, 3, 2) and torch.equal(z, raw[:, :4])
    torch.testing.assert_close(z, ours.encode(image), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out, ours.decode(z), rtol=1e-5, atol=1e-6)
    # our loaded VAE's parts answer the type tests too
    assert isinstance(ours.first_stage_model.encoder, Encoder)
    assert isinstance(ours.first_stage_model.decoder, Decoder)


def test_video_decoder_target_decodes_as_our_svd_vae(session):
    from comfy.ldm.models.autoencoder import AutoencodingEngine
    from comfy.ldm.modules.temporal_ae import VideoDecoder
    from comfy_core.models.video_vae import VideoAutoencoder, video_vae_config
    from tests.fixtures.svd import svd_vae_shapes

    gen = torch.Generator().manual_seed(6)
    sd = {k: _random_value(k, s, gen) for k, s in sorted(svd_vae_shapes("").items())}
    for name in sd:
        if name.endswith("mix_factor"):
            sd[name] = torch.randn(1, generator=gen) * 1.5
    assert "decoder.mid.block_1.mix_factor" in sd  # VAE-Utils' test for this branch
    ddconfig = dict(DDCONFIG, num_res_blocks=2)  # the tiny SVD fixture's VAE (tests/fixtures/svd.py)
    decoder_config = dict(ddconfig, video_kernel_size=[3, 1, 1], alpha=0.0)
    engine = AutoencodingEngine(
        regularizer_config={"target": "comfy.ldm.models.autoencoder.DiagonalGaussianRegularizer"},
        encoder_config={"target": "comfy.ldm.modules.diffusionmodules.model.Encoder", "params": ddconfig},
        decoder_config={"target": "comfy.ldm.modules.temporal_ae.VideoDecoder", "params": decoder_config}).eval()
    missing, unexpected = engine.load_state_dict(sd, strict=False)
    assert missing == [] and unexpected == []
    ours = VideoAutoencoder(video_vae_config(sd, prefix="")).eval()
    ours.load_state_dict(sd)
    z = torch.randn(3, 4, 2, 3, generator=gen)  # three frames of one video
    with torch.no_grad():
        torch.testing.assert_close(engine.decode(z), ours.decode_raw(z), rtol=1e-5, atol=1e-6)
        # two videos of three frames: `timesteps` frames per video
        two = torch.cat([z, z.flip(0)])
        split = engine.decode(two, timesteps=3)
        torch.testing.assert_close(split[3:], ours.decode_raw(z.flip(0)), rtol=1e-4, atol=1e-5)
    assert isinstance(engine.decoder, VideoDecoder) and isinstance(ours.decoder, VideoDecoder)


def test_regularisers_and_refused_configs(session):
    from comfy.ldm.models.autoencoder import AutoencoderKL, DiagonalGaussianRegularizer, EmptyRegularizer
    from comfy.ldm.modules.diffusionmodules.model import Encoder
    from compat.ldm_autoencoder import UnsupportedAutoencoderConfig

    z = torch.randn(2, 6, 3, 3, generator=torch.Generator().manual_seed(7))
    same, log = EmptyRegularizer()(z)
    assert same is z and log is None
    torch.manual_seed(11)
    sampled, _ = DiagonalGaussianRegularizer(sample=True)(z)
    torch.manual_seed(11)
    noise = torch.randn(2, 3, 3, 3)
    torch.testing.assert_close(sampled, z[:, :3] + torch.exp(0.5 * z[:, 3:]) * noise)
    with pytest.raises(UnsupportedAutoencoderConfig, match="attn_resolutions"):
        Encoder(**dict(DDCONFIG, attn_resolutions=[16]))
    with pytest.raises(UnsupportedAutoencoderConfig, match="conv3d"):  # VAE-Utils' Wan-style 3-D branch
        AutoencoderKL(ddconfig=dict(DDCONFIG, conv3d=True, time_compress=4), embed_dim=4)


# --- E7: comfy.taesd.taehv, latent_preview ------------------------------------------------------------------


def test_taehv_imports_and_refuses_to_build(session):
    from comfy.taesd.taehv import TAEHV
    from compat.unsupported_networks import UnsupportedNetworkError

    with pytest.raises(UnsupportedNetworkError, match="TAEHV"):
        TAEHV(latent_channels=128)  # CRT's _crt_build_taehv

    class Wide(TAEHV):  # a pack's subclass is declared (built, it is refused the same way)
        pass

    with pytest.raises(UnsupportedNetworkError):
        Wide()


def test_preview_method_override_and_default(session):
    import latent_preview

    start = latent_preview.default_preview_method
    assert isinstance(start, latent_preview.LatentPreviewMethod)
    assert latent_preview.VIDEO_TAES == ["taehv", "lighttaew2_2", "lighttaew2_1", "lighttaehy1_5", "taeltx_2", "taeh3"]
    latent_preview.set_preview_method("taesd")  # CRT's sampler, before sampling
    assert latent_preview.args.preview_method == latent_preview.LatentPreviewMethod.TAESD
    assert session.env.preview_method == "taesd"  # what the engine's samplers follow
    latent_preview.set_preview_method("none")
    assert latent_preview.args.preview_method == latent_preview.LatentPreviewMethod.NoPreviews
    for back in (None, "default", "no such method"):
        latent_preview.set_preview_method("latent2rgb")
        latent_preview.set_preview_method(back)
        assert latent_preview.args.preview_method == start


class _Format:
    def process_out(self, latent):
        return latent * 2.0 + 0.25


class _VideoDecoder:
    """A stand-in video VAE: decode [B, C, T, h, w] -> [B, T, 2h, 2w, 3] in 0..1 (ComfyUI's VAE
    decodes a video latent to frames per batch item)."""

    def __init__(self):
        self.seen = None

    def decode(self, latent):
        self.seen = latent
        frames = latent[:, :3].permute(0, 2, 3, 4, 1).sigmoid()
        return frames.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)


def test_taehv_previewer_decodes_the_first_frame_without_rescaling(session):
    import numpy as np

    import latent_preview

    x0 = torch.randn(2, 4, 3, 5, 6, generator=torch.Generator().manual_seed(8))
    decoder = _VideoDecoder()
    previewer = latent_preview.TAEHVPreviewerImpl(decoder, _Format())
    image = previewer.decode_latent_to_preview(x0)
    torch.testing.assert_close(decoder.seen, x0[:1, :, :1] * 2.0 + 0.25)
    expected = (decoder.decode(x0[:1, :, :1] * 2.0 + 0.25)[0][0].clamp(0, 1) * 255).to(torch.uint8).numpy()
    assert image.size == (12, 10) and np.array_equal(np.asarray(image), expected)
    assert isinstance(previewer, latent_preview.TAESDPreviewerImpl)
    fmt, _, size = previewer.decode_latent_to_preview_image("JPEG", x0)
    assert fmt == "JPEG" and size == latent_preview.MAX_PREVIEW_RESOLUTION

    class CRTPreviewer(latent_preview.TAEHVPreviewerImpl):  # CRT's _CRTLTXPreviewer shape
        def __init__(self, wide_model):
            self.taesd = None
            self._wide_model = wide_model

    assert CRTPreviewer("m")._wide_model == "m"
    # do_scale: -1..1 maps to 0..255 by default, 0..1 with do_scale=False
    values = torch.tensor([[[-1.0, 0.0, 1.0]]])
    assert np.asarray(latent_preview.preview_to_image(values)).tolist() == [[[0, 127, 255]]]
    assert np.asarray(latent_preview.preview_to_image(values, do_scale=False)).tolist() == [[[0, 0, 255]]]


# --- E8: LTXVAddGuide.encode --------------------------------------------------------------------------------


class _GuideVAE:
    """A stand-in LTX video VAE: `encode(pixels [N, H, W, 3])` -> [1, 128, (N - 1) // 8 + 1, H/32, W/32]
    (frame groups and 32x32 cells averaged, spread over the channels); records what it was given."""

    downscale_index_formula = (8, 32, 32)

    def __init__(self):
        self.calls = []

    def encode(self, pixels):
        self.calls.append(pixels)
        first = pixels[:1]
        rest = pixels[1:].reshape(-1, 8, *pixels.shape[1:]).mean(1) if len(pixels) > 1 else pixels[:0]
        groups = torch.cat([first, rest])  # [T', H, W, 3]
        cells = F.avg_pool2d(groups.movedim(-1, 1), 32).mean(1)  # [T', h, w]
        scale = torch.linspace(0.5, 1.5, 128).view(1, 128, 1, 1, 1)
        return cells.unsqueeze(0).unsqueeze(0) * scale

    def decode(self, latent):
        raise NotImplementedError


def test_ltxv_add_guide_encode_resizes_trims_and_encodes_as_our_node(session):
    from comfy_extras.nodes_lt import LTXVAddGuide
    from nodes.ltxv_nodes import ltxv_add_guide

    images = torch.rand(12, 50, 70, 4, generator=torch.Generator().manual_seed(9))  # RGBA, 12 frames
    samples = torch.zeros(1, 128, 4, 2, 3)
    vae = _GuideVAE()
    pixels, guide_latent = LTXVAddGuide.encode(vae, int(samples.shape[4]), int(samples.shape[3]), images,
                                               vae.downscale_index_formula)  # vrgamedevgirl's call
    assert pixels.shape == (9, 64, 96, 3) and guide_latent.shape == (1, 128, 2, 2, 3)
    # independent: 9 frames kept ((12 - 1) // 8 * 8 + 1); ComfyUI's centre crop to the target's aspect
    # ratio (70/50 < 96/64: rows cut, round((50 - 50 * (1.4 / 1.5)) / 2) = 2 from each side), bilinear
    src = images[:9, ..., :3].movedim(-1, 1)
    y = round((50 - 50 * ((70 / 50) / (96 / 64))) / 2)
    assert y == 2
    src = src[:, :, y:50 - y]
    expected = F.interpolate(src, size=(64, 96), mode="bilinear", align_corners=False).movedim(1, -1)
    torch.testing.assert_close(pixels, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(guide_latent, vae.encode(expected))
    # our LTXVAddGuide node appends exactly this latent (frame 0: no throwaway frame)
    node_vae = _GuideVAE()
    cond = [[torch.zeros(1, 3, 8), {"frame_rate": 24.0}]]
    _, _, out = ltxv_add_guide(cond, cond, node_vae, {"samples": samples}, images, 0, 1.0)
    torch.testing.assert_close(out["samples"][:, :, 4:], guide_latent)
    # an IC-LoRA's downscale factor halves the target size
    small, small_latent = LTXVAddGuide.encode(vae, 4, 2, images[:1], (8, 32, 32), latent_downscale_factor=2)
    assert small.shape == (1, 32, 64, 3) and small_latent.shape == (1, 128, 1, 1, 2)


# --- E9: comfy.ldm.genmo, LTXBaseModel ---------------------------------------------------------------------


def test_genmo_classes_are_isinstance_targets_no_network_here_matches(session):
    import comfy.ldm
    from compat.unsupported_networks import UnsupportedNetworkError
    from comfy_core.models.unet import UNetModel

    asymm = comfy.ldm.genmo.joint_model.asymm_models_joint  # Patches_ll's attribute chain, no import
    unet = UNetModel.__new__(UNetModel)
    assert not isinstance(unet, asymm.AsymmDiTJoint) and not isinstance(torch.nn.Linear(1, 1), asymm.AsymmDiTJoint)
    with pytest.raises(UnsupportedNetworkError, match="Mochi"):
        asymm.AsymmDiTJoint()
    import comfy.ldm.genmo.vae.model as vae_model

    with pytest.raises(UnsupportedNetworkError):
        vae_model.VideoVAE()
    dist = vae_model.LatentDistribution(torch.zeros(2), torch.zeros(2))
    assert torch.equal(dist.mode(), torch.zeros(2)) and torch.equal(dist.sample(temperature=0.0), torch.zeros(2))
    # modulated_rmsnorm (TeaCache copies it): rms-normalise over D, scale by 1 + scale per sample
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(10))
    scale = torch.randn(2, 8, generator=torch.Generator().manual_seed(11))
    rms = torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(asymm.modulated_rmsnorm(x, scale), x / rms * (1 + scale[:, None]))


def test_ltx_base_model_is_true_for_our_ltx_networks_only(session):
    from comfy.ldm.lightricks.av_model import LTXAVModel
    from comfy.ldm.lightricks.model import LTXBaseModel, LTXVModel

    assert isinstance(LTXVModel.__new__(LTXVModel), LTXBaseModel)
    assert isinstance(LTXAVModel.__new__(LTXAVModel), LTXBaseModel)
    assert issubclass(LTXVModel, LTXBaseModel) and issubclass(LTXAVModel, LTXBaseModel)
    assert not isinstance(torch.nn.Linear(1, 1), LTXBaseModel)
    with pytest.raises(TypeError, match="abstract"):
        LTXBaseModel()

    class PackLTX(LTXBaseModel):  # a pack's own LTX network builds
        pass

    assert isinstance(PackLTX(), LTXBaseModel)


# --- E10: comfy.bg_removal_model ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def birefnet_files(tmp_path_factory):
    from tests.fixtures.template_models_bgremoval import WRITERS_BGREMOVAL

    root = tmp_path_factory.mktemp("bgr")
    WRITERS_BGREMOVAL["birefnet"](root / "birefnet.safetensors")
    save_file({"model.weight": torch.zeros(2)}, str(root / "other.safetensors"))
    return root


def test_bg_removal_model_load_gives_the_nodes_masks(session, birefnet_files):
    from comfy.bg_removal_model import load
    from comfy_core.models.birefnet.model import load_background_removal
    from comfy_core.patching.patcher import Patcher

    model = load(str(birefnet_files / "birefnet.safetensors"))  # LayerForge's backend
    assert load(str(birefnet_files / "other.safetensors")) is None
    assert isinstance(model.patcher, Patcher) and model.patcher.model is model.model
    image = torch.rand(2, 36, 50, 3, generator=torch.Generator().manual_seed(12))
    mask = model.encode_image(image, image_size=256)
    ours = load_background_removal(birefnet_files / "birefnet.safetensors")  # the loader node's model
    assert mask.shape == (2, 36, 50)
    torch.testing.assert_close(mask, ours.encode_image(image, image_size=256), rtol=1e-6, atol=1e-6)
    # get_sd / load_sd round trip: weights swapped in change the mask, putting them back restores it
    saved = {k: v.clone() for k, v in model.get_sd().items()}
    missing, _ = model.load_sd({k: v * 0.5 if v.is_floating_point() else v for k, v in saved.items()})
    assert missing == []
    assert not torch.allclose(model.encode_image(image, image_size=256), mask)
    model.load_sd(saved)
    torch.testing.assert_close(model.encode_image(image, image_size=256), mask)


# --- E11 ----------------------------------------------------------------------------------------------------


def test_minimax_time_shift_sigma_and_slope(session):
    from comfy.ldm.minimax.model import MiniMaxH3Model, time_shift_sigma, time_shift_slope
    from comfy_core.families.minimax_h3.dit import MiniMaxH3Model as Ours

    assert MiniMaxH3Model is Ours
    sigma = torch.linspace(0.05, 0.95, 7, dtype=torch.float64)
    # independent: sigma_to from the base grid b of sigma_from = f b / (1 + (f - 1) b)
    base = sigma / (12.0 + sigma * (1 - 12.0))
    torch.testing.assert_close(12.0 * base / (1 + 11.0 * base), sigma)
    torch.testing.assert_close(time_shift_sigma(sigma, 12.0, 3.0), 3.0 * base / (1 + 2.0 * base))
    eps = 1e-6
    numeric = (time_shift_sigma(sigma + eps, 12.0, 3.0) - time_shift_sigma(sigma - eps, 12.0, 3.0)) / (2 * eps)
    torch.testing.assert_close(time_shift_slope(sigma, 12.0, 3.0), numeric, rtol=1e-6, atol=1e-8)
    assert time_shift_slope(0.4, 5.0, 5.0) == pytest.approx(1.0)


def test_sam3_pixeldit_and_seedvr_color_fix_modules(session):
    import comfy.ldm.sam3  # noqa: F401  CRT Isolate's support check
    import comfy.ldm.pixeldit.model as pixeldit
    from comfy.ldm.seedvr.color_fix import adain_color_transfer, lab_color_transfer, wavelet_color_transfer
    from comfy_core.families.pixeldit.dit import PixelDiT
    from comfy_core.families.pixeldit.pid import PiDNet

    assert pixeldit.PixDiT_T2I is PixelDiT and isinstance(PiDNet.__new__(PiDNet), pixeldit.PixDiT_T2I)
    gen = torch.Generator().manual_seed(13)
    content = torch.rand(1, 3, 16, 16, generator=gen) * 2 - 1
    reference = torch.rand(1, 3, 16, 16, generator=gen) * 0.5
    out = adain_color_transfer(content, reference)
    # independent AdaIN: per channel, the reference's mean and (population) std
    c, r = content.flatten(2), reference.flatten(2)
    expected = ((c - c.mean(-1, keepdim=True)) / (c.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
                * (r.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt() + r.mean(-1, keepdim=True))
    torch.testing.assert_close(out, expected.view_as(content).clamp(-1, 1), rtol=1e-5, atol=1e-5)
    # a flat content takes the reference's low frequencies: the wavelet transfer of two flat images
    flat = torch.full((1, 3, 16, 16), 0.2)
    torch.testing.assert_close(wavelet_color_transfer(flat, torch.full((1, 3, 16, 16), -0.3)),
                               torch.full((1, 3, 16, 16), -0.3), rtol=1e-5, atol=1e-5)
    assert lab_color_transfer(content, reference, luminance_weight=0.8).shape == content.shape


def _random_state(module, seed):
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in module.state_dict().items()}


def test_hunyuan_sr_model_and_ltx_latent_upsampler_as_crt_builds_them(session, tmp_path):
    from comfy_core.upscale.hv15_latent_upsampler import SRModel720p, SRModelConfig
    from comfy_core.upscale.latent_models import load_latent_upscale_model
    from comfy_extras.nodes_hunyuan import HunyuanVideo15SRModel, LatentUpsampler
    from tests.fixtures.latent_upscale_files import write_tiny_latent_upsampler

    sd = _random_state(SRModel720p(SRModelConfig(4, 4, 8, 2)), 14)
    save_file(sd, str(tmp_path / "sr.safetensors"))
    # CRT AutoDL_Nodes.load_model's 720p branch
    config = {"in_channels": sd["in_conv.conv.weight"].shape[1], "out_channels": sd["out_conv.conv.weight"].shape[0],
              "hidden_channels": sd["in_conv.conv.weight"].shape[0],
              "num_blocks": len([k for k in sd if k.startswith("blocks.") and k.endswith(".block.0.conv.weight")]),
              "global_residual": False}
    model = HunyuanVideo15SRModel("720p", config)
    model.load_sd(sd)
    ours = load_latent_upscale_model(tmp_path / "sr.safetensors")
    latent = torch.randn(1, 4, 3, 5, 6, generator=torch.Generator().manual_seed(15))
    torch.testing.assert_close(model.resample_latent(latent), ours.resample_latent(latent))
    assert model.patcher is model and set(model.get_sd()) == set(sd)
    with pytest.raises(ValueError, match="model_type"):
        HunyuanVideo15SRModel("4k", config)
    # the LTX branch: LatentUpsampler.from_config(the file's config metadata) + load_state_dict
    path = write_tiny_latent_upsampler(tmp_path / "ltx.safetensors", "spatial_x2")
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["config"])
        state = {k: f.get_tensor(k) for k in f.keys()}
    upsampler = LatentUpsampler.from_config(meta)
    upsampler.load_state_dict(state)
    loaded = load_latent_upscale_model(path)
    x = torch.randn(1, meta["in_channels"], 2, 3, 4, generator=torch.Generator().manual_seed(16))
    with torch.no_grad():
        torch.testing.assert_close(upsampler.eval()(x), loaded.upsample(x), rtol=1e-5, atol=1e-6)
    assert isinstance(loaded.model, LatentUpsampler)
    assert math.isclose(upsampler.get_config()["spatial_scale"], meta["spatial_scale"])
