"""The CogVideoX family (comfy_core/families/cogvideox): detection by ComfyUI's names, the network
against diffusers 0.42.1's `CogVideoXTransformer3DModel` on tiny random weights mapped from
ComfyUI's layout, ComfyUI's policy (v-prediction on the zero-terminal-SNR table, latent scales,
VOID's concatenated channels), two sampling steps from a UNETLoader file, and the T5-XXL set under
CLIPLoader type "cogvideox" (226-token minimum)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from comfy_core.families import default_registry
from comfy_core.families.cogvideox.dit import CogVideoXConfig, CogVideoXConfigError, CogVideoXInputError
from tests.fixtures.template_models_void import TINY_VOID, tiny_cogvideox_state_dict

UNET = "model.diffusion_model."
diffusers = pytest.importorskip("diffusers")

# diffusers' names -> ComfyUI's, written here from the two layouts (the test's own table)
_RENAMES = (("transformer_blocks.", "blocks."), (".attn1.to_q.", ".q."), (".attn1.to_k.", ".k."),
            (".attn1.to_v.", ".v."), (".attn1.to_out.0.", ".attn_out."), (".attn1.norm_q.", ".norm_q."),
            (".attn1.norm_k.", ".norm_k."), (".ff.net.0.proj.", ".ff_proj."), (".ff.net.2.", ".ff_out."),
            ("time_embedding.linear_", "time_embedding_linear_"), ("ofs_embedding.linear_", "ofs_embedding_linear_"))


def _to_comfy(state: dict) -> dict:
    out = {}
    for name, value in state.items():
        for old, new in _RENAMES:
            name = name.replace(old, new)
        out[name] = value
    return out


def _header(state: dict) -> dict:
    return {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in state.items()}


def _save(state: dict, path):
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    return path


def _reference(**kwargs):
    from diffusers import CogVideoXTransformer3DModel

    torch.manual_seed(kwargs.pop("seed", 0))
    ref = CogVideoXTransformer3DModel(attention_head_dim=16, time_embed_dim=24, text_embed_dim=12, num_layers=2,
                                      patch_size=2, **kwargs).eval()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.normal_(0, 0.25)
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)
    return ref


# --- detection ------------------------------------------------------------------------------------------

def test_split_and_single_files_are_detected_with_the_network_read_from_names_and_shapes():
    registry = default_registry()
    state = tiny_cogvideox_state_dict()
    detection = registry.detect_diffusion_model(_header({UNET + k: v for k, v in state.items()}))
    assert detection.family.name == "cogvideox"
    assert registry.detect(_header({UNET + k: v for k, v in state.items()})).family.name == "cogvideox"
    config = CogVideoXConfig.detect_from_weights(_header(state))
    assert config == TINY_VOID
    assert (config.in_channels, config.out_channels, config.patch_size_t, config.num_layers) == (48, 16, 2, 2)
    one_zero = dataclasses.replace(TINY_VOID, in_channels=16, patch_size_t=None)
    detected = CogVideoXConfig.detect_from_weights(_header(tiny_cogvideox_state_dict(one_zero)))
    assert detected.patch_size_t is None and detected.in_channels == 16 and detected.use_rotary_positional_embeddings


def test_the_2b_width_has_its_own_latent_scale_and_sin_cos_positions():
    from comfy_core.families.cogvideox import _facts

    registry = default_registry()
    two_b = CogVideoXConfig(num_attention_heads=30, attention_head_dim=64)
    assert _facts(two_b)["size_class"] == "2b" and _facts(TINY_VOID)["size_class"] == "5b"
    assert registry.get("cogvideox_2b").latent_format.scale_factor == pytest.approx(1.15258426)
    assert registry.get("cogvideox").latent_format.scale_factor == pytest.approx(0.7)
    assert not registry.get("cogvideox_2b").signature.matches_diffusion_model(_facts(TINY_VOID))


def test_inconsistent_weights_are_typed_errors():
    state = tiny_cogvideox_state_dict()
    state["blocks.0.norm_q.weight"] = torch.ones(5)
    with pytest.raises(CogVideoXConfigError, match="heads"):
        CogVideoXConfig.detect_from_weights(_header(state))
    state = tiny_cogvideox_state_dict()
    del state["patch_embed.text_proj.weight"]
    with pytest.raises(CogVideoXConfigError):
        CogVideoXConfig.detect_from_weights(_header(state))


# --- the network against diffusers ---------------------------------------------------------------------

def _load(state: dict, path):
    from comfy_core.split.diffusion_model import load_diffusion_model

    return load_diffusion_model(_save(state, path))


def test_cogvideox_15_with_ofs_matches_diffusers_from_a_comfyui_file(tmp_path):
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    ref = _reference(num_attention_heads=2, in_channels=8, out_channels=4, patch_size_t=2, ofs_embed_dim=24,
                     use_rotary_positional_embeddings=True, max_text_seq_length=5)
    patcher = _load(_to_comfy(ref.state_dict()), tmp_path / "cogvideox15.safetensors")
    network = patcher.model.diffusion_model
    assert network.config.ofs_embed_dim == 24 and network.config.patch_size_t == 2
    gen = torch.Generator().manual_seed(1)
    x, ctx = torch.randn(2, 8, 4, 6, 8, generator=gen), torch.randn(2, 5, 12, generator=gen)
    t, ofs = torch.tensor([999.0, 321.0]), torch.tensor([2.0, 2.0])
    rope = get_3d_rotary_pos_embed(16, None, (3, 4), 2, grid_type="slice", max_size=(3, 4), device="cpu")
    with torch.no_grad():
        theirs = ref(x.permute(0, 2, 1, 3, 4), ctx, t, image_rotary_emb=rope, ofs=ofs,
                     return_dict=False)[0].permute(0, 2, 1, 3, 4)
        ours = network(x.to(network.dtype or torch.float32), t, ctx, ofs=ofs).float()
    assert ours.shape == (2, 4, 4, 6, 8)
    assert (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()


def test_odd_latent_lengths_are_padded_circularly_and_cropped():
    from comfy_core.families.cogvideox.dit import CogVideoXTransformer

    network = CogVideoXTransformer(TINY_VOID).eval()
    network.load_state_dict(tiny_cogvideox_state_dict())
    gen = torch.Generator().manual_seed(2)
    x, ctx = torch.randn(1, 48, 3, 4, 6, generator=gen), torch.randn(1, 7, 64, generator=gen)
    with torch.no_grad():
        out = network(x, torch.tensor([500.0]), ctx)
        padded = network(torch.cat([x, x[:, :, :1]], dim=2), torch.tensor([500.0]), ctx)
    assert out.shape == (1, 16, 3, 4, 6)
    torch.testing.assert_close(out, padded[:, :, :3])
    with pytest.raises(CogVideoXInputError, match="48"):
        network(torch.randn(1, 16, 2, 4, 4), torch.tensor([1.0]), ctx)


def _comfy_sincos(dim: int, frames: int, rows: int, cols: int) -> torch.Tensor:
    """ComfyUI's 3-D sin/cos table, re-computed: time on a third (cos half first), then rows and
    columns a third each, positions over 1.875 spatially."""
    def one(d, pos):
        half = d // 2
        freqs = torch.exp(-torch.log(torch.tensor(10000.0)) * torch.arange(half) / half)
        a = pos.reshape(-1, 1).float() * freqs
        return torch.cat([a.cos(), a.sin()], -1)

    third = dim // 3
    out = torch.zeros(frames, rows, cols, dim)
    for f in range(frames):
        for r in range(rows):
            for c in range(cols):
                out[f, r, c] = torch.cat([one(third, torch.tensor([float(f)]))[0],
                                          one(third, torch.tensor([r / 1.875]))[0],
                                          one(third, torch.tensor([c / 1.875]))[0]])
    return out.reshape(-1, dim)


def test_2b_layout_matches_diffusers_with_comfyuis_positions(tmp_path):
    from comfy_core.families.cogvideox.dit import CogVideoXTransformer

    ref = _reference(num_attention_heads=3, in_channels=4, out_channels=4, sample_width=8, sample_height=6,
                     sample_frames=9, max_text_seq_length=5)
    table = _comfy_sincos(48, 3, 3, 4)
    ref.patch_embed.pos_embedding = torch.cat([torch.zeros(1, 5, 48), table[None]], dim=1)
    state = _to_comfy(ref.state_dict())
    config = dataclasses.replace(CogVideoXConfig.detect_from_weights(_header(state)),
                                 use_rotary_positional_embeddings=False)  # the 2B's (width 1920) kind
    network = CogVideoXTransformer(config).eval()
    network.load_state_dict(state)
    gen = torch.Generator().manual_seed(3)
    x, ctx = torch.randn(1, 4, 3, 6, 8, generator=gen), torch.randn(1, 5, 12, generator=gen)
    with torch.no_grad():
        theirs = ref(x.permute(0, 2, 1, 3, 4), ctx, torch.tensor([250.0]), return_dict=False)[0].permute(0, 2, 1, 3, 4)
        ours = network(x, torch.tensor([250.0]), ctx)
    assert (ours - theirs).abs().max() < 1e-4, (ours - theirs).abs().max()


def test_a_diffusers_layout_file_loads_as_the_same_network(tmp_path):
    ref = _reference(num_attention_heads=2, in_channels=8, out_channels=4, patch_size_t=2,
                     use_rotary_positional_embeddings=True, max_text_seq_length=5)
    comfy = _load(_to_comfy(ref.state_dict()), tmp_path / "a.safetensors").model.diffusion_model
    native = _load(dict(ref.state_dict()), tmp_path / "b.safetensors").model.diffusion_model
    for name, value in comfy.state_dict().items():
        assert torch.equal(value, native.state_dict()[name]), name


# --- policy, conditions, sampling --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def void(tmp_path_factory):
    return _load(tiny_cogvideox_state_dict(seed=5), tmp_path_factory.mktemp("void") / "void_pass1.safetensors")


def test_policy_is_comfyuis_v_prediction_on_the_zero_terminal_snr_table(void):
    from comfy_core.families.cogvideox.supported_models import CogVideoX_T2V

    model = void.model
    sampling = model.model_sampling
    assert sampling.prediction == "v" and sampling.zsnr
    assert float(sampling.sigma_max) == pytest.approx(4518.6, rel=1e-3)  # ComfyUI's zero-SNR stand-in
    # V_PREDICTION_DDPM: the variance-preserving sample goes in unscaled, x0 = sqrt(a) x - sqrt(1 - a) v
    sigma, x, v = torch.tensor([3.0]), torch.randn(1, 16, 2, 4, 4), torch.randn(1, 16, 2, 4, 4)
    assert torch.equal(sampling.calculate_input(sigma, x), x)
    a = 1.0 / (1.0 + 9.0)
    torch.testing.assert_close(sampling.calculate_denoised(sigma, v, x), x * a ** 0.5 - v * (1 - a) ** 0.5)
    config = model.model_config
    assert isinstance(config, CogVideoX_T2V) and config.unet_config["image_model"] == "cogvideox"
    assert config.latent_format.scale_factor == pytest.approx(0.7)
    family = default_registry().get("cogvideox")
    assert family.comfy_model_class == "CogVideoX" and family.latent_format.latent_dimensions == 3
    assert family.latent_format.temporal_downscale_ratio == 4 and family.geometry.downscale == 8
    assert family.text_encoders.clip_types == ("cogvideox",)


def test_voids_concatenated_latents_are_scaled_per_16_channels(void):
    model = void.model
    noise = torch.zeros(1, 16, 2, 4, 6)
    zeros = model.family.conditioning.concat_cond(model, noise=noise)
    assert zeros.shape == (1, 32, 2, 4, 6) and not zeros.any()
    image = torch.randn(1, 32, 1, 4, 6)
    out = model.family.conditioning.concat_cond(model, noise=noise, concat_latent_image=image)
    assert out.shape == (1, 32, 2, 4, 6)
    torch.testing.assert_close(out[:, :, :1], image * 0.7)
    assert not out[:, :, 1:].any()  # missing frames are zeros
    half = model.family.conditioning.concat_cond(model, noise=noise, concat_latent_image=image[:, :16])
    torch.testing.assert_close(half[:, 16:], half[:, :16])  # repeated to the width the network takes


def test_a_unetloader_file_samples_two_steps_with_voids_conditioning(void):
    from comfy_core.sampling.ksampler import sample

    gen = torch.Generator().manual_seed(7)
    inpaint = torch.randn(1, 32, 2, 4, 6, generator=gen)
    positive = [[torch.randn(1, 226, 64, generator=gen), {"concat_latent_image": inpaint}]]
    negative = [[torch.randn(1, 226, 64, generator=gen), {"concat_latent_image": inpaint}]]
    noise = torch.randn(1, 16, 2, 4, 6, generator=torch.Generator().manual_seed(0))
    out = sample(void, noise, 2, 6.0, "euler", "simple", positive, negative, torch.zeros(1, 16, 2, 4, 6))
    assert out.shape == (1, 16, 2, 4, 6) and torch.isfinite(out).all()


# --- T5-XXL under CLIPLoader type "cogvideox" ------------------------------------------------------------

def test_cliploader_type_cogvideox_is_t5xxl_padded_to_226_tokens(tmp_path):
    from comfy_core.families.sd3.clip import SD3ClipModel
    from comfy_core.split.text_encoder_files import load_text_encoders
    from tests.fixtures import dit_checkpoints as dit

    path = _save(dit.t5_tower("", 3), tmp_path / "t5xxl_fp16.safetensors")
    clip = load_text_encoders([path], "cogvideox")
    assert isinstance(clip.cond_stage_model, SD3ClipModel)
    assert type(clip.tokenizer).__name__ == "CogVideoXT5Tokenizer"
    tokens = clip.tokenize("a snowy mountain")
    assert len(tokens["t5xxl"][0]) == 226
    cond = clip.encode_from_tokens(tokens)
    assert cond.shape == (1, 226, dit.T5_WIDTH)


def test_lora_names_reach_the_networks_layers(void):
    network = void.model.diffusion_model
    names = ["diffusion_model." + k for k in network.state_dict()]  # the LoRA loader's view of the model
    key_map = network.lora_key_map(names)
    assert key_map["transformer.transformer_blocks.0.attn1.to_q"] == "diffusion_model.blocks.0.q.weight"
    assert key_map["diffusion_model.transformer_blocks.1.ff.net.2"] == "diffusion_model.blocks.1.ff_out.weight"
    assert key_map["lora_transformer_time_embedding_linear_1"] == "diffusion_model.time_embedding_linear_1.weight"
    assert key_map["lora_unet_blocks_0_attn_out"] == "diffusion_model.blocks.0.attn_out.weight"  # kohya's


def test_cogvideox_is_no_longer_a_loader_type_without_a_family():
    from comfy_core.split.clip_types import CLIP_LOADER_TYPES, NEEDS, supported_types

    assert "cogvideox" in CLIP_LOADER_TYPES and "cogvideox" not in NEEDS
    assert "cogvideox" in supported_types(default_registry().encoder_sets())


def test_a_single_file_loads_the_network_t5_and_the_cogvideox_vae(tmp_path):
    from comfy_core.loading import load_checkpoint
    from comfy_core.models.cogvideox_vae import CogVideoXVAE
    from tests.fixtures import dit_checkpoints as dit
    from tests.fixtures.template_models_void import tiny_cogvideox_vae_state_dict

    state = {UNET + k: v for k, v in tiny_cogvideox_state_dict().items()}
    state.update({"vae." + k: v for k, v in tiny_cogvideox_vae_state_dict().items()})
    state.update(dit.t5_tower("text_encoders.t5xxl.transformer.", 3))
    model, clip, vae = load_checkpoint(_save(state, tmp_path / "cogvideox_all_in_one.safetensors"))
    assert model.model.family.name == "cogvideox" and isinstance(vae.first_stage_model, CogVideoXVAE)
    assert clip.encode_from_tokens(clip.tokenize("a cat")).shape == (1, 226, dit.T5_WIDTH)
