"""HunyuanVideo 1.5 as a family: the transformer against diffusers' `HunyuanVideo15Transformer3DModel` on tiny
random weights, detection of the released layout (t2v / i2v and the SR model), the conditioning
ComfyUI's `model_base.HunyuanVideo15*` builds, and the MeanFlow timestep of the SR model."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.hunyuan_video15.conditions import HunyuanVideo15Conditions
from comfy_core.families.hunyuan_video15.dit import (HunyuanVideo15Config, HunyuanVideo15ConfigError,
                                                     HunyuanVideo15Transformer)
from comfy_core.families.hunyuan_video15.keys import HunyuanVideo15KeyError, convert_diffusers_state_dict
from comfy_core.families.flux.blocks import timestep_embedding
from comfy_core.models.model_conditions import ConditioningError
from tests.fixtures.hv15_files import tiny_hv15_state_dict, write_hv15_diffusion_model


@pytest.fixture(scope="module")
def diffusers_pair():
    """A tiny diffusers transformer and ours loaded from its converted weights."""
    transformers = pytest.importorskip("diffusers.models.transformers.transformer_hunyuan_video15")
    torch.manual_seed(0)
    reference = transformers.HunyuanVideo15Transformer3DModel(
        in_channels=9, out_channels=4, num_attention_heads=2, attention_head_dim=32, num_layers=2,
        num_refiner_layers=1, mlp_ratio=2.0, text_embed_dim=24, text_embed_2_dim=20, image_embed_dim=16,
        rope_axes_dim=(4, 14, 14)).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.normal_(0, 0.2)
    state = convert_diffusers_state_dict(reference.state_dict())
    ours = HunyuanVideo15Transformer(HunyuanVideo15Config.detect_from_weights(state)).eval()
    ours.load_state_dict(state, strict=True)
    return reference, ours


def _inputs():
    gen = torch.Generator().manual_seed(1)
    return (torch.randn(1, 9, 2, 4, 6, generator=gen), torch.tensor([700.0]), torch.randn(1, 5, 24, generator=gen),
            torch.randn(1, 3, 20, generator=gen), torch.randn(1, 4, 16, generator=gen))


def test_matches_diffusers_image_to_video(diffusers_pair):
    reference, ours = diffusers_pair
    x, t, context, glyph, image = _inputs()
    with torch.no_grad():
        want = reference(x, t, context, torch.ones(1, 5), encoder_hidden_states_2=glyph,
                         encoder_attention_mask_2=torch.ones(1, 3), image_embeds=image).sample
        got = ours(x, t, context, txt_byt5=glyph, clip_fea=image)
    assert got.shape == (1, 4, 2, 4, 6)
    assert torch.allclose(got, want, atol=1e-4, rtol=0)


def test_matches_diffusers_text_to_video(diffusers_pair):
    """diffusers masks zero image embeddings out; ComfyUI passes no vision tokens: the same result."""
    reference, ours = diffusers_pair
    x, t, context, glyph, _ = _inputs()
    with torch.no_grad():
        want = reference(x, t, context, torch.ones(1, 5), encoder_hidden_states_2=glyph,
                         encoder_attention_mask_2=torch.ones(1, 3), image_embeds=torch.zeros(1, 4, 16)).sample
        got = ours(x, t, context, txt_byt5=glyph)
        without_glyphs = ours(x, t, context)
    assert torch.allclose(got, want, atol=1e-4, rtol=0)
    assert not torch.allclose(without_glyphs, got, atol=1e-3)  # the ByT5 tokens take part


def test_diffusers_conversion_refuses_a_partial_projection(diffusers_pair):
    reference, _ = diffusers_pair
    state = dict(reference.state_dict())
    del state["transformer_blocks.0.attn.to_k.weight"]
    with pytest.raises(HunyuanVideo15KeyError, match="to_k"):
        convert_diffusers_state_dict(state)


def test_config_from_the_released_layout():
    config = HunyuanVideo15Config.detect_from_weights(tiny_hv15_state_dict(), "")
    assert (config.in_channels, config.out_channels, config.hidden_size, config.num_heads) == (65, 32, 64, 2)
    assert (config.depth, config.refiner_depth, config.mlp_ratio) == (1, 1, 2.0)
    assert (config.context_in_dim, config.byt5_in_dim, config.vision_in_dim) == (256, 32, 32)
    assert config.cond_type_embedding and not config.meanflow and not config.guidance_embed
    assert config.comfy_unet_config()["image_model"] == "hunyuan_video"
    sr = HunyuanVideo15Config.detect_from_weights(tiny_hv15_state_dict(super_resolution=True), "")
    assert (sr.in_channels, sr.meanflow) == (98, True)
    state = tiny_hv15_state_dict()
    del state["double_blocks.0.img_attn_q_norm.weight"]
    with pytest.raises(HunyuanVideo15ConfigError, match="img_attn_q_norm"):
        HunyuanVideo15Config.detect_from_weights(state, "")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    folder = tmp_path_factory.mktemp("hv15")
    t2v = load_diffusion_model(write_hv15_diffusion_model(folder / "hunyuanvideo1.5_720p_t2v_fp16.safetensors"))
    sr = load_diffusion_model(write_hv15_diffusion_model(folder / "sr.safetensors", super_resolution=True))
    return t2v.model, sr.model


def test_split_files_are_detected_with_comfyui_sampling(loaded):
    t2v, sr = loaded
    assert (t2v.family.name, sr.family.name) == ("hunyuan_video15", "hunyuan_video15_sr")
    assert (t2v.model_sampling.shift, t2v.model_sampling.multiplier) == (7.0, 1000)
    assert sr.model_sampling.shift == 2.0
    assert t2v.latent_format.scale_factor == pytest.approx(1.03682) and t2v.latent_format.channels == 32
    assert t2v.family.geometry.downscale == 16
    assert t2v.family.comfy_model_class == "HunyuanVideo15"


def test_image_to_video_concat_channels(loaded):
    t2v, _ = loaded
    noise = torch.zeros(2, 32, 3, 2, 3)
    empty = t2v.concat_cond(noise=noise, device="cpu")
    assert empty.shape == (2, 33, 3, 2, 3) and not empty.any()
    image = torch.randn(1, 32, 3, 2, 3)
    mask = torch.ones(1, 1, 3, 2, 3)
    mask[:, :, 0] = 0.0
    out = t2v.concat_cond(noise=noise, device="cpu", concat_latent_image=image, concat_mask=mask)
    assert torch.allclose(out[:, :32], (image * 1.03682).expand(2, -1, -1, -1, -1), atol=1e-6)
    assert out[:, 32, 0].eq(1).all() and out[:, 32, 1:].eq(0).all()  # 1 marks the given frame
    with pytest.raises(ConditioningError, match="5-D"):
        t2v.concat_cond(noise=noise, device="cpu", concat_latent_image=torch.zeros(1, 32, 2, 3))


def test_super_resolution_block_and_noise_augmentation(loaded):
    _, sr = loaded
    noise = torch.zeros(1, 32, 2, 2, 3)
    block = torch.randn(1, 66, 2, 2, 3)
    plain = sr.concat_cond(noise=noise, device="cpu", concat_latent_image=block)
    lq = slice(33, 65)
    assert torch.allclose(plain[:, lq], 0.75 * block[:, lq]) and torch.equal(plain[:, :33], block[:, :33])
    augmented = sr.concat_cond(noise=noise, device="cpu", concat_latent_image=block, noise_augmentation=0.7, seed=15)
    fresh = torch.randn(block[:, lq].shape, generator=torch.Generator().manual_seed(5))
    assert torch.allclose(augmented[:, lq], 0.7 * fresh + min(0.3, 0.75) * block[:, lq], atol=1e-6)
    assert torch.equal(block, block.clone())  # the conditioning's tensor is not changed in place
    with pytest.raises(ConditioningError, match="HunyuanVideo15SuperResolution"):
        sr.concat_cond(noise=noise, device="cpu", concat_latent_image=torch.zeros(1, 65, 2, 2, 3))


def test_extra_inputs_as_comfyui_names_them():
    class Vision:
        last_hidden_state = torch.ones(1, 4, 16)

    conditions = HunyuanVideo15Conditions()
    out = conditions.extra_conds(None, attention_mask=torch.ones(1, 5), conditioning_byt5small=torch.zeros(1, 3, 20),
                                 clip_vision_output=Vision())
    assert "attention_mask" not in out  # it masks nothing
    assert out["txt_byt5"].shape == (1, 3, 20) and out["clip_fea"] is Vision.last_hidden_state
    assert out["guidance"].item() == 6.0 and "disable_time_r" not in out
    padded = conditions.extra_conds(None, attention_mask=torch.tensor([[1, 1, 0]]))
    assert padded["attention_mask"].tolist() == [[1, 1, 0]]
    assert HunyuanVideo15Conditions(super_resolution=True).extra_conds(None)["disable_time_r"] is False


def test_meanflow_averages_the_next_sigma_embedding(loaded):
    _, sr = loaded
    network = sr.diffusion_model
    img = torch.zeros(1, 1, network.config.hidden_size)
    t = torch.tensor([800.0])
    schedule = torch.tensor([0.8, 0.5, 0.0])
    options = {"sigmas": torch.tensor([0.8]), "sample_sigmas": schedule}
    with torch.no_grad():
        vec = network._vec(img, t, None, False, options)
        base = network.time_in(timestep_embedding(t, 256, time_factor=1.0))
        r = network.time_r_in(timestep_embedding(torch.tensor([0.5]), 256, time_factor=1000.0))
        assert torch.allclose(vec, (base + r) / 2, atol=1e-6)
        assert torch.allclose(network._vec(img, t, None, True, options), base)  # disable_time_r


def test_vae_matches_diffusers_and_loads_from_its_file(tmp_path):
    from tests.fixtures.hv15_files import to_diffusers_vae, tiny_hv15_vae_state_dict, write_hv15_vae

    autoencoders = pytest.importorskip("diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15")
    from comfy_core.loading import load_vae

    state = tiny_hv15_vae_state_dict(latent_channels=4, widths=(8, 16, 32, 32, 32))
    reference = autoencoders.AutoencoderKLHunyuanVideo15(block_out_channels=(8, 16, 32, 32, 32), latent_channels=4,
                                                         layers_per_block=1).eval()
    reference.load_state_dict(to_diffusers_vae(state), strict=True)
    vae = load_vae(write_hv15_vae(tmp_path / "hunyuanvideo15_vae_fp16.safetensors", latent_channels=4,
                                 widths=(8, 16, 32, 32, 32)))
    module = vae.first_stage_model
    assert (module.downscale_ratio, module.temporal_ratio, module.latent_channels) == (16, 4, 4)
    x = torch.rand(1, 3, 5, 32, 16, generator=torch.Generator().manual_seed(2)) * 2 - 1
    z = torch.randn(1, 4, 2, 2, 1, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want_latent = reference.encode(x).latent_dist.mode()
        want_video = reference.decode(z).sample
        got_latent, got_video = module.encode_raw(x), module.decode_raw(z)
    assert got_latent.shape == (1, 4, 2, 2, 1) and got_video.shape == (1, 3, 5, 32, 16)
    assert torch.allclose(got_latent, want_latent, atol=1e-4, rtol=0)
    assert torch.allclose(got_video, want_video, atol=1e-4, rtol=0)
    with pytest.raises(Exception, match="4k|1 \\+ 4"):
        module.encode_raw(torch.zeros(1, 3, 4, 32, 16))


def test_text_mask_and_block_replacement(loaded):
    """ComfyUI's token mask (1 keep, 0 pad) becomes an additive key mask over [img, byt5, text] and a
    `patches_replace["dit"]` entry gets each block with ComfyUI's arguments."""
    t2v, _ = loaded
    network = t2v.diffusion_model
    seen = []

    def replace(args, extra):
        seen.append(args["attention_mask"])
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 0): replace}}}
    x = torch.randn(1, 65, 1, 2, 2)
    context, glyphs = torch.randn(1, 3, 256), torch.randn(1, 2, 32)
    with torch.no_grad():
        plain = network(x, torch.tensor([500.0]), context, txt_byt5=glyphs)
        masked = network(x, torch.tensor([500.0]), context, txt_byt5=glyphs, attention_mask=torch.tensor([[1, 1, 0]]),
                         transformer_options=options)
    (mask,) = seen
    assert mask.shape == (1, 1, 1, 4 + 2 + 3)
    assert mask[0, 0, 0, :8].eq(0).all() and mask[0, 0, 0, 8] < -1e30  # only the padded Qwen token is masked
    assert masked.shape == plain.shape and not torch.allclose(masked, plain)


def test_lora_names_reach_the_files_modules(loaded):
    t2v, _ = loaded
    names = ["diffusion_model." + name for name in t2v.diffusion_model.state_dict()]
    key_map = t2v.diffusion_model.lora_key_map(names)
    target = "diffusion_model.double_blocks.0.img_attn_qkv.weight"
    for spelling in ("diffusion_model.double_blocks.0.img_attn_qkv", "lora_unet_double_blocks_0_img_attn_qkv",
                     "transformer.double_blocks.0.img_attn_qkv", "lora_transformer_double_blocks_0_img_attn_qkv"):
        assert key_map[spelling] == target
