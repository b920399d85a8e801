"""Autoregressive Wan video (Causal Forcing / Self-Forcing): the key/value cache of the Wan DiT's
self-attention (comfy_core/families/wan/causal.py) and the `ar_video` sampler
(comfy_core/sampling/ar_video.py), on tiny random Wan 2.1 T2V weights, against their equations:
a block run with the cache equals the last block of one pass over the whole causal prefix with a
block-causal attention mask (the prefix clean at timestep 0), and the sampler equals a plain loop
that recomputes that prefix at every step, re-noising with the same draws."""
from __future__ import annotations

import pytest
import torch

from comfy_core.families.wan import causal
from comfy_core.families.wan.dit import WanConfig, WanModel
from comfy_core.sampling import ar_video
from comfy_core.sampling.ar_video import KVCache, block_ranges, sample_ar_video
from comfy_core.sampling.guider import ksampler
from tests.fixtures.wan_files import tiny_wan_state_dict

TOLERANCE = 1e-4
H, W = 4, 6  # latent rows/columns: 2 x 3 tokens a frame with 1x2x2 patches


def _model(seed: int = 0) -> WanModel:
    state = tiny_wan_state_dict("t2v", seed=seed)
    model = WanModel.from_config(WanConfig.detect_from_weights(state))
    model.load_state_dict(state, strict=True)
    return model.eval()


def _context(model: WanModel, seed: int = 3) -> torch.Tensor:
    return torch.randn(1, 8, model.text_dim, generator=torch.Generator().manual_seed(seed))


def _block_causal(frame_blocks: list[int], tokens_per_frame: int) -> dict:
    """transformer_options whose attention override masks self-attention block-causally: a token of
    block b sees the tokens of blocks <= b (cross-attention, to the text, is left alone)."""
    blocks = torch.tensor(frame_blocks).repeat_interleave(tokens_per_frame)
    allowed = blocks[:, None] >= blocks[None, :]  # [L, L]

    def override(func, q, k, v, heads, *args, **kwargs):
        if q.shape[1] != k.shape[1] or q.shape[1] != allowed.shape[0]:
            return func(q, k, v, heads, *args, **kwargs)
        b, n = q.shape[0], q.shape[1]
        split = [t.view(b, n, heads, -1).transpose(1, 2) for t in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*split, attn_mask=allowed)
        return out.transpose(1, 2).reshape(b, n, -1)

    return {"optimized_attention_override": override}


def _frame_blocks(frames: int, start: int, per_block: int) -> list[int]:
    """The block of each latent frame: the initial frames `[0, start)` block 0 (when any), then
    `per_block` frames a block."""
    out = [0] * start
    for n, (s, e) in enumerate(block_ranges(start, frames, per_block)):
        out += [n + (1 if start else 0)] * (e - s)
    return out


def test_the_option_names_are_the_same_on_both_sides():
    assert causal.KV_CACHE_OPTION == ar_video.KV_CACHE_OPTION
    assert causal.FRAME_OFFSET_OPTION == ar_video.FRAME_OFFSET_OPTION


def test_block_ranges():
    assert block_ranges(0, 5, 1) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    assert block_ranges(1, 8, 3) == [(1, 4), (4, 7), (7, 8)]
    with pytest.raises(ValueError):
        block_ranges(0, 3, 0)


