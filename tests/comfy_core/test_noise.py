"""Noise exactly as ComfyUI draws it: initial noise, ancestral step noise, Brownian-tree noise."""
from __future__ import annotations

import pytest
import torch
import torchsde

from comfy_core.sampling.noise import BrownianTreeNoiseSampler, default_noise_sampler, prepare_noise


def test_prepare_noise_is_global_manual_seed_randn() -> None:
    latent = torch.zeros(2, 4, 8, 8)
    got = prepare_noise(latent, 1234)
    torch.manual_seed(1234)
    expected = torch.randn(latent.size(), dtype=torch.float32, device="cpu")
    assert torch.equal(got, expected)
    assert got.dtype == torch.float32 and got.shape == latent.shape


def test_prepare_noise_does_not_touch_global_rng() -> None:
    torch.manual_seed(7)
    before = torch.get_rng_state()
    prepare_noise(torch.zeros(1, 4, 4, 4), 99)
    assert torch.equal(before, torch.get_rng_state())


def test_first_item_of_a_batch_is_the_batch_one_image() -> None:
    one = prepare_noise(torch.zeros(1, 4, 8, 8), 5)
    four = prepare_noise(torch.zeros(4, 4, 8, 8), 5)
    assert torch.equal(four[:1], one)
    assert not torch.equal(four[1], four[0])


def test_batch_index_draws_every_index_up_to_the_largest() -> None:
    full = prepare_noise(torch.zeros(5, 4, 4, 4), 3)
    picked = prepare_noise(torch.zeros(2, 4, 4, 4), 3, batch_inds=[4, 1])
    assert torch.equal(picked[0], full[4]) and torch.equal(picked[1], full[1])
    dup = prepare_noise(torch.zeros(2, 4, 4, 4), 3, batch_inds=[2, 2])
    assert torch.equal(dup[0], full[2]) and torch.equal(dup[1], full[2])


def test_prepare_noise_keeps_latent_dtype() -> None:
    got = prepare_noise(torch.zeros(1, 4, 4, 4, dtype=torch.float16), 1)
    assert got.dtype == torch.float16
    torch.manual_seed(1)
    assert torch.equal(got, torch.randn(1, 4, 4, 4).half())


def test_bad_batch_index_raises() -> None:
    with pytest.raises(ValueError, match="batch_index"):
        prepare_noise(torch.zeros(1, 4, 4, 4), 1, batch_inds=[-1])


def test_default_noise_sampler_uses_the_seed_itself_on_cpu() -> None:
    # ComfyUI 0.3.64 default_noise_sampler: Generator(x.device).manual_seed(seed), no +1, so the
    # first step's noise equals the initial noise of the same seed.
    x = torch.zeros(1, 4, 4, 4)
    ns = default_noise_sampler(x, seed=10)
    g = torch.Generator().manual_seed(10)
    first, second = ns(None, None), ns(None, None)
    assert torch.equal(first, torch.randn(x.shape, generator=g))
    assert torch.equal(first, prepare_noise(x, 10))
    assert torch.equal(second, torch.randn(x.shape, generator=g))  # one stream, advancing


def test_brownian_tree_sampler_matches_torchsde_directly() -> None:
    x = torch.zeros(2, 4, 3, 3)
    lo, hi = torch.tensor(0.0292), torch.tensor(14.6146)
    ns = BrownianTreeNoiseSampler(x, lo, hi, seed=42)
    tree = torchsde.BrownianTree(lo, torch.zeros_like(x), hi, entropy=42)
    s0, s1 = torch.tensor(14.6146), torch.tensor(9.1)
    expected = tree(s1, s0) * -1 / (s1 - s0).abs().sqrt()  # queried in descending order: sign flips
    torch.testing.assert_close(ns(s0, s1), expected)


def test_brownian_tree_is_deterministic_and_seed_dependent() -> None:
    x = torch.zeros(1, 4, 8, 8)
    lo, hi = torch.tensor(0.03), torch.tensor(14.6)
    a = BrownianTreeNoiseSampler(x, lo, hi, seed=1)
    b = BrownianTreeNoiseSampler(x, lo, hi, seed=1)
    c = BrownianTreeNoiseSampler(x, lo, hi, seed=2)
    s0, s1 = torch.tensor(5.0), torch.tensor(3.0)
    assert torch.equal(a(s0, s1), b(s0, s1))
    assert not torch.allclose(a(s0, s1), c(s0, s1))
    # Queries out of order give the same increment (the tree, not a stream).
    later = a(torch.tensor(1.0), torch.tensor(0.5))
    assert torch.equal(b(torch.tensor(1.0), torch.tensor(0.5)), later)


def test_brownian_increments_are_unit_normal() -> None:
    x = torch.zeros(1, 16, 32, 32)
    ns = BrownianTreeNoiseSampler(x, torch.tensor(0.03), torch.tensor(14.6), seed=0)
    n = ns(torch.tensor(4.0), torch.tensor(2.5))
    assert abs(float(n.mean())) < 0.05 and abs(float(n.std()) - 1) < 0.05


def test_batched_seeds_need_one_per_item() -> None:
    with pytest.raises(ValueError, match="seeds"):
        BrownianTreeNoiseSampler(torch.zeros(2, 4, 2, 2), 0.1, 1.0, seed=[1, 2, 3])
    ns = BrownianTreeNoiseSampler(torch.zeros(2, 4, 2, 2), 0.1, 1.0, seed=[1, 2])
    assert ns(torch.tensor(0.9), torch.tensor(0.5)).shape == (2, 4, 2, 2)


def test_largest_seed_works_for_step_noise() -> None:
    x = torch.zeros(1, 4, 2, 2)
    top = default_noise_sampler(x, seed=0xFFFFFFFFFFFFFFFF)(None, None)
    assert torch.equal(top, torch.randn(x.shape, generator=torch.Generator().manual_seed(0xFFFFFFFFFFFFFFFF)))
    assert prepare_noise(x, 0xFFFFFFFFFFFFFFFF).shape == x.shape
