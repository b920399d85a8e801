"""ComfyUI_IPAdapter_plus's way of adding an image prompt, on our runtime, through the fixture
pack tests/compat/api_packs/ipadapter_like_pack: CLIP vision penultimate hidden states (by
`encode_image` or by `clip_vision.model(..., intermediate_output=-2)`), one `Attn2Replace`
object per SD1 cross-attention (`set_model_attn2_replace`) that calls
`comfy.ldm.modules.attention.optimized_attention` for the text attention and adds the
image-prompt attention per cond / uncond chunk inside a sigma window. Checked against a
reference written here on torch's scaled_dot_product_attention."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

PACK = Path(__file__).parent / "api_packs" / "ipadapter_like_pack" / "__init__.py"


@pytest.fixture
def ipa(session, tmp_path, monkeypatch, tiny_sd1_ckpt):
    """The pack, with models/checkpoints/tiny.safetensors, a 224-px CLIP vision tower and an
    adapter file for the tiny SD1 UNet's cross-attention widths in models/."""
    from tests.fixtures.clip_vision import write_tiny_clip_vision

    monkeypatch.chdir(tmp_path)
    models = tmp_path / "models"
    for kind in ("checkpoints", "clip_vision", "ipadapter"):
        (models / kind).mkdir(parents=True, exist_ok=True)
    shutil.copy(tiny_sd1_ckpt, models / "checkpoints" / "tiny.safetensors")
    write_tiny_clip_vision(models / "clip_vision" / "vit_224.safetensors", "clip", "hf", width=32, image_size=224,
                           projection_dim=64)
    spec = importlib.util.spec_from_file_location("ipadapter_like_pack_under_test", PACK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("ipadapter_like_pack_under_test", None)


def _attn2(model, block):
    """The first cross-attention of SD1 block `("input"|"middle"|"output", n)`."""
    unet = model.model.diffusion_model
    name, number = block
    owner = unet.middle_block if name == "middle" else (unet.input_blocks if name == "input" else unet.output_blocks)[number]
    transformer = next(m for m in owner if hasattr(m, "transformer_blocks"))
    return transformer.transformer_blocks[0].attn2


def _write_adapter(path, ipa, model, seed=5):
    g = torch.Generator().manual_seed(seed)
    sd = {"image_proj.proj.weight": torch.randn(64, 32, generator=g) * 0.2,
          "image_proj.proj.bias": torch.randn(64, generator=g) * 0.1}
    for n, block in enumerate(ipa.SD1_BLOCKS):
        width = _attn2(model, block).to_k.weight.shape[0]
        for kv in ("k", "v"):
            sd[f"ip_adapter.{2 * n + 1}.to_{kv}_ip.weight"] = torch.randn(width, 64, generator=g) * 0.3
    save_file(sd, str(path))


@pytest.fixture
def parts(ipa):
    from nodes.clip_vision import load_clip as clip_vision_loader
    from nodes.loaders import checkpoint_loader_simple

    model, clip, vae = checkpoint_loader_simple("tiny.safetensors")
    _write_adapter(Path("models/ipadapter/ip-adapter_tiny.safetensors"), ipa, model)
    (adapter,) = ipa.ImagePromptLoader().load("ip-adapter_tiny.safetensors")
    (clip_vision,) = clip_vision_loader("vit_224.safetensors")
    image = torch.rand(1, 96, 80, 3, generator=torch.Generator().manual_seed(2))
    return model, clip, vae, adapter, clip_vision, image


def _sdpa(q, k, v, heads):
    b, _, inner = q.shape
    split = lambda t: t.reshape(b, -1, heads, inner // heads).transpose(1, 2)
    return F.scaled_dot_product_attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, -1, inner)


def _reference(model, adapter, cond, uncond, weight):
    """The same image prompt, written here: text attention + weight * image attention per chunk."""
    from tests.compat.api_packs.ipadapter_like_pack import SD1_BLOCKS

    work = model.clone()
    for n, block in enumerate(SD1_BLOCKS):
        to_k, to_v = adapter.to_kvs[f"{2 * n + 1}_to_k_ip"], adapter.to_kvs[f"{2 * n + 1}_to_v_ip"]

        def replace(q, k, v, extra, to_k=to_k, to_v=to_v):
            chunks = extra.get("cond_or_uncond", [0])
            per = q.shape[0] // len(chunks)
            tokens = torch.cat([(uncond if c == 1 else cond).expand(per, -1, -1) for c in chunks])
            heads = extra["n_heads"]
            return _sdpa(q, k, v, heads) + weight * _sdpa(q, to_k(tokens), to_v(tokens), heads)

        work.set_model_attn2_replace(replace, *block)
    return work


def _predict(model, chunks=(0, 1), sigma=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(chunks), 4, 8, 8, generator=g)
    context = torch.randn(len(chunks), 7, 64, generator=g)
    sigmas = torch.full((len(chunks),), sigma)
    options = dict(model.model_options["transformer_options"], cond_or_uncond=list(chunks), sigmas=sigmas)
    with torch.no_grad(), model.applied() as module:
        return module.apply_model(x, sigmas, c_crossattn=context, transformer_options=options)


def test_penultimate_hidden_states_agree_both_ways(ipa, parts):
    _model, _clip, _vae, _adapter, clip_vision, image = parts
    by_output = ipa.encode_penultimate(clip_vision, image, "encode_image")
    by_model = ipa.encode_penultimate(clip_vision, image, "model")
    assert by_output.shape == (1, 257, 32)  # (224 / 14)^2 patches and the class token, width 32
    assert torch.equal(by_output, by_model)


def test_weight_zero_reproduces_the_unpatched_model_bit_exactly(ipa, parts):
    model, _clip, _vae, adapter, clip_vision, image = parts
    (patched,) = ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.0)
    replace = patched.model_options["transformer_options"]["patches_replace"]["attn2"]
    assert set(replace) == set(ipa.SD1_BLOCKS) and all(isinstance(r, ipa.Attn2Replace) for r in replace.values())
    assert "patches_replace" not in model.model_options["transformer_options"]  # the source MODEL is untouched
    assert torch.equal(_predict(patched), _predict(model))


