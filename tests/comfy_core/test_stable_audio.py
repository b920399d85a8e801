"""Stable Audio Open (comfy_core/families/stable_audio, comfy_core/models/oobleck_vae.py): the DiT and
the Oobleck VAE against diffusers' `StableAudioDiTModel` / `AutoencoderOobleck` and the seconds
conditioner against diffusers' `StableAudioNumberConditioner` on the same tiny random weights
(converted by our diffusers key maps), detection from ComfyUI's layout, refusals."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.stable_audio.conditioner import NumberConditioner
from comfy_core.families.stable_audio.dit import (StableAudioConfigError, StableAudioDiT, StableAudioDiTConfig,
                                                  StableAudioInputError)
from comfy_core.families.stable_audio.keys import convert_diffusers_state_dict, is_diffusers_stable_audio
from comfy_core.models.oobleck_vae import (OobleckConfig, OobleckConfigError, OobleckInputError, OobleckVAE,
                                           from_diffusers_oobleck, is_diffusers_oobleck, is_oobleck_vae)

diffusers = pytest.importorskip("diffusers")
TOLERANCE = 1e-4
HEADS, HEAD_DIM = 2, 64


def _randomize(module: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def _diffusers_dit(seed: int = 0):
    from diffusers import StableAudioDiTModel

    model = StableAudioDiTModel(sample_size=16, in_channels=8, num_layers=2, attention_head_dim=HEAD_DIM,
                                num_attention_heads=HEADS, num_key_value_attention_heads=1, out_channels=8,
                                cross_attention_dim=64, time_proj_dim=256, global_states_input_dim=16,
                                cross_attention_input_dim=64).eval()
    _randomize(model, seed, 0.1)
    with torch.no_grad():  # the released LayerNorms have no bias (ComfyUI drops the zeros)
        for name, p in model.named_parameters():
            if ".norm" in name and name.endswith(".bias"):
                p.zero_()
    return model


def _ours_from(reference) -> StableAudioDiT:
    state = convert_diffusers_state_dict(reference.state_dict(), num_heads=HEADS)
    config = StableAudioDiTConfig.detect_from_weights(state, num_heads=HEADS)
    model = StableAudioDiT(config).eval()
    model.load_state_dict(state, strict=True)
    return model


def test_dit_matches_diffusers():
    from diffusers.models.embeddings import get_1d_rotary_pos_embed

    reference = _diffusers_dit()
    assert is_diffusers_stable_audio(reference.state_dict())
    ours = _ours_from(reference)
    assert ours.config.global_cond_type == "prepend" and ours.config.rotary_dim == 32
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 10, generator=g)
    context = torch.randn(2, 5, 64, generator=g)
    global_embed = torch.randn(2, 16, generator=g)
    t = torch.tensor([0.3, 0.9])
    rotary = get_1d_rotary_pos_embed(HEAD_DIM // 2, x.shape[2] + 1, use_real=True, repeat_interleave_real=False)
    with torch.no_grad():
        expected = reference(x, t, encoder_hidden_states=context, global_hidden_states=global_embed[:, None],
                             rotary_embedding=rotary, return_dict=False)[0]
        got = ours(x, t, context=context, global_embed=global_embed)
    assert got.shape == expected.shape == (2, 8, 10)
    assert (got - expected).abs().max() < TOLERANCE


def test_dit_block_replacement_and_bad_inputs():
    ours = _ours_from(_diffusers_dit())
    x, t = torch.randn(1, 8, 4), torch.tensor([0.5])
    context, global_embed = torch.randn(1, 3, 64), torch.randn(1, 16)
    seen = []

    def replace(args, extra):
        seen.append(args["img"].shape)
        return extra["original_block"](args)

    with torch.no_grad():
        plain = ours(x, t, context=context, global_embed=global_embed)
        patched = ours(x, t, context=context, global_embed=global_embed,
                       transformer_options={"patches_replace": {"dit": {("double_block", 1): replace}}})
    assert seen == [(1, 5, HEADS * HEAD_DIM)] and torch.equal(plain, patched)
    with pytest.raises(StableAudioInputError, match="latent"):
        ours(x[0], t, context=context)
    with pytest.raises(StableAudioInputError, match="context is 32 wide"):
        ours(x, t, context=torch.randn(1, 3, 32))
    with pytest.raises(StableAudioConfigError, match="project_in"):
        state = convert_diffusers_state_dict(_diffusers_dit().state_dict(), num_heads=HEADS)
        state["preprocess_conv.weight"] = torch.zeros(9, 9, 1)
        StableAudioDiTConfig.detect_from_weights(state, num_heads=HEADS)


def _diffusers_vae(seed: int = 0):
    from diffusers import AutoencoderOobleck

    model = AutoencoderOobleck(encoder_hidden_size=4, downsampling_ratios=[2, 4], channel_multiples=[1, 2],
                               decoder_channels=4, decoder_input_channels=2, audio_channels=2).eval()
    _randomize(model, seed)
    return model


def test_oobleck_vae_matches_diffusers():
    reference = _diffusers_vae()
    assert is_diffusers_oobleck(reference.state_dict())
    state = from_diffusers_oobleck(reference.state_dict())
    assert is_oobleck_vae(state)
    config = OobleckConfig.detect_from_weights(state)
    assert (config.channels, config.latent_dim, config.c_mults, config.strides) == (4, 2, (1, 2), (2, 4))
    assert config.downscale == 8
    ours = OobleckVAE(config).eval()
    ours.load_state_dict(state, strict=True)
    g = torch.Generator().manual_seed(3)
    audio = torch.randn(1, 2, 64, generator=g)
    latent = torch.randn(1, 2, 8, generator=g)
    with torch.no_grad():
        assert (ours.decode(latent) - reference.decode(latent).sample).abs().max() < TOLERANCE
        moments = reference.encoder(audio)
        torch.manual_seed(7)
        got = ours.encode(audio)
        torch.manual_seed(7)
        mean, scale = moments.chunk(2, dim=1)
        expected = mean + (torch.nn.functional.softplus(scale) + 1e-4) * torch.randn_like(mean)
    assert got.shape == (1, 2, 8) and (got - expected).abs().max() < TOLERANCE


def test_oobleck_reads_parametrized_names_and_refuses_bad_input():
    state = from_diffusers_oobleck(_diffusers_vae().state_dict())
    renamed = {k.replace(".weight_g", ".parametrizations.weight.original0")
               .replace(".weight_v", ".parametrizations.weight.original1"): v for k, v in state.items()}
    config = OobleckConfig.detect_from_weights({"vae." + k: v for k, v in renamed.items()}, "vae.")
    plain, parametrized = OobleckVAE(config).eval(), OobleckVAE(config).eval()
    plain.load_state_dict(state, strict=True)
    parametrized.load_state_dict(renamed, strict=True)
    latent = torch.randn(1, 2, 3)
    with torch.no_grad():
        assert torch.equal(plain.decode(latent), parametrized.decode(latent))
    with pytest.raises(OobleckInputError, match="latent"):
        plain.decode(torch.randn(1, 3, 3))
    with pytest.raises(OobleckInputError, match="audio"):
        plain.encode(torch.randn(1, 1, 16))
    del state["decoder.layers.0.weight_v"]
    with pytest.raises(OobleckConfigError, match="decoder.layers.0.weight_v"):
        OobleckConfig.detect_from_weights(state)


def test_a_vae_state_dict_makes_an_oobleck_patcher():
    """ComfyUI's `comfy.sd.VAE(sd=...)` of an Oobleck state dict (its `decoder.layers.1.layers.0.beta`)."""
    from comfy_core.patching import VaePatcher
    from comfy_core.patching.oobleck_vae import OobleckVaePatcher

    state = from_diffusers_oobleck(_diffusers_vae().state_dict())
    vae = VaePatcher(sd=state)
    assert isinstance(vae, OobleckVaePatcher) and (vae.latent_channels, vae.downscale_ratio) == (2, 8)
    assert vae.decode(torch.zeros(1, 2, 3)).shape == (1, 24, 2)


def test_seconds_conditioner_matches_diffusers():
    from diffusers.pipelines.stable_audio.modeling_stable_audio import StableAudioNumberConditioner

    reference = StableAudioNumberConditioner(16, 0, 512, internal_dim=8).eval()
    _randomize(reference, 5, 1.0)
    state = {"embedder.embedding.0.weights": reference.time_positional_embedding[0].weights,
             "embedder.embedding.1.weight": reference.time_positional_embedding[1].weight,
             "embedder.embedding.1.bias": reference.time_positional_embedding[1].bias}
    ours = NumberConditioner.from_state_dict(state, min_val=0, max_val=512)
    seconds = torch.tensor([0.0, 47.0, 600.0])  # the last one clamped to 512
    with torch.no_grad():
        expected = reference(seconds)
        got = ours(seconds.tolist())
    assert got.shape == (3, 1, 16) and (got - expected).abs().max() < TOLERANCE
