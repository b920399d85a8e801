"""SeedVR2's NaDiT (comfy_core/families/seedvr2/dit.py) against an independent reference written here
token by token from the model's description (ComfyUI's comfy/ldm/seedvr/model.py read for the
behaviour; diffusers has no SeedVR2 to compare with), plus its windows, RoPE, detection, family
policy and the int8 ConvRot file.

The reference: patches as (ph, pw, channel) vectors, the time embedding [sin, cos], per block an
affine-free RMS norm, the shared (shift, scale, gate) at emb[d*6 + layer*3 + k] plus the branch's
own vectors, q / k RMS-normed per head, RoPE as complex rotations of channel pairs (3B: text token i
at (i, i, i), a window cell at (text length + t, h, w); 7B: positions over -1..1 per window axis, the
video only), softmax attention per window over [window cells, text], the text averaged over the
windows, SwiGLU / GELU(tanh) MLPs, the 3B's output norm with (shift, scale) = emb[3d], emb[3d+1].
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.fixtures.template_models_seedvr2 import (WRITERS_SEEDVR2, tiny_seedvr2_config, tiny_seedvr2_state_dict)


# --- the reference ------------------------------------------------------------------------------

def _rms(x: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)
    return y if w is None else y * w


def _axis_windows(length: int, win: int, shifted: bool) -> list[tuple[int, int]]:
    """(start, stop) of the windows along one axis; shifted tilings start half a window early."""
    out = []
    if not shifted or win >= length:
        start = 0
        while start < length:
            out.append((start, min(start + win, length)))
            start += win
        return out
    edge = 0.5 * win
    out.append((0, int(edge)))
    position = edge
    while position < length:
        out.append((int(position), min(int(position + win), length)))
        position += win
    return [(a, b) for a, b in out if b > a]


def _windows(t: int, h: int, w: int, shifted: bool) -> list[tuple[tuple[int, int], ...]]:
    area_scale = math.sqrt(45 * 80 / (h * w))
    wh = math.ceil(round(h * area_scale) / 3)
    ww = math.ceil(round(w * area_scale) / 3)
    wt = math.ceil(min(t, 30) / 4)
    return [(a, b, c) for a in _axis_windows(t, wt, shifted) for b in _axis_windows(h, wh, shifted)
            for c in _axis_windows(w, ww, shifted)]


def _rotate(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """x [..., d] with its first 2 * len(angles) channels rotated pairwise as complex numbers."""
    n = angles.shape[-1]
    pairs = torch.view_as_complex(x[..., :2 * n].reshape(*x.shape[:-1], n, 2).contiguous())
    turned = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    return torch.cat((turned, x[..., 2 * n:]), dim=-1)


def _lin(sd: dict, name: str, x: torch.Tensor) -> torch.Tensor:
    bias = sd.get(name + ".bias")
    return x @ sd[name + ".weight"].T + (0 if bias is None else bias)


def reference_forward(sd: dict, config, x: torch.Tensor, cond: torch.Tensor, t: float,
                      context: torch.Tensor) -> torch.Tensor:
    """One row: x [16, T, H, W], cond [17, T, H, W], context [L, C] -> [16, T, H, W]."""
    D, heads, hd = config.vid_dim, config.heads, config.head_dim
    axis = config.rope_dim // 3
    seven = config.mlp_type == "normal"
    full = torch.cat((x, cond))  # [33, T, H, W]
    T, H, W = full.shape[1], full.shape[2] // 2, full.shape[3] // 2
    tokens = {}
    for a in range(T):
        for b in range(H):
            for c in range(W):
                feats = [full[:, a, 2 * b + p, 2 * c + q] for p in range(2) for q in range(2)]
                tokens[(a, b, c)] = torch.cat(feats)
    cells = list(tokens)
    vid = _lin(sd, "vid_in.proj", torch.stack([tokens[k] for k in cells]))
    txt = _lin(sd, "txt_in", context)
    freqs = torch.exp(-math.log(10000.0) * torch.arange(128) / 128) * t
    e = torch.cat((freqs.sin(), freqs.cos()))
    e = _lin(sd, "emb_in.proj_out", F.silu(_lin(sd, "emb_in.proj_hid", F.silu(_lin(sd, "emb_in.proj_in", e)))))

    def shared(layer: int, k: int) -> torch.Tensor:
        return e[torch.arange(D) * 6 + layer * 3 + k]

    for i in range(config.num_layers):
        vb, tb = ("vid", "txt") if i < config.mm_layers else ("all", "all")
        last_3b = not seven and i == config.num_layers - 1
        p = f"blocks.{i}."

        def ada(branch: str, name: str) -> torch.Tensor:
            return sd[f"{p}ada.{branch}.{name}"]

        def mod_in(h, branch, layer, lname):
            return h * (shared(layer, 1) + ada(branch, lname + "_scale")) + shared(layer, 0) + ada(branch, lname + "_shift")

        v_in = mod_in(_rms(vid), vb, 0, "attn")
        t_in = _rms(txt) if last_3b else mod_in(_rms(txt), tb, 0, "attn")
        vq, vk, vv = _lin(sd, f"{p}attn.proj_qkv.{vb}", v_in).view(-1, 3, heads, hd).unbind(1)
        tq, tk, tv = _lin(sd, f"{p}attn.proj_qkv.{tb}", t_in).view(-1, 3, heads, hd).unbind(1)
        vq, vk = _rms(vq, sd[f"{p}attn.norm_q.{vb}.weight"]), _rms(vk, sd[f"{p}attn.norm_k.{vb}.weight"])
        tq, tk = _rms(tq, sd[f"{p}attn.norm_q.{tb}.weight"]), _rms(tk, sd[f"{p}attn.norm_k.{tb}.weight"])
        v_out = torch.zeros_like(vq)
        t_acc = torch.zeros_like(tq)
        wins = _windows(T, H, W, shifted=i % 2 == 1)
        L = txt.shape[0]
        for (t0, t1), (h0, h1), (w0, w1) in wins:
            members = [n for n, (a, b, c) in enumerate(cells) if t0 <= a < t1 and h0 <= b < h1 and w0 <= c < w1]
            local = [(cells[n][0] - t0, cells[n][1] - h0, cells[n][2] - w0) for n in members]
            shape = (t1 - t0, h1 - h0, w1 - w0)
            q, k = vq[members], vk[members]
            wq, wk = tq, tk
            if seven:
                f = torch.linspace(1.0, 128.0, axis // 2) * math.pi
                ang = torch.stack([torch.cat([torch.linspace(-1, 1, shape[d])[pos[d]] * f for d in range(3)])
                                   for pos in local])
                q, k = _rotate(q, ang[:, None]), _rotate(k, ang[:, None])
            else:
                f = 10000.0 ** (-torch.arange(0, axis, 2)[:axis // 2].float() / axis)
                ang = torch.stack([torch.cat([(L + a) * f, b * f, c * f]) for a, b, c in local])
                tang = torch.stack([torch.cat([j * f, j * f, j * f]) for j in range(L)])
                q, k = _rotate(q, ang[:, None]), _rotate(k, ang[:, None])
                wq, wk = _rotate(tq, tang[:, None]), _rotate(tk, tang[:, None])
            Q, K, V = torch.cat((q, wq)), torch.cat((k, wk)), torch.cat((vv[members], tv))
            for head in range(heads):
                att = torch.softmax(Q[:, head] @ K[:, head].T / math.sqrt(hd), dim=-1)
                o = att @ V[:, head]
                v_out[members, head] = o[:len(members)]
                t_acc[:, head] += o[len(members):] / len(wins)
        va = _lin(sd, f"{p}attn.proj_out.{vb}", v_out.flatten(1))
        ta = _lin(sd, f"{p}attn.proj_out.{tb}", t_acc.flatten(1))
        vid = vid + va * (shared(0, 2) + ada(vb, "attn_gate"))
        txt = txt + (ta if last_3b else ta * (shared(0, 2) + ada(tb, "attn_gate")))

        def mlp(branch, h):
            name = f"{p}mlp.{branch}"
            if seven:
                return _lin(sd, name + ".proj_out", F.gelu(_lin(sd, name + ".proj_in", h), approximate="tanh"))
            return _lin(sd, name + ".proj_out", F.silu(_lin(sd, name + ".proj_in_gate", h)) * _lin(sd, name + ".proj_in", h))

        vid = vid + mlp(vb, mod_in(_rms(vid), vb, 1, "mlp")) * (shared(1, 2) + ada(vb, "mlp_gate"))
        if not last_3b:
            txt = txt + mlp(tb, mod_in(_rms(txt), tb, 1, "mlp")) * (shared(1, 2) + ada(tb, "mlp_gate"))
    if config.vid_out_norm:
        vid = _rms(vid, sd["vid_out_norm.weight"])
        vid = vid * (e[torch.arange(D) * 3 + 1] + sd["vid_out_ada.out_scale"]) + e[torch.arange(D) * 3] + sd["vid_out_ada.out_shift"]
    out_tokens = _lin(sd, "vid_out.proj", vid)  # [N, 4 * 16], (ph, pw, c)
    out = torch.zeros(16, T, 2 * H, 2 * W)
    for n, (a, b, c) in enumerate(cells):
        patch = out_tokens[n].view(2, 2, 16)
        for p_ in range(2):
            for q_ in range(2):
                out[:, a, 2 * b + p_, 2 * c + q_] = patch[p_, q_]
    return out


# --- tests --------------------------------------------------------------------------------------

def _network(variant: str, seed: int = 0):
    from comfy_core.families.seedvr2.dit import SeedVR2DiT

    config = tiny_seedvr2_config(variant)
    sd = tiny_seedvr2_state_dict(variant, seed=seed)
    network = SeedVR2DiT(config)
    network.load_state_dict(sd)
    return network.eval(), config, sd


@pytest.mark.parametrize("variant", ["3b", "7b"])
@pytest.mark.parametrize("frames, height, width", [(1, 8, 12), (2, 12, 8)])
def test_the_network_matches_the_reference(variant, frames, height, width):
    network, config, sd = _network(variant)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, frames, height, width, generator=gen)
    cond = torch.randn(1, 17, frames, height, width, generator=gen)
    context = torch.stack((sd["positive_conditioning"][:7], sd["negative_conditioning"][:7]))
    t = torch.tensor([1000.0, 371.0])
    with torch.no_grad():
        out = network(x, t, context, condition=cond)
    for b in range(2):
        ref = reference_forward(sd, config, x[b], cond[0], float(t[b]), context[b])
        torch.testing.assert_close(out[b], ref, atol=1e-4, rtol=1e-4)


def test_each_row_reads_its_own_context_and_no_context_is_the_positive_embedding():
    network, config, sd = _network("3b", seed=1)
    x = torch.randn(1, 16, 1, 8, 8)
    cond = torch.randn(1, 17, 1, 8, 8)
    t = torch.tensor([1000.0])
    with torch.no_grad():
        default = network(x, t, None, condition=cond)
        positive = network(x, t, sd["positive_conditioning"][None], condition=cond)
        negative = network(x, t, sd["negative_conditioning"][None], condition=cond)
    torch.testing.assert_close(default, positive)
    assert not torch.allclose(positive, negative)


def test_without_the_condition_the_network_says_so():
    from comfy_core.families.seedvr2.dit import SeedVR2ConfigError

    network, _, _ = _network("3b")
    with pytest.raises(SeedVR2ConfigError, match="SeedVR2Conditioning"):
        network(torch.randn(1, 16, 1, 8, 8), torch.tensor([1.0]), None)
    with pytest.raises(SeedVR2ConfigError, match="condition must be"):
        network(torch.randn(1, 16, 1, 8, 8), torch.tensor([1.0]), None, condition=torch.randn(1, 16, 1, 8, 8))


@pytest.mark.parametrize("size", [(1, 45, 80), (21, 45, 80), (3, 17, 9), (1, 4, 6), (5, 64, 36)])
@pytest.mark.parametrize("shifted", [False, True])
def test_windows_tile_the_grid_as_the_720p_rule_says(size, shifted):
    from comfy_core.families.seedvr2.dit import window_slices

    got = window_slices(size, shifted)
    cover = torch.zeros(size, dtype=torch.int64)
    for st, sh, sw in got:
        cover[st, sh, sw] += 1
    assert bool((cover == 1).all())
    want = {((a, b), (c, d), (e, f)) for (a, b), (c, d), (e, f) in _windows(*size, shifted)}
    assert {((st.start, st.stop), (sh.start, sh.stop), (sw.start, sw.stop)) for st, sh, sw in got} == want


def test_a_720p_frame_has_three_by_three_windows_of_fifteen_by_twenty_seven():
    from comfy_core.families.seedvr2.dit import window_slices

    plain = window_slices((1, 45, 80), False)
    assert len(plain) == 9 and {(s[1].stop - s[1].start, s[2].stop - s[2].start) for s in plain} >= {(15, 27)}
    shifted = window_slices((1, 45, 80), True)
    assert len(shifted) == 16  # 4 x 4: half windows at the borders


def test_the_multimodal_rope_puts_text_on_the_diagonal_and_video_after_it():
    from comfy_core.families.seedvr2.dit import mm_rope_angles

    video, text = mm_rope_angles((2, 3, 4), 5, 42)
    f = 1.0 / 10000.0 ** (torch.arange(0, 42, 2).float() / 42)
    assert video.shape == (24, 63) and text.shape == (5, 63)
    torch.testing.assert_close(text[3], torch.cat((3 * f, 3 * f, 3 * f)))
    # cell (t=1, h=2, w=3) is row 1*12 + 2*4 + 3
    torch.testing.assert_close(video[1 * 12 + 2 * 4 + 3], torch.cat(((5 + 1) * f, 2 * f, 3 * f)))


def test_the_pixel_rope_spreads_each_window_axis_over_minus_one_to_one():
    from comfy_core.families.seedvr2.dit import pixel_rope_angles

    angles = pixel_rope_angles((1, 3, 5), 42)
    f = torch.linspace(1.0, 128.0, 21) * math.pi
    torch.testing.assert_close(angles[0], torch.cat((-1 * f, -1 * f, -1 * f)))
    torch.testing.assert_close(angles[-1], torch.cat((-1 * f, 1 * f, 1 * f)))
    torch.testing.assert_close(angles[1 * 5 + 2], torch.cat((-1 * f, 0 * f, 0 * f)))


def test_the_time_embedding_is_sine_then_cosine_unshifted():
    from comfy_core.families.seedvr2.dit import sinusoidal_embedding

    emb = sinusoidal_embedding(torch.tensor([500.0]))
    i = torch.arange(128).double()
    want = torch.cat((torch.sin(500.0 * 10000.0 ** (-i / 128)), torch.cos(500.0 * 10000.0 ** (-i / 128))))
    torch.testing.assert_close(emb[0].double(), want, atol=1e-4, rtol=0)  # float32 arguments up to 500


@pytest.mark.parametrize("variant", ["3b", "7b"])
def test_detection_reads_the_config_from_names_and_shapes(variant):
    from comfy_core.families.seedvr2.dit import SeedVR2Config

    sd = tiny_seedvr2_state_dict(variant)
    config = SeedVR2Config.detect_from_weights({"model.diffusion_model." + k: v for k, v in sd.items()},
                                               "model.diffusion_model.")
    assert config == tiny_seedvr2_config(variant)
    assert config.variant == variant and config.positive_tokens == 58 and config.negative_tokens == 64


def test_the_family_is_registered_with_comfyuis_policy():
    from comfy_core.families import default_registry

    family = default_registry().get("seedvr2")
    assert family.sampling.schedule == "flow" and family.sampling.prediction == "flow"
    assert (family.sampling.shift, family.sampling.multiplier) == (1.0, 1000.0)
    assert family.latent_format.channels == 16 and family.latent_format.latent_dimensions == 3
    assert family.latent_format.scale_factor == 1.0 and family.latent_format.temporal_downscale_ratio == 4
    assert family.text_encoders is None and family.comfy_model_class == "SeedVR2"
    cond = torch.ones(1, 17, 1, 4, 4)
    assert family.conditioning.extra_conds(None, condition=cond)["condition"] is cond
    assert family.conditioning.extra_conds(None) == {}


@pytest.mark.parametrize("variant", ["3b", "7b"])
def test_the_int8_convrot_file_loads_as_its_dequantised_network(variant, tmp_path: Path):
    from safetensors.torch import load_file

    from comfy_core.families.seedvr2.dit import SeedVR2Config, SeedVR2DiT
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_quant import true_state

    path = tmp_path / f"seedvr2_{variant}_int8_convrot.safetensors"
    WRITERS_SEEDVR2[f"unet_seedvr2_{variant}"](path)
    patcher = load_diffusion_model(path)
    model = patcher.model
    assert model.family.name == "seedvr2" and model.diffusion_model.config.variant == variant
    stored = load_file(str(path))
    assert any(k.endswith(".weight_scale") for k in stored)  # the block linears are int8
    reference = SeedVR2DiT(SeedVR2Config.detect_from_weights(stored))
    shapes = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    reference.load_state_dict(true_state(stored, {}, shapes))
    x, cond = torch.randn(1, 16, 1, 8, 8), torch.randn(1, 17, 1, 8, 8)
    context = stored["positive_conditioning"].float()[None]
    sigma = torch.tensor([1.0])
    with torch.no_grad():
        denoised = model.apply_model(x, sigma, context, condition=cond)
        velocity = reference(x, sigma * 1000.0, context, condition=cond)
    # FLOW: denoised = x - sigma * v, the network fed sigma x 1000
    torch.testing.assert_close(denoised, x - velocity, atol=2e-2, rtol=2e-2)
