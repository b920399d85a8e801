"""Flux.2 (dev, Klein): detection from names and shapes (BFL / ComfyUI and diffusers layouts), the
network against diffusers' `Flux2Transformer2DModel` on tiny weights loaded from a ComfyUI-named
file, LoRA spellings, the family's ComfyUI policy (latent format, shift, conditions) and a two-step
sample from a UNETLoader file."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.flux2 import Flux2Conditions
from comfy_core.families.flux2.dit import Flux2Config, Flux2ConfigError, flux2_axes_dim
from comfy_core.families.flux2.keys import convert_diffusers_state_dict
from comfy_core.families.flux2.latent_format import Flux2LatentFormat, patchify, unpatchify
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.flux2_files import (CONTEXT, UNET, diffusers_flux2_kwargs, tiny_flux2_state_dict,
                                       to_diffusers_layout, write_flux2_unet)


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


# --- detection ---------------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes():
    config = Flux2Config.detect_from_weights(_header(tiny_flux2_state_dict()))
    assert (config.hidden_size, config.num_heads, config.depth, config.depth_single_blocks) == (64, 2, 1, 1)
    assert (config.in_channels, config.out_channels, config.context_in_dim) == (128, 128, CONTEXT)
    assert config.mlp_ratio == 3.0 and config.axes_dim == (8, 8, 8, 8) and config.theta == 2000
    assert config.guidance_embed and config.variant == "dev" and config.patch_size == 1
    klein = Flux2Config.detect_from_weights(_header(tiny_flux2_state_dict(guidance=False)))
    assert not klein.guidance_embed and klein.variant == "klein"
    assert flux2_axes_dim(128) == (32, 32, 32, 32)  # the released heads
    assert Flux2Config().comfy_unet_config()["image_model"] == "flux2"


def test_single_and_split_files_are_detected_as_dev_or_klein():
    registry = default_registry()
    for guidance, name in ((True, "flux2"), (False, "flux2_klein")):
        state = tiny_flux2_state_dict(prefix=UNET, guidance=guidance)
        assert registry.detect(_header(state), "f.safetensors").family.name == name
        assert registry.detect_diffusion_model(_header(state)).family.name == name
        assert registry.detect_diffusion_model(_header(state)).config.hidden_size == 64


def test_inconsistent_weights_are_typed_errors():
    header = _header(tiny_flux2_state_dict())
    wrong = {**header, "double_blocks.0.txt_mlp.0.weight": SimpleNamespace(shape=(100, 64))}
    with pytest.raises(Flux2ConfigError, match="txt_mlp.0.weight has shape"):
        Flux2Config.detect_from_weights(wrong)
    no_time = {k: v for k, v in header.items() if not k.startswith("time_in.")}
    with pytest.raises(Flux2ConfigError, match="time_in.in_layer.weight"):
        Flux2Config.detect_from_weights(no_time)
    flux1 = {**header, "vector_in.in_layer.weight": SimpleNamespace(shape=(64, 768))}
    with pytest.raises(Flux2ConfigError, match="vector_in"):
        Flux2Config.detect_from_weights(flux1)
    gap = {**header, "single_blocks.2.linear1.weight": SimpleNamespace(shape=(576, 64))}
    with pytest.raises(Flux2ConfigError):
        Flux2Config.detect_from_weights(gap)


def test_diffusers_layout_converts_to_bfl_names_exactly():
    state = tiny_flux2_state_dict(seed=4)
    back = convert_diffusers_state_dict(to_diffusers_layout(state))
    assert set(back) == set(state)
    assert all(torch.equal(back[k], state[k]) for k in state)


# --- numerics against diffusers ---------------------------------------------------------------------------

@pytest.fixture(scope="module", params=[True, False], ids=["dev", "klein"])
def pair(request, tmp_path_factory):
    pytest.importorskip("diffusers")
    from diffusers import Flux2Transformer2DModel
    from comfy_core.split.diffusion_model import load_diffusion_model

    guidance = request.param
    state = tiny_flux2_state_dict(seed=1, guidance=guidance)
    reference = Flux2Transformer2DModel(**diffusers_flux2_kwargs(guidance=guidance))
    reference.load_state_dict(to_diffusers_layout(state), strict=True)
    path = save(state, tmp_path_factory.mktemp("flux2") / "diffusion_models" / "flux2_tiny.safetensors")
    return reference.eval(), load_diffusion_model(path), guidance


def _diffusers_ids(batch: int, h: int, w: int, text: int) -> tuple[torch.Tensor, torch.Tensor]:
    # diffusers' Flux2Pipeline: image (0, row, col, 0), text (0, 0, 0, index)
    img = torch.zeros(h, w, 4)
    img[..., 1] = torch.arange(h)[:, None]
    img[..., 2] = torch.arange(w)[None, :]
    txt = torch.zeros(text, 4)
    txt[:, 3] = torch.arange(text)
    return img.reshape(1, h * w, 4).expand(batch, -1, -1), txt[None].expand(batch, -1, -1)


@pytest.mark.parametrize("size", [(4, 4), (3, 5)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(pair, size):
    reference, loaded, guidance = pair
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(3)
    h, w = size
    x = torch.randn(2, 128, h, w, generator=gen)
    context = torch.randn(2, 7, CONTEXT, generator=gen)
    sigma = torch.tensor([0.7, 0.2])
    g = torch.tensor([3.5, 2.0]) if guidance else None
    with torch.no_grad():
        ours = network(x, sigma, context, guidance=g)
        img_ids, txt_ids = _diffusers_ids(2, h, w, 7)
        theirs = reference(hidden_states=x.flatten(2).transpose(1, 2), encoder_hidden_states=context,
                           timestep=sigma, img_ids=img_ids, txt_ids=txt_ids, guidance=g, return_dict=False)[0]
    theirs = theirs.transpose(1, 2).reshape(2, 128, h, w)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4


def test_reference_latents_take_time_index_ten_per_reference(pair):
    reference, loaded, guidance = pair
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(1, 128, 2, 3, generator=gen)
    ref = torch.randn(1, 128, 3, 2, generator=gen)
    context = torch.randn(1, 4, CONTEXT, generator=gen)
    sigma = torch.tensor([0.5])
    g = torch.tensor([3.5]) if guidance else None
    with torch.no_grad():
        ours = network(x, sigma, context, guidance=g, ref_latents=[ref])
        img_ids, txt_ids = _diffusers_ids(1, 2, 3, 4)
        ref_ids = torch.zeros(3, 2, 4)
        ref_ids[..., 0] = 10
        ref_ids[..., 1] = torch.arange(3)[:, None]
        ref_ids[..., 2] = torch.arange(2)[None, :]
        tokens = torch.cat([x.flatten(2).transpose(1, 2), ref.flatten(2).transpose(1, 2)], 1)
        theirs = reference(hidden_states=tokens, encoder_hidden_states=context, timestep=sigma,
                           img_ids=torch.cat([img_ids, ref_ids.reshape(1, 6, 4)], 1), txt_ids=txt_ids, guidance=g,
                           return_dict=False)[0][:, :6]
    assert (ours - theirs.transpose(1, 2).reshape(1, 128, 2, 3)).abs().max() < 1e-4
    with pytest.raises(ValueError, match="'offset' is not supported"):
        network(x, sigma, context, guidance=g, ref_latents=[ref], ref_latents_method="offset")


def test_diffusers_layout_file_loads_and_computes_alike(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    comfy = load_diffusion_model(write_flux2_unet(tmp_path, seed=2, guidance=False))
    diffusers = load_diffusion_model(write_flux2_unet(tmp_path, seed=2, layout="diffusers", guidance=False))
    assert diffusers.model.family.name == "flux2_klein"
    x = torch.randn(1, 128, 2, 2, generator=torch.Generator().manual_seed(0))
    ctx = torch.randn(1, 3, CONTEXT, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a = comfy.model.diffusion_model(x, torch.tensor([0.4]), ctx)
        b = diffusers.model.diffusion_model(x, torch.tensor([0.4]), ctx)
    assert (a - b).abs().max() < 1e-6


def test_lora_spellings_reach_the_fused_qkv(pair):
    from comfy_core.lora.dit_keymap import dit_key_map

    _, loaded, _ = pair
    key_map = dit_key_map(loaded.model)
    qkv = "diffusion_model.double_blocks.0.img_attn.qkv.weight"
    for spelling in ("transformer.transformer_blocks.0.attn.to_k", "diffusion_model.transformer_blocks.0.attn.to_k",
                     "lycoris_transformer_blocks_0_attn_to_k", "lora_transformer_transformer_blocks_0_attn_to_k"):
        assert key_map[spelling] == (qkv, (0, 64, 64)), spelling
    assert key_map["lora_unet_double_blocks_0_img_attn_qkv"] == qkv  # kohya
    assert key_map["diffusion_model.single_blocks.0.linear1"] == "diffusion_model.single_blocks.0.linear1.weight"
    assert (key_map["transformer.single_transformer_blocks.0.attn.to_qkv_mlp_proj"]
            == "diffusion_model.single_blocks.0.linear1.weight")
    assert key_map["transformer.double_stream_modulation_img.linear"] == \
        "diffusion_model.double_stream_modulation_img.lin.weight"


# --- the family ------------------------------------------------------------------------------------------------

def test_family_policy_is_comfyuis(pair):
    from comfy_core.models.model_sampling import FluxModelSampling

    _, loaded, _ = pair
    model = loaded.model
    sampling = model.model_sampling
    assert isinstance(sampling, FluxModelSampling) and sampling.shift == pytest.approx(2.02)
    assert model.latent_format.channels == 128 and model.latent_format.scale_factor == 1.0
    config = model.model_config
    assert type(config).__name__ == "Flux2" and type(config).__mro__[1].__name__ == "Flux"
    assert config.unet_config["image_model"] == "flux2"
    assert config.memory_usage_factor == pytest.approx(3.1 * 4 * 64 / 2604)


def test_latent_format_patches_and_previews():
    latent = torch.randn(1, 32, 4, 6)
    packed = patchify(latent)
    assert packed.shape == (1, 128, 2, 3) and torch.equal(unpatchify(packed), latent)
    assert packed[0, 4 * 5 + 2 * 1 + 0, 1, 2] == latent[0, 5, 3, 4]  # channel 4c + 2i + j
    fmt = Flux2LatentFormat()
    rgb = fmt.latent_to_rgb(packed)
    assert rgb.shape == (1, 4, 6, 3)
    assert torch.equal(fmt.process_in(packed), packed) and torch.equal(fmt.process_out(packed), packed)


def test_conditions_front_pad_text_to_512_tokens():
    conditions = Flux2Conditions()
    ctx = torch.randn(1, 5, 8)
    out = conditions.extra_conds(None, cross_attn=ctx, guidance=4.0)
    assert out["c_crossattn"].shape == (1, 512, 8)
    assert torch.equal(out["c_crossattn"][:, -5:], ctx) and not out["c_crossattn"][:, :-5].any()
    assert out["guidance"].item() == 4.0
    long = torch.randn(1, 600, 8)
    assert "c_crossattn" not in conditions.extra_conds(None, cross_attn=long)


def test_unetloader_file_samples_two_steps(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_flux2_unet(tmp_path, seed=0, guidance=False))
    gen = torch.Generator().manual_seed(7)
    positive = [[torch.randn(1, 6, CONTEXT, generator=gen), {}]]
    negative = [[torch.randn(1, 3, CONTEXT, generator=gen), {}]]
    noise = torch.randn(1, 128, 3, 3, generator=torch.Generator().manual_seed(0))
    out = sample(model, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 128, 3, 3))
    assert out.shape == (1, 128, 3, 3) and torch.isfinite(out).all()


def test_sampling_previews_unpack_the_patches():
    from comfy_core.sampling.preview import Latent2RGBPreviewer

    previewer = Latent2RGBPreviewer(Flux2LatentFormat())
    kind, image, _ = previewer.preview(torch.randn(1, 128, 3, 5))
    assert image.size == (10, 6)  # 32 channels at twice the latent size


def test_single_file_with_klein_encoder_and_vae_loads_all_three(tmp_path):
    from comfy_core.families.flux2.clip import Flux2TEModel
    from comfy_core.loading import load_checkpoint
    from comfy_core.models.flux2_vae import Flux2AutoencoderKL
    from tests.fixtures.flux2_files import tiny_flux2_vae_state_dict
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict

    state = tiny_flux2_state_dict(seed=0, prefix=UNET, guidance=False, context=96)
    state.update({"text_encoders.qwen3_4b.transformer." + k: v
                  for k, v in tiny_qwen3_state_dict(seed=1, num_hidden_layers=28).items()})
    state.update(tiny_flux2_vae_state_dict(seed=2, prefix="vae.", levels=4))  # 16x, as the family's geometry
    model, clip, vae = load_checkpoint(save(state, tmp_path / "klein_aio.safetensors"))
    assert model.model.family.name == "flux2_klein"
    assert isinstance(clip.cond_stage_model, Flux2TEModel)
    assert isinstance(vae.model, Flux2AutoencoderKL) and vae.latent_channels == 128
    assert torch.equal(vae.model.bn.running_var, state["vae.bn.running_var"])
    assert vae.model.downscale_ratio == 16
    two_levels = {**state, **tiny_flux2_vae_state_dict(seed=2, prefix="vae.")}
    two_levels = {k: v for k, v in two_levels.items() if not k.startswith("vae.encoder.down.2")
                  and not k.startswith("vae.encoder.down.3") and not k.startswith("vae.decoder.up.2")
                  and not k.startswith("vae.decoder.up.3")}
    from comfy_core.checkpoint.errors import ShapeMismatchError

    with pytest.raises(ShapeMismatchError, match="VAE downscales 4x to 128 channels"):
        load_checkpoint(save(two_levels, tmp_path / "wrong_vae.safetensors"))



def test_single_dev_file_reads_mistrals_tekken_tokenizer_at_the_text_encoders_root(tmp_path):
    """ComfyUI's checkpoint loader hands the text-encoder state dict on as `tokenizer_data`, and its
    CLIP.get_sd saves the tokenizer's state (`tekken_model`) there: an all-in-one FLUX.2 dev file
    carries it as `text_encoders.tekken_model`, and its prompts tokenize as the split file's."""
    from comfy_core.loading import load_checkpoint
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.flux2_files import tiny_flux2_vae_state_dict
    from tests.fixtures.mistral_files import tekken_tensor, tiny_mistral_state_dict, write_mistral_file

    mistral = tiny_mistral_state_dict(seed=1)
    state = tiny_flux2_state_dict(seed=0, prefix=UNET, guidance=True, context=96)
    state.update({"text_encoders.mistral3_24b.transformer." + k: v for k, v in mistral.items()})
    state.update(tiny_flux2_vae_state_dict(seed=2, prefix="vae.", levels=4))
    without = save(state, tmp_path / "flux2_dev_no_tokenizer.safetensors")
    state["text_encoders.tekken_model"] = tekken_tensor()
    model, clip, _vae = load_checkpoint(save(state, tmp_path / "flux2_dev_aio.safetensors"))
    assert model.model.family.name == "flux2"
    split = load_text_encoders([write_mistral_file(tmp_path / "mistral.safetensors", mistral, dtype=torch.float32)],
                               "flux2")
    prompt = "a red fox in the snow, café"
    assert clip.tokenize(prompt) == split.tokenize(prompt)
    cond = clip.encode_from_tokens(clip.tokenize(prompt))
    assert torch.allclose(cond, split.encode_from_tokens(split.tokenize(prompt)), atol=1e-5)
    from comfy_core.checkpoint.errors import ShapeMismatchError

    with pytest.raises(ShapeMismatchError, match="no 'tekken_model' tensor"):
        load_checkpoint(without)

