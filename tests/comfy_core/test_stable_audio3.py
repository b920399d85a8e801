"""Stable Audio 3: the DiT against diffusers' `StableAudio3DiTModel` and the SAME VAE against
diffusers' `AutoencoderSAME`, on tiny random weights."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.stable_audio.sa3_dit import (StableAudio3ConfigError, StableAudio3DiT,
                                                      StableAudio3DiTConfig, StableAudio3InputError,
                                                      sa3_diffusers_names)

diffusers = pytest.importorskip("diffusers")


def _randomise(module: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)


@pytest.fixture(scope="module")
def dit_pair():
    from diffusers.models.transformers.transformer_stable_audio3 import StableAudio3DiTModel

    ref = StableAudio3DiTModel(io_channels=8, embed_dim=64, depth=2, num_heads=4, cond_token_dim=24,
                               global_cond_dim=20, local_add_cond_dim=9, timestep_features_dim=16, ff_mult=2,
                               num_memory_tokens=3).eval()
    _randomise(ref, 0)
    state = sa3_diffusers_names(ref.state_dict())
    config = StableAudio3DiTConfig.detect_from_weights(state)
    ours = StableAudio3DiT(config).eval()
    ours.load_state_dict(state, strict=True)
    return ref, ours


def test_config_read_from_weights(dit_pair):
    _, ours = dit_pair
    c = ours.config
    assert (c.io_channels, c.embed_dim, c.depth, c.num_heads, c.cond_token_dim, c.global_cond_dim) == \
        (8, 64, 2, 4, 24, 20)
    assert (c.timestep_features_dim, c.ff_inner, c.num_memory_tokens, c.local_add_cond_dim, c.differential) == \
        (16, 128, 3, 9, True)


@pytest.mark.parametrize("with_local", [False, True])
def test_dit_matches_diffusers(dit_pair, with_local):
    ref, ours = dit_pair
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 7, generator=g)
    t = torch.tensor([0.3, 0.9])
    ctx = torch.randn(2, 5, 24, generator=g)
    glob = torch.randn(2, 20, generator=g)
    local = torch.randn(2, 9, 7, generator=g) if with_local else None
    with torch.no_grad():
        want = ref(x, t, ctx, glob, local_add_cond=local).sample
        got = ours(x, t, context=ctx, global_embed=glob, local_add_cond=local)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


def test_dit_rejects_bad_inputs(dit_pair):
    _, ours = dit_pair
    x = torch.zeros(1, 8, 4)
    with pytest.raises(StableAudio3InputError):
        ours(torch.zeros(1, 7, 4), torch.zeros(1), context=torch.zeros(1, 2, 24), global_embed=torch.zeros(1, 20))
    with pytest.raises(StableAudio3InputError):
        ours(x, torch.zeros(1), context=torch.zeros(1, 2, 23), global_embed=torch.zeros(1, 20))
    with pytest.raises(StableAudio3InputError):
        ours(x, torch.zeros(1), context=torch.zeros(1, 2, 24), global_embed=torch.zeros(1, 20),
             local_add_cond=torch.zeros(1, 9, 5))


def test_dit_config_errors(dit_pair):
    _, ours = dit_pair
    state = dict(ours.state_dict())
    with pytest.raises(StableAudio3ConfigError, match="project_in"):
        StableAudio3DiTConfig.detect_from_weights({k: v for k, v in state.items() if "project_in" not in k})
    state["transformer.layers.0.self_attn.to_qkv.weight"] = torch.zeros(7, 64)
    with pytest.raises(StableAudio3ConfigError, match="to_qkv"):
        StableAudio3DiTConfig.detect_from_weights(state)


@pytest.fixture(scope="module")
def vae_pair():
    from diffusers.models.autoencoders.autoencoder_same import AutoencoderSAME

    from comfy_core.models.sa3_vae import SA3VAE, SA3VAEConfig, from_diffusers_same

    ref = AutoencoderSAME(patch_size=4, encoder_channels=8, encoder_c_mults=(3,), encoder_strides=(4,),
                          encoder_transformer_depths=(2,), latent_dim=6, dim_heads=8, ff_mult=2,
                          sliding_window=1, decoder_sinusoidal_blocks=(2,)).eval()
    _randomise(ref, 2)
    with torch.no_grad():
        ref.bottleneck.running_std.fill_(1.7)
    state = from_diffusers_same(ref.state_dict(), head_dims={24: 8})
    config = SA3VAEConfig.detect_from_weights(state, strides=(4,), sinusoidal_blocks=2, noise_regularize=False)
    ours = SA3VAE(config).eval()
    ours.load_state_dict(state, strict=True)
    return ref, ours


def test_vae_config_read_from_weights(vae_pair):
    _, ours = vae_pair
    c = ours.config
    assert (c.patch, c.channels, c.depth, c.head_dim, c.ff_inner, c.latent_dim) == (4, (24,), 2, 8, 48, 6)
    assert c.downscale == 16


def test_vae_matches_diffusers(vae_pair):
    ref, ours = vae_pair
    audio = torch.randn(2, 2, 70, generator=torch.Generator().manual_seed(3))  # padded to 80 samples
    with torch.no_grad():
        want = ref.encode(audio).latents
        got = ours.encode(audio)
        assert got.shape == want.shape == (2, 6, 5)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()
        want_audio = ref.decode(want).sample
        got_audio = ours.decode(want)
    assert got_audio.shape == want_audio.shape == (2, 2, 80)
    assert torch.allclose(got_audio, want_audio, atol=1e-4, rtol=1e-4), (got_audio - want_audio).abs().max()


def test_vae_decode_noise_regularisation(vae_pair):
    """ComfyUI's SA3 VAE adds 1e-3 x running_std noise to the latent before decoding."""
    import dataclasses

    from comfy_core.models.sa3_vae import SA3VAE

    _, ours = vae_pair
    noisy = SA3VAE(dataclasses.replace(ours.config, noise_regularize=True)).eval()
    noisy.load_state_dict(ours.state_dict())
    latent = torch.randn(1, 6, 3, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.manual_seed(0)
        a = noisy.decode(latent)
        torch.manual_seed(0)
        b = noisy.decode(latent)
        clean = ours.decode(latent)
    assert torch.equal(a, b)
    assert not torch.equal(a, clean)


def test_vae_errors(vae_pair):
    from comfy_core.models.sa3_vae import SA3VAEConfig, SA3VAEConfigError, SA3VAEInputError

    _, ours = vae_pair
    with pytest.raises(SA3VAEInputError):
        ours.encode(torch.zeros(1, 1, 16))
    with pytest.raises(SA3VAEInputError):
        ours.decode(torch.zeros(1, 5, 2))
    with pytest.raises(SA3VAEConfigError):
        SA3VAEConfig.detect_from_weights({})
