"""ComfyUI's LTX-Video Python API on our runtime: a loaded LTX-Video model is a
`comfy.model_base.LTXV` with a `comfy.supported_models.LTXV` config and `comfy.latent_formats.LTXV`
latents, its network a `comfy.ldm.lightricks.model.LTXVModel`; the patchifier, pixel coordinates
and RoPE helpers of `comfy.ldm.lightricks` in ComfyUI's shapes; a loaded VAE made of
`comfy.ldm.lightricks.vae` blocks; `comfy_extras.nodes_lt`'s nodes and helpers."""
from __future__ import annotations

import torch

from tests.fixtures.ltxv_files import write_tiny_ltxv_unet, write_tiny_ltxv_vae


def test_a_loaded_ltxv_model_is_comfyuis_classes(session, tmp_path):
    import comfy.latent_formats
    import comfy.ldm.lightricks.model
    import comfy.model_base
    import comfy.supported_models

    from comfy_core.split.diffusion_model import load_diffusion_model

    patcher = load_diffusion_model(write_tiny_ltxv_unet(tmp_path / "ltxv.safetensors"))
    model = patcher.model
    assert isinstance(model, comfy.model_base.LTXV) and not isinstance(model, comfy.model_base.Flux)
    config = model.model_config
    assert isinstance(config, comfy.supported_models.LTXV)
    assert config.unet_config["image_model"] == "ltxv" and config.sampling_settings["shift"] == 2.37
    assert config.memory_usage_factor == 5.5 * 64 / 2048  # ComfyUI's cross_attention_dim / 2048 x 5.5
    assert isinstance(model.latent_format, comfy.latent_formats.LTXV)
    assert comfy.latent_formats.LTXV().latent_channels == 128 and comfy.latent_formats.LTXV().latent_dimensions == 3
    assert isinstance(model.diffusion_model, comfy.ldm.lightricks.model.LTXVModel)
    blocks = list(model.diffusion_model.modules())
    assert any(isinstance(m, comfy.ldm.lightricks.model.CrossAttention) for m in blocks)
    assert any(isinstance(m, comfy.ldm.lightricks.model.BasicTransformerBlock) for m in blocks)


def test_patchifier_and_pixel_coordinates(session):
    from comfy.ldm.lightricks.symmetric_patchifier import SymmetricPatchifier, latent_to_pixel_coords

    latent = torch.randn(2, 128, 3, 2, 4)
    tokens, coords = SymmetricPatchifier(1).patchify(latent)
    assert tokens.shape == (2, 24, 128) and coords.shape == (2, 3, 24)
    assert torch.equal(tokens, latent.flatten(2).transpose(1, 2))  # the DiT's token order
    assert torch.equal(SymmetricPatchifier(1).unpatchify(tokens, 2, 4, 3, 128), latent)
    pixel = latent_to_pixel_coords(coords, (8, 32, 32), causal_fix=True)
    assert pixel[0, 0].unique().tolist() == [0, 1, 9] and pixel[0, 2, :4].tolist() == [0, 32, 64, 96]
    _, start_end = SymmetricPatchifier(1, start_end=True).patchify(latent)
    assert start_end.shape == (2, 3, 24, 2) and torch.equal(start_end[..., 1], start_end[..., 0] + 1)
    wide = SymmetricPatchifier(2)
    tokens2, _ = wide.patchify(latent)
    assert tokens2.shape == (2, 6, 512) and torch.equal(wide.unpatchify(tokens2, 2, 4, 3, 128), latent)


