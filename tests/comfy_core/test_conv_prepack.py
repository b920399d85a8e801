"""CPU convolutions on weights packed once (comfy_core/models/conv_prepack.py)."""
from __future__ import annotations

import gc

import pytest
import torch
import torch.nn.functional as F

from comfy_core.models import conv_prepack
from comfy_core.models.conv_prepack import PrepackCache, PrepackedConvMode

pytestmark = pytest.mark.skipif(not conv_prepack.available(), reason="this torch build has no oneDNN packed convolution")


def _conv(out_ch=256, in_ch=512, k=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    conv = torch.nn.Conv2d(in_ch, out_ch, k, padding=k // 2)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=gen) * 0.02)
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=gen))
    return conv, torch.randn(1, in_ch, 8, 8, generator=gen)


def test_a_qualifying_convolution_runs_packed_with_the_plain_result():
    conv, x = _conv()
    assert conv.weight.numel() >= conv_prepack.MIN_WEIGHT_ELEMENTS
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode():
        plain = conv(x)
        with PrepackedConvMode(cache):
            first = conv(x)
            assert len(cache) == 0 and cache.packed_bytes() == 0  # the first call runs plain
            packed = conv(x)
            again = conv(x)
    assert len(cache) == 1 and cache.packed_bytes() == conv.weight.numel() * 4
    assert torch.equal(first, plain)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)
    assert torch.equal(packed, again)


def test_a_weight_called_once_is_never_packed_and_a_new_input_shape_starts_over():
    """Packing pays for itself only over several calls: one call (a one-step sampler) runs plain,
    and a weight called with a new layout is packed on that layout's second call."""
    conv, x = _conv()
    wider = torch.randn(2, *x.shape[1:])
    with torch.inference_mode():
        plain_wider = conv(wider)  # outside the mode: a call inside it counts
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode(), PrepackedConvMode(cache):
        conv(x)
        assert len(cache) == 0
        conv(x)
        assert len(cache) == 1
        assert torch.equal(conv(wider), plain_wider)
        assert len(cache) == 0  # the old layout's copy is dropped, the new one not packed yet
        torch.testing.assert_close(conv(wider), plain_wider, rtol=1e-4, atol=1e-4)
        assert len(cache) == 1


def test_a_weight_written_in_place_is_repacked_and_a_freed_weight_leaves_the_cache():
    conv, x = _conv()
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode(), PrepackedConvMode(cache):
        conv(x)
        before = conv(x)
    assert len(cache) == 1
    with torch.no_grad():
        conv.weight.mul_(-2.0)  # what a patcher's in-place LoRA merge does to the tensor
    with torch.inference_mode():
        plain = conv(x)
        with PrepackedConvMode(cache):
            conv(x)
            after = conv(x)
    torch.testing.assert_close(after, plain, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(after, before)
    assert len(cache) == 1
    del conv
    gc.collect()
    assert len(cache) == 0


def test_large_images_small_weights_no_headroom_and_training_take_the_plain_path():
    conv, _ = _conv()
    big_image = torch.randn(1, 512, 64, 64)
    small, small_x = _conv(out_ch=8, in_ch=8)
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode(), PrepackedConvMode(cache):
        torch.testing.assert_close(conv(big_image), F.conv2d(big_image, conv.weight, conv.bias, padding=1))
        small(small_x)
    assert len(cache) == 0
    starved = PrepackCache(memory_margin=1 << 62)  # no machine has this much left over
    conv2, x2 = _conv()
    with torch.inference_mode(), PrepackedConvMode(starved):
        conv2(x2)
        conv2(x2)
    assert len(starved) == 0
    with PrepackedConvMode(cache):  # grad mode with a trainable weight: autograd needs the plain op
        conv(x2).sum().backward()
    assert len(cache) == 0 and conv.weight.grad is not None


def test_a_diffusion_model_forward_on_the_cpu_packs_and_matches_the_plain_forward(monkeypatch, tiny_sd1_ckpt):
    from comfy_core import load_checkpoint

    model, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
    base = model.model
    monkeypatch.setattr(conv_prepack, "MIN_WEIGHT_ELEMENTS", 0)  # the tiny UNet's weights count too
    monkeypatch.setattr(conv_prepack, "MEMORY_MARGIN", 0)
    base.__dict__["_conv_prepack_cache"] = PrepackCache(memory_margin=0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    context = torch.randn(1, 77, base.diffusion_model.config.context_dim, generator=gen)
    sigma = torch.tensor([3.0])
    with torch.inference_mode():
        base.cpu_conv_prepack = False
        plain = base.apply_model(x, sigma, c_crossattn=context)
        assert len(base._conv_prepack_cache) == 0
        base.cpu_conv_prepack = True
        first = base.apply_model(x, sigma, c_crossattn=context)
        assert len(base._conv_prepack_cache) == 0  # a model's first forward runs plain
        packed = base.apply_model(x, sigma, c_crossattn=context)
    assert len(base._conv_prepack_cache) > 0
    assert torch.equal(first, plain)
    torch.testing.assert_close(packed, plain, rtol=1e-4, atol=1e-4)


def test_a_copied_model_starts_with_an_empty_cache():
    import copy
    import pickle

    conv, x = _conv()
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode(), PrepackedConvMode(cache):
        conv(x)
        conv(x)
    assert len(cache) == 1
    for copied in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert isinstance(copied, PrepackCache) and len(copied) == 0 and copied.memory_margin == 0


def test_a_weight_made_for_the_call_is_not_packed():
    conv, x = _conv()
    cache = PrepackCache(memory_margin=0)
    with torch.inference_mode(), PrepackedConvMode(cache):
        cast_each_call = F.conv2d(x, conv.weight.detach().clone(), conv.bias, padding=1)  # as run-time casts make
    assert len(cache) == 0
    torch.testing.assert_close(cast_each_call, F.conv2d(x, conv.weight, conv.bias, padding=1))


def test_weights_patched_and_restored_in_place_never_leave_a_stale_packing(monkeypatch, tiny_sd1_ckpt):
    """An in-place LoRA merge and its restore write through `.data` (no version bump): the patcher
    drops the packings when it applies and when it restores, so the next forward packs afresh."""
    from comfy_core import load_checkpoint

    monkeypatch.setattr(conv_prepack, "MIN_WEIGHT_ELEMENTS", 0)
    patched, _, _ = load_checkpoint(tiny_sd1_ckpt, output_clip=False, output_vae=False)
    plain = patched.clone()
    base = patched.model
    base.__dict__["_conv_prepack_cache"] = PrepackCache(memory_margin=0)
    key = next(k for k, v in base.state_dict().items() if v.dim() == 4 and v.shape[2] == 3)
    patched.weight_inplace_update = True
    patched.add_patches({key: (torch.full_like(base.state_dict()[key], 0.05),)}, 1.0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 4, 8, 8, generator=gen)
    context = torch.randn(1, 77, base.diffusion_model.config.context_dim, generator=gen)
    sigma = torch.tensor([3.0])

    def run(patcher, pack):
        with torch.inference_mode(), patcher.applied() as model:
            model.cpu_conv_prepack = pack
            model.apply_model(x, sigma, c_crossattn=context)  # the first forward runs plain
            out = model.apply_model(x, sigma, c_crossattn=context)
            assert (len(base._conv_prepack_cache) > 0) == pack
            return out

    with_lora = run(patched, True)
    torch.testing.assert_close(with_lora, run(patched, False), rtol=1e-4, atol=1e-4)
    without = run(plain, True)  # the LoRA restored in place, then the plain model packed again
    torch.testing.assert_close(without, run(plain, False), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(with_lora, without)
