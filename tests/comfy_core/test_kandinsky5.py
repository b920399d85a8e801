"""Kandinsky 5 (comfy_core/families/kandinsky5) and HunyuanVideo 1.0's VAE
(comfy_core/models/hunyuan_video_vae.py): the DiT and the VAE against diffusers' on tiny random
weights, detection of split files, the conditioning ComfyUI's model_base gives it, and the text path
(DualCLIPLoader types kandinsky5 / kandinsky5_image)."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.kandinsky5.dit import Kandinsky5Config, Kandinsky5ConfigError, Kandinsky5Transformer
from comfy_core.models.hunyuan_video_vae import HunyuanVideoVAE, HunyuanVideoVAEConfig, ldm_names
from comfy_core.models.model_conditions import ConditioningError
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.template_models_kandinsky import tiny_hunyuan_video_vae, tiny_kandinsky5_state_dict

TEXT, POOLED = 24, 12


class _FloatRopeTorch:
    """diffusers' Kandinsky 5 attention casts the rotated queries / keys to bfloat16 (a precision
    choice of its own, not ComfyUI's nor the reference's): its module sees this torch, whose
    `bfloat16` is float32, so the comparison is of the computation, not of that rounding."""

    bfloat16 = torch.float32

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.fixture(scope="module")
def diffusers_dits():
    import diffusers.models.transformers.transformer_kandinsky as reference

    original = reference.torch
    reference.torch = _FloatRopeTorch()
    try:
        pairs = {}
        for image in (False, True):
            torch.manual_seed(int(image))
            ref = reference.Kandinsky5Transformer3DModel(
                in_visual_dim=4, in_text_dim=TEXT, in_text_dim2=POOLED, time_dim=32, out_visual_dim=4, model_dim=64,
                ff_dim=96, num_text_blocks=1, num_visual_blocks=2, axes_dims=(4, 6, 6), visual_cond=not image).eval()
            with torch.no_grad():
                for parameter in ref.parameters():
                    parameter.copy_(torch.randn_like(parameter) * 0.2)
            state = ref.state_dict()
            ours = Kandinsky5Transformer(Kandinsky5Config.detect_from_weights(state)).eval()
            ours.load_state_dict(state, strict=True)
            pairs[image] = (ref, ours)
        yield pairs, reference
    finally:
        reference.torch = original


def _run_reference(ref, x, ctx, y, t, scale):
    b, _, frames, h, w = x.shape
    out = ref(x.permute(0, 2, 3, 4, 1), ctx, t, y, [torch.arange(frames), torch.arange(h // 2), torch.arange(w // 2)],
              torch.arange(ctx.shape[1]), scale_factor=scale).sample  # [B, T, H, W, C]
    return out.permute(0, 4, 1, 2, 3)


def test_video_dit_matches_diffusers(diffusers_dits):
    (ref, ours), reference = diffusers_dits[0][False], diffusers_dits[1]
    assert ours.config.in_visual_dim == 9 and ours.config.rope_scale_factor == (1.0, 2.0, 2.0)
    gen = torch.Generator().manual_seed(3)
    x, ctx, y = torch.randn(2, 9, 3, 4, 6, generator=gen), torch.randn(2, 5, TEXT, generator=gen), torch.randn(2, POOLED, generator=gen)
    t = torch.tensor([700.0, 250.0])
    with torch.no_grad():
        got, want = ours(x, t, ctx, y), _run_reference(ref, x, ctx, y, t, (1.0, 2.0, 2.0))
    assert got.shape == (2, 4, 3, 4, 6)
    assert (got - want).abs().max() < 1e-4


def test_image_dit_matches_diffusers_on_4d_latents(diffusers_dits):
    ref, ours = diffusers_dits[0][True]
    assert ours.config.image_model and ours.config.rope_scale_factor == (1.0, 1.0, 1.0)
    gen = torch.Generator().manual_seed(4)
    x, ctx, y = torch.randn(1, 4, 6, 4, generator=gen), torch.randn(1, 3, TEXT, generator=gen), torch.randn(1, POOLED, generator=gen)
    t = torch.tensor([500.0])
    with torch.no_grad():
        got = ours(x, t, ctx, y)
        want = _run_reference(ref, x.unsqueeze(2), ctx, y, t, (1.0, 1.0, 1.0))[:, :, 0]
    assert got.shape == (1, 4, 6, 4) and (got - want).abs().max() < 1e-4


def test_time_dim_replace_rope_options_and_refusals(diffusers_dits):
    _, ours = diffusers_dits[0][False]
    gen = torch.Generator().manual_seed(5)
    x, ctx, y = torch.randn(1, 9, 3, 4, 4, generator=gen), torch.randn(1, 2, TEXT, generator=gen), torch.randn(1, POOLED, generator=gen)
    start = torch.randn(1, 4, 1, 4, 4, generator=gen)
    t = torch.tensor([400.0])
    with torch.no_grad():
        replaced = x.clone()
        replaced[:, :4, :1] = start
        assert torch.allclose(ours(x, t, ctx, y, time_dim_replace=start), ours(replaced, t, ctx, y), atol=1e-6)
        scaled = ours(x, t, ctx, y, transformer_options={"rope_options": {"scale_y": 0.5, "scale_x": 0.5}})
        assert torch.allclose(scaled, ours(x, t, ctx, y), atol=1e-5)  # 0.5 x index = index / 2, the default
        assert not torch.allclose(ours(x, t, ctx, y, transformer_options={"rope_options": {"shift_t": 3.0}}),
                                  ours(x, t, ctx, y), atol=1e-4)
    with pytest.raises(Kandinsky5ConfigError, match="takes"):
        ours(x[:, :4], t, ctx, y)
    with pytest.raises(Kandinsky5ConfigError, match="sparse"):
        ours(torch.zeros(1, 9, 41, 2, 2), t, ctx, y)
    with pytest.raises(Kandinsky5ConfigError, match="pooled"):
        ours(x, t, ctx, None)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    folder = tmp_path_factory.mktemp("kandinsky5")
    video = save(tiny_kandinsky5_state_dict(1), folder / "kandinsky5lite_t2v_sft_5s.safetensors")
    image = save(tiny_kandinsky5_state_dict(2, image=True), folder / "kandinsky5lite_t2i.safetensors")
    return load_diffusion_model(video).model, load_diffusion_model(image).model


def test_split_files_are_detected_with_comfyui_settings(loaded):
    video, image = loaded
    assert (video.family.name, image.family.name) == ("kandinsky5", "kandinsky5_image")
    assert (video.model_sampling.shift, video.model_sampling.multiplier) == (10.0, 1000)
    assert image.model_sampling.shift == 3.0
    assert video.latent_format.scale_factor == pytest.approx(0.476986) and video.latent_format.latent_dimensions == 3
    assert image.latent_format.scale_factor == pytest.approx(0.3611)
    assert (video.family.comfy_model_class, image.family.comfy_model_class) == ("Kandinsky5", "Kandinsky5Image")
    assert video.diffusion_model.config.in_visual_dim == 33 and video.adm_channels == 32
    unet = video.diffusion_model.config.comfy_unet_config()  # ComfyUI's model_detection entry
    assert unet["visual_embed_dim"] == 132 and unet["image_model"] == "kandinsky5" and "rope_scale_factor" not in unet
    assert image.diffusion_model.config.comfy_unet_config()["rope_scale_factor"] == (1.0, 1.0, 1.0)


def test_conditioning_as_comfyui_model_base(loaded):
    video, image = loaded
    noise = torch.zeros(2, 16, 3, 2, 4)
    empty = video.concat_cond(noise=noise, device="cpu")
    assert empty.shape == (2, 17, 3, 2, 4) and not empty.any()
    mask = torch.ones(1, 1, 3, 2, 4)
    mask[:, :, 0] = 0.0
    out = video.concat_cond(noise=noise, device="cpu", concat_mask=mask)
    assert not out[:, :16].any() and out[:, 16, 0].eq(1).all() and out[:, 16, 1:].eq(0).all()
    with pytest.raises(ConditioningError, match="does not fit"):
        video.concat_cond(noise=noise, device="cpu", concat_mask=torch.ones(1, 1, 5, 2, 4))
    assert image.concat_cond(noise=torch.zeros(1, 16, 2, 4), device="cpu") is None
    start = torch.randn(1, 16, 1, 2, 4)
    extra = video.family.conditioning.extra_conds(video, time_dim_replace=start)
    assert torch.allclose(extra["time_dim_replace"], start * 0.476986)
    pooled = video.family.conditioning.encode_adm(video, pooled_output=torch.ones(1, 32))
    assert pooled.shape == (1, 32)
    with pytest.raises(ConditioningError, match="pooled output"):
        video.family.conditioning.encode_adm(video, pooled_output=torch.ones(1, 768))


def test_a_sampling_step_runs_with_the_concatenated_channels(loaded):
    video, _ = loaded
    noise = torch.randn(1, 16, 2, 2, 4)
    with torch.no_grad():
        out = video.apply_model(noise, torch.tensor([0.5]), c_crossattn=torch.randn(1, 3, 256), y=torch.randn(1, 32),
                                c_concat=video.concat_cond(noise=noise, device="cpu"))
    assert out.shape == noise.shape and torch.isfinite(out).all()


# --- HunyuanVideo 1.0's VAE -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vae_pair():
    ref = tiny_hunyuan_video_vae(seed=7)
    state = ref.state_dict()
    ours = HunyuanVideoVAE(HunyuanVideoVAEConfig.detect_from_weights(state)).eval()
    ours.load_state_dict(state, strict=True)
    return ref, ours, state


def test_vae_matches_diffusers(vae_pair):
    ref, ours, _ = vae_pair
    gen = torch.Generator().manual_seed(8)
    video = torch.rand(1, 3, 5, 16, 24, generator=gen) * 2 - 1
    z = torch.randn(1, 16, 2, 2, 3, generator=gen)
    with torch.no_grad():
        ours.with_causal_attention(True)  # the reference's frame-causal middle attention
        assert (ours.encode_raw(video) - ref.encode(video).latent_dist.mode()).abs().max() < 1e-4
        decoded = ours.decode_raw(z)
        assert decoded.shape == (1, 3, 5, 16, 24)
        assert (decoded - ref.decode(z).sample).abs().max() < 1e-4
        ours.with_causal_attention(False)  # ComfyUI's: every position sees every other
        assert (ours.decode_raw(z[:, :, :1]) - ref.decode(z[:, :, :1]).sample).abs().max() < 1e-4
        assert (ours.decode_raw(z) - ref.decode(z).sample).abs().max() > 1e-3


def test_vae_loads_from_the_released_and_comfyui_names(vae_pair, tmp_path):
    from comfy_core.loading import load_vae

    _, ours, state = vae_pair
    released = load_vae(save(state, tmp_path / "hunyuan_video_vae_bf16.safetensors"))
    assert released.latent_channels == 16 and released.spacial_compression_decode() == 8
    assert released.upscale_ratio[0](3) == 9 and released.downscale_ratio[0](9) == 3
    frames = torch.rand(5, 16, 16, 3)
    with torch.no_grad():
        latent = released.encode(frames)
        assert latent.shape == (1, 16, 2, 2, 2)
        assert torch.allclose(latent, ours.encode(frames), atol=1e-5)
        assert released.decode(latent).shape[-4:] == (5, 16, 16, 3)
    ldm = _ldm_layout(state)
    assert set(ldm_names(list(ldm))) == set(state)  # every LDM name maps back onto a released one
    comfy = load_vae(save(ldm, tmp_path / "comfy_layout.safetensors"))
    with torch.no_grad():
        assert torch.allclose(comfy.encode(frames), latent, atol=1e-5)


def _ldm_layout(state):
    """The released names -> ComfyUI's LDM names (attention as 1x1x1 convolutions), written here
    from ComfyUI's diffusers_convert rules, for the loader's LDM path."""
    import re

    out = {}
    top = 3
    for name, value in state.items():
        new = re.sub(r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.", r"encoder.down.\1.block.\2.", name)
        new = re.sub(r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.", r"encoder.down.\1.downsample.", new)
        new = re.sub(r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.",
                     lambda m: f"decoder.up.{top - int(m.group(1))}.block.{m.group(2)}.", new)
        new = re.sub(r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.",
                     lambda m: f"decoder.up.{top - int(m.group(1))}.upsample.", new)
        new = (new.replace("mid_block.resnets.0.", "mid.block_1.").replace("mid_block.resnets.1.", "mid.block_2.")
               .replace("mid_block.attentions.0.group_norm.", "mid.attn_1.norm.")
               .replace("conv_norm_out.", "norm_out.").replace("conv_shortcut.", "nin_shortcut."))
        for released, ldm in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")):
            new = new.replace(f"mid_block.attentions.0.{released}.", f"mid.attn_1.{ldm}.")
        if re.search(r"mid\.attn_1\.(q|k|v|proj_out)\.weight$", new):
            value = value.reshape(*value.shape, 1, 1, 1)
        out[new] = value
    return out


# --- the text path ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def text_files(tmp_path_factory):
    from tests.fixtures.template_models import WRITERS

    folder = tmp_path_factory.mktemp("k5_text")
    qwen, clip_l = folder / "qwen_2.5_vl_7b_fp8_scaled.safetensors", folder / "clip_l.safetensors"
    WRITERS["qwen25vl_7b"](qwen)
    WRITERS["clip_l"](clip_l)
    return qwen, clip_l


@pytest.mark.parametrize("clip_type, system", [("kandinsky5", "Describe the video in detail"),
                                               ("kandinsky5_image", "Describe the image by detailing")])
def test_dual_clip_loader_types(text_files, clip_type, system):
    from comfy_core.families.kandinsky5.clip import Kandinsky5TEModel
    from comfy_core.split import load_text_encoders

    clip = load_text_encoders(list(text_files), clip_type)
    assert isinstance(clip.cond_stage_model, Kandinsky5TEModel)
    tokens = clip.tokenize("a red fox")
    qwen_ids = [pair[0] for pair in tokens["qwen25_7b"][0]]
    decoded = clip.tokenizer.decode(qwen_ids, skip_special_tokens=False)
    assert system in decoded and decoded.rstrip().endswith("a red fox<|im_end|>")
    clip_ids = [pair[0] for pair in tokens["l"][0]]
    assert len(tokens["l"]) == 1 and clip_ids.count(49407) >= 1  # CLIP-L reads the prompt alone: one chunk
    cond, pooled = clip.encode_from_tokens(tokens, return_pooled=True)
    user = [i for i, token in enumerate(qwen_ids) if token == 151644][1]  # the user turn's <|im_start|>
    assert cond.shape == (1, len(qwen_ids) - user - 3, 256)  # the system turn and "<|im_start|>user\n" dropped
    assert pooled.shape == (1, 32)
    # Qwen2.5-VL's last block output without the final norm (ComfyUI's "hidden" layer -1)
    from dataclasses import replace

    model = clip.cond_stage_model
    tower, options = model.encoder("qwen25_7b"), model.spec.options("qwen25_7b")
    with torch.no_grad():
        with tower.using_options(options):
            hidden = tower.encode_token_weights(tokens["qwen25_7b"])[0]
        with tower.using_options(replace(options, layer_idx=None)):
            normed = tower.encode_token_weights(tokens["qwen25_7b"])[0]
    assert torch.allclose(cond, hidden[:, user + 3:], atol=1e-5)
    assert not torch.allclose(cond, normed[:, user + 3:], atol=1e-3)


def test_hunyuan_video_latents_preview_with_comfyuis_factors():
    from comfy_core.families.kandinsky5.latent_format import HunyuanVideo

    fmt = HunyuanVideo()
    assert len(fmt.latent_rgb_factors) == 16 and fmt.latent_rgb_factors_bias == (0.0259, -0.0192, -0.0761)
    assert fmt.latent_rgb_factors[0] == (-0.0395, -0.0331, 0.0445)
    assert fmt.latent_rgb_factors[15] == (0.0249, -0.0469, -0.1703)
    latent = torch.zeros(1, 16, 1, 1)  # one frame's latent: channel 12 at 1
    latent[0, 12] = 1.0
    rgb = fmt.latent_to_rgb(latent)[0, 0, 0]
    expected = (torch.tensor([-0.2315, -0.1920, -0.1355]) + torch.tensor([0.0259, -0.0192, -0.0761]) + 1) / 2
    torch.testing.assert_close(rgb, expected)
