"""The Qwen-Image family: config from names and shapes, the MMDiT against diffusers'
`QwenImageTransformer2DModel` on the same tiny random weights loaded from a ComfyUI-named file
(plain, masked text, Edit's reference latents, Edit-2511's timestep-zero references), ComfyUI's
positions where diffusers differs, patch points, LoRA spellings, its VAE (Wan 2.1's) against
diffusers' `AutoencoderKLQwenImage`, the family policy, conditions and a 2-step KSampler run."""
from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.qwen_image import QwenImageConditions
from comfy_core.families.qwen_image.dit import (QwenImageConfig, QwenImageConfigError, QwenImageInputError,
                                                default_axes_dims, image_tokens)
from tests.fixtures.dit_checkpoints import save
from tests.fixtures.qwen_image_files import (TXT_WIDTH, UNET, diffusers_qwen_image_kwargs, tiny_qwen_image_state_dict,
                                             write_qwen_image_unet)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _header(state: dict) -> dict:
    return {k: SimpleNamespace(shape=tuple(v.shape)) for k, v in state.items()}


# --- detection --------------------------------------------------------------------------------------------

def test_config_is_read_from_names_and_shapes():
    config = QwenImageConfig.detect_from_weights(_header(tiny_qwen_image_state_dict()))
    assert (config.in_channels, config.out_channels, config.num_layers) == (64, 16, 2)
    assert (config.num_attention_heads, config.attention_head_dim, config.joint_attention_dim) == (2, 32, TXT_WIDTH)
    assert config.mlp_hidden_dim == 256 and config.axes_dims_rope == (4, 14, 14)
    assert config.default_ref_method == "index"
    assert default_axes_dims(128) == (16, 56, 56)  # Qwen-Image's real split
    unet_config = config.comfy_unet_config()
    assert unet_config["image_model"] == "qwen_image" and unet_config["in_channels"] == 64
    assert unet_config["num_layers"] == 2
    marked = QwenImageConfig.detect_from_weights(_header(tiny_qwen_image_state_dict(edit_2511=True)))
    assert marked.default_ref_method == "index_timestep_zero"


def test_inconsistent_or_unsupported_weights_are_typed_errors():
    header = _header(tiny_qwen_image_state_dict())
    wrong = {**header, "transformer_blocks.1.attn.to_k.weight": SimpleNamespace(shape=(64, 32))}
    with pytest.raises(QwenImageConfigError, match="transformer_blocks.1.attn.to_k.weight has shape"):
        QwenImageConfig.detect_from_weights(wrong)
    missing = {k: v for k, v in header.items() if k != "proj_out.weight"}
    with pytest.raises(QwenImageConfigError, match="proj_out.weight' is missing"):
        QwenImageConfig.detect_from_weights(missing)
    layered = {**header, "time_text_embed.addition_t_embedding.weight": SimpleNamespace(shape=(3, 64))}
    with pytest.raises(QwenImageConfigError, match="addition_t_embedding.weight has shape"):
        QwenImageConfig.detect_from_weights(layered)
    with pytest.raises(QwenImageConfigError, match="default_ref_method"):
        QwenImageConfig(default_ref_method="bogus")


def test_single_and_split_files_are_detected_as_qwen_image(tmp_path):
    registry = default_registry()
    single = _header(tiny_qwen_image_state_dict(prefix=UNET))
    assert registry.detect(single).family.name == "qwen_image"
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_qwen_image_unet(tmp_path, seed=2, edit_2511=True))
    assert model.model.family.name == "qwen_image"
    assert model.model.diffusion_model.config.default_ref_method == "index_timestep_zero"


# --- numerics against diffusers ---------------------------------------------------------------------------

def _reference(zero_cond_t: bool = False):
    pytest.importorskip("diffusers")
    from diffusers import QwenImageTransformer2DModel

    state = tiny_qwen_image_state_dict(seed=1)
    model = QwenImageTransformer2DModel(**diffusers_qwen_image_kwargs(zero_cond_t=zero_cond_t))
    model.load_state_dict(state, strict=True)  # ComfyUI's names are diffusers' names
    return model.eval()


@pytest.fixture(scope="module")
def reference():
    return _reference()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_qwen_image_unet(tmp_path_factory.mktemp("qwen_image"), seed=1))