def test_image_prompt_matches_the_reference_per_cond_and_uncond_chunk(ipa, parts):
    model, _clip, _vae, adapter, clip_vision, image = parts
    (patched,) = ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.7)
    cond = adapter.image_tokens(clip_vision.encode_image(image).penultimate_hidden_states)
    uncond = adapter.image_tokens(clip_vision.encode_image(torch.zeros_like(image)).penultimate_hidden_states)
    ours = _predict(patched, chunks=(0, 1))
    torch.testing.assert_close(ours, _predict(_reference(model, adapter, cond, uncond, 0.7), chunks=(0, 1)),
                               rtol=0, atol=1e-5)
    assert (ours - _predict(model)).abs().max() > 1e-3
    # the chunk order is read from cond_or_uncond: swapping it swaps which embeddings each half gets
    swapped = _predict(patched, chunks=(1, 0))
    torch.testing.assert_close(swapped, _predict(_reference(model, adapter, cond, uncond, 0.7), chunks=(1, 0)),
                               rtol=0, atol=1e-5)


def test_sigma_window_from_start_and_end_percent(ipa, parts):
    model, _clip, _vae, adapter, clip_vision, image = parts
    sampling = model.get_model_object("model_sampling")
    (late,) = ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.7, start_at=0.5, end_at=1.0)
    high = float(sampling.percent_to_sigma(0.2))  # early in sampling: outside [0.5, 1.0]
    low = float(sampling.percent_to_sigma(0.8))
    assert torch.equal(_predict(late, sigma=high), _predict(model, sigma=high))
    assert (_predict(late, sigma=low) - _predict(model, sigma=low)).abs().max() > 1e-3


def test_a_second_apply_adds_a_callback_to_the_same_blocks(ipa, parts):
    model, _clip, _vae, adapter, clip_vision, image = parts
    (once,) = ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.4)
    (twice,) = ipa.ImagePromptApply().apply(once, adapter, clip_vision, image, 0.3)
    block = ("input", 1)
    assert len(once.model_options["transformer_options"]["patches_replace"]["attn2"][block].callback) == 1
    assert len(twice.model_options["transformer_options"]["patches_replace"]["attn2"][block].callback) == 2
    (single,) = ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.7)
    # the image terms add up: two adapters of weights 0.4 and 0.3 are one of 0.7 (same image), up
    # to float32 rounding of the sum through the UNet
    torch.testing.assert_close(_predict(twice), _predict(single), rtol=0, atol=1e-4)
    assert (_predict(twice) - _predict(once)).abs().max() > 1e-3


def test_sampling_with_the_image_prompt(ipa, parts):
    """KSampler runs the patched MODEL (cond and uncond batched by our CFG): weight 0 samples the
    plain model's latent bit for bit, a weight changes it as the reference does."""
    from nodes.conditioning import clip_text_encode
    from nodes.sampling import common_ksampler

    model, clip, _vae, adapter, clip_vision, image = parts
    (positive,) = clip_text_encode("a cat", clip)
    (negative,) = clip_text_encode("", clip)
    latent = {"samples": torch.zeros(1, 4, 8, 8)}

    def run(m):
        return common_ksampler(m, 1, 2, 5.0, "euler", "normal", positive, negative, latent)[0]["samples"]

    plain = run(model)
    assert torch.equal(run(ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.0)[0]), plain)
    ours = run(ipa.ImagePromptApply().apply(model, adapter, clip_vision, image, 0.7)[0])
    cond = adapter.image_tokens(clip_vision.encode_image(image).penultimate_hidden_states)
    uncond = adapter.image_tokens(clip_vision.encode_image(torch.zeros_like(image)).penultimate_hidden_states)
    torch.testing.assert_close(ours, run(_reference(model, adapter, cond, uncond, 0.7)), rtol=0, atol=1e-4)
    assert (ours - plain).abs().max() > 1e-3
