"""Z-Image through the family registry: detection from headers (never taken for another family),
the NextDiT network against diffusers' `ZImageTransformer2DModel` on the same tiny weights loaded
from a ComfyUI-named file, diffusers-layout files, the family's sampling / conditioning as today's
ComfyUI's `supported_models.ZImage` / `model_base.Lumina2`, LoRA spellings, and a 2-step sample
from a split file with ModelSamplingAuraFlow."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.zimage import NextDiTConditions, zimage_axes
from comfy_core.families.zimage.keys import ZImageKeyError, convert_diffusers_state_dict, diffusers_key_map
from comfy_core.families.zimage.nextdit import NextDiTConfig, NextDiTConfigError
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.zimage_files import (CAP_WIDTH, UNET, diffusers_zimage_kwargs, tiny_zimage_params,
                                        tiny_zimage_state_dict, to_diffusers_layout, write_zimage_unet)


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape), dtype="F32") for k, v in state.items()}


# --- detection ---------------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes():
    config = NextDiTConfig.detect_from_weights(_header(tiny_zimage_state_dict()), "", axes_split=zimage_axes,
                                               axes_lens=(1536, 512, 512), rope_theta=256.0, time_scale=1000.0,
                                               pad_multiple=32)
    p = tiny_zimage_params()
    assert (config.dim, config.n_heads, config.n_kv_heads, config.n_layers, config.n_refiner_layers) == (64, 4, 4, 2, 1)
    assert (config.cap_feat_dim, config.in_channels, config.ffn_hidden) == (CAP_WIDTH, 16, p["ffn"])
    assert (config.t_hidden, config.adaln_dim, config.axes_dims) == (1024, 64, (4, 6, 6))
    assert config.z_image_modulation and config.pad_tokens_multiple == 32
    # the released model: 30 heads of 128 split 32 / 48 / 48 (ComfyUI's model_detection)
    assert zimage_axes(128) == (32, 48, 48)
    assert NextDiTConfig().comfy_unet_config()["ffn_dim_multiplier"] == pytest.approx(8 / 3)


def test_single_and_split_files_are_detected_as_zimage():
    registry = default_registry()
    state = tiny_zimage_state_dict(prefix=UNET)
    detection = registry.detect(_header(state), "z.safetensors")
    assert detection.family.name == "zimage" and detection.config.dim == 64
    assert registry.detect_diffusion_model(_header(state)).family.name == "zimage"
    # without pad tokens: still Z-Image, no padding
    no_pads = {k: v for k, v in state.items() if not k.endswith("pad_token")}
    assert registry.detect_diffusion_model(_header(no_pads)).config.pad_tokens_multiple is None


def test_inconsistent_weights_are_typed_errors():
    header = _header(tiny_zimage_state_dict())
    kwargs = dict(axes_split=zimage_axes, axes_lens=(1536, 512, 512), rope_theta=256.0, time_scale=1000.0,
                  pad_multiple=32)
    broken = {k: v for k, v in header.items() if not k.startswith("context_refiner.")}
    with pytest.raises(NextDiTConfigError, match="1 noise refiner blocks but 0 context"):
        NextDiTConfig.detect_from_weights(broken, **kwargs)
    wrong = {**header, "layers.0.attention.qkv.weight": SimpleNamespace(shape=(100, 64))}
    with pytest.raises(NextDiTConfigError, match="qkv.weight has 100 rows"):
        NextDiTConfig.detect_from_weights(wrong, **kwargs)
    odd = {**header, "layers.0.attention.q_norm.weight": SimpleNamespace(shape=(8,))}
    with pytest.raises(NextDiTConfigError, match="2:3:3"):
        NextDiTConfig.detect_from_weights(odd, **kwargs)
    assert issubclass(NextDiTConfigError, ValueError)


# --- numerics against diffusers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("diffusers")
    from diffusers import ZImageTransformer2DModel

    state = tiny_zimage_state_dict(seed=1)
    model = ZImageTransformer2DModel(**diffusers_zimage_kwargs())
    model.load_state_dict(to_diffusers_layout(state), strict=True)
    return model.eval(), state


@pytest.fixture(scope="module")
def loaded(tmp_path_factory, reference):
    from comfy_core.split.diffusion_model import load_diffusion_model

    _, state = reference
    path = save(state, tmp_path_factory.mktemp("zimage") / "diffusion_models" / "zimage_tiny.safetensors")
    return load_diffusion_model(path)


def _diffusers_out(model, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = model([xi.unsqueeze(1) for xi in x], 1.0 - sigma, [c for c in context], return_dict=False)[0]
    return torch.stack([o.squeeze(1) for o in out])


@pytest.mark.parametrize("size", [(8, 8), (6, 10)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(reference, loaded, size):
    diffusers_model, _ = reference
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, *size, generator=gen)
    context = torch.randn(2, 32, CAP_WIDTH, generator=gen)  # 32 tokens: no text padding (see below)
    sigma = torch.tensor([0.7, 0.2])
    with torch.no_grad():
        ours = network(x, sigma, context)
    theirs = _diffusers_out(diffusers_model, x, sigma, context)
    # ComfyUI's NextDiT returns the negated prediction (diffusers' pipeline negates it after the call)
    assert ours.shape == x.shape
    assert (ours + theirs).abs().max() < 1e-4


def test_text_padding_follows_comfyui(loaded):
    """Text shorter than a multiple of 32 is filled with `cap_pad_token` at the next positions
    (ComfyUI); a context already holding those pad states at those positions gives the same output."""
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(1, 16, 4, 4, generator=gen)
    short = torch.randn(1, 7, CAP_WIDTH, generator=gen)
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        out = network(x, sigma, short)
        # the pad token differs from any embedded text: changing it changes the output
        original = network.cap_pad_token.detach().clone()
        network.cap_pad_token.add_(1.0)
        moved = network(x, sigma, short)
        network.cap_pad_token.copy_(original)
    assert torch.isfinite(out).all() and (out - moved).abs().max() > 1e-4


def test_noise_refiner_and_block_patches_see_the_parts(loaded):
    network = loaded.model.diffusion_model
    x = torch.randn(1, 16, 4, 4, generator=torch.Generator().manual_seed(5))
    context = torch.randn(1, 32, CAP_WIDTH, generator=torch.Generator().manual_seed(6))
    sigma = torch.tensor([0.5])
    seen = []

    def refiner(args):
        seen.append(("noise_refiner", args["block_index"], tuple(args["img"].shape), tuple(args["txt"].shape)))
        return {}

    def block(args):
        seen.append(("double", args["block_index"], tuple(args["img"].shape), tuple(args["txt"].shape),
                     args["transformer_options"]["total_blocks"]))
        return {"img": args["img"].roll(1, dims=-1)} if args["block_index"] == 1 else {}

    with torch.no_grad():
        plain = network(x, sigma, context)
        patched = network(x, sigma, context,
                          transformer_options={"patches": {"noise_refiner": [refiner], "double_block": [block]}})
    assert seen == [("noise_refiner", 0, (1, 32, 64), (1, 32, 64)), ("double", 0, (1, 32, 64), (1, 32, 64), 2),
                    ("double", 1, (1, 32, 64), (1, 32, 64), 2)]
    assert (plain - patched).abs().max() > 1e-4


# --- layouts ----------------------------------------------------------------------------------------------------

def test_diffusers_layout_file_loads_to_comfyuis_names(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    state = tiny_zimage_state_dict(seed=2)
    converted = convert_diffusers_state_dict(to_diffusers_layout(state))
    assert converted.keys() == state.keys() and all(torch.equal(converted[k], state[k]) for k in state)
    model = load_diffusion_model(write_zimage_unet(tmp_path, seed=2, layout="diffusers"))
    assert model.model.family.name == "zimage"
    loaded = model.model.diffusion_model.state_dict()
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    lonely = {k: v for k, v in to_diffusers_layout(state).items() if not k.endswith("layers.0.attention.to_q.weight")}
    with pytest.raises(ZImageKeyError, match="without its to_q"):
        convert_diffusers_state_dict(lonely)
    with pytest.raises(ZImageKeyError, match="2x2 patches"):
        convert_diffusers_state_dict({"all_x_embedder.4-1.weight": torch.zeros(1)})


def test_lora_spellings_reach_the_fused_qkv(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    qkv = "diffusion_model.layers.1.attention.qkv.weight"
    for spelling in ("transformer.layers.1.attention.to_k", "diffusion_model.layers.1.attention.to_k",
                     "layers.1.attention.to_k", "lycoris_layers_1_attention_to_k",
                     "lora_transformer_layers_1_attention_to_k", "lora_unet_layers_1_attention_to_k"):
        assert key_map[spelling] == (qkv, (0, 64, 64)), spelling
    assert key_map["diffusion_model.layers.1.attention.qkv"] == qkv  # native
    assert key_map["lora_unet_layers_1_attention_qkv"] == qkv  # kohya
    assert key_map["transformer.layers.1.attention.to_out.0"] == "diffusion_model.layers.1.attention.out.weight"
    assert key_map["transformer.all_x_embedder.2-1"] == "diffusion_model.x_embedder.weight"
    assert key_map["transformer.layers.0.feed_forward.w1"] == "diffusion_model.layers.0.feed_forward.w1.weight"
    # grouped-query heads: k and v slices sized by the key/value heads
    gqa = NextDiTConfig(dim=64, n_heads=4, n_kv_heads=2, axes_dims=(4, 6, 6), n_layers=1, n_refiner_layers=0)
    assert diffusers_key_map(gqa)["layers.0.attention.to_v.weight"] == ("layers.0.attention.qkv.weight", (0, 96, 32))


# --- the family end to end -----------------------------------------------------------------------------------

def test_family_policy_is_comfyuis(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    model = loaded.model
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 3.0 and sampling.multiplier == 1.0
    assert model.latent_format.channels == 16 and model.latent_format.scale_factor == 0.3611
    config = model.model_config
    assert type(config).__name__ == "ZImage" and type(config).__mro__[1].__name__ == "Lumina2"
    assert config.memory_usage_factor == 2.8 and config.unet_config["image_model"] == "lumina2"
    assert config.unet_config["z_image_modulation"] is True and config.unet_config["pad_tokens_multiple"] == 32
    family = default_registry().get("zimage")
    assert family.text_encoders.name == "zimage" and family.comfy_model_class == "Lumina2"
    assert "lumina2" in family.text_encoders.clip_types


def test_conditions_are_model_base_lumina2s():
    conditions = NextDiTConditions()
    ctx = torch.zeros(1, 9, CAP_WIDTH)
    assert conditions.extra_conds(None, cross_attn=ctx) == {"num_tokens": 9}
    full = conditions.extra_conds(None, cross_attn=ctx, attention_mask=torch.ones(1, 9))
    assert full == {"num_tokens": 9}  # an all-ones mask is not passed on
    mask = torch.tensor([[1, 1, 1, 0]])
    partial = conditions.extra_conds(None, cross_attn=ctx[:, :4], attention_mask=mask)
    assert partial["num_tokens"] == 3 and partial["attention_mask"] is mask


def test_unetloader_file_samples_two_steps_with_aura_flow_shift(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.model_sampling_nodes import model_sampling_aura_flow

    model = load_diffusion_model(write_zimage_unet(tmp_path, seed=0))
    assert model.model.family.name == "zimage"
    (shifted,) = model_sampling_aura_flow(model, 3.0)
    gen = torch.Generator().manual_seed(7)
    # conditioning tensors of Qwen3-4B's shape for this tiny model (cond and uncond of different lengths)
    positive = [[torch.randn(1, 12, CAP_WIDTH, generator=gen), {"attention_mask": torch.ones(1, 12)}]]
    negative = [[torch.randn(1, 5, CAP_WIDTH, generator=gen), {}]]
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    results = [sample(m, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
               for m in (model, shifted)]
    assert results[0].shape == (1, 16, 8, 8) and torch.isfinite(results[0]).all()
    assert (results[0] - results[1]).abs().max() < 1e-6  # the family's default shift is AuraFlow's 3.0
    (other,) = model_sampling_aura_flow(model, 1.0)
    changed = sample(other, noise, 2, 4.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
    assert (changed - results[0]).abs().max() > 1e-4


def test_single_file_and_split_files_sample_alike_with_the_qwen3_encoder(tmp_path):
    """A whole Z-Image single file (Qwen3-4B under `text_encoders.qwen3_4b.transformer.`, the Flux
    VAE under `vae.`) and its split parts (UNETLoader + CLIPLoader type "lumina2"): both encoders
    give Qwen3's states with their mask, both diffusion models the same 2-step sample; the VAE
    decodes it. (The single file's Qwen3 tower is built in the policy's text dtype, the split one in
    the file's: comfy_core/loading.py `_load_clip`, outside this family, so the samples are compared
    on one conditioning.)"""
    from comfy_core.loading import load_checkpoint
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures.dit_checkpoints import under
    from tests.fixtures.qwen3_files import tiny_qwen3_state_dict
    from tests.fixtures.vae16_files import tiny_vae16_state_dict

    te = "text_encoders.qwen3_4b.transformer."
    state = tiny_zimage_state_dict(prefix=UNET)
    state.update({te + k: v for k, v in tiny_qwen3_state_dict().items()})
    state.update({"vae." + k: v for k, v in tiny_vae16_state_dict("bfl").items()})
    model, clip, vae = load_checkpoint(save(state, tmp_path / "checkpoints" / "zimage_tiny.safetensors"))
    assert model.model.family.name == "zimage" and type(clip.cond_stage_model).__name__ == "ZImageTEModel"
    split = load_diffusion_model(save(under(state, UNET), tmp_path / "diffusion_models" / "z.safetensors"))
    qwen_file = save(under(state, te), tmp_path / "text_encoders" / "qwen.safetensors")
    split_clip = load_text_encoders([qwen_file], "lumina2")
    for c in (clip, split_clip):
        cond = c.encode_from_tokens_scheduled(c.tokenize("a red cat"))
        assert cond[0][0].shape[-1] == CAP_WIDTH and cond[0][1]["attention_mask"].shape[1] == cond[0][0].shape[1]
    positive = split_clip.encode_from_tokens_scheduled(split_clip.tokenize("a red cat"))
    negative = split_clip.encode_from_tokens_scheduled(split_clip.tokenize(""))
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    results = [sample(m, noise, 2, 3.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 8, 8))
               for m in (model, split)]
    assert (results[0] - results[1]).abs().max() < 1e-4  # float32 rounding of two load paths
    image = vae.decode(results[0])
    assert image.shape == (1, 64, 64, 3) and torch.isfinite(image).all()


def test_fp8_file_stays_fp8_and_computes_like_its_upcast_weights(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    rounded = {k: v.to(torch.float8_e4m3fn) for k, v in tiny_zimage_state_dict(seed=3).items()}
    fp8 = load_diffusion_model(save(rounded, tmp_path / "fp8" / "z.safetensors"))
    fp32 = load_diffusion_model(save({k: v.float() for k, v in rounded.items()}, tmp_path / "fp32" / "z.safetensors"))
    assert {p.dtype for p in fp8.model.diffusion_model.parameters()} == {torch.float8_e4m3fn}
    gen = torch.Generator().manual_seed(8)
    x, context = torch.randn(1, 16, 8, 8, generator=gen), torch.randn(1, 20, CAP_WIDTH, generator=gen)
    with torch.no_grad():
        outs = [m.model.apply_model(x, torch.tensor([0.4]), c_crossattn=context) for m in (fp8, fp32)]
    assert (outs[0] - outs[1]).abs().max() < 1e-4


def test_rope_options_scale_and_shift_image_positions(loaded):
    """`transformer_options["rope_options"]` moves the image's row / column positions (ComfyUI's
    `pos_ids_x`); identity options change nothing."""
    network = loaded.model.diffusion_model
    gen = torch.Generator().manual_seed(9)
    x, context = torch.randn(1, 16, 4, 4, generator=gen), torch.randn(1, 32, CAP_WIDTH, generator=gen)
    sigma = torch.tensor([0.5])
    with torch.no_grad():
        plain = network(x, sigma, context)
        same = network(x, sigma, context, transformer_options={"rope_options": {"scale_x": 1.0, "shift_y": 0.0}})
        shifted = network(x, sigma, context, transformer_options={"rope_options": {"shift_x": 3.0}})
    assert torch.equal(plain, same) and (plain - shifted).abs().max() > 1e-4


def test_diffusers_peft_lora_matches_diffusers_with_the_lora_merged(reference, loaded):
    """A PEFT-named LoRA (`transformer.<diffusers name>.lora_A/B.weight`: to_k, a slice of our fused
    qkv; a feed-forward and the patch embedder, renamed) applied through our key map and patcher
    equals diffusers' network with `W += strength * B @ A` merged into its own weights."""
    from comfy_core.lora import load_lora_for_models

    diffusers_model, state = reference
    gen = torch.Generator().manual_seed(11)
    layers = {"layers.0.attention.to_k": (64, 64), "noise_refiner.0.feed_forward.w1": (64, 170),
              "all_x_embedder.2-1": (64, 64), "context_refiner.0.attention.to_v": (64, 64)}
    lora, merged = {}, dict(diffusers_model.state_dict())
    strength = 0.8
    for layer, (fan_in, fan_out) in layers.items():
        down, up = 0.3 * torch.randn(4, fan_in, generator=gen), 0.3 * torch.randn(fan_out, 4, generator=gen)
        lora[f"transformer.{layer}.lora_A.weight"], lora[f"transformer.{layer}.lora_B.weight"] = down, up
        merged[layer + ".weight"] = merged[layer + ".weight"] + strength * up @ down
    patched, _, report = load_lora_for_models(loaded, None, lora, strength, 0.0)
    assert report.unmatched == []
    from diffusers import ZImageTransformer2DModel

    theirs = ZImageTransformer2DModel(**diffusers_zimage_kwargs())
    theirs.load_state_dict(merged, strict=True)
    x = torch.randn(1, 16, 8, 8, generator=gen)
    context = torch.randn(1, 32, CAP_WIDTH, generator=gen)
    sigma = torch.tensor([0.6])
    with torch.no_grad():
        with patched.applied() as module:
            ours = module.diffusion_model(x, sigma, context)
        plain = loaded.model.diffusion_model(x, sigma, context)
    expected = -_diffusers_out(theirs.eval(), x, sigma, context)
    assert (ours - plain).abs().max() > 1e-2 and (ours - expected).abs().max() < 1e-4
