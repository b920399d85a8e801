"""MiniMax H3's DiT against its equations (comfy/ldm/minimax/model.py's, written out again here as a
plain per-token reference: gathered adaLN rows, complex-number RoPE, explicit softmax attention,
loop patchify), its packed layout, detection, sampling and the audio stream's carried scale."""
from __future__ import annotations

import math

import pytest
import torch

from comfy_core.families.minimax_h3.dit import MiniMaxH3Config, MiniMaxH3ConfigError, MiniMaxH3Model
from comfy_core.families.minimax_h3.layout import build_layout, pdd_head_weights, time_shift_sigma
from comfy_core.latent.nested import pack_latents, unpack_latents
from tests.fixtures.template_models_minimax_h3 import minimax_h3_dit_state, tiny_config

TEXT = 24
FPT = (1, 4, 4, 4, 4)


def _model(pdd_heads: int = 1, curve: int | None = None) -> MiniMaxH3Model:
    state = minimax_h3_dit_state(seed=1, text_dim=TEXT, pdd_heads=pdd_heads, curve=curve, gate_compress=True)
    model = MiniMaxH3Model(MiniMaxH3Config.detect_from_weights(state))
    model.load_state_dict(state)
    return model.eval()


# --- the reference ---

def _rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _axis(dim, sqrt_area):
    n = dim // 2
    ratio = dim / sqrt_area
    return [((i * ratio / n) + (1 - ratio) / 2) * 32.0 for i in range(n)]


def _positions(text_len, vt, h, w, at, keyframes):
    """(t, h, w) per row in packed order: text, keyframe rows, audio, video."""
    hs, ws = _axis(h, math.sqrt(h * w)), _axis(w, math.sqrt(h * w))
    pos = [(float(i), 0.0, 0.0) for i in range(text_len)]

    def video(n, origin):
        t = origin
        for k in range(n):
            pos.extend((t, y, x) for y in hs for x in ws)
            t += 5.0 / 3.0 * FPT[k % 5]

    for frame, lt in keyframes:
        video(lt, text_len + 5.0 / 3.0 * frame)
    for ch in range(2):
        pos.extend((text_len + float(t), 0.0, ws[0] if ch == 0 else ws[-1]) for t in range(at))
    video(vt, float(text_len))
    return torch.tensor(pos, dtype=torch.float64)


