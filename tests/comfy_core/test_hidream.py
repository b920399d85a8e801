"""The HiDream family: config from names and shapes, the sparse DiT against diffusers'
`HiDreamImageTransformer2DModel` on the same tiny random weights loaded from a ComfyUI-named file,
detection of single and split files, typed errors, LoRA spellings, the family policy, conditions
and a 2-step KSampler run from a UNETLoader file."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.hidream import HiDreamConditions
from comfy_core.families.hidream.dit import (HiDreamConfig, HiDreamConfigError, HiDreamInputError,
                                             default_llama_layers)
from tests.fixtures.hidream_files import (LLAMA_WIDTH, POOLED_WIDTH, T5_WIDTH, UNET, diffusers_hidream_kwargs,
                                          tiny_hidream_state_dict, write_hidream_unet)


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
    config = HiDreamConfig.detect_from_weights(_header(tiny_hidream_state_dict()))
    assert (config.in_channels, config.out_channels, config.num_layers, config.num_single_layers) == (16, 16, 2, 2)
    assert (config.num_attention_heads, config.attention_head_dim) == (2, 128)
    assert config.caption_channels == (T5_WIDTH, LLAMA_WIDTH) and config.text_emb_dim == POOLED_WIDTH
    assert (config.num_routed_experts, config.num_activated_experts) == (4, 2)
    assert (config.expert_hidden, config.shared_hidden, config.text_hidden) == (768, 512, 768)
    assert config.llama_layers == (0, 1, 2, 3) and config.adm_in_channels == POOLED_WIDTH
    # ComfyUI's list for the 48 blocks of the real model: 0..31, then 31 sixteen times.
    assert default_llama_layers(48) == tuple(range(32)) + (31,) * 16
    unet_config = config.comfy_unet_config()
    assert unet_config["image_model"] == "hidream" and unet_config["num_single_layers"] == 2
    dense = HiDreamConfig.detect_from_weights(_header(tiny_hidream_state_dict(experts=0)))
    assert dense.num_routed_experts == 0 and dense.expert_hidden == 768


def test_inconsistent_weights_are_typed_errors():
    header = _header(tiny_hidream_state_dict())
    wrong = {**header, "single_stream_blocks.1.block.attn1.to_k.weight": SimpleNamespace(shape=(256, 128))}
    with pytest.raises(HiDreamConfigError, match="single_stream_blocks.1.block.attn1.to_k.weight has shape"):
        HiDreamConfig.detect_from_weights(wrong)
    missing = {k: v for k, v in header.items() if k != "double_stream_blocks.1.block.ff_i.experts.3.w2.weight"}
    with pytest.raises(HiDreamConfigError, match="experts.3.w2.weight' is missing"):
        HiDreamConfig.detect_from_weights(missing)
    short = {k: v for k, v in header.items() if not k.startswith("caption_projection.4.")}
    with pytest.raises(HiDreamConfigError, match="caption projections"):
        HiDreamConfig.detect_from_weights(short)
    with pytest.raises(HiDreamConfigError, match="llama_layers"):
        HiDreamConfig(num_layers=1, num_single_layers=1, llama_layers=(0,))
    with pytest.raises(HiDreamConfigError, match="axes_dims_rope"):
        HiDreamConfig(axes_dims_rope=(64, 32, 30))


def test_single_and_split_files_are_detected_as_hidream(tmp_path):
    registry = default_registry()
    single = _header(tiny_hidream_state_dict(prefix=UNET))
    assert registry.detect(single).family.name == "hidream"
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_hidream_unet(tmp_path, seed=2))
    assert model.model.family.name == "hidream"
    assert model.model.diffusion_model.config.num_layers == 2


# --- numerics against diffusers ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    pytest.importorskip("diffusers")
    from diffusers import HiDreamImageTransformer2DModel

    model = HiDreamImageTransformer2DModel(**diffusers_hidream_kwargs())
    model.load_state_dict(tiny_hidream_state_dict(seed=1), strict=True)  # ComfyUI's names are diffusers' names
    return model.eval()


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(write_hidream_unet(tmp_path_factory.mktemp("hidream"), seed=1))


def _inputs(size=(8, 8), seed=3, batch=2, t5_tokens=5, llama_tokens=6, layers=4):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, 16, *size, generator=gen), torch.tensor([0.7, 0.2][:batch]),
            torch.randn(batch, POOLED_WIDTH, generator=gen), torch.randn(batch, t5_tokens, T5_WIDTH, generator=gen),
            torch.randn(batch, layers, llama_tokens, LLAMA_WIDTH, generator=gen))


def _diffusers(model, x, sigma, pooled, t5, llama):
    with torch.no_grad():
        out = model(hidden_states=x, timesteps=sigma * 1000, encoder_hidden_states_t5=t5,
                    encoder_hidden_states_llama3=llama.movedim(1, 0), pooled_embeds=pooled, return_dict=False)[0]
    return -out  # diffusers' pipeline negates the prediction, ComfyUI's network does


@pytest.mark.parametrize("size", [(8, 8), (12, 12)])
def test_network_matches_diffusers_on_weights_loaded_from_a_comfyui_file(reference, loaded, size):
    x, sigma, pooled, t5, llama = _inputs(size)
    with torch.no_grad():
        ours = loaded.model.diffusion_model(x, sigma * 1000, t5, pooled, encoder_hidden_states_llama3=llama)
    theirs = _diffusers(reference, x, sigma, pooled, t5, llama)
    assert ours.shape == x.shape
    assert (ours - theirs).abs().max() < 1e-4


def test_apply_model_runs_the_flow_parametrisation(reference, loaded):
    """DiffusionModel.apply_model: t = 1000 sigma in, denoised = x - sigma * velocity out."""
    x, sigma, pooled, t5, llama = _inputs()
    with torch.no_grad():
        denoised = loaded.model.apply_model(x, sigma, c_crossattn=t5, y=pooled, encoder_hidden_states_llama3=llama)
    velocity = _diffusers(reference, x, sigma, pooled, t5, llama)
    assert (denoised - (x - sigma.view(-1, 1, 1, 1) * velocity)).abs().max() < 1e-4


def test_odd_and_non_square_latents_are_padded_and_cropped(loaded):
    """ComfyUI's handling: circular padding to whole patches, every token real (diffusers would pad
    non-square latents to max_resolution with masked keys), the output cropped back."""
    network = loaded.model.diffusion_model
    x, sigma, pooled, t5, llama = _inputs(size=(7, 10))
    with torch.no_grad():
        out = network(x, sigma * 1000, t5, pooled, encoder_hidden_states_llama3=llama)
        padded = network(torch.nn.functional.pad(x, (0, 0, 0, 1), mode="circular"), sigma * 1000, t5, pooled,
                         encoder_hidden_states_llama3=llama)
    assert out.shape == x.shape and torch.isfinite(out).all()
    assert torch.allclose(out, padded[:, :, :7], atol=1e-5)


def test_e1_image_cond_is_appended_along_the_width(loaded):
    network = loaded.model.diffusion_model
    x, sigma, pooled, t5, llama = _inputs()
    source = torch.randn_like(x)
    with torch.no_grad():
        edited = network(x, sigma * 1000, t5, pooled, encoder_hidden_states_llama3=llama, image_cond=source)
        wide = network(torch.cat([x, source], dim=-1), sigma * 1000, t5, pooled, encoder_hidden_states_llama3=llama)
    assert edited.shape == x.shape and torch.equal(edited, wide[..., :8])


def test_bad_inputs_are_typed_errors(loaded):
    network = loaded.model.diffusion_model
    x, sigma, pooled, t5, llama = _inputs()
    with pytest.raises(HiDreamInputError, match="pooled"):
        network(x, sigma, t5, pooled[:, :4], encoder_hidden_states_llama3=llama)
    with pytest.raises(HiDreamInputError, match="T5"):
        network(x, sigma, t5[..., :8], pooled, encoder_hidden_states_llama3=llama)
    with pytest.raises(HiDreamInputError, match="encoder_hidden_states_llama3"):
        network(x, sigma, t5, pooled, encoder_hidden_states_llama3=llama[:, :2])
    with pytest.raises(HiDreamInputError, match="encoder_hidden_states_llama3"):
        network(x, sigma, t5, pooled)
    with pytest.raises(HiDreamInputError, match="channels"):
        network(x[:, :4], sigma, t5, pooled, encoder_hidden_states_llama3=llama)
    with pytest.raises(HiDreamInputError, match="image_cond"):
        network(x, sigma, t5, pooled, encoder_hidden_states_llama3=llama, image_cond=x[:, :, :4])


def test_lora_spellings_reach_the_weights(loaded):
    names = [k for k in loaded.model.state_dict() if k.startswith("diffusion_model.")]
    key_map = loaded.model.diffusion_model.lora_key_map(names)
    target = "diffusion_model.double_stream_blocks.0.block.ff_i.experts.1.w2.weight"
    for spelling in ("transformer.double_stream_blocks.0.block.ff_i.experts.1.w2",
                     "diffusion_model.double_stream_blocks.0.block.ff_i.experts.1.w2",
                     "double_stream_blocks.0.block.ff_i.experts.1.w2",
                     "lora_unet_double_stream_blocks_0_block_ff_i_experts_1_w2",
                     "lora_transformer_double_stream_blocks_0_block_ff_i_experts_1_w2"):
        found = key_map[spelling]
        assert (found if isinstance(found, str) else found[0]) == target, spelling


def test_family_policy_is_comfyuis(loaded):
    from comfy_core.models.model_sampling import FlowModelSampling

    model = loaded.model
    sampling = model.model_sampling
    assert type(sampling) is FlowModelSampling and sampling.shift == 1.0 and sampling.multiplier == 1000
    config = model.model_config
    assert type(config).__name__ == "HiDream" and type(config).sampling_settings == {}  # ComfyUI: defaults
    assert config.unet_config["image_model"] == "hidream"
    family = default_registry().get("hidream")
    assert family.comfy_model_class == "HiDream" and family.inference_dtypes == ("bf16", "fp32")
    assert family.geometry.latent_channels == 16 and family.latent_format.scale_factor == pytest.approx(0.3611)


def test_conditions_are_model_base_hidreams(loaded):
    conditions = HiDreamConditions()
    llama = torch.randn(1, 4, 3, LLAMA_WIDTH)
    image = torch.randn(1, 16, 4, 4)
    out = conditions.extra_conds(loaded.model, conditioning_llama3=llama, concat_latent_image=image)
    assert out["encoder_hidden_states_llama3"] is llama
    assert torch.allclose(out["image_cond"], loaded.model.process_latent_in(image))
    pooled = torch.randn(1, POOLED_WIDTH)
    assert conditions.encode_adm(loaded.model, pooled_output=pooled) is pooled


def test_unetloader_file_samples_two_steps(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_hidream_unet(tmp_path, seed=0))
    gen = torch.Generator().manual_seed(7)

    def cond(t5_tokens: int, llama_tokens: int) -> list:
        return [[torch.randn(1, t5_tokens, T5_WIDTH, generator=gen),
                 {"pooled_output": torch.randn(1, POOLED_WIDTH, generator=gen),
                  "conditioning_llama3": torch.randn(1, 4, llama_tokens, LLAMA_WIDTH, generator=gen)}]]

    positive, negative = cond(8, 6), cond(8, 3)
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(1, 16, 8, 8)
    out = sample(model, noise, 2, 5.0, "euler", "simple", positive, negative, empty)
    assert out.shape == (1, 16, 8, 8) and torch.isfinite(out).all()
    other = sample(model, noise, 2, 5.0, "euler", "simple", cond(8, 6), negative, empty)
    assert (other - out).abs().max() > 1e-4  # the conditioning reaches the network


# --- the text encoders ------------------------------------------------------------------------------------

def test_four_text_encoder_files_form_hidreams_set_and_condition_a_sample(tmp_path):
    """QuadrupleCLIPLoader's files (any order) -> ComfyUI's HiDream conditioning -> a 2-step sample."""
    pytest.importorskip("llama_models")
    from comfy_core.families.hidream.clip import HiDreamTEModel, HiDreamTokenizer
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split import load_text_encoders
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.hidream_files import write_hidream_text_encoders

    files = write_hidream_text_encoders(tmp_path)
    clip = load_text_encoders([files["llama"], files["t5xxl"], files["clip_g"], files["clip_l"]], "hidream")
    assert isinstance(clip.cond_stage_model, HiDreamTEModel) and isinstance(clip.tokenizer, HiDreamTokenizer)
    tokens = clip.tokenize("a photo of a cat " * 40)
    assert set(tokens) == {"l", "g", "t5xxl", "llama"}
    assert len(tokens["t5xxl"]) == 1 and len(tokens["t5xxl"][0]) == 128 and tokens["t5xxl"][0][-1][0] == 1
    llama = tokens["llama"][0]
    assert llama[0][0] == 128000 and [t for t, _ in llama[1:6]] == [64, 6685, 315, 264, 8415]  # "a photo of a cat"
    short = clip.tokenize("a cat")["llama"][0]
    assert len(short) == 128 and short[3][0] == 128009  # start, "a", " cat", then <|eot_id|> pads
    [[cond, extra]] = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    assert cond.shape == (1, 128, 64) and extra["pooled_output"].shape == (1, 64)
    assert extra["conditioning_llama3"].shape == (1, 4, 128, 32)
    [[negative_cond, negative_extra]] = clip.encode_from_tokens_scheduled(clip.tokenize(""))

    model = load_diffusion_model(write_hidream_unet(tmp_path, seed=0, t5_width=64, llama_width=32, pooled_width=64))
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    out = sample(model, noise, 2, 4.0, "euler", "simple", [[cond, extra]], [[negative_cond, negative_extra]],
                 torch.zeros(1, 16, 8, 8))
    assert out.shape == (1, 16, 8, 8) and torch.isfinite(out).all()


def test_a_partial_set_fills_comfyuis_zeros(tmp_path):
    pytest.importorskip("llama_models")
    from comfy_core.split import load_text_encoders
    from tests.fixtures.hidream_files import write_hidream_text_encoders

    files = write_hidream_text_encoders(tmp_path)
    clip = load_text_encoders([files["clip_g"], files["llama"]], "hidream")  # DualCLIPLoader type hidream
    [[cond, extra]] = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    assert torch.equal(cond, torch.zeros(1, 128, 4096))  # no T5: ComfyUI's zeros
    pooled = extra["pooled_output"]
    assert pooled.shape == (1, 768 + 32) and torch.equal(pooled[:, :768], torch.zeros(1, 768))
    assert pooled[:, 768:].abs().sum() > 0 and extra["conditioning_llama3"].shape == (1, 4, 128, 32)


def test_e1_concat_latent_image_reaches_the_network_in_a_sample(tmp_path):
    from comfy_core.sampling.ksampler import sample
    from comfy_core.split.diffusion_model import load_diffusion_model

    model = load_diffusion_model(write_hidream_unet(tmp_path, seed=0, name="hidream_e1_tiny"))
    gen = torch.Generator().manual_seed(3)
    base = {"pooled_output": torch.randn(1, POOLED_WIDTH, generator=gen),
            "conditioning_llama3": torch.randn(1, 4, 5, LLAMA_WIDTH, generator=gen)}
    context = torch.randn(1, 6, T5_WIDTH, generator=gen)
    source = torch.randn(1, 16, 8, 8, generator=gen)  # the VAE-encoded image to edit
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    empty = torch.zeros(1, 16, 8, 8)
    negative = [[context, dict(base)]]
    plain = sample(model, noise, 2, 5.0, "euler", "simple", [[context, dict(base)]], negative, empty)
    edited = sample(model, noise, 2, 5.0, "euler", "simple", [[context, {**base, "concat_latent_image": source}]],
                    [[context, {**base, "concat_latent_image": source}]], empty)
    assert edited.shape == plain.shape and torch.isfinite(edited).all()
    assert (edited - plain).abs().max() > 1e-4


def test_fp8_weights_stay_fp8_and_compute_close_to_fp32(tmp_path, loaded):
    from comfy_core.split.diffusion_model import load_diffusion_model

    fp8 = load_diffusion_model(write_hidream_unet(tmp_path, seed=1), weight_dtype=torch.float8_e4m3fn)
    block = fp8.model.diffusion_model.double_stream_blocks[0].block
    assert block.ff_i.experts[0].w1.weight.dtype == torch.float8_e4m3fn
    x, sigma, pooled, t5, llama = _inputs()
    with torch.no_grad():
        ours = fp8.model.apply_model(x, sigma, c_crossattn=t5, y=pooled, encoder_hidden_states_llama3=llama)
        full = loaded.model.apply_model(x, sigma, c_crossattn=t5, y=pooled, encoder_hidden_states_llama3=llama)
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    assert (ours - full).abs().max() < 0.25 * full.abs().max()  # fp8 rounding of every weight


def test_comfyuis_classes_for_packs():
    from compat.mp_model_base import CLASS_OF_FAMILY
    from compat.mp_supported_models import our_config_class
    from comfy_core.families.hidream.supported_models import HiDream

    assert our_config_class("HiDream") is HiDream
    assert CLASS_OF_FAMILY["hidream"].__name__ == "HiDream"


def test_single_file_with_all_four_text_encoders_loads_and_samples(tmp_path):
    """ComfyUI's single-file layout: the DiT under `model.diffusion_model.`, the towers under
    `text_encoders.{clip_l,clip_g,t5xxl,llama}.transformer.`, the VAE under `vae.`."""
    pytest.importorskip("llama_models")
    from safetensors.torch import load_file

    from comfy_core.loading import load_checkpoint
    from comfy_core.sampling.ksampler import sample
    from tests.fixtures.dit_checkpoints import light_vae16_state_dict, save
    from tests.fixtures.hidream_files import write_hidream_text_encoders

    files = write_hidream_text_encoders(tmp_path / "parts")
    state = tiny_hidream_state_dict(seed=0, prefix=UNET, t5_width=64, llama_width=32, pooled_width=64)
    for slot, path in files.items():  # the split files' names under the tower's single-file prefix
        state.update({f"text_encoders.{slot}.transformer.{k}": v for k, v in load_file(str(path)).items()})
    state.update(light_vae16_state_dict("vae."))
    model, clip, vae = load_checkpoint(save(state, tmp_path / "checkpoints" / "hidream_tiny.safetensors"))[:3]
    assert model.model.family.name == "hidream" and clip.cond_stage_model.slots == ("clip_l", "clip_g", "t5xxl",
                                                                                      "llama")
    [[cond, extra]] = clip.encode_from_tokens_scheduled(clip.tokenize("a cat"))
    assert cond.shape == (1, 128, 64) and extra["conditioning_llama3"].shape == (1, 4, 128, 32)
    noise = torch.randn(1, 16, 8, 8, generator=torch.Generator().manual_seed(0))
    out = sample(model, noise, 2, 1.0, "euler", "simple", [[cond, extra]], [[cond, extra]], torch.zeros(1, 16, 8, 8))
    assert torch.isfinite(out).all() and vae is not None
