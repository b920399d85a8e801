"""Qwen-Image-Layered in the Qwen-Image family: detected from its `addition_t_embedding`, its
5-D latent of `layers + 1` frames and its input image on frame -1 against diffusers'
`QwenImageTransformer2DModel(use_additional_t_cond=True, use_layer3d_rope=True)` on the same
tiny random weights loaded from a ComfyUI-named file, the extra timestep row, typed errors, and
a 2-step KSampler run of EmptyQwenImageLayeredLatentImage's latent."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.qwen_image.dit import QwenImageConfig, QwenImageInputError, image_tokens
from tests.fixtures.qwen_image_files import (TXT_WIDTH, diffusers_qwen_image_kwargs, tiny_qwen_image_state_dict,
                                             write_qwen_image_unet)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def layered(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_qwen_image_unet(tmp_path_factory.mktemp("layered"), seed=1, layered=True))


@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("diffusers")
    from diffusers import QwenImageTransformer2DModel

    model = QwenImageTransformer2DModel(**diffusers_qwen_image_kwargs(layered=True))
    model.load_state_dict(tiny_qwen_image_state_dict(seed=1, layered=True), strict=True)
    return model.eval()


def _pack(x: torch.Tensor) -> torch.Tensor:
    """[B, C, T, H, W] -> diffusers' packed Layered tokens [B, T*H/2*W/2, 4C] (frame, row, col)."""
    b, c, t, h, w = x.shape
    return x.reshape(b, c, t, h // 2, 2, w // 2, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(b, t * h * w // 4, c * 4)


def _diffusers(model, x, sigma, context, image, t_cond):
    b, c, t, h, w = x.shape
    tokens = torch.cat([_pack(x), _pack(image)], dim=1)
    shapes = [[(1, h // 2, w // 2)] * t + [(1, image.shape[-2] // 2, image.shape[-1] // 2)]] * b
    with torch.no_grad():
        out = model(hidden_states=tokens, encoder_hidden_states=context, timestep=sigma, img_shapes=shapes,
                    additional_t_cond=t_cond, return_dict=False)[0][:, :t * h * w // 4]
    return out.reshape(b, t, h // 2, w // 2, c, 2, 2).permute(0, 4, 1, 2, 5, 3, 6).reshape(b, c, t, h, w)


def _inputs(frames=3, size=(16, 16), batch=2, tokens=6, seed=5):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 16, frames, *size, generator=gen), torch.tensor([0.8, 0.3][:batch]),
            torch.randn(batch, tokens, TXT_WIDTH, generator=gen), torch.randn(batch, 16, 1, *size, generator=gen))


def test_layered_files_are_detected_with_the_extra_embedding_and_negative_index():
    header = {k: SimpleNamespace(shape=tuple(v.shape)) for k, v in tiny_qwen_image_state_dict(layered=True).items()}
    config = QwenImageConfig.detect_from_weights(header)
    assert config.use_additional_t_cond and config.default_ref_method == "negative_index"
    assert config.comfy_unet_config()["use_additional_t_cond"] is True
    plain = QwenImageConfig.detect_from_weights({k: v for k, v in header.items() if "addition_t" not in k})
    assert not plain.use_additional_t_cond and plain.default_ref_method == "index"
    prefixed = {"model.diffusion_model." + k: v for k, v in header.items()}
    assert default_registry().detect(prefixed).family.name == "qwen_image"


def test_layer_frames_are_numbered_and_the_image_sits_on_frame_minus_one(layered):
    _, ids, grid = image_tokens(torch.zeros(1, 16, 3, 4, 6), 2)
    assert grid == (2, 3) and ids.shape == (1, 18, 3)
    assert ids[0, :, 0].tolist() == [0.0] * 6 + [1.0] * 6 + [2.0] * 6
    assert torch.equal(ids[0, :6, 1:], ids[0, 6:12, 1:])  # every layer on the same grid
    _, one, _ = image_tokens(torch.zeros(1, 16, 1, 4, 6), 2, index=-1)
    assert one[0, :, 0].unique().tolist() == [-1.0]
    network = layered.model.diffusion_model
    _, refs = network.reference_tokens([torch.zeros(1, 16, 1, 4, 4)] * 2, "negative_index", 1)
    assert [r[0, 0, 0].item() for r in refs] == [-1.0, -2.0]


@pytest.mark.parametrize("t_cond", [None, (0, 1)])
def test_layered_network_matches_diffusers_layer3d_rope_and_additional_t_cond(reference, layered, t_cond):
    network = layered.model.diffusion_model
    x, sigma, context, image = _inputs()
    given = None if t_cond is None else torch.tensor(t_cond)
    with torch.no_grad():
        ours = network(x, sigma, context, ref_latents=[image], additional_t_cond=given)
    assert ours.shape == x.shape
    theirs = _diffusers(reference, x, sigma, context, image, torch.zeros(2, dtype=torch.long) if given is None
                        else given)
    assert (ours - theirs).abs().max() < 1e-4
    with torch.no_grad():  # the input image's frame (-1, not Edit's +1) is what diffusers computes
        index = network(x, sigma, context, ref_latents=[image], ref_latents_method="index", additional_t_cond=given)
    assert (index - theirs).abs().max() > 1e-3
    if given is not None:  # the second sample's row 1 changes it; the first's row 0 is the default
        with torch.no_grad():
            default = network(x, sigma, context, ref_latents=[image])
        assert (ours[0] - default[0]).abs().max() < 1e-6 and (ours[1] - default[1]).abs().max() > 1e-4


def test_layered_errors_are_typed(layered, tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    network = layered.model.diffusion_model
    x, sigma, context, image = _inputs(batch=1)
    with pytest.raises(QwenImageInputError, match="additional_t_cond must be"):
        network(x, sigma, context, ref_latents=[image], additional_t_cond=torch.tensor([2]))
    with pytest.raises(QwenImageInputError, match="additional_t_cond must be"):
        network(x, sigma, context, additional_t_cond=torch.tensor([0, 1]))
    plain = load_diffusion_model(write_qwen_image_unet(tmp_path, seed=1)).model.diffusion_model
    with pytest.raises(QwenImageInputError, match="only Qwen-Image-Layered"):
        plain(x, sigma, context, additional_t_cond=torch.tensor([0]))


def test_empty_layered_latent_samples_two_steps_with_the_input_image(layered):
    from comfy_core.sampling.ksampler import sample
    from nodes.qwen_image_nodes import empty_qwen_image_layered_latent_image

    (latent,) = empty_qwen_image_layered_latent_image(64, 48, 2, 1)
    empty = latent["samples"]
    assert empty.shape == (1, 16, 3, 6, 8) and not empty.any()
    gen = torch.Generator().manual_seed(3)
    noise = torch.randn(empty.shape, generator=gen)
    context = torch.randn(1, 5, TXT_WIDTH, generator=gen)
    image = torch.randn(1, 16, 1, 6, 8, generator=gen)  # the input image's latent (ReferenceLatent)
    positive = [[context, {"reference_latents": [image]}]]
    negative = [[torch.randn(1, 3, TXT_WIDTH, generator=gen), {"reference_latents": [image]}]]
    out = sample(layered, noise, 2, 2.0, "euler", "simple", positive, negative, empty)
    assert out.shape == empty.shape and torch.isfinite(out).all()
    without = sample(layered, noise, 2, 2.0, "euler", "simple", [[context, {}]], negative, empty)
    assert (out - without).abs().max() > 1e-4


def test_rgba_vae_matches_diffusers_and_decodes_each_layer_with_alpha(tmp_path):
    pytest.importorskip("diffusers")
    from diffusers import AutoencoderKLQwenImage
    from diffusers.loaders.single_file_utils import convert_wan_vae_to_diffusers

    from comfy_core.loading import load_vae
    from nodes.latent_cut_to_batch import latent_cut_to_batch
    from tests.fixtures.qwen_image_files import tiny_layered_vae_state_dict, write_qwen_image_layered_vae
    from tests.fixtures.wan_vae_files import diffusers_config

    theirs = AutoencoderKLQwenImage(**diffusers_config("2.1"), input_channels=4).eval()
    theirs.load_state_dict(convert_wan_vae_to_diffusers(tiny_layered_vae_state_dict(0)), strict=True)
    vae = load_vae(write_qwen_image_layered_vae(tmp_path, 0))
    module = vae.first_stage_model
    assert module.config.rgb_channels == 4 and module.out_channels == 4
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 4, 1, 16, 16, generator=gen) * 2 - 1
    z = torch.randn(1, 4, 1, 2, 2, generator=gen)
    with torch.no_grad():
        assert (module.encode_raw(x) - theirs.encode(x).latent_dist.mode()).abs().max() < 1e-4
        assert (module.decode_raw(z).clamp(-1, 1) - theirs.decode(z).sample).abs().max() < 1e-4
        opaque = torch.cat([x[:, :3], torch.ones_like(x[:, :1])], dim=1)  # RGB in: an opaque alpha
        assert torch.equal(module.encode_raw(x[:, :3]), module.encode_raw(opaque))
    rgb = torch.rand(1, 16, 16, 3, generator=gen)  # LoadImage's IMAGE
    assert vae.encode(rgb).shape == (1, 4, 1, 2, 2)
    layers = torch.randn(1, 4, 3, 2, 2, generator=gen)  # a sampled Layered latent: composite + 2 layers
    (cut,) = latent_cut_to_batch({"samples": layers}, "t", 1)
    pixels = vae.decode(cut["samples"])
    assert pixels.shape[0] == 3 and pixels.shape[-1] == 4  # one RGBA picture per frame



def test_a_vae_of_neither_rgb_nor_rgba_pixels_is_refused():
    from comfy_core.models.vae import VAEConfigError
    from comfy_core.models.wan_vae_config import WanVAEConfig
    from tests.fixtures.qwen_image_files import tiny_layered_vae_state_dict

    header = {k: SimpleNamespace(shape=tuple(v.shape)) for k, v in tiny_layered_vae_state_dict().items()}
    assert WanVAEConfig.detect_from_weights(header).rgb_channels == 4
    header["encoder.conv1.weight"] = SimpleNamespace(shape=(header["encoder.conv1.weight"].shape[0], 5, 3, 3, 3))
    with pytest.raises(VAEConfigError, match="5 channels"):
        WanVAEConfig.detect_from_weights(header)
    with pytest.raises(VAEConfigError):
        WanVAEConfig(rgb_channels=2)