def _video_rows(latent):
    _, c, t, h, w = latent.shape
    return torch.stack([torch.stack([latent[0, ch, k, 2 * y + i, 2 * x + j] for ch in range(c) for i in range(2)
                                     for j in range(2)]) for k in range(t) for y in range(h // 2)
                        for x in range(w // 2)])


def _audio_rows(latent):
    return torch.stack([latent[0, :, ch, t] for ch in range(2) for t in range(latent.shape[-1])])


def _rope(x, angles):
    r = angles.shape[-1]
    z = torch.complex(x[..., :r], x[..., r:2 * r]) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    return torch.cat([z.real, z.imag, x[..., 2 * r:]], dim=-1)


def _attention(p, prefix, x, heads, angles):
    q, k, v = (x @ p[prefix + "qkv_proj.weight"].T).chunk(3, dim=-1)
    q, k, v = (t.reshape(x.shape[0], heads, -1) for t in (q, k, v))
    q, k = _rms(q, p[prefix + "q_norm.weight"]), _rms(k, p[prefix + "k_norm.weight"])
    if angles is not None:
        q, k = _rope(q, angles), _rope(k, angles)
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(x.shape[0], -1)
    return out @ p[prefix + "out_proj.weight"].T


def _mlp(p, prefix, x):
    gate, up = (x @ p[prefix + "fc1.weight"].T).chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate) * up) @ p[prefix + "fc2.weight"].T


def _t_emb(p, t, curve):
    if curve:
        table = p["adaln_t_table"]
        pos = t.clamp(0, 1) * (table.shape[0] - 1)
        lo = pos.floor().long().clamp(max=table.shape[0] - 2)
        return table[lo] + (pos - lo)[:, None] * (table[lo + 1] - table[lo])
    freq = p["time_embedder.proj_in.weight"].shape[1] // 2
    args = t[:, None] * torch.exp(-math.log(10000.0) * torch.arange(freq) / freq)[None]
    e = torch.cat([args.cos(), args.sin()], -1)
    h = torch.nn.functional.silu(e @ p["time_embedder.proj_in.weight"].T + p["time_embedder.proj_in.bias"])
    return h @ p["time_embedder.proj_out.weight"].T + p["time_embedder.proj_out.bias"]


def reference(p, video, audio, sigma, text, tags, keyframes, shifts=(12.0, 3.0), curve=False, pdd=1,
              sample_sigmas=None, seed=0, video_mask=None):
    """One sample's output ([-video velocity], [-audio velocity]) from the equations; `video_mask`
    [T, H, W] (1 = generate): each 2x2 patch row at 1 - m sigma (m its largest value, at most the
    condition label), the velocity times the mask."""
    heads, hidden = 2, p["video_patch_proj.weight"].shape[0]
    t_v, t_a = 1 - sigma, 1 - time_shift_sigma(sigma, *shifts)
    ctx = text @ p["condition_proj.weight"].T + p["condition_proj.bias"]
    ctx = ctx + _attention(p, "token_refiner.blocks.0.attn.", _rms(ctx, p["token_refiner.blocks.0.norm1.weight"]),
                           heads, None)
    ctx = ctx + _mlp(p, "token_refiner.blocks.0.mlp.", _rms(ctx, p["token_refiner.blocks.0.norm2.weight"]))
    ctx = _rms(ctx, p["token_refiner.final_norm.weight"])
    rows, row_t, row_tag = [ctx], [t_v] * text.shape[0], list(tags)
    for frame, latent in keyframes:  # each keyframe's rows, noised by 0.001 of the seeded noise
        r = _video_rows(latent)
        noise = torch.randn(r.shape, generator=torch.Generator().manual_seed(seed))
        rows.append((0.999 * r + 0.001 * noise) @ p["video_patch_proj.weight"].T + p["video_patch_proj.bias"])
        row_t += [max(t_v, 0.999)] * r.shape[0]
        row_tag += [0] * r.shape[0]
    a_rows = _audio_rows(audio)
    rows.append(a_rows @ p["audio_patch_proj.weight"].T + p["audio_patch_proj.bias"])
    row_t += [t_a] * a_rows.shape[0]
    row_tag += [2] * a_rows.shape[0]
    v_rows = _video_rows(video)
    rows.append(v_rows @ p["video_patch_proj.weight"].T + p["video_patch_proj.bias"])
    if video_mask is None:
        v_t = [t_v] * v_rows.shape[0]
    else:
        t, hh, ww = video_mask.shape
        v_t = [float(torch.tensor(1.0 - float(video_mask[k, 2 * y:2 * y + 2, 2 * x:2 * x + 2].max()) * sigma,
                                  dtype=torch.float32).clamp(max=max(t_v, 0.999)))
               for k in range(t) for y in range(hh // 2) for x in range(ww // 2)]
    row_t += v_t
    row_tag += [0] * v_rows.shape[0]
    x = torch.cat(rows)
    levels = sorted(set(row_t) | {t_v, t_a})
    emb = _t_emb(p, torch.tensor(levels, dtype=torch.float32), curve)
    index = torch.tensor([levels.index(t) for t in row_t])
    tag = torch.tensor(row_tag)
    pos = _positions(text.shape[0], video.shape[2], video.shape[3], video.shape[4], audio.shape[-1],
                     [(f, lat.shape[2]) for f, lat in keyframes])
    angles = (pos[:, :, None].float() * p["rope.inv_freq"][None, None]).reshape(pos.shape[0], -1)
    act = emb if curve else torch.nn.functional.silu(emb)
    for b in range(sum(1 for k in p if k.endswith(".adaln_proj.linear.weight")) - 1):
        pre = f"blocks.{b}."
        table = (act @ p[pre + "adaln_proj.linear.weight"].T + p[pre + "adaln_proj.linear.bias"])
        table = table.reshape(len(levels), 3, 6, hidden)[index, tag]  # [S, 6, hidden]: this row's level and modality
        sh1, sc1, g1, sh2, sc2, g2 = table.unbind(1)
        x = x + g1 * _attention(p, pre + "attn.", _rms(x, p[pre + "norm1.weight"]) * (1 + sc1) + sh1, heads, angles)
        x = x + g2 * _mlp(p, pre + "mlp.", _rms(x, p[pre + "norm2.weight"]) * (1 + sc2) + sh2)
    shift, scale = (act @ p["final_layer.adaln_proj.linear.weight"].T + p["final_layer.adaln_proj.linear.bias"]
                    ).chunk(2, dim=-1)
    h = _rms(x, p["final_layer.norm.weight"])
    n_a, n_v = a_rows.shape[0], v_rows.shape[0]
    ha = h[-n_a - n_v:-n_v] * (1 + scale[levels.index(t_a)]) + shift[levels.index(t_a)]
    v_index = torch.tensor([levels.index(t) for t in v_t])
    hv = h[-n_v:] * (1 + scale[v_index]) + shift[v_index]

    def head(name, hh, width, flow_shift):
        w, bias = p[name + ".weight"].reshape(pdd, width, -1), p[name + ".bias"].reshape(pdd, width)
        if pdd == 1:
            return hh @ w[0].T + bias[0]
        i = int((sample_sigmas - sigma).abs().argmin())
        nxt = float(sample_sigmas[min(i + 1, len(sample_sigmas) - 1)])
        start, stop = (round((1 - time_shift_sigma(s, shifts[0], 1.0)) * pdd) for s in (sigma, nxt))
        start = min(start, pdd - 1)
        stop = max(stop, start + 1)
        grid = [1 - j / pdd for j in range(pdd + 1)]
        shifted = [1 - flow_shift * g / (1 + (flow_shift - 1) * g) for g in grid]
        dts = [shifted[j + 1] - shifted[j] for j in range(start, stop)]
        total_w, total_b = w[0].clone(), bias[0].clone()
        for j, dt in zip(range(start, stop), dts):
            if j >= 1:
                total_w += dt / sum(dts) * w[j]
                total_b += dt / sum(dts) * bias[j]
        return hh @ total_w.T + total_b

    v = head("final_layer.video_out", hv, 96, shifts[0])
    a = head("final_layer.audio_out", ha, 32, shifts[1])
    out_v = torch.zeros_like(video)
    t, hh, ww = video.shape[2], video.shape[3] // 2, video.shape[4] // 2
    for r, (k, y, xx) in enumerate((k, y, xx) for k in range(t) for y in range(hh) for xx in range(ww)):
        out_v[0, :, k, 2 * y:2 * y + 2, 2 * xx:2 * xx + 2] = v[r].reshape(24, 2, 2)
    out_a = torch.stack([a[:audio.shape[-1]].T, a[audio.shape[-1]:].T], dim=1)[None]
    if video_mask is not None:
        out_v = out_v * video_mask
    return -out_v, -out_a


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 24, 2, 4, 6, generator=g), torch.randn(1, 32, 2, 5, generator=g),
            torch.randn(1, 6, TEXT, generator=g), torch.randn(1, 24, 1, 4, 6, generator=g))


@pytest.fixture(scope="module")
def model() -> MiniMaxH3Model:
    return _model()


def test_forward_matches_the_equations_with_a_keyframe_and_vision_tags(model):
    video, audio, text, key = _inputs()
    tags = torch.tensor([1, 0, 0, 0, 1, 1])
    payload = {"keyframes": [{"resolved_frame_index": 4, "latent": key}], "cond_video_latents": [key],
               "text_token_tags": tags, "seed": 7}
    packed, shapes = pack_latents([video, audio])
    with torch.no_grad():
        out = model(packed, torch.tensor([600.0]), text, latent_shapes=shapes, minimax_payload=payload,
                    transformer_options={})
        want_v, want_a = reference(model.state_dict(), video, audio, 0.6, text[0], tags.tolist(), [(4, key)],
                                   seed=7)
    got_v, got_a = unpack_latents(out, shapes)
    torch.testing.assert_close(got_v, want_v, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_a, want_a, rtol=1e-5, atol=1e-5)


def test_pdd_head_bank_and_curve_form_time_embedding_match_the_equations():
    model = _model(pdd_heads=4, curve=9)
    video, audio, text, _ = _inputs(1)
    sigmas = torch.tensor([1.0, 0.95, 0.7, 0.3, 0.0])
    packed, shapes = pack_latents([video, audio])
    with torch.no_grad():
        out = model(packed, torch.tensor([700.0]), text, latent_shapes=shapes, minimax_payload={},
                    transformer_options={"sample_sigmas": sigmas})
        want = reference(model.state_dict(), video, audio, 0.7, text[0], [1] * 6, [], curve=True, pdd=4,
                         sample_sigmas=sigmas)
    for got, expected in zip(unpack_latents(out, shapes), want):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="sigma schedule"):
        model(packed, torch.tensor([700.0]), text, latent_shapes=shapes, minimax_payload={}, transformer_options={})


def test_pdd_weights_cover_the_step_on_the_shifted_schedule():
    w = pdd_head_weights(8, 2, 5, 3.0)
    grid = torch.linspace(1, 0, 9, dtype=torch.float64)
    shifted = 1 - 3 * grid / (1 + 2 * grid)
    torch.testing.assert_close(w, (shifted[3:6] - shifted[2:5]) / (shifted[5] - shifted[2]))


def test_the_carried_audio_is_turned_into_the_stream_and_its_velocity_back(model):
    video, audio, text, _ = _inputs(2)
    packed, shapes = pack_latents([video, audio])
    scale, sigma = 4.0, 0.5
    sigma_a = time_shift_sigma(sigma, 12.0, 3.0)
    with torch.no_grad():
        out = model(packed, torch.tensor([sigma * 1000]), text, latent_shapes=shapes,
                    minimax_payload={"audio_scale": scale}, transformer_options={})
        plain_v, plain_a = unpack_latents(model(pack_latents([video, audio * sigma_a / sigma])[0],
                                                torch.tensor([sigma * 1000]), text, latent_shapes=shapes,
                                                minimax_payload={}, transformer_options={}), shapes)
    got_v, got_a = unpack_latents(out, shapes)
    torch.testing.assert_close(got_v, plain_v)
    carried = audio * sigma_a / sigma
    torch.testing.assert_close(got_a, (1 - scale) * carried + (1 + (scale - 1) * sigma_a) * plain_a)


def test_layout_orders_segments_and_places_references_before_the_targets():
    ref = {"kind": "video_audio", "latent_t": 2, "latent_h": 2, "latent_w": 4, "ref_audio_t": 3}
    layout = build_layout(5, 2, 4, 6, 7, keyframes=[{"resolved_frame_index": 3, "latent": torch.zeros(1, 24, 1, 4, 6)}],
                          refs=[{"kind": "image", "latent_h": 2, "latent_w": 2}, ref])
    kinds = [k for _, _, k in layout.segments]
    assert kinds == ["text", "cond", "ref_img", "ref_audio", "ref_img", "audio", "video"]
    cursor = 5 + 1 + max(3, 5 / 3 * (1 + 4))  # text, the image's 1, the clip's longer span
    a0, _ = layout.segment("audio")
    v0, _ = layout.segment("video")
    c0, _ = layout.segment("cond")
    assert layout.position_ids[a0, 0].item() == pytest.approx(cursor)
    assert layout.position_ids[v0 + 6, 0].item() == pytest.approx(cursor + 5 / 3)  # second latent frame
    assert layout.position_ids[c0, 0].item() == pytest.approx(cursor + 5 / 3 * 3)
    (ri0, _), = [(a, b) for a, b, k in layout.segments[:3] if k == "ref_img"]
    assert layout.position_ids[ri0, 0].item() == 5.0  # the image sits at the text's end


def test_detection_reads_the_network_and_refuses_a_mismatched_bank():
    state = minimax_h3_dit_state(pdd_heads=8, gate_compress=True)
    config = MiniMaxH3Config.detect_from_weights({"model.diffusion_model." + k: v for k, v in state.items()},
                                                 "model.diffusion_model.")
    assert config == tiny_config(pdd_heads=8, gate_compress=True)
    state["final_layer.audio_out.weight"] = state["final_layer.audio_out.weight"][:32]
    with pytest.raises(MiniMaxH3ConfigError, match="audio_out"):
        MiniMaxH3Config.detect_from_weights(state)


def test_the_turbo_lora_spelling_reaches_every_block(tmp_path):
    """ComfyUI's LoRA names (`diffusion_model.blocks.N.attn.qkv_proj.lora_A/B`) patch the DiT's fused q/k/v."""
    from safetensors.torch import load_file

    from comfy_core.families.minimax_h3 import definition
    from comfy_core.lora import load_lora_for_models
    from comfy_core.patching.model import ModelPatcher
    from tests.fixtures.template_models_minimax_h3 import DEPTH, WRITERS_MINIMAX_H3

    family = definition()
    patcher = ModelPatcher(family.components.build_model(_model(), family, "flow", False))
    WRITERS_MINIMAX_H3["lora_minimax_h3"](tmp_path / "minimax_h3_turbo.safetensors")
    lora = load_file(str(tmp_path / "minimax_h3_turbo.safetensors"))
    patched, _, report = load_lora_for_models(patcher, None, lora, 1.0, 0.0, "turbo", ("test",))
    assert report.model_keys == DEPTH
    name = "diffusion_model.blocks.1.attn.qkv_proj.weight"
    before = patcher.model.state_dict()[name].clone()
    with patched.applied() as dm:
        delta = dm.state_dict()[name] - before
    base = "diffusion_model.blocks.1.attn.qkv_proj"
    want = lora[base + ".lora_B.weight"].float() @ lora[base + ".lora_A.weight"].float()
    torch.testing.assert_close(delta, want, rtol=1e-3, atol=1e-3)


def test_a_distilled_int8_convrot_file_loads_as_minimax_h3(tmp_path):
    """UNETLoader's path: the family from the names, the PDD bank and VSA gates from the shapes, the
    block layers kept int8, the audio-video sampling (shift 12, audio 3)."""
    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.template_models_minimax_h3 import PDD_HEADS, WRITERS_MINIMAX_H3

    path = tmp_path / "fastvideo_fasth3_8step_v2_pruned_int8_convrot.safetensors"
    WRITERS_MINIMAX_H3["unet_fasth3_int8"](path)
    patcher = load_diffusion_model(path)
    dm = patcher.model
    assert dm.family.name == "minimax_h3" and type(dm.diffusion_model).__name__ == "MiniMaxH3Model"
    assert dm.diffusion_model.config.pdd_heads == PDD_HEADS and dm.diffusion_model.config.gate_compress
    assert (dm.model_sampling.shift, dm.model_sampling.audio_shift, dm.model_sampling.audio_scale) == (12.0, 3.0, 4.0)
    assert type(dm.diffusion_model.blocks[0].attn.qkv_proj).__name__ == "QuantizedLinear"
    assert dm.model_config.memory_usage_factor == pytest.approx(0.114)


def test_the_av_latent_format_builds_the_nested_latent_from_an_empty_one():
    from comfy_core.families.minimax_h3.latent_format import MiniMaxH3AV

    fmt = MiniMaxH3AV()
    assert (fmt.latent_channels, fmt.channels, fmt.latent_dimensions, fmt.spacial_downscale_ratio) == (32, 24, 3, 16)
    video, audio = fmt.fix_empty_latent(torch.zeros(1, 32, 7, 4, 6)).unbind()
    assert video.shape == (1, 24, 7, 4, 6) and audio.shape == (1, 32, 2, round(22 * 5 / 3))
    assert fmt.latent_to_rgb(torch.zeros(1, 24, 2, 4, 6)).shape == (1, 2, 4, 6, 3)
    with pytest.raises(ValueError):
        fmt.fix_empty_latent(torch.zeros(1, 4, 8, 8))


def test_a_denoise_mask_gives_per_row_labels_and_scales_the_velocity(model):
    """A kept region's rows are labelled 1 - m sigma (fully kept: the condition label 0.999), each
    row's adaLN from its own label, the velocity times the mask."""
    video, audio, text, _ = _inputs(3)
    mask = torch.ones(2, 4, 6)
    mask[0, :2, :2] = 0.0  # one patch kept
    mask[1, 2:, 4:] = 0.5  # one patch half re-generated
    packed, shapes = pack_latents([video, audio])
    with torch.no_grad():
        out = model(packed, torch.tensor([400.0]), text, latent_shapes=shapes, minimax_payload={},
                    transformer_options={}, denoise_mask=mask[None, None])
        want = reference(model.state_dict(), video, audio, 0.4, text[0], [1] * 6, [], video_mask=mask)
    for got, expected in zip(unpack_latents(out, shapes), want):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