def test_rope_helpers_are_the_networks(session):
    import comfy.ldm.lightricks.model as lt

    from comfy_core.families.ltxv.dit import rope_cos_sin

    coords = torch.rand(1, 3, 5) * 100
    cos, sin = lt.precompute_freqs_cis(coords, 64, torch.float32)
    want_cos, want_sin = rope_cos_sin(coords, 64, 10000.0, (20, 2048, 2048), torch.float32)
    assert torch.equal(cos, want_cos) and torch.equal(sin, want_sin)
    x = torch.randn(1, 5, 64)
    rotated = lt.apply_rotary_emb(x, (cos, sin))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation
    fractional = lt.get_fractional_positions(coords, [20, 2048, 2048])
    assert fractional.shape == (1, 5, 3) and torch.allclose(fractional[0, :, 0], coords[0, 0] / 20)
    t = torch.tensor([0.0, 500.0])
    embedding = lt.get_timestep_embedding(t, 8, flip_sin_to_cos=True, downscale_freq_shift=0)
    assert embedding[0].tolist() == [1.0] * 4 + [0.0] * 4  # cosines first
    assert lt.get_timestep_embedding(t, 7).shape == (2, 7)


def test_a_loaded_vae_is_made_of_comfyuis_blocks(session, tmp_path):
    import comfy.ldm.lightricks.vae.causal_conv3d as cc
    import comfy.ldm.lightricks.vae.causal_video_autoencoder as cva
    import comfy.ldm.lightricks.vae.pixel_norm as pn
    import comfy.sd
    import comfy.utils

    vae = comfy.sd.VAE(sd=comfy.utils.load_torch_file(str(write_tiny_ltxv_vae(tmp_path / "vae.safetensors"))))
    network = vae.first_stage_model
    assert isinstance(network, cva.VideoVAE)
    modules = list(network.modules())
    assert any(isinstance(m, cc.CausalConv3d) for m in modules) and any(isinstance(m, cva.ResnetBlock3D) for m in modules)
    assert isinstance(network.encoder, cva.Encoder) and isinstance(network.decoder, cva.Decoder)
    assert vae.downscale_index_formula == (8, 32, 32)
    x = torch.randn(1, 3, 1, 8, 8)
    assert torch.equal(cva.unpatchify(cva.patchify(x, 4), 4), x)
    norm = pn.PixelNorm()(torch.randn(1, 6, 1, 2, 2))
    assert torch.allclose(norm.pow(2).mean(dim=1), torch.ones(1, 1, 2, 2), atol=1e-5)


def test_nodes_lt_module(session):
    import comfy_extras.nodes_lt as nodes_lt

    assert {"LTXVAddGuide", "LTXVCropGuides", "EmptyLTXVLatentVideo", "LTXVImgToVideoInplace"} <= set(
        nodes_lt.NODE_CLASS_MAPPINGS)
    latent = {"samples": torch.zeros(2, 128, 3, 1, 1)}
    mask = nodes_lt.get_noise_mask(latent)
    assert mask.shape == (2, 1, 3, 1, 1) and bool((mask == 1).all())
    cond = [[torch.zeros(1, 2, 4), {"keyframe_idxs": torch.zeros(1, 3, 8, 2)}]]
    assert nodes_lt.get_keyframe_idxs(cond, (1, 128, 5, 2, 2))[1] == 2
    assert nodes_lt.conditioning_get_any_value(cond, "frame_rate", 25) == 25
    # KJNodes' LTXV guide nodes: one more attention entry on each conditioning, each extending its own list
    negative = [[torch.zeros(1, 2, 4), {"guide_attention_entries": [{"pre_filter_count": 4}]}]]
    positive, negative = nodes_lt._append_guide_attention_entry(cond, negative, 12, [1, 3, 4], strength=0.5,
                                                                attention_mask=torch.ones(1, 24, 32))
    entry = positive[0][1]["guide_attention_entries"][-1]
    assert len(positive[0][1]["guide_attention_entries"]) == 1 and len(negative[0][1]["guide_attention_entries"]) == 2
    assert (entry["pre_filter_count"], entry["strength"], entry["latent_shape"]) == (12, 0.5, [1, 3, 4])
    assert entry["pixel_mask"].shape == (1, 1, 1, 24, 32)
    assert negative[0][1]["guide_attention_entries"][-1]["pixel_mask"] is entry["pixel_mask"]
    assert "guide_attention_entries" not in cond[0][1]  # the inputs are not changed
    (latent_out,) = nodes_lt.EmptyLTXVLatentVideo.execute(64, 64, 9, 1)
    assert latent_out["samples"].shape == (1, 128, 2, 2, 2)
