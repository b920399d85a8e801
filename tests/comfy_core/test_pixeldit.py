"""PixelDiT and PiD (comfy_core/families/pixeldit): the network against the equations written
out here independently (complex-number RoPE, explicit softmax attention, per-pixel loops of the
adaLN tables), detection from names and shapes (single and split files, PiD's variants), PiD
v1.5's pixel adaLN split, and the text encoder's tokens and state selection."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from comfy_core.families.pixeldit.dit import PiDConfig, PixelDiTConfig, PixelDiTConfigError, \
    PixelDiTInputError, split_pixel_adaln
from comfy_core.families.pixeldit.pid import build_network
from tests.fixtures.clips import one_thread  # noqa: F401  (module-wide one-thread torch)

TINY = PixelDiTConfig(hidden_size=32, num_groups=2, pixel_hidden_size=4, pixel_attn_hidden_size=24,
                      pixel_num_groups=2, patch_depth=3, pixel_depth=2, patch_size=4, txt_embed_dim=24,
                      txt_max_length=10, mlp_hidden=40, pixel_mlp_hidden=16, time_freq_dim=16)


def _network(config: PixelDiTConfig, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = build_network(config).double().eval()
    with torch.no_grad():
        for name, param in net.named_parameters():
            if name.endswith("log_alpha"):
                param.fill_(0.3)
            elif param.ndim == 1 and "norm" in name:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            else:
                param.copy_(torch.randn_like(param) / max(1, param.shape[-1]) ** 0.5)
    return net


# -- the equations ------------------------------------------------------------------------------

def rms(x, w):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def lin(sd, name, x):
    out = x @ sd[name + ".weight"].T
    return out + sd[name + ".bias"] if name + ".bias" in sd else out


def rotate(x, angles):
    """x [..., L, D]: channel pairs (2j, 2j+1) as complex numbers times exp(i angle[L, j])."""
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape)


def axis_omega(channels, theta):
    return theta ** (-torch.arange(0, channels, 2, dtype=torch.float64) / channels)


def image_angles(head_dim, rows, cols, ref=None):
    """Pair j: x frequency j//2 for even j, y for odd; positions 0..16 over each axis."""
    d = head_dim // 2
    angles = torch.zeros(rows * cols, head_dim // 2, dtype=torch.float64)
    for r in range(rows):
        for c in range(cols):
            px = 16.0 * c / (cols - 1) if cols > 1 else 0.0
            py = 16.0 * r / (rows - 1) if rows > 1 else 0.0
            tx = 10000.0 * ((cols / ref[1]) ** (d / (d - 2)) if ref else 1.0)
            ty = 10000.0 * ((rows / ref[0]) ** (d / (d - 2)) if ref else 1.0)
            ox, oy = axis_omega(d, tx), axis_omega(d, ty)
            for j in range(head_dim // 2):
                angles[r * cols + c, j] = (px * ox[j // 2]) if j % 2 == 0 else (py * oy[j // 2])
    return angles


def attend(q, k, v):
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v


def split_heads(x, heads):
    b, n, w = x.shape
    return x.reshape(b, n, heads, w // heads).transpose(1, 2)


def merge_heads(x):
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)


def reference(sd, config, x, t, context, lq=None, sigma=None):
    """PixelDiT / PiD's velocity written out (see comfy_core/families/pixeldit/dit.py's docstring)."""
    b, ch, height, width = x.shape
    p, dim, heads = config.patch_size, config.hidden_size, config.num_groups
    rows, cols = height // p, width // p
    hd = dim // heads
    pid = config.pid
    ref = (pid.rope_ref_h // p, pid.rope_ref_w // p) if pid else None
    # timestep: cos-first sinusoid of period 10
    half = config.time_freq_dim // 2
    freqs = torch.exp(-math.log(10.0) * torch.arange(half, dtype=torch.float64) / half)
    args = t[:, None] * freqs[None]
    sinus = torch.cat([torch.cos(args), torch.sin(args)], -1)
    temb = lin(sd, "t_embedder.mlp.2", torch.nn.functional.silu(lin(sd, "t_embedder.mlp.0", sinus)))[:, None]
    # text
    n_txt = min(context.shape[1], config.txt_max_length)
    y = rms(lin(sd, "y_embedder.proj", context[:, :n_txt]), sd["y_embedder.norm.weight"])
    y = y + sd["y_pos_embedding"][:, :n_txt]
    txt_angles = torch.arange(n_txt, dtype=torch.float64)[:, None] * axis_omega(hd, 10000.0)[None]
    img_angles = image_angles(hd, rows, cols, ref)
    # patches, channel-major within a patch
    patches = x.reshape(b, ch, rows, p, cols, p).permute(0, 2, 4, 1, 3, 5).reshape(b, rows * cols, ch * p * p)
    s = lin(sd, "s_embedder.proj", patches)
    c = torch.nn.functional.silu(temb)
    lq_features = sigma_b = None
    if pid is not None:
        sigma_b = sigma.reshape(-1, 1, 1)
        z = lq
        f = pid.lq_latent_unpatchify_factor
        if f > 1:
            bb, cc, hh, ww = z.shape
            z = z.reshape(bb, cc // (f * f), f, f, hh, ww).permute(0, 1, 4, 2, 5, 3).reshape(bb, cc // (f * f), hh * f, ww * f)
        if tuple(z.shape[2:]) != (rows, cols):
            z = torch.nn.functional.interpolate(z, size=(rows, cols), mode="nearest")
        conv = lambda name, v: torch.nn.functional.conv2d(  # noqa: E731
            torch.nn.functional.pad(v, (1, 1, 1, 1), mode="replicate" if pid.lq_conv_padding_mode == "replicate"
                                    else "constant"), sd[name + ".weight"], sd[name + ".bias"])
        h_ = conv("lq_proj.latent_proj.2", torch.nn.functional.silu(conv("lq_proj.latent_proj.0", z)))
        for i in range(pid.lq_num_res_blocks):
            base = f"lq_proj.latent_proj.{3 + i}.block."
            gn = lambda k, v: torch.nn.functional.group_norm(v, 4, sd[base + k + ".weight"], sd[base + k + ".bias"])  # noqa: E731
            inner = conv(base + "2", torch.nn.functional.silu(gn("0", h_)))
            h_ = h_ + conv(base + "5", torch.nn.functional.silu(gn("3", inner)))
        tokens = h_.flatten(2).transpose(1, 2)
        lq_features = [lin(sd, f"lq_proj.output_heads.{i}", tokens) for i in range(pid.lq_num_outputs)]

    def gate(prefix, s_, feat):
        logit = lin(sd, prefix + ".content_proj", torch.cat([s_, feat], -1))
        return s_ + torch.sigmoid(logit - torch.exp(sd[prefix + ".log_alpha"]) * sigma_b) * feat

    for i in range(config.patch_depth):
        pre = f"patch_blocks.{i}."
        if pid is not None and i % pid.lq_interval == 0 and i // pid.lq_interval < len(lq_features):
            s = gate(f"lq_proj.gate_modules.{i // pid.lq_interval}", s, lq_features[i // pid.lq_interval])
        mx = lin(sd, pre + "adaLN_modulation_img.0", c).chunk(6, -1)
        my = lin(sd, pre + "adaLN_modulation_txt.0", c).chunk(6, -1)
        xs = rms(s, sd[pre + "norm_x1.weight"]) * (1 + mx[1]) + mx[0]
        ys = rms(y, sd[pre + "norm_y1.weight"]) * (1 + my[1]) + my[0]
        qx, kx, vx = (split_heads(part, heads) for part in lin(sd, pre + "attn.qkv_x", xs).chunk(3, -1))
        qy, ky, vy = (split_heads(part, heads) for part in lin(sd, pre + "attn.qkv_y", ys).chunk(3, -1))
        qx = rotate(rms(qx, sd[pre + "attn.q_norm_x.weight"]), img_angles)
        kx = rotate(rms(kx, sd[pre + "attn.k_norm_x.weight"]), img_angles)
        qy = rotate(rms(qy, sd[pre + "attn.q_norm_y.weight"]), txt_angles)
        ky = rotate(rms(ky, sd[pre + "attn.k_norm_y.weight"]), txt_angles)
        out = merge_heads(attend(torch.cat([qy, qx], 2), torch.cat([ky, kx], 2), torch.cat([vy, vx], 2)))
        s = s + mx[2] * lin(sd, pre + "attn.proj_x", out[:, n_txt:])
        y = y + my[2] * lin(sd, pre + "attn.proj_y", out[:, :n_txt])

        def swiglu(name, v):
            return lin(sd, name + ".w2", torch.nn.functional.silu(lin(sd, name + ".w1", v)) * lin(sd, name + ".w3", v))

        s = s + mx[5] * swiglu(pre + "mlp_x", rms(s, sd[pre + "norm_x2.weight"]) * (1 + mx[4]) + mx[3])
        y = y + my[5] * swiglu(pre + "mlp_y", rms(y, sd[pre + "norm_y2.weight"]) * (1 + my[4]) + my[3])
    s = torch.nn.functional.silu(temb + s)  # [B, L, D]
    pd = config.pixel_hidden_size
    # pixel tokens: per pixel linear + MAE sin/cos (columns, then rows)
    omega = 1.0 / 10000.0 ** (torch.arange(pd // 4, dtype=torch.float64) / (pd / 4))
    pix = torch.zeros(b, height, width, pd, dtype=torch.float64)
    for r in range(height):
        for col in range(width):
            pos = torch.cat([torch.sin(col * omega), torch.cos(col * omega), torch.sin(r * omega), torch.cos(r * omega)])
            pix[:, r, col] = lin(sd, "pixel_embedder.proj", x[:, :, r, col]) + pos
    # group by patch: [B, L, P*P, pd] with pixel (i, j) of the patch at i * P + j
    pix = pix.reshape(b, rows, p, cols, p, pd).permute(0, 1, 3, 2, 4, 5).reshape(b, rows * cols, p * p, pd)
    pheads = config.pixel_num_groups
    pangles = image_angles(config.pixel_attn_hidden_size // pheads, rows, cols, ref)
    for i in range(config.pixel_depth):
        pre = f"pixel_blocks.{i}."
        msa = lin(sd, pre + "adaLN_modulation_msa", s).reshape(b, rows * cols, p * p, 3, pd)
        normed = rms(pix, sd[pre + "norm1.weight"]) * (1 + msa[..., 1, :]) + msa[..., 0, :]
        comp = lin(sd, pre + "compress_to_attn", normed.reshape(b, rows * cols, p * p * pd))
        q, k, v = (split_heads(part, pheads) for part in lin(sd, pre + "attn.qkv", comp).chunk(3, -1))
        q = rotate(rms(q, sd[pre + "attn.q_norm.weight"]), pangles)
        k = rotate(rms(k, sd[pre + "attn.k_norm.weight"]), pangles)
        att = lin(sd, pre + "attn.proj", merge_heads(attend(q, k, v)))
        pix = pix + msa[..., 2, :] * lin(sd, pre + "expand_from_attn", att).reshape(b, rows * cols, p * p, pd)
        mlp = lin(sd, pre + "adaLN_modulation_mlp", s).reshape(b, rows * cols, p * p, 3, pd)
        normed = rms(pix, sd[pre + "norm2.weight"]) * (1 + mlp[..., 1, :]) + mlp[..., 0, :]
        hidden = torch.nn.functional.gelu(lin(sd, pre + "mlp.fc1", normed), approximate="tanh")
        pix = pix + mlp[..., 2, :] * lin(sd, pre + "mlp.fc2", hidden)
    rgb = lin(sd, "final_layer.linear", rms(pix, sd["final_layer.norm.weight"]))  # [B, L, P*P, C]
    return rgb.reshape(b, rows, cols, p, p, ch).permute(0, 5, 1, 3, 2, 4).reshape(b, ch, height, width)


def _inputs(seed=1, height=12, width=16):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, height, width, generator=gen, dtype=torch.float64)
    context = torch.randn(2, 13, 24, generator=gen, dtype=torch.float64)  # longer than the 10-row table
    return x, torch.tensor([700.0, 150.0], dtype=torch.float64), context


def test_pixeldit_matches_the_equations():
    net = _network(TINY)
    x, t, context = _inputs()
    sd = {k: v.detach() for k, v in net.state_dict().items()}
    with torch.no_grad():
        out = net(x, t, context)
    expected = reference(sd, TINY, x, t, context)
    assert out.shape == x.shape
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


def test_sizes_not_multiple_of_the_patch_are_padded_and_cut():
    net = _network(TINY)
    x, t, context = _inputs(height=10, width=15)
    with torch.no_grad():
        out = net(x, t, context)
        padded = net(torch.nn.functional.pad(x, (0, 1, 0, 2), mode="circular"), t, context)
    assert out.shape == x.shape
    torch.testing.assert_close(out, padded[:, :, :10, :15])


PID = dataclasses.replace(TINY, pid=PiDConfig(lq_latent_channels=16, lq_hidden_dim=8, lq_num_res_blocks=1,
                                              lq_interval=2, lq_num_outputs=2, latent_spatial_down_factor=8,
                                              rope_ref_h=8, rope_ref_w=8))  # NTK scaling at this size
PID_FILE = dataclasses.replace(PID, pid=dataclasses.replace(PID.pid, rope_ref_h=1024, rope_ref_w=1024))  # as detected


@pytest.mark.parametrize("config", [
    PID,
    dataclasses.replace(PID, pid=dataclasses.replace(PID.pid, lq_latent_channels=128, lq_latent_unpatchify_factor=2,
                                                     latent_spatial_down_factor=16, lq_conv_padding_mode="replicate",
                                                     lq_gate_per_token=True)),
], ids=["flux1", "flux2_v15_gates"])
def test_pid_matches_the_equations(config):
    net = _network(config, seed=3)
    x, t, context = _inputs(seed=4)
    channels = config.pid.lq_latent_channels
    lq = torch.randn(2, channels, 2, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    sigma = torch.tensor([0.0, 0.6], dtype=torch.float64)
    sd = {k: v.detach() for k, v in net.state_dict().items()}
    with torch.no_grad():
        out = net(x, t, context, lq_latent=lq, degrade_sigma=sigma)
    torch.testing.assert_close(out, reference(sd, config, x, t, context, lq, sigma), atol=1e-4, rtol=1e-4)
    with torch.no_grad():  # the latent matters
        assert not torch.allclose(out, net(x, t, context, lq_latent=lq * 0, degrade_sigma=sigma))


def test_pid_needs_its_latent_with_the_right_channels():
    net = _network(PID)
    x, t, context = _inputs()
    with pytest.raises(PixelDiTInputError, match="lq_latent"):
        net(x, t, context)
    with pytest.raises(PixelDiTInputError, match="128"):
        net(x, t, context, lq_latent=torch.zeros(2, 4, 2, 2, dtype=torch.float64), degrade_sigma=torch.zeros(1))


def test_pid_v15_pixel_adaln_table_is_split_as_comfyui_splits_it():
    net = _network(TINY)
    sd = dict(net.state_dict())
    p2, pd = TINY.patch_size ** 2, TINY.pixel_hidden_size
    merged = {}
    for name, value in sd.items():
        if ".adaLN_modulation_msa." in name:
            other = sd[name.replace("_msa.", "_mlp.")]
            tail = value.shape[1:]
            both = torch.cat([value.reshape(p2, 3, pd, *tail), other.reshape(p2, 3, pd, *tail)], dim=1)
            merged[name.replace("adaLN_modulation_msa.", "adaLN_modulation.0.")] = both.reshape(p2 * 6 * pd, *tail)
        elif ".adaLN_modulation_mlp." not in name:
            merged[name] = value
    converted = split_pixel_adaln(merged)
    assert set(converted) == set(sd)
    for name in sd:
        assert torch.equal(converted[name], sd[name]), name


def test_detection_reads_the_shape_and_refuses_a_broken_file():
    sd = dict(_network(TINY).state_dict())
    assert PixelDiTConfig.detect_from_weights(sd) == TINY
    assert PixelDiTConfig.detect_from_weights(dict(_network(PID).state_dict())) == PID_FILE
    del sd["pixel_blocks.1.mlp.fc2.bias"]
    sd.pop("y_pos_embedding")
    with pytest.raises(PixelDiTConfigError, match="y_pos_embedding"):
        PixelDiTConfig.detect_from_weights(sd)


@pytest.mark.parametrize("config,family,shift", [(TINY, "pixeldit", 4.0), (PID_FILE, "pid", 1.5)])
def test_registry_detects_single_and_split_files(config, family, shift, tmp_path):
    from safetensors.torch import save_file

    from comfy_core.families import default_registry
    from comfy_core.split.diffusion_model import load_diffusion_model

    network = _network(config).float()
    sd = {k: v.contiguous() for k, v in network.state_dict().items()}
    registry = default_registry()
    assert registry.detect({"model.diffusion_model." + k: v for k, v in sd.items()}).family.name == family
    assert registry.detect_diffusion_model({"model.diffusion_model." + k: v for k, v in sd.items()}).family.name == family
    path = tmp_path / "split.safetensors"
    save_file(sd, str(path))
    model = load_diffusion_model(path).model
    assert model.family.name == family
    assert model.model_sampling.shift == shift and model.model_sampling.multiplier == 1000.0
    x, t, context = (v.float() for v in _inputs())
    extra = {"lq_latent": torch.randn(2, 16, 3, 4), "degrade_sigma": torch.zeros(1)} if family == "pid" else {}
    with torch.no_grad():
        torch.testing.assert_close(model.diffusion_model(x, t, context, **extra), network(x, t, context, **extra))


def test_pid_v15_release_layout_loads_through_the_split(tmp_path):
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model

    config = dataclasses.replace(PID, pid=dataclasses.replace(PID.pid, pit_lq_inject=True, lq_gate_per_token=True,
                                                            lq_conv_padding_mode="replicate",
                                                            rope_ref_h=2048, rope_ref_w=2048))
    network = _network(config).float()
    sd = dict(network.state_dict())
    assert "lq_proj.pit_head.weight" in sd and "pit_lq_gate.log_alpha" in sd
    p2, pd = config.patch_size ** 2, config.pixel_hidden_size
    release = {}
    for name, value in sd.items():
        if ".adaLN_modulation_msa." in name:
            other = sd[name.replace("_msa.", "_mlp.")]
            tail = value.shape[1:]
            both = torch.cat([value.reshape(p2, 3, pd, *tail), other.reshape(p2, 3, pd, *tail)], dim=1)
            release[name.replace("adaLN_modulation_msa.", "adaLN_modulation.0.")] = both.reshape(-1, *tail)
        elif ".adaLN_modulation_mlp." not in name:
            release[name] = value
    path = tmp_path / "pid_v15.safetensors"
    save_file({k: v.contiguous() for k, v in release.items()}, str(path))
    model = load_diffusion_model(path).model
    assert model.family.name == "pid" and model.diffusion_model.config.pid == config.pid
    x, t, context = (v.float() for v in _inputs())
    extra = {"lq_latent": torch.randn(2, 16, 3, 4), "degrade_sigma": torch.tensor([0.2])}
    with torch.no_grad():
        torch.testing.assert_close(model.diffusion_model(x, t, context, **extra), network(x, t, context, **extra))