def test_diffusers_peft_lora_matches_diffusers_with_the_lora_merged(pair):
    """A PEFT-named LoRA (`transformer.<diffusers name>.lora_A/B.weight`: to_k, a slice of our fused
    qkv; the single block's fused projection; the global modulation; the final adaLN, whose halves
    diffusers orders scale then shift) through our key map and patcher equals diffusers' network
    with `W += strength * B @ A` merged into its weights."""
    from diffusers import Flux2Transformer2DModel
    from comfy_core.lora import load_lora_for_models

    reference, loaded, guidance = pair
    gen = torch.Generator().manual_seed(11)
    layers = {"transformer_blocks.0.attn.to_k": (64, 64), "single_transformer_blocks.0.attn.to_qkv_mlp_proj": (64, 576),
              "double_stream_modulation_txt.linear": (64, 384), "norm_out.linear": (64, 128),
              "transformer_blocks.0.ff_context.linear_out": (192, 64)}
    lora, merged, strength = {}, dict(reference.state_dict()), 0.8
    for layer, (fan_in, fan_out) in layers.items():
        down, up = 0.3 * torch.randn(4, fan_in, generator=gen), 0.3 * torch.randn(fan_out, 4, generator=gen)
        lora[f"transformer.{layer}.lora_A.weight"], lora[f"transformer.{layer}.lora_B.weight"] = down, up
        merged[layer + ".weight"] = merged[layer + ".weight"] + strength * up @ down
    patched, _, report = load_lora_for_models(loaded, None, lora, strength, 0.0)
    assert report.unmatched == []
    theirs = Flux2Transformer2DModel(**diffusers_flux2_kwargs(guidance=guidance))
    theirs.load_state_dict(merged, strict=True)
    x = torch.randn(1, 128, 3, 3, generator=gen)
    context = torch.randn(1, 5, CONTEXT, generator=gen)
    sigma, g = torch.tensor([0.6]), (torch.tensor([3.0]) if guidance else None)
    img_ids, txt_ids = _diffusers_ids(1, 3, 3, 5)
    with torch.no_grad():
        with patched.applied() as module:
            ours = module.diffusion_model(x, sigma, context, guidance=g)
        plain = loaded.model.diffusion_model(x, sigma, context, guidance=g)
        expected = theirs.eval()(hidden_states=x.flatten(2).transpose(1, 2), encoder_hidden_states=context,
                                 timestep=sigma, img_ids=img_ids, txt_ids=txt_ids, guidance=g, return_dict=False)[0]
    expected = expected.transpose(1, 2).reshape(1, 128, 3, 3)
    assert (ours - plain).abs().max() > 1e-2 and (ours - expected).abs().max() < 1e-4


