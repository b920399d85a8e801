"""Inpainting, instruct-pix2pix and SD2.1 unCLIP families: detection from names and shapes, the
UNet's concatenated inputs in ComfyUI's order and formulas, unCLIP's noise-augmented ADM for a
fixed seed, and sampling on tiny random checkpoints. Expected values are computed here from
ComfyUI's semantics (model_base.py: concat_cond, IP2P, unclip_adm; noise_aug_modules.py)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.clip_vision.output import ClipVisionOutput
from comfy_core.loading import load_checkpoint
from comfy_core.models.concat_inputs import inpaint_concat, ip2p_concat, resize_to_batch_size
from comfy_core.models.diffusion import ConditioningError
from comfy_core.models.unclip import unclip_adm
from tests.fixtures.checkpoints_variants import UNCLIP_EMBED_DIM, VARIANTS, write_tiny_variant

EXPECTED = {  # variant -> (family, UNet input channels, concat kind, prediction)
    "sd1_inpaint": ("sd1_inpaint", 9, "inpaint", "eps"), "sd1_ip2p": ("sd1_ip2p", 8, "ip2p", "eps"),
    "sd2_inpaint": ("sd2_inpaint", 9, "inpaint", "eps"), "sdxl_inpaint": ("sdxl_inpaint", 9, "inpaint", "eps"),
    "sdxl_ip2p": ("sdxl_ip2p", 8, "ip2p", "eps"), "sd21_unclip": ("sd21_unclip", 4, "none", "v"),
}


@pytest.fixture(scope="module")
def variant_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    return {v: write_tiny_variant(root, v) for v in VARIANTS}


@pytest.fixture(scope="module")
def loaded(variant_files):
    cache = {}

    def get(variant):
        if variant not in cache:
            cache[variant] = load_checkpoint(variant_files[variant])
        return cache[variant]
    return get


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_is_detected_as_its_family(loaded, variant):
    family, in_channels, concat, prediction = EXPECTED[variant]
    model, clip, vae = loaded(variant)
    dm = model.model
    assert dm.family.name == family and dm.family.concat == concat
    assert dm.diffusion_model.config.in_channels == in_channels
    assert dm.model_sampling.prediction == prediction
    assert clip is not None and vae is not None


def test_the_unclip_family_knows_where_its_image_encoder_is(loaded):
    dm = loaded("sd21_unclip")[0].model
    assert dm.family.clip_vision_prefix == "embedder.model.visual." and dm.adm == "unclip"
    assert dm.adm_channels == 2 * UNCLIP_EMBED_DIM
    assert loaded("sd1_inpaint")[0].model.family.clip_vision_prefix is None


# --- concatenated inputs: ComfyUI's formulas, computed here ---

def _bilinear(t, h, w):
    return F.interpolate(t, size=(h, w), mode="bilinear")


def test_inpaint_concat_is_mask_then_masked_image_latent():
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(2, 4, 8, 8, generator=g)
    latent_image = torch.randn(2, 4, 8, 8, generator=g)
    concat_latent = torch.randn(1, 4, 8, 8, generator=g)
    concat_mask = (torch.rand(1, 1, 64, 64, generator=g) > 0.5).float()
    out = inpaint_concat(noise, "cpu", latent_image=latent_image, denoise_mask=torch.zeros(2, 4, 8, 8),
                         concat_latent_image=concat_latent, concat_mask=concat_mask, process_latent_in=lambda x: x * 3)
    assert out.shape == (2, 5, 8, 8)
    expected_mask = _bilinear(concat_mask, 8, 8).round().repeat(2, 1, 1, 1)  # concat_mask wins over denoise_mask
    assert torch.equal(out[:, :1], expected_mask)
    assert torch.equal(out[:, 1:], (concat_latent * 3).repeat(2, 1, 1, 1))


def test_inpaint_concat_falls_back_to_the_denoise_mask_and_the_sampled_latent():
    g = torch.Generator().manual_seed(1)
    noise = torch.randn(1, 4, 6, 6, generator=g)
    latent_image = torch.randn(1, 4, 6, 6, generator=g)
    denoise = torch.rand(1, 4, 6, 6, generator=g)
    out = inpaint_concat(noise, "cpu", latent_image=latent_image, denoise_mask=denoise)
    assert torch.equal(out[:, :1], denoise[:, :1].round()) and torch.equal(out[:, 1:], latent_image)


def test_inpaint_concat_without_a_mask_is_all_ones_and_the_black_image_latent():
    noise = torch.randn(1, 4, 3, 5)
    out = inpaint_concat(noise, "cpu", latent_image=torch.randn(1, 4, 3, 5), concat_latent_image=torch.randn(1, 4, 3, 5))
    assert torch.equal(out[:, 0], torch.ones(1, 3, 5))
    for channel, value in enumerate((0.8223, -0.6876, 0.6364, 0.1380)):
        assert torch.equal(out[:, 1 + channel], torch.full((1, 3, 5), value))


def test_concat_images_of_another_size_are_centre_cropped_and_resized():
    noise = torch.zeros(1, 4, 4, 4)
    image = torch.arange(4 * 4 * 8, dtype=torch.float32).reshape(1, 4, 4, 8)  # twice as wide
    expected = _bilinear(image[..., 2:6], 4, 4)  # centre square, then bilinear
    assert torch.equal(ip2p_concat(noise, "cpu", image), expected)
    assert torch.equal(ip2p_concat(noise, "cpu", None), torch.zeros(1, 4, 4, 4))


def test_batches_are_resized_by_nearest_rows_as_comfyui_does():
    rows = torch.arange(3.0).reshape(3, 1)
    assert resize_to_batch_size(rows, 5).flatten().tolist() == [0, 0, 1, 2, 2]  # floor((i + .5) * 3 / 5)
    assert resize_to_batch_size(rows, 2).flatten().tolist() == [0, 2]


# --- the UNet sees them while sampling ---

def _spy_unet(model):
    seen = []
    unet = model.model.diffusion_model
    original = unet.forward

    def forward(x, *args, **kwargs):
        seen.append(x.detach().clone())
        return original(x, *args, **kwargs)
    return seen, unet, original, forward


def _sample(model, positive, negative, latent, steps=1, seed=5):
    from nodes.sampling import ksampler

    return ksampler(model, seed, steps, 4.0, "euler", "normal", positive, negative, latent)[0]["samples"]


def test_the_inpainting_unet_gets_noisy_latent_mask_and_masked_image_in_comfyui_order(loaded):
    from nodes.conditioning import clip_text_encode
    from nodes.inpaint_conditioning import inpaint_model_conditioning

    model, clip, vae = loaded("sd1_inpaint")
    pixels = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(2))
    mask = torch.zeros(1, 64, 64)
    mask[:, 8:40, 16:48] = 1.0
    pos, neg, latent = inpaint_model_conditioning(clip_text_encode("a", clip)[0], clip_text_encode("", clip)[0],
                                                  vae, pixels, mask, True)
    seen, unet, original, spy = _spy_unet(model)
    unet.forward = spy
    try:
        _sample(model, pos, neg, latent)
    finally:
        unet.forward = original
    x = seen[0]
    assert x.shape == (2, 9, 8, 8)
    expected_mask = _bilinear(mask.reshape(1, 1, 64, 64), 8, 8).round()
    masked = pixels.clone()
    masked[..., :3] = (masked[..., :3] - 0.5) * (1 - mask.round()).unsqueeze(-1) + 0.5
    expected_image = vae.encode(masked) * model.model.latent_format.scale_factor
    for row in range(2):
        assert torch.equal(x[row, 4:5], expected_mask[0])
        torch.testing.assert_close(x[row, 5:], expected_image[0].to(x.dtype))
    # channels 0..3 are the scaled noisy latent: not the conditioning
    assert not torch.equal(x[:, :4], x[:, 5:])


def test_the_ip2p_unet_gets_the_unscaled_image_latent(loaded):
    from nodes.conditioning import clip_text_encode
    from nodes.inpaint_conditioning import instruct_pix_to_pix_conditioning

    model, clip, vae = loaded("sd1_ip2p")
    pixels = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(3))
    pos, neg, latent = instruct_pix_to_pix_conditioning(clip_text_encode("a", clip)[0], clip_text_encode("", clip)[0],
                                                        vae, pixels)
    seen, unet, original, spy = _spy_unet(model)
    unet.forward = spy
    try:
        _sample(model, pos, neg, latent)
    finally:
        unet.forward = original
    assert seen[0].shape == (2, 8, 8, 8)
    torch.testing.assert_close(seen[0][:, 4:], vae.encode(pixels).repeat(2, 1, 1, 1))


# --- unCLIP ---

def _independent_augment(embedding, level, noise):
    """CLIPEmbeddingNoiseAugmentation, written from its definition: squared-cosine betas, identity stats."""
    def alpha_bar(t):
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
    cumprod = 1.0
    for i in range(level + 1):
        cumprod *= 1 - min(1 - alpha_bar((i + 1) / 1000) / alpha_bar(i / 1000), 0.999)
    half = embedding.shape[-1] // 2
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    level_emb = torch.cat([torch.cos(level * freqs), torch.sin(level * freqs)])[None]
    return torch.cat([math.sqrt(cumprod) * embedding + math.sqrt(1 - cumprod) * noise, level_emb], dim=1)


def _embeds(n, seed):
    out = ClipVisionOutput()
    out.image_embeds = torch.randn(n, 16, generator=torch.Generator().manual_seed(seed))
    return out


def test_unclip_adm_is_the_noise_augmented_embedding_for_a_fixed_seed():
    embeds = _embeds(1, 0)
    y = unclip_adm([{"clip_vision_output": embeds, "strength": 0.8, "noise_augmentation": 0.25}], "cpu", 0.05, seed=7)
    level = round(999 * 0.25)
    noise = torch.randn(1, 16, generator=torch.Generator().manual_seed(7))
    expected = _independent_augment(embeds.image_embeds, level, noise) * 0.8
    torch.testing.assert_close(y, expected, rtol=1e-6, atol=1e-6)


def test_several_unclip_embeddings_are_summed_and_augmented_again_at_the_merge_level():
    a, b = _embeds(1, 1), _embeds(2, 2)  # a batch of two images counts as two embeddings
    entries = [{"clip_vision_output": a, "strength": 1.0, "noise_augmentation": 0.1},
               {"clip_vision_output": b, "strength": 0.5, "noise_augmentation": 0.0}]
    y = unclip_adm(entries, "cpu", 0.05, seed=3)
    gen = torch.Generator().manual_seed(3)
    noise = torch.randn(1, 16, generator=gen)  # every embedding is re-seeded: the same draw
    rows = [_independent_augment(a.image_embeds, round(99.9), noise),
            _independent_augment(b.image_embeds[:1], 0, noise) * 0.5,
            _independent_augment(b.image_embeds[1:], 0, noise) * 0.5]
    total = sum(rows)
    merge_noise = torch.randn(1, 16, generator=gen)  # the stream continued after the last re-seed
    expected = _independent_augment(total[:, :16], round(999 * 0.05), merge_noise)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


def test_the_unclip_model_encodes_its_adm_from_the_conditioning_with_the_seed_minus_10(loaded):
    dm = loaded("sd21_unclip")[0].model
    embeds = _embeds(1, 4)
    embeds.image_embeds = torch.randn(1, UNCLIP_EMBED_DIM, generator=torch.Generator().manual_seed(4))
    entry = [{"clip_vision_output": embeds, "strength": 1.0, "noise_augmentation": 0.2}]
    y = dm.encode_adm(unclip_conditioning=entry, seed=50, device=torch.device("cpu"))
    assert torch.equal(y, unclip_adm(entry, "cpu", 0.05, seed=40))
    assert torch.equal(dm.encode_adm(device=torch.device("cpu")), torch.zeros(1, 2 * UNCLIP_EMBED_DIM))
    wrong = ClipVisionOutput()
    wrong.image_embeds = torch.zeros(1, 8)
    with pytest.raises(ConditioningError, match="CLIP vision embedding is 8 wide"):
        dm.encode_adm(unclip_conditioning=[{"clip_vision_output": wrong, "strength": 1.0, "noise_augmentation": 0}],
                      device=torch.device("cpu"))


def test_sdxl_reads_an_unclip_embedding_as_its_pooled_output(tmp_path):
    from tests.fixtures.checkpoints import write_tiny_checkpoint

    dm = load_checkpoint(write_tiny_checkpoint(tmp_path, "sdxl"), output_clip=False, output_vae=False)[0].model
    embeds = ClipVisionOutput()
    embeds.image_embeds = torch.randn(1, 64, generator=torch.Generator().manual_seed(0))
    entry = [{"clip_vision_output": embeds, "strength": 1.0, "noise_augmentation": 0.0}]
    y = dm.encode_adm(unclip_conditioning=entry, pooled_output=torch.ones(1, 64), width=64, height=64, seed=12)
    torch.testing.assert_close(y[:, :64], unclip_adm(entry, "cpu", 0.0, seed=2)[:, :64])


@pytest.mark.parametrize("variant", VARIANTS)
def test_ksampler_runs_on_each_variant(loaded, variant):
    from nodes.conditioning import clip_text_encode
    from nodes.inpaint_conditioning import inpaint_model_conditioning, instruct_pix_to_pix_conditioning
    from nodes.unclip import unclip_conditioning

    model, clip, vae = loaded(variant)
    pos, neg = clip_text_encode("a cat", clip)[0], clip_text_encode("", clip)[0]
    pixels = torch.rand(1, 64, 72, 3, generator=torch.Generator().manual_seed(9))
    if EXPECTED[variant][2] == "inpaint":
        mask = torch.zeros(1, 64, 72)
        mask[:, 16:40, 16:48] = 1
        pos, neg, latent = inpaint_model_conditioning(pos, neg, vae, pixels, mask, True)
    elif EXPECTED[variant][2] == "ip2p":
        pos, neg, latent = instruct_pix_to_pix_conditioning(pos, neg, vae, pixels)
    else:
        embeds = ClipVisionOutput()
        embeds.image_embeds = torch.randn(1, UNCLIP_EMBED_DIM, generator=torch.Generator().manual_seed(1))
        pos = unclip_conditioning(pos, embeds, 1.0, 0.1)[0]
        latent = {"samples": torch.zeros(1, 4, 8, 9)}
    out = _sample(model, pos, neg, latent, steps=2)
    assert out.shape == (1, 4, 8, 9) and torch.isfinite(out).all()
    assert torch.equal(out, _sample(model, pos, neg, latent, steps=2))  # seeded: reproducible


def test_an_area_entry_gets_the_concat_inputs_of_its_area(loaded):
    """c_concat is noise-shaped: an area conditioning runs with the matching crop (ComfyUI's CONDNoiseShape)."""
    from nodes.conditioning import clip_text_encode
    from nodes.inpaint_conditioning import inpaint_model_conditioning

    model, clip, vae = loaded("sd1_inpaint")
    pixels = torch.rand(1, 64, 64, 3)
    pos, neg, latent = inpaint_model_conditioning(clip_text_encode("a", clip)[0], clip_text_encode("", clip)[0],
                                                  vae, pixels, torch.ones(1, 64, 64), False)
    pos = [[t, {**o, "area": (4, 4, 2, 2), "strength": 1.0}] for t, o in pos] + pos
    out = _sample(model, pos, neg, latent)
    assert out.shape == (1, 4, 8, 8) and torch.isfinite(out).all()
