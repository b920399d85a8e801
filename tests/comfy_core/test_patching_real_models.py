"""Patchers on the real (tiny) SD1 components: sampling with a LoRA leaves every base tensor
unchanged, also after an exception or an interrupt inside the patched run; alternating LoRA
clones; per-clone attention backends in the UNet, the VAE and concurrent prompts."""
from __future__ import annotations

import hashlib
import threading

import pytest
import torch

from comfy_core.loading import load_checkpoint
from comfy_core.lora import load_lora_for_models, text_encoder_key_map, unet_key_map
from comfy_core.sampling.ksampler import sample
from graph.context import Interrupted


@pytest.fixture(scope="module")
def components(tiny_sd1_ckpt):
    model, clip, vae = load_checkpoint(tiny_sd1_ckpt)
    return model, clip, vae


def hashes(module: torch.nn.Module) -> dict[str, tuple[int, str]]:
    return {name: (id(t), hashlib.sha256(t.detach().contiguous().numpy().tobytes()).hexdigest())
            for name, t in list(module.named_parameters()) + list(module.named_buffers())}


def make_lora(model, clip, seed: int, rank: int = 4, text: bool = False) -> dict[str, torch.Tensor]:
    """A kohya-named LoRA over every attention projection of the UNet and the text encoder."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.model.named_parameters()) | dict(clip.patcher.model.named_parameters())
    names = {v: k for k, v in unet_key_map(model.model).items() if k.startswith("lora_unet_down_blocks")}
    if text:
        names |= {v: k for k, v in text_encoder_key_map(clip.patcher.model).items() if k.startswith("lora_te_")}
    lora = {}
    for key, layer in names.items():
        if not any(p in key for p in ("to_q", "to_k", "to_v", "q_proj", "v_proj")):
            continue
        w = params[key]
        lora[f"{layer}.lora_up.weight"] = torch.randn(w.shape[0], rank, generator=g) * 0.3
        lora[f"{layer}.lora_down.weight"] = torch.randn(rank, w.shape[1], generator=g) * 0.3
        lora[f"{layer}.alpha"] = torch.tensor(float(rank))
    return lora


def conds(clip, text: str = "a photo of a cat"):
    cond, pooled = clip.encode_from_tokens(clip.tokenize(text), return_pooled=True)
    return [[cond, {"pooled_output": pooled}]]


def run(model, positive, negative, callback=None) -> torch.Tensor:
    latent = torch.zeros(1, 4, 8, 8)
    noise = torch.randn(latent.shape, generator=torch.Generator().manual_seed(3))
    return sample(model, noise, 2, 5.0, "euler", "normal", positive, negative, latent, callback=callback, seed=3,
                  last_step=1)  # one of two steps: a real partial-denoise run, kept cheap


def test_sampling_with_lora_leaves_base_untouched(components):
    model, clip, _ = components
    base_unet, base_text = hashes(model.model), hashes(clip.patcher.model)
    lora_model, lora_clip, report = load_lora_for_models(model, clip, make_lora(model, clip, 0, text=True), 1.0, 1.0)
    assert report.model_keys > 0 and report.clip_keys > 0 and report.unmatched == []
    negative, positive, lora_positive = conds(clip, ""), conds(clip), conds(lora_clip)
    assert not torch.equal(positive[0][0], lora_positive[0][0])  # the text encoder was patched
    plain = run(model, positive, negative)
    with_lora = run(lora_model, lora_positive, negative)
    assert not torch.allclose(plain, with_lora)
    assert hashes(model.model) == base_unet and hashes(clip.patcher.model) == base_text
    torch.testing.assert_close(conds(clip)[0][0], positive[0][0], atol=0, rtol=0)
    torch.testing.assert_close(run(model, positive, negative), plain, atol=0, rtol=0)


@pytest.mark.parametrize("error", [RuntimeError("node failed"), Interrupted("prompt interrupted")])
def test_exception_or_interrupt_mid_sampling_restores(components, error):
    model, clip, _ = components
    base = hashes(model.model)
    lora_model, _, _ = load_lora_for_models(model, None, make_lora(model, clip, 1), 0.8, 0.0)
    lora_model.set_attention_backend("sub_quadratic", query_chunk_size=16)

    def stop(step, *_):
        if step == 0:  # after the first UNet evaluations, still inside the patched run
            raise error

    with pytest.raises(type(error)):
        run(lora_model, conds(clip), conds(clip, ""), callback=stop)
    assert hashes(model.model) == base
    assert not lora_model.in_use


def unet_once(patcher) -> torch.Tensor:
    g = torch.Generator().manual_seed(5)
    x, context = torch.randn(1, 4, 8, 8, generator=g), torch.randn(1, 77, 64, generator=g)
    with torch.no_grad(), patcher.applied() as dm:
        return dm.diffusion_model(x, torch.tensor([500.0]), context)


def test_alternating_lora_clones_equal_each_alone(components):
    model, clip, _ = components
    a, _, _ = load_lora_for_models(model, None, make_lora(model, clip, 2), 1.0, 0.0)
    b, _, _ = load_lora_for_models(model, None, make_lora(model, clip, 3), 1.0, 0.0)
    alone_a, alone_b, plain = unet_once(a), unet_once(b), unet_once(model)
    assert not torch.allclose(alone_a, alone_b) and not torch.allclose(alone_a, plain)
    # b after a, a after b, the base after a: each switch swaps the shared weights.
    torch.testing.assert_close(unet_once(b), alone_b, atol=0, rtol=0)
    torch.testing.assert_close(unet_once(a), alone_a, atol=0, rtol=0)
    torch.testing.assert_close(unet_once(model), plain, atol=0, rtol=0)


def test_attention_backend_reaches_unet_and_vae(components):
    model, _, vae = components
    reference = unet_once(model)
    for name in ("naive", "sub_quadratic", "split"):
        clone = model.clone()
        clone.set_attention_backend(name)
        torch.testing.assert_close(unet_once(clone), reference, atol=1e-4, rtol=1e-4)
    # A broken option makes the chosen kernel raise: proof that the UNet's attention used it.
    broken = model.clone()
    broken.set_attention_backend("sub_quadratic", query_chunk_size=0)
    with pytest.raises(ValueError, match="query_chunk_size"):
        unet_once(broken)
    torch.testing.assert_close(unet_once(model), reference, atol=0, rtol=0)  # the original: still sdpa
    latent = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    broken_vae = vae.clone()
    broken_vae.set_attention_backend("split", slices=0)
    with pytest.raises(ValueError, match="slices"):
        broken_vae.decode(latent)
    good_vae = vae.clone()
    good_vae.set_attention_backend("naive")
    torch.testing.assert_close(good_vae.decode(latent), vae.decode(latent), atol=1e-4, rtol=1e-4)


def test_concurrent_prompts_with_different_backends(components):
    model, _, _ = components
    clones = {}
    for name in ("naive", "sub_quadratic"):
        clones[name] = model.clone()
        clones[name].set_attention_backend(name)
    alone = {name: unet_once(c) for name, c in clones.items()}
    results: dict[str, list[torch.Tensor]] = {name: [] for name in clones}
    errors: list[BaseException] = []
    start = threading.Barrier(len(clones), timeout=60)

    def prompt(name: str) -> None:
        try:
            start.wait()
            for _ in range(2):
                results[name].append(unet_once(clones[name]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=prompt, args=(name,)) for name in clones]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors
    for name, outs in results.items():
        assert len(outs) == 2
        for out in outs:
            torch.testing.assert_close(out, alone[name], atol=0, rtol=0)