def test_comfyuis_classes_for_packs():
    # compat: comfy.model_base.Flux2 (a Flux) for both families, comfy.supported_models.Flux2 (a Flux)
    from compat.mp_model_base import CLASS_OF_FAMILY, Flux, Flux2
    from compat.mp_supported_models import our_config_class
    from comfy_core.families.flux.supported_models import FluxModelConfig
    from comfy_core.families.flux2.supported_models import Flux2ModelConfig

    assert CLASS_OF_FAMILY["flux2"] is Flux2 and CLASS_OF_FAMILY["flux2_klein"] is Flux2 and issubclass(Flux2, Flux)
    assert our_config_class("Flux2") is Flux2ModelConfig and issubclass(Flux2ModelConfig, FluxModelConfig)


def test_fp8_file_stays_fp8_and_computes_like_its_upcast_weights(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    rounded = {k: v.to(torch.float8_e4m3fn) for k, v in tiny_flux2_state_dict(seed=3).items()}
    fp8 = load_diffusion_model(save(rounded, tmp_path / "fp8" / "f.safetensors"))
    fp32 = load_diffusion_model(save({k: v.float() for k, v in rounded.items()}, tmp_path / "fp32" / "f.safetensors"))
    assert {p.dtype for p in fp8.model.diffusion_model.parameters()} == {torch.float8_e4m3fn}
    gen = torch.Generator().manual_seed(8)
    x, context = torch.randn(1, 128, 3, 3, generator=gen), torch.randn(1, 5, CONTEXT, generator=gen)
    with torch.no_grad():
        outs = [m.model.apply_model(x, torch.tensor([0.4]), c_crossattn=context, guidance=torch.tensor([3.5]))
                for m in (fp8, fp32)]
    assert (outs[0] - outs[1]).abs().max() < 1e-4