@pytest.mark.parametrize("per_block", [1, 2])
def test_a_cached_block_equals_the_block_causal_pass_over_its_prefix(per_block):
    torch.manual_seed(0)
    model, context = _model(), None
    context = _context(model)
    frames, t = 5, 700.0
    clean = torch.randn(1, model.in_dim, frames, H, W)
    blocks = block_ranges(0, frames, per_block)
    cache = KVCache()
    for n, (s, e) in enumerate(blocks):
        noisy = torch.randn(1, model.in_dim, e - s, H, W)
        options = {causal.KV_CACHE_OPTION: cache, causal.FRAME_OFFSET_OPTION: s}
        with torch.no_grad():
            got = model(noisy, torch.tensor([t]), context, transformer_options=options)
            # the reference: the clean prefix at timestep 0 and this block at t, in one pass
            x = torch.cat([clean[:, :, :s], noisy], dim=2)
            timesteps = torch.tensor([[0.0] * s + [t] * (e - s)])
            full = model(x, timesteps, context, transformer_options=_block_causal(
                _frame_blocks(e, 0, per_block), (H // 2) * (W // 2)))
        torch.testing.assert_close(got, full[:, :, s:e], atol=TOLERANCE, rtol=TOLERANCE)
        if n > 0:  # the cache changes the result: without it the block sees only itself
            with torch.no_grad():
                alone = model(noisy, torch.tensor([t]), context,
                              transformer_options={causal.FRAME_OFFSET_OPTION: s})
            assert not torch.allclose(alone, got, atol=1e-3)
        cache.recording = True
        with torch.no_grad():
            model(clean[:, :, s:e], torch.tensor([0.0]), context, transformer_options=options)
        cache.recording = False
        assert cache.cached_tokens(0) == e * (H // 2) * (W // 2)


def test_the_cache_keeps_cond_and_uncond_apart_batched_or_not():
    cache = KVCache()
    k = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)
    cache.recording = True
    cache.attend_keys(0, [0, 1], k, -k)  # cond and uncond in one batch
    cache.recording = False
    keys, values = cache.attend_keys(0, [1], k[:1] + 100, k[:1])  # uncond alone
    torch.testing.assert_close(keys, torch.cat([k[1:], k[:1] + 100], dim=1))
    torch.testing.assert_close(values, torch.cat([-k[1:], k[:1]], dim=1))
    with pytest.raises(ValueError):
        cache.attend_keys(0, [0, 1], k[:1], k[:1])


class FlowDenoiser:
    """The tiny Wan as a flow-matching x0 denoiser (`x - sigma * v(x, 1000 sigma)`), taking the
    run's `model_options` as the sampler passes them; counts its calls."""

    class Sampling:
        def noise_scaling(self, sigma, noise, latent_image, max_denoise=False):
            return sigma * noise + (1.0 - sigma) * latent_image

    def __init__(self, model: WanModel, context: torch.Tensor) -> None:
        self.model, self.context, self.calls = model, context, 0
        self.model_sampling = self.Sampling()

    def __call__(self, x, sigma, model_options=None, seed=None, **_):
        self.calls += 1
        options = (model_options or {}).get("transformer_options", {})
        v = self.model(x, sigma * 1000.0, self.context, transformer_options=options)
        return x - sigma.view(-1, 1, 1, 1, 1) * v


def _reference_sampler(model: WanModel, context: torch.Tensor, x: torch.Tensor, sigmas: torch.Tensor, seed: int,
                       per_block: int, first: torch.Tensor | None) -> torch.Tensor:
    """The AR loop with no cache: each step one block-causal pass over the clean prefix and the block."""
    frames = x.shape[2]
    out = torch.zeros_like(x)
    start = 0 if first is None else first.shape[2]
    if first is not None:
        out[:, :, :start] = first
    generator = torch.Generator().manual_seed(seed)
    tokens = (H // 2) * (W // 2)
    for s, e in block_ranges(start, frames, per_block):
        block = x[:, :, s:e]
        options = _block_causal(_frame_blocks(e, start, per_block), tokens)
        for i in range(len(sigmas) - 1):
            sigma = sigmas[i]
            inp = torch.cat([out[:, :, :s], block], dim=2)
            timesteps = torch.tensor([[0.0] * s + [float(sigma) * 1000.0] * (e - s)])
            with torch.no_grad():
                v = model(inp, timesteps, context, transformer_options=options)[:, :, s:e]
            denoised = block - sigma * v
            if float(sigmas[i + 1]) > 0:
                noise = torch.randn(block.shape, generator=generator)
                block = sigmas[i + 1] * noise + (1 - sigmas[i + 1]) * denoised
            else:
                block = denoised
            out[:, :, s:e] = denoised
    return out


@pytest.mark.parametrize("per_block,with_image", [(1, False), (2, True), (3, True)])
def test_the_sampler_equals_recomputing_the_causal_prefix_each_step(per_block, with_image):
    model = _model(seed=1)
    context = _context(model)
    frames = 5
    sigmas = torch.tensor([1.0, 0.8, 0.5, 0.0])
    x = torch.randn(1, model.in_dim, frames, H, W, generator=torch.Generator().manual_seed(7))
    first = torch.randn(1, model.in_dim, 1, H, W, generator=torch.Generator().manual_seed(8)) if with_image else None
    options = {"transformer_options": {} if first is None else {"ar_config": {"initial_latent": first}}}
    denoiser = FlowDenoiser(model, context)
    got = sample_ar_video(denoiser, x, sigmas, extra_args={"model_options": options, "seed": 42},
                          num_frame_per_block=per_block)
    want = _reference_sampler(model, context, x, sigmas, 42, per_block, first)
    torch.testing.assert_close(got, want, atol=TOLERANCE, rtol=TOLERANCE)
    blocks = len(block_ranges(1 if with_image else 0, frames, per_block))
    # 3 steps a block, a recording pass after every block but the last, one for the image
    assert denoiser.calls == 3 * blocks + (blocks - 1) + (1 if with_image else 0)
    if with_image:
        torch.testing.assert_close(got[:, :, :1], first)
    assert options == {"transformer_options": {} if first is None else {"ar_config": {"initial_latent": first}}}


def test_the_legacy_initial_latent_option_and_the_seed():
    model = _model(seed=2)
    context = _context(model)
    sigmas = torch.tensor([1.0, 0.5, 0.0])
    x = torch.randn(1, model.in_dim, 3, H, W, generator=torch.Generator().manual_seed(1))
    first = torch.randn(1, model.in_dim, 1, H, W)
    run = lambda seed, key: sample_ar_video(  # noqa: E731
        FlowDenoiser(model, context), x, sigmas,
        extra_args={"model_options": {"transformer_options": key}, "seed": seed})
    a = run(5, {"ar_initial_latent": first})
    torch.testing.assert_close(a, run(5, {"ar_config": {"initial_latent": first}}))
    assert not torch.allclose(a, run(6, {"ar_initial_latent": first}))
    torch.testing.assert_close(a[:, :, :1], first)


def test_ksampler_names_the_ar_video_sampler_and_refuses_an_image_latent():
    sampler = ksampler("ar_video", {"num_frame_per_block": 3})
    assert sampler.sampler_function is sample_ar_video and sampler.extra_options == {"num_frame_per_block": 3}
    with pytest.raises(ValueError, match="video"):
        sample_ar_video(lambda *a, **k: a[0], torch.zeros(1, 4, 8, 8), torch.tensor([1.0, 0.0]))
