"""Lens (comfy_core/families/lens): the DiT against the equations written out here (ComfyUI's
`LensTransformer2DModel` as a plain function of its state dict, its RoPE in complex form with
the centred image positions), detection by ComfyUI's keys, the family's policy and the GPT-OSS
conditioning as ComfyUI builds it (template cut, mask, empty prompt)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.lens import definition
from comfy_core.families.lens.dit import LensConfig, LensConfigError, LensInputError, LensTransformer, rope_axes

TINY = LensConfig(inner_dim=64, head_dim=32, layers=2, in_channels=128, out_channels=32, mlp_dim=170, enc_dim=24,
                  taps=4)


def tiny_model(seed: int = 0) -> LensTransformer:
    torch.manual_seed(seed)
    model = LensTransformer(TINY)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.2 if "norm" not in name else 0.1) + (1.0 if "norm" in name else 0.0))
    return model.eval()


# -- the reference, from ComfyUI's description ------------------------------------------------------

def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def lin(sd, name, x):
    return F.linear(x, sd[name + ".weight"], sd.get(name + ".bias"))


def rope_freqs(positions, dim, theta=10000.0):
    """complex `[L, dim/2]` e^{i p w_k}."""
    w = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return torch.polar(torch.ones(positions.shape[0], dim // 2, dtype=torch.float64), positions[:, None].double() * w)


def rotate(x, freqs):  # x [B, L, H, D], pairs (2k, 2k+1) as complex numbers
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs[None, :, None, :]).flatten(3).to(x.dtype)


def reference(sd, config, x, sigma, context, mask):
    b, c, h, w = x.shape
    d, hd = config.inner_dim, config.head_dim
    heads = d // hd
    img = lin(sd, "img_in", x.permute(0, 2, 3, 1).reshape(b, h * w, c))
    parts = context.reshape(b, context.shape[1], config.taps, config.enc_dim)
    txt = lin(sd, "txt_in", torch.cat([rms(parts[:, :, i], sd[f"txt_norm.{i}.weight"], 1e-5)
                                      for i in range(config.taps)], -1))
    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)
    args = 1000 * sigma[:, None] * freqs[None]
    temb = torch.cat([torch.cos(args), torch.sin(args)], -1)
    temb = lin(sd, "time_text_embed.timestep_embedder.linear_2",
               F.silu(lin(sd, "time_text_embed.timestep_embedder.linear_1", temb)))
    # positions: rows / columns centred, text on the diagonal after max(h//2, w//2)
    a0, a1, a2 = rope_axes(hd)
    rows = torch.tensor([r - (h - h // 2) for r in range(h) for _ in range(w)], dtype=torch.float64)
    cols = torch.tensor([q - (w - w // 2) for _ in range(h) for q in range(w)], dtype=torch.float64)
    t = torch.arange(txt.shape[1], dtype=torch.float64) + max(h // 2, w // 2)
    img_f = torch.cat([rope_freqs(torch.zeros(h * w), a0), rope_freqs(rows, a1), rope_freqs(cols, a2)], -1)
    txt_f = torch.cat([rope_freqs(t, a0), rope_freqs(t, a1), rope_freqs(t, a2)], -1)
    keep = torch.cat([torch.ones(b, h * w, dtype=torch.bool), mask.bool()], 1)
    for i in range(config.layers):
        p = f"transformer_blocks.{i}."
        im = lin(sd, p + "img_mod.1", F.silu(temb))
        tm = lin(sd, p + "txt_mod.1", F.silu(temb))
        ish, isc, ig, ish2, isc2, ig2 = im.chunk(6, -1)
        tsh, tsc, tg, tsh2, tsc2, tg2 = tm.chunk(6, -1)
        xi = rms(img, sd[p + "img_norm1.weight"], 1e-6) * (1 + isc[:, None]) + ish[:, None]
        xt = rms(txt, sd[p + "txt_norm1.weight"], 1e-6) * (1 + tsc[:, None]) + tsh[:, None]
        qi, ki, vi = lin(sd, p + "attn.img_qkv", xi).view(b, -1, 3, heads, hd).unbind(2)
        qt, kt, vt = lin(sd, p + "attn.txt_qkv", xt).view(b, -1, 3, heads, hd).unbind(2)
        qi, ki = rms(qi, sd[p + "attn.norm_q.weight"], 1e-5), rms(ki, sd[p + "attn.norm_k.weight"], 1e-5)
        qt, kt = rms(qt, sd[p + "attn.norm_added_q.weight"], 1e-5), rms(kt, sd[p + "attn.norm_added_k.weight"], 1e-5)
        q = torch.cat([rotate(qi, img_f), rotate(qt, txt_f)], 1).transpose(1, 2)
        k = torch.cat([rotate(ki, img_f), rotate(kt, txt_f)], 1).transpose(1, 2)
        v = torch.cat([vi, vt], 1).transpose(1, 2)
        logits = q @ k.transpose(-1, -2) / math.sqrt(hd)
        logits = logits.masked_fill(~keep[:, None, None, :], float("-inf"))
        out = (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, d)
        img = img + ig[:, None] * lin(sd, p + "attn.to_out.0", out[:, :h * w])
        txt = txt + tg[:, None] * lin(sd, p + "attn.to_add_out", out[:, h * w:])
        xi = rms(img, sd[p + "img_norm2.weight"], 1e-6) * (1 + isc2[:, None]) + ish2[:, None]
        img = img + ig2[:, None] * lin(sd, p + "img_mlp.w2", F.silu(lin(sd, p + "img_mlp.w1", xi)) *
                                       lin(sd, p + "img_mlp.w3", xi))
        xt = rms(txt, sd[p + "txt_norm2.weight"], 1e-6) * (1 + tsc2[:, None]) + tsh2[:, None]
        txt = txt + tg2[:, None] * lin(sd, p + "txt_mlp.w2", F.silu(lin(sd, p + "txt_mlp.w1", xt)) *
                                       lin(sd, p + "txt_mlp.w3", xt))
    scale, shift = lin(sd, "norm_out.linear", F.silu(temb)).chunk(2, -1)
    img = F.layer_norm(img, (d,), eps=1e-6) * (1 + scale[:, None]) + shift[:, None]
    return lin(sd, "proj_out", img).reshape(b, h, w, -1).permute(0, 3, 1, 2)


@pytest.mark.parametrize("h,w", [(4, 6), (5, 3)])
def test_network_matches_equations(h, w):
    model = tiny_model()
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    x = torch.randn(2, 128, h, w)
    sigma = torch.tensor([0.7, 0.25])
    context = torch.randn(2, 5, TINY.context_width)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    with torch.no_grad():
        ours = model(x, sigma, context, attention_mask=mask)
        ref = reference(sd, TINY, x, sigma, context, mask)
    assert ours.shape == x.shape
    # float32 against the equations in float64: the outputs reach ~150, so the tolerance is relative
    # to that scale (3e-4 differences on values near zero with some CPU builds' matrix products)
    scale = float(ref.abs().max())
    assert torch.allclose(ours, ref.float(), atol=1e-5 * scale, rtol=1e-4), (ours - ref).abs().max()


def test_masked_text_is_ignored_and_empty_text_runs():
    model = tiny_model()
    torch.manual_seed(2)
    x, sigma = torch.randn(1, 128, 3, 3), torch.tensor([0.5])
    context = torch.randn(1, 4, TINY.context_width)
    with torch.no_grad():
        masked = model(x, sigma, context, attention_mask=torch.tensor([[1, 1, 0, 0]]))
        cut = model(x, sigma, context[:, :2])
        full = model(x, sigma, context)
        empty = model(x, sigma, context[:, :0], attention_mask=torch.zeros(1, 0, dtype=torch.long))
    assert torch.allclose(masked, cut, atol=1e-3, rtol=1e-5)
    assert not torch.allclose(masked, full, atol=1e-3)
    assert empty.shape == x.shape and torch.isfinite(empty).all()


def test_block_replace_patch_sees_comfyui_arguments():
    model = tiny_model()
    seen = []

    def replace(args, extra):
        seen.append(sorted(args))
        return extra["original_block"](args)

    x, sigma, context = torch.randn(1, 128, 2, 2), torch.tensor([0.3]), torch.randn(1, 3, TINY.context_width)
    with torch.no_grad():
        plain = model(x, sigma, context)
        patched = model(x, sigma, context, transformer_options={"patches_replace": {"dit": {("double_block", 1): replace}}})
    assert seen == [["attn_mask", "img", "pe", "transformer_options", "txt", "vec"]]
    assert torch.allclose(plain, patched)


def test_config_from_comfyui_keys_and_family_detection():
    model = tiny_model()
    sd = {"model.diffusion_model." + k: v for k, v in model.state_dict().items()}
    assert LensConfig.detect_from_weights(sd, "model.diffusion_model.") == TINY
    assert TINY.comfy_unet_config()["axes_dims_rope"] == [4, 14, 14]
    assert rope_axes(64) == (8, 28, 28)
    family = definition()
    assert family.name == "lens" and family.comfy_model_class == "Lens"
    assert family.sampling.shift == pytest.approx(1.829) and family.sampling.schedule == "flux"
    assert family.latent_format.channels == 128 and family.geometry.downscale == 16
    assert family.architecture.present(sd, "model.diffusion_model.")
    broken = {k: v for k, v in sd.items() if ".transformer_blocks.0." not in k or "img_qkv" in k}
    with pytest.raises(LensConfigError):
        LensConfig.detect_from_weights(broken, "model.diffusion_model.")


def test_wrong_context_width_refused():
    model = tiny_model()
    with pytest.raises(LensInputError, match="CLIPLoader type 'lens'"):
        model(torch.randn(1, 128, 2, 2), torch.tensor([0.5]), torch.randn(1, 3, 10))


def test_conditions_pass_the_mask():
    family = definition()
    mask = torch.ones(1, 3)
    assert family.conditioning.extra_conds(None, attention_mask=mask)["attention_mask"] is mask
    assert family.conditioning.extra_conds(None) == {}


# -- the text encoder as CLIPLoader type "lens" builds it -------------------------------------------

def _load(path):
    from comfy_core.split.text_encoder_files import load_text_encoders

    return load_text_encoders([str(path)], "lens")


def test_clip_conditioning_is_the_taps_after_the_template(tmp_path):
    from comfy_core.families.lens.clip import LENS_TXT_OFFSET, render_chat
    from comfy_core.text_encoders.gpt_oss import GptOssConfig, build_gpt_oss
    from tests.fixtures.template_models_lens import tiny_gpt_oss_state_dict, write_gpt_oss_file

    path = tmp_path / "gpt_oss_20b_bf16.safetensors"
    write_gpt_oss_file(path, seed=3, quantize=False)
    clip = _load(path)
    assert type(clip.cond_stage_model).__name__ == "LensTEModel" and type(clip.tokenizer).__name__ == "LensTokenizer"
    tokens = clip.tokenize("a red fox")
    ids = [t for t, _ in tokens["gpt_oss"][0]]
    assert clip.tokenizer.decode(ids, skip_special_tokens=False) == render_chat("a red fox")
    out = clip.encode_from_tokens(tokens, return_dict=True)
    state = {k: v.to(torch.bfloat16).float() for k, v in tiny_gpt_oss_state_dict(3).items()}
    tower = build_gpt_oss(GptOssConfig.detect_from_weights(state), state)
    taps = tower.captured(torch.tensor([ids]), None, (5, 11, 17, 23))
    expected = torch.stack(taps, dim=2)[:, LENS_TXT_OFFSET:].reshape(1, len(ids) - LENS_TXT_OFFSET, -1)
    assert out["cond"].shape == expected.shape
    assert torch.allclose(out["cond"].float(), expected, atol=1e-4, rtol=1e-4)
    assert out["attention_mask"].tolist() == [[1] * (len(ids) - LENS_TXT_OFFSET)]
    assert out["num_layers_stacked"] == 4 and out["pooled_output"] is None


def test_clip_empty_prompt_and_truncation(tmp_path):
    from tests.fixtures.template_models_lens import write_gpt_oss_file

    path = tmp_path / "gpt_oss_20b_nvfp4.safetensors"
    write_gpt_oss_file(path, seed=1)
    clip = _load(path)
    assert clip.tokenize("   ")["gpt_oss"] == [[]]
    empty = clip.encode_from_tokens(clip.tokenize(""), return_dict=True)
    assert empty["cond"].shape == (1, 0, 4 * 32) and empty["attention_mask"].shape == (1, 0)
    assert len(clip.tokenize("x" * 2000)["gpt_oss"][0]) == 512


def test_nvfp4_attention_layers_are_read_dequantised(tmp_path):
    from safetensors import safe_open

    from tests.fixtures.template_models_lens import tiny_gpt_oss_state_dict, write_gpt_oss_file
    from tests.fixtures.template_models_quant import true_state

    path = tmp_path / "gpt_oss_20b_nvfp4.safetensors"
    write_gpt_oss_file(path, seed=2)
    with safe_open(str(path), "pt") as f:
        stored = {k: f.get_tensor(k) for k in f.keys()}
    assert stored["model.layers.0.self_attn.q_proj.weight"].dtype == torch.uint8  # packed NVFP4
    original = tiny_gpt_oss_state_dict(2)
    shapes = {"model." + k: tuple(v.shape) for k, v in original.items() if v.dim() == 2}
    truth = true_state(stored, {}, shapes)
    tower = _load(path).cond_stage_model.gpt_oss
    loaded = tower.layers[0].self_attn.q_proj.weight.float()
    assert torch.allclose(loaded, truth["model.layers.0.self_attn.q_proj.weight"].to(torch.bfloat16).float())
    assert not torch.equal(loaded, original["layers.0.self_attn.q_proj.weight"])


def test_lens_type_needs_a_gpt_oss_file(tmp_path):
    from comfy_core.split.clip_types import CLIP_LOADER_TYPES, NEEDS
    from comfy_core.text_encoders.errors import TextEncoderError
    from tests.fixtures.mistral_files import write_mistral_file
    from tests.fixtures.template_models_ernie import tiny_ministral_state_dict

    assert "lens" in CLIP_LOADER_TYPES and "lens" not in NEEDS
    path = tmp_path / "ministral-3-3b.safetensors"
    write_mistral_file(path, tiny_ministral_state_dict(0), dtype=torch.bfloat16)
    with pytest.raises(TextEncoderError, match="lens"):
        _load(path)


def test_registry_detects_lens_single_and_split():
    from comfy_core.families import default_registry
    from tests.fixtures.template_models_lens import tiny_lens_state_dict

    state = {"model.diffusion_model." + k: v for k, v in tiny_lens_state_dict(0).items()}
    registry = default_registry()
    assert registry.detect(state).family.name == "lens"
    assert registry.detect_diffusion_model(state).family.name == "lens"