def _pack(x: torch.Tensor) -> torch.Tensor:
    """[B, 16, H, W] -> diffusers' packed tokens [B, H/2*W/2, 64]."""
    b, c, h, w = x.shape
    return x.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5).reshape(b, h * w // 4, c * 4)


def _diffusers(model, x, sigma, context, refs=(), mask=None):
    b, c, h, w = x.shape
    tokens = torch.cat([_pack(x), *[_pack(r) for r in refs]], dim=1)
    shapes = [[(1, h // 2, w // 2)] + [(1, r.shape[-2] // 2, r.shape[-1] // 2) for r in refs]] * b
    with torch.no_grad():
        out = model(hidden_states=tokens, encoder_hidden_states=context, encoder_hidden_states_mask=mask,
                    timestep=sigma, img_shapes=shapes, return_dict=False)[0][:, :h * w // 4]
    return out.reshape(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5).reshape(b, c, h, w)


def _inputs(size=(8, 12), seed=3, batch=2, tokens=7):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 16, *size, generator=gen), torch.tensor([0.7, 0.2][:batch]),
            torch.randn(batch, tokens, TXT_WIDTH, generator=gen))


@pytest.mark.parametrize("size", [(8, 12), (12, 4)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(reference, loaded, size):
    network = loaded.model.diffusion_model
    x, sigma, context = _inputs(size)
    with torch.no_grad():
        ours = network(x, sigma, context)
        ours5 = network(x.unsqueeze(2), sigma, context)  # the VAE's 5-D one-frame latent
    theirs = _diffusers(reference, x, sigma, context)
    assert ours.shape == x.shape and ours5.shape == (2, 16, 1, *size)
    assert (ours - theirs).abs().max() < 1e-4
    assert torch.equal(ours5[:, :, 0], ours)


def test_text_mask_matches_diffusers(reference, loaded):
    x, sigma, context = _inputs()
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        ours = loaded.model.diffusion_model(x, sigma, context, attention_mask=mask)
        unmasked = loaded.model.diffusion_model(x, sigma, context)
    assert (ours - _diffusers(reference, x, sigma, context, mask=mask)).abs().max() < 1e-4
    assert (ours[0] - unmasked[0]).abs().max() > 1e-4 and (ours[1] - unmasked[1]).abs().max() < 1e-5


def test_edit_reference_latents_match_diffusers_index_method(reference, loaded):
    x, sigma, context = _inputs()
    gen = torch.Generator().manual_seed(9)
    refs = [torch.randn(2, 16, 8, 8, generator=gen), torch.randn(2, 16, 4, 12, generator=gen)]
    with torch.no_grad():
        ours = loaded.model.diffusion_model(x, sigma, context, ref_latents=refs)
        plain = loaded.model.diffusion_model(x, sigma, context)
        five = loaded.model.diffusion_model(x.unsqueeze(2), sigma, context, ref_latents=[r.unsqueeze(2) for r in refs])
    assert (ours - _diffusers(reference, x, sigma, context, refs)).abs().max() < 1e-4
    assert (ours - plain).abs().max() > 1e-3
    assert torch.equal(five[:, :, 0], ours)


def test_edit_2511_references_at_timestep_zero_match_diffusers_zero_cond_t(tmp_path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    reference = _reference(zero_cond_t=True)
    state = tiny_qwen_image_state_dict(seed=1, edit_2511=True)
    model = load_diffusion_model(save(state, tmp_path / "diffusion_models" / "qwen_image_edit_2511.safetensors"))
    network = model.model.diffusion_model
    x, sigma, context = _inputs()
    refs = [torch.randn(2, 16, 8, 12, generator=torch.Generator().manual_seed(4))]
    with torch.no_grad():
        ours = network(x, sigma, context, ref_latents=refs)  # the marker's default method
        index = network(x, sigma, context, ref_latents=refs, ref_latents_method="index")
    assert (ours - _diffusers(reference, x, sigma, context, refs)).abs().max() < 1e-4
    assert (ours - index).abs().max() > 1e-4


def test_positions_follow_comfyui_where_diffusers_differs():
    x = torch.zeros(1, 16, 6, 10)  # 3 x 5 patches: odd grids centre as -k..k
    _, ids, grid = image_tokens(x, 2)
    assert grid == (3, 5)
    assert ids[0, :, 1].unique().tolist() == [-1.0, 0.0, 1.0]
    assert ids[0, :, 2].unique().tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0]
    # "offset": frame 1, the second reference placed after the first along the squarer axis
    from comfy_core.families.qwen_image.dit import QwenImageTransformer

    network = QwenImageTransformer(device="meta", **QwenImageConfig(
        in_channels=64, num_layers=0, attention_head_dim=32, num_attention_heads=2, joint_attention_dim=8,
        mlp_hidden_dim=8, axes_dims_rope=(4, 14, 14)).params())
    refs = [torch.zeros(1, 16, 4, 4), torch.zeros(1, 16, 4, 4)]
    _, ids = network.reference_tokens(refs, "offset", 1)
    assert ids[0][0, :, 0].unique().tolist() == [1.0] and ids[1][0, :, 0].unique().tolist() == [1.0]
    assert ids[1][0, :, 1].min() - ids[0][0, :, 1].min() == 2  # 4 latent rows = 2 patches down
    assert all(torch.equal(a, b) for a, b in zip(ids, network.reference_tokens(refs, "uxo", 1)[1]))
    _, ids = network.reference_tokens(refs, "index", 1)
    assert [i[0, 0, 0].item() for i in ids] == [1.0, 2.0]
    with pytest.raises(QwenImageInputError, match="ref_latents_method"):
        network.reference_tokens(refs, "bogus", 1)


def test_bad_inputs_are_typed_errors(loaded):
    network = loaded.model.diffusion_model
    x, sigma, context = _inputs()
    with pytest.raises(QwenImageInputError, match="channels"):
        network(x[:, :8], sigma, context)
    with pytest.raises(QwenImageInputError, match=r"\[B, C, T, H, W\]"):
        network(torch.zeros(16, 8, 8), sigma, context)
    with pytest.raises(QwenImageInputError, match="context"):
        network(x, sigma, context[..., :8])
    with pytest.raises(QwenImageInputError, match="reference latent has 4 channels"):
        network(x, sigma, context, ref_latents=[torch.zeros(2, 4, 8, 8)])


def test_block_patches_replace_and_control_reach_the_image_tokens(loaded):
    network = loaded.model.diffusion_model
    x, sigma, context = _inputs(batch=1)
    seen = []

    def replace(args, extra):
        seen.append(("replace", args["transformer_options"]["block_index"], tuple(args["img"].shape),
                     tuple(args["txt"].shape)))
        return extra["original_block"](args)

    def after(args):
        seen.append(("patch", args["block_index"]))
        return {"img": args["img"], "txt": args["txt"]}

    with torch.no_grad():
        plain = network(x, sigma, context)
        same = network(x, sigma, context, transformer_options={
            "patches_replace": {"dit": {("double_block", 1): replace}}, "patches": {"double_block": [after]}})
        residual = torch.randn(1, 24, 64, generator=torch.Generator().manual_seed(2))
        control = network(x, sigma, context, control={"input": [residual, None]})
    assert seen == [("patch", 0), ("replace", 1, (1, 24, 64), (1, 7, 64)), ("patch", 1)]
    assert torch.equal(plain, same) and (control - plain).abs().max() > 1e-3


# --- LoRA spellings ---------------------------------------------------------------------------------------

def test_lora_spellings_reach_the_weights(loaded):
    from comfy_core.lora.dit_keymap import dit_key_map

    key_map = dit_key_map(loaded.model)
    target = "diffusion_model.transformer_blocks.1.attn.to_q.weight"
    for spelling in ("transformer_blocks.1.attn.to_q", "transformer.transformer_blocks.1.attn.to_q",
                     "diffusion_model.transformer_blocks.1.attn.to_q", "lycoris_transformer_blocks_1_attn_to_q",
                     "lora_unet_transformer_blocks_1_attn_to_q", "lora_transformer_transformer_blocks_1_attn_to_q"):
        assert key_map[spelling] == target, spelling
    assert key_map["transformer.transformer_blocks.0.img_mlp.net.0.proj"] == \
        "diffusion_model.transformer_blocks.0.img_mlp.net.0.proj.weight"


# --- the VAE: Wan 2.1's ------------------------------------------------------------------------------------

def test_vae_is_wan21s_and_matches_diffusers_autoencoder_kl_qwen_image(tmp_path):
    pytest.importorskip("diffusers")
    from diffusers import AutoencoderKLQwenImage

    from comfy_core.loading import load_vae
    from comfy_core.models.wan_vae import WanVAE
    from tests.fixtures.wan_vae_files import diffusers_config, diffusers_state_dict, write_wan_vae

    theirs = AutoencoderKLQwenImage(**diffusers_config("2.1")).eval()
    theirs.load_state_dict(diffusers_state_dict("2.1"), strict=True)  # Wan 2.1's diffusers names
    for layout in ("comfy", "diffusers"):  # qwen_image_vae.safetensors, the pipeline's vae/ folder
        vae = load_vae(write_wan_vae(tmp_path / layout, "2.1", layout))
        module = vae.first_stage_model
        assert isinstance(module, WanVAE) and vae.latent_dim == 3
        x = torch.rand(1, 3, 1, 16, 16, generator=torch.Generator().manual_seed(0)) * 2 - 1
        z = torch.randn(1, 4, 1, 2, 2, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            assert (module.encode_raw(x) - theirs.encode(x).latent_dist.mode()).abs().max() < 1e-4
            assert (module.decode_raw(z).clamp(-1, 1) - theirs.decode(z).sample).abs().max() < 1e-4


def test_latent_format_is_wan21s_with_qwen_images_mean_and_std():
    defaults = inspect.signature(pytest.importorskip("diffusers").AutoencoderKLQwenImage.__init__).parameters
    family = default_registry().get("qwen_image")
    fmt = family.latent_format
    assert fmt.channels == 16 and fmt.latent_dimensions == 3 and family.geometry.downscale == 8
    assert torch.allclose(fmt.latents_mean.flatten(), torch.tensor(defaults["latents_mean"].default))
    assert torch.allclose(fmt.latents_std.flatten(), torch.tensor(defaults["latents_std"].default))
    z = torch.randn(1, 16, 1, 2, 2)
    assert torch.allclose(fmt.process_out(fmt.process_in(z)), z, atol=1e-6)


# --- the family end to end -----------------------------------------------------------------------------------

def test_family_policy_is_comfyuis(loaded):
    from comfy_core.models.model_sampling import FluxModelSampling

    model = loaded.model
    assert type(model.model_sampling) is FluxModelSampling and model.model_sampling.shift == 1.15
    config = model.model_config
    assert type(config).__name__ == "QwenImage" and config.memory_usage_factor == 1.8
    assert config.unet_config["image_model"] == "qwen_image" and config.sampling_settings["shift"] == 1.15
    family = default_registry().get("qwen_image")
    assert family.comfy_model_class == "QwenImage" and family.inference_dtypes == ("bf16", "fp32")
    assert family.vae_prefix == "vae." and family.geometry.latent_channels == 16


def test_conditions_are_model_base_qwen_images(loaded):
    conditions = QwenImageConditions()
    ref = torch.randn(1, 16, 1, 2, 2)
    out = conditions.extra_conds(loaded.model, cross_attn=torch.zeros(1, 3, TXT_WIDTH), reference_latents=[ref],
                                 reference_latents_method="offset")
    assert torch.allclose(out["ref_latents"][0], loaded.model.process_latent_in(ref))
    assert out["ref_latents_method"] == "offset"
    assert conditions.extra_conds(loaded.model, cross_attn=torch.zeros(1, 3, TXT_WIDTH),
                                  attention_mask=torch.ones(1, 3)) == {}


def test_unetloader_file_samples_two_steps_with_and_without_an_edit_reference(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.model_sampling_nodes import model_sampling_aura_flow

    model = load_diffusion_model(write_qwen_image_unet(tmp_path, seed=0))
    (shifted,) = model_sampling_aura_flow(model, 3.1)  # the templates' ModelSamplingAuraFlow
    gen = torch.Generator().manual_seed(7)
    context = torch.randn(1, 12, TXT_WIDTH, generator=gen)  # Qwen2.5-VL's states, tiny width
    negative = [[torch.randn(1, 5, TXT_WIDTH, generator=gen), {}]]
    noise = torch.randn(1, 16, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(1, 16, 1, 8, 8)
    plain = sample(shifted, noise, 2, 2.5, "euler", "simple", [[context, {}]], negative, empty)
    assert plain.shape == (1, 16, 1, 8, 8) and torch.isfinite(plain).all()
    default = sample(model, noise, 2, 2.5, "euler", "simple", [[context, {}]], negative, empty)
    assert (default - plain).abs().max() > 1e-4  # shift 1.15 (Flux's) vs AuraFlow's 3.1
    reference = torch.randn(1, 16, 1, 8, 8, generator=gen)  # a VAE-encoded input image
    edited = sample(shifted, noise, 2, 2.5, "euler", "simple", [[context, {"reference_latents": [reference]}]],
                    negative, empty)
    assert torch.isfinite(edited).all() and (edited - plain).abs().max() > 1e-4


def test_fp8_weights_stay_fp8_and_compute_close_to_fp32(tmp_path, loaded):
    from comfy_core.split.diffusion_model import load_diffusion_model

    fp8 = load_diffusion_model(write_qwen_image_unet(tmp_path, seed=1), weight_dtype=torch.float8_e4m3fn)
    network = fp8.model.diffusion_model
    assert network.transformer_blocks[0].attn.to_q.weight.dtype == torch.float8_e4m3fn
    x, sigma, context = _inputs()
    with torch.no_grad():
        ours = fp8.model.apply_model(x.unsqueeze(2), sigma, c_crossattn=context)
        full = loaded.model.apply_model(x.unsqueeze(2), sigma, c_crossattn=context)
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    assert (ours - full).abs().max() < 0.25 * full.abs().max()  # fp8 rounding of every weight
