"""The Mage-VAE (comfy_core/models/mage_vae.py) against a functional reference written here from the
structure of ComfyUI's `comfy/ldm/mage_flow/vae.py` (DConvEncoder at t = 0 from a zero latent, the
CoD decoder's windowed attention over `[b * windows, c, d * d]`, the DConvDenoiser's unfold / per-pixel
head / fold), on tiny random weights; loading the release's layout through VAELoader's path."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.models.mage_vae import MageVAE, MageVAEConfig
from tests.fixtures.template_models_mage import TINY_VAE, release_layout, tiny_mage_vae_state_dict


def tiny_vae(seed: int = 0) -> tuple[MageVAE, dict[str, torch.Tensor]]:
    state = tiny_mage_vae_state_dict(seed)
    vae = MageVAE(MageVAEConfig(**TINY_VAE))
    vae.load_state_dict(state)
    return vae.eval(), state


# --- the reference ----------------------------------------------------------------------------------

def conv(s, name, x, **kw):
    return F.conv2d(x, s[name + ".weight"], s.get(name + ".bias"), **kw)


def lin(s, name, x):
    return F.linear(x, s[name + ".weight"], s[name + ".bias"])


def ln2d(s, name, x, affine=True):
    w = (s[name + ".weight"], s[name + ".bias"]) if affine else (None, None)
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), *w, eps=1e-6).permute(0, 3, 1, 2)


def gn(s, name, x):
    return F.group_norm(x, 32, s[name + ".weight"], s[name + ".bias"], eps=1e-6)


def temb(s, name, b, dtype=torch.float32):
    half = 128
    freqs = torch.exp(-math.log(10000) * torch.arange(0, half, dtype=torch.float32) / half)
    args = torch.zeros(b)[:, None] * freqs[None]
    e = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return lin(s, name + ".mlp.2", F.silu(lin(s, name + ".mlp.0", e)))


def dico(s, p, x, c=None):
    width = x.shape[1]
    if c is not None:
        m = lin(s, p + ".adaLN_modulation.1", F.silu(c)).chunk(6, dim=1)
        mod = lambda v, sh, sc: v * (1 + sc.view(-1, width, 1, 1)) + sh.view(-1, width, 1, 1)  # noqa: E731
        h = mod(ln2d(s, p + ".norm1", x, False), m[0], m[1])
    else:
        h = ln2d(s, p + ".norm1", x)
    h = F.gelu(conv(s, p + ".conv2", conv(s, p + ".conv1", h), padding=1, groups=width))
    h = h * torch.sigmoid(conv(s, p + ".ca.1", h.mean(dim=(2, 3), keepdim=True)))
    h = conv(s, p + ".conv3", h)
    x = x + (m[2].view(-1, width, 1, 1) * h if c is not None else h)
    h2 = mod(ln2d(s, p + ".norm2", x, False), m[3], m[4]) if c is not None else ln2d(s, p + ".norm2", x)
    h2 = conv(s, p + ".conv5", F.gelu(conv(s, p + ".conv4", h2)))
    return x + (m[5].view(-1, width, 1, 1) * h2 if c is not None else h2)


def ref_encode(s, x):
    p = "dconv_encoder"
    cond = conv(s, p + ".patch_cond_embed", x, stride=16)
    for i in range(TINY_VAE["head_blocks"]):
        cond = dico(s, f"{p}.head_blocks.{i}", cond)
    cond = conv(s, p + ".proj_down", cond)
    z = torch.zeros(x.shape[0], 128, *cond.shape[2:])
    h = conv(s, p + ".fuse_proj", torch.cat([cond, conv(s, p + ".z_proj", z)], dim=1))
    c = temb(s, p + ".t_embedder", x.shape[0])
    for i in range(TINY_VAE["encoder_blocks"]):
        h = dico(s, f"{p}.blocks.{i}", h, c)
    return conv(s, p + ".proj_out", ln2d(s, p + ".norm_out", h))[:, :128]


def window_attn(s, p, x, d=32):
    h = gn(s, p + ".norm", x)
    q, k, v = (conv(s, f"{p}.{n}", h) for n in "qkv")
    b, c, H, W = q.shape
    ph, pw = (d - H % d) % d, (d - W % d) % d
    q, k, v = (F.pad(t, (0, pw, 0, ph), mode="replicate") for t in (q, k, v))
    nh, nw = q.shape[2] // d, q.shape[3] // d
    patches = lambda t: t.reshape(b, c, nh, d, nw, d).permute(0, 2, 4, 1, 3, 5).reshape(b * nh * nw, c, d * d)  # noqa
    q, k, v = patches(q), patches(k), patches(v)
    w = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(c), dim=-1)  # [n, dd, dd]
    out = (w @ v.transpose(1, 2)).transpose(1, 2)  # [n, c, dd]
    out = out.reshape(b, nh, nw, c, d, d).permute(0, 3, 1, 4, 2, 5).reshape(b, c, nh * d, nw * d)[:, :, :H, :W]
    return x + conv(s, p + ".proj_out", out)


def resnet(s, p, x):
    h = conv(s, p + ".conv1", F.silu(gn(s, p + ".norm1", x)), padding=1)
    return x + conv(s, p + ".conv2", F.silu(gn(s, p + ".norm2", h)), padding=1)


def ref_decode(s, z):
    p = "decoder_model"
    cd = p + ".y_embedder.decoder"
    h = conv(s, cd + ".conv_in", z, padding=1)
    for i, kind in enumerate((resnet, window_attn, resnet, window_attn, resnet)):
        h = kind(s, f"{cd}.block.{i}", h)
    cond = conv(s, cd + ".conv_out", F.silu(gn(s, cd + ".norm_out", h)), padding=1)
    b, _, hh, ww = z.shape
    ps, wx = 16, TINY_VAE["hidden_x"]
    noise = torch.zeros(b, 3, hh * ps, ww * ps)
    c = temb(s, p + ".t_embedder", b)
    sm = conv(s, p + ".s_embedder.proj2", torch.cat([F.conv2d(noise, s[p + ".s_embedder.proj1.weight"], stride=ps),
                                                      cond], dim=1))
    for i in range(TINY_VAE["cond_blocks"]):
        sm = dico(s, f"{p}.blocks.{i}", sm, c)
    L = hh * ww
    sm = sm.permute(0, 2, 3, 1).reshape(-1, sm.shape[1])
    x = torch.cat([F.unfold(noise, ps, stride=ps), conv(s, p + ".y_embedder_x", cond).flatten(2)], dim=1)
    x = x.reshape(b, -1, ps * ps, L).permute(0, 3, 2, 1).flatten(0, 1)  # [bL, p2, 3 + wx]
    pos = torch.linspace(0, 1, ps)
    py, px = torch.meshgrid(pos, pos, indexing="ij")
    fr = torch.linspace(0, 8, 8)
    fx, fy = fr[None, :, None], fr[None, None, :]
    dct = torch.cos(px.reshape(-1, 1, 1) * fx * math.pi) * torch.cos(py.reshape(-1, 1, 1) * fy * math.pi) / (1 + fx * fy)
    x = lin(s, p + ".x_embedder.embedder.0", torch.cat([x, dct.reshape(1, ps * ps, 64).expand(x.shape[0], -1, -1)],
                                                       dim=-1))
    x = lin(s, p + ".dec_net.input_proj", x)
    cc = lin(s, p + ".dec_net.cond_embed", sm).reshape(sm.shape[0], ps * ps, wx)
    for i in range(TINY_VAE["res_blocks"]):
        r = f"{p}.dec_net.res_blocks.{i}"
        sh, sc, g = lin(s, r + ".adaLN_modulation.1", F.silu(cc)).chunk(3, dim=-1)
        hx = F.layer_norm(x, (wx,), s[r + ".in_ln.weight"], s[r + ".in_ln.bias"], eps=1e-6) * (1 + sc) + sh
        x = x + g * lin(s, r + ".mlp.2", F.silu(lin(s, r + ".mlp.0", hx)))
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * s[p + ".final_layer.norm.weight"]
    x = lin(s, p + ".final_layer.linear", x)  # [bL, p2, 3]
    x = x.transpose(1, 2).reshape(b, L, -1)
    return F.fold(x.transpose(1, 2), (hh * ps, ww * ps), kernel_size=ps, stride=ps)


# --- tests --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [(32, 48), (48, 80)])
def test_encode_matches_reference(size) -> None:
    vae, state = tiny_vae()
    pixels = torch.rand(2, *size, 3, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = vae.encode(pixels)
        want = ref_encode(state, pixels.movedim(-1, 1) * 2 - 1)
    assert ours.shape == (2, 128, size[0] // 16, size[1] // 16)
    assert torch.allclose(ours, want, atol=1e-4, rtol=1e-4), (ours - want).abs().max()


@pytest.mark.parametrize("size", [(2, 3), (3, 3)])  # windows of 32 latent pixels: padded (replicate) here
def test_decode_matches_reference(size) -> None:
    vae, state = tiny_vae(2)
    z = torch.randn(1, 128, *size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = vae.decode_raw(z)
        want = ref_decode(state, z)
        image = vae.decode(z)
    assert ours.shape == (1, 3, size[0] * 16, size[1] * 16)
    assert torch.allclose(ours, want, atol=1e-4, rtol=1e-4), (ours - want).abs().max()
    assert image.shape == (1, size[0] * 16, size[1] * 16, 3) and 0 <= image.min() and image.max() <= 1


def test_window_attention_over_several_windows() -> None:
    vae, state = tiny_vae(4)
    x = torch.randn(1, TINY_VAE["hidden"], 40, 70, generator=torch.Generator().manual_seed(5))
    block = vae.decoder_model.y_embedder.decoder.block[1]
    with torch.no_grad():
        ours = block(x)
        want = window_attn(state, "decoder_model.y_embedder.decoder.block.1", x)
    assert torch.allclose(ours, want, atol=1e-4, rtol=1e-4)


def test_release_layout_loads_through_the_vae_loader(tmp_path) -> None:
    from safetensors.torch import save_file

    from comfy_core.patching.vae_build import vae_module_from

    state = tiny_mage_vae_state_dict(6)
    path = tmp_path / "mage_flow_vae_bf16.safetensors"
    save_file(release_layout(state), str(path))
    vae = vae_module_from(path)
    assert isinstance(vae, MageVAE) and vae.config == MageVAEConfig(**TINY_VAE)
    assert vae.downscale_ratio == 16 and vae.latent_channels == 128
    assert torch.equal(vae.state_dict()["decoder_model.y_embedder.decoder.conv_in.weight"],
                       state["decoder_model.y_embedder.decoder.conv_in.weight"])
    assert not any("y_embedder.encoder" in name for name in vae.state_dict())
