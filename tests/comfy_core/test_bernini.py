"""Bernini-R on the Wan DiT (comfy_core/families/wan/bernini.py and its hooks in wan/dit.py,
wan/conditions.py): its files are plain Wan 2.2 A14B t2v experts (detected as such); the network
with `context_latents` against its equations composed here by hand on tiny random weights (the
streams' tokens after the video's through every block, each stream's own 3-D RoPE grid from 0 turned
by `source_id * 10000^(-2j/D)` on channel pair j, ScaleROPE's options on every grid, the streams cut
off after the head); the plain network without them; ComfyUI's `WAN21.extra_conds` (each latent in
model space); the streams batched through CFG (ComfyUI's CONDList); variants that cannot take them."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.bernini import CONTEXT_LATENTS, source_rotation
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.families.wan.dit import WanConfig, WanModel
from comfy_core.models.model_conditions import ConditioningError
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX, tiny_wan_state_dict

TOL = 1e-4
DIM, HEADS, HEAD_DIM, TEXT = 256, 2, 128, 32
B, T, H, W = 2, 2, 4, 6  # the noisy latent: 2 frames of 2 x 3 patches


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_wan_state_dict("t2v", seed=11, text_dim=TEXT)


@pytest.fixture(scope="module")
def model(state) -> WanModel:
    net = WanModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    # a source video as long as the output, and a one-frame reference image of another size (odd: padded)
    return dict(x=rnd(B, 16, T, H, W), t=torch.tensor([800.0, 800.0]), context=rnd(B, 5, TEXT),
                source=rnd(B, 16, T, H, W), image=rnd(B, 16, 1, 3, 8))


def test_the_release_is_a_plain_wan22_a14b_t2v_file(tmp_path):
    from safetensors import safe_open

    from tests.fixtures.template_models_bernini import WRITERS_BERNINI, file_kind_bernini

    name = "wan2.2_bernini_r_high_noise_fp8_scaled.safetensors"
    assert file_kind_bernini("diffusion_models", name) == "unet_wan_bernini_r_scaled"
    WRITERS_BERNINI["unet_wan_bernini_r_scaled"](tmp_path / name)
    with safe_open(str(tmp_path / name), "pt") as f:
        header = {SINGLE_FILE_PREFIX + k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in f.keys()}
    family = default_registry().detect_diffusion_model(header).family
    assert (family.name, family.comfy_model_class) == ("wan21_t2v", "WAN21")
    config = WanConfig.detect_from_weights({k[len(SINGLE_FILE_PREFIX):]: v for k, v in header.items()
                                            if not k.endswith(("scale_weight", "scaled_fp8"))})
    assert (config.model_type, config.variant, config.in_dim, config.out_dim) == ("t2v", "t2v", 16, 16)


# -- the equations, by hand ---------------------------------------------------------------------

def _lin(s, name, x):
    return F.linear(x, s[f"{name}.weight"], s[f"{name}.bias"])


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _ln(x, s=None, name=None):
    if name is None:
        return F.layer_norm(x, (x.shape[-1],), eps=1e-6)
    return F.layer_norm(x, (x.shape[-1],), s[f"{name}.weight"], s[f"{name}.bias"], eps=1e-6)


def _grid(frames, rows, cols, options=None):
    """Positions [L, 3] of a grid from 0, each axis `shift + i * scale` (ScaleROPE)."""
    o = options or {}
    axes = [torch.arange(n, dtype=torch.float64) * o.get(f"scale_{a}", 1.0) + o.get(f"shift_{a}", 0.0)
            for n, a in ((frames, "t"), (rows, "y"), (cols, "x"))]
    f, y, x = torch.meshgrid(*axes, indexing="ij")
    return torch.stack([f, y, x], dim=-1).reshape(-1, 3)


def _angles(pos, source_id=0):
    """[L, 3] positions -> [L, 64] angles: axes of 44, 42, 42 channels (theta 10000), plus the
    stream's turn `source_id * 10000^(-2j/128)` on every pair j."""
    parts = []
    for axis, width in enumerate((44, 42, 42)):
        parts.append(pos[:, axis:axis + 1] * 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width))
    turn = source_id * 10000.0 ** (-torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    return torch.cat(parts, dim=1) + turn


def _rotate(x, angles):
    b, l, _c = x.shape
    z = torch.view_as_complex(x.double().reshape(b, l, HEADS, HEAD_DIM // 2, 2).contiguous())
    z = z * torch.polar(torch.ones_like(angles), angles)[None, :, None]
    return torch.view_as_real(z).reshape(b, l, -1).float()


def _attend(q, k, v):
    b = q.shape[0]
    q, k, v = (t.reshape(b, t.shape[1], HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, DIM)


def _patches(s, latent):
    """Circular padding to even rows / columns (the 1x2x2 patch), then the patch embedding."""
    pad_h, pad_w = latent.shape[-2] % 2, latent.shape[-1] % 2
    if pad_h or pad_w:
        latent = F.pad(latent, (0, pad_w, 0, pad_h, 0, 0), mode="circular")
    out = F.conv3d(latent, s["patch_embedding.weight"], s["patch_embedding.bias"], stride=(1, 2, 2))
    return out.flatten(2).transpose(1, 2), tuple(out.shape[2:])


def reference(s, x, t, context, streams=(), options=None):
    """ComfyUI's Wan forward with Bernini's context latents, written out: tokens [video, stream 1,
    stream 2, ...], full attention with each part's RoPE (stream i turned by i), video tokens out."""
    tokens, grid = _patches(s, x)
    angles = [_angles(_grid(*grid, options))]
    for i, latent in enumerate(streams):
        more, own = _patches(s, latent)
        tokens = torch.cat([tokens, more], dim=1)
        angles.append(_angles(_grid(*own, options), source_id=i + 1))
    angles = torch.cat(angles)
    freqs = 10000.0 ** (-torch.arange(128, dtype=torch.float32) / 128)
    sinus = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], dim=1)
    e = _lin(s, "time_embedding.2", F.silu(_lin(s, "time_embedding.0", sinus)))
    e0 = _lin(s, "time_projection.1", F.silu(e)).view(-1, 6, DIM)
    txt = _lin(s, "text_embedding.2", F.gelu(_lin(s, "text_embedding.0", context), approximate="tanh"))
    xg = tokens
    for i in range(2):
        r = [v.unsqueeze(1) for v in (s[f"blocks.{i}.modulation"] + e0).unbind(1)]
        a, c = f"blocks.{i}.self_attn", f"blocks.{i}.cross_attn"
        h = _ln(xg) * (1 + r[1]) + r[0]
        q = _rotate(_rms(_lin(s, f"{a}.q", h), s[f"{a}.norm_q.weight"]), angles)
        k = _rotate(_rms(_lin(s, f"{a}.k", h), s[f"{a}.norm_k.weight"]), angles)
        xg = xg + _lin(s, f"{a}.o", _attend(q, k, _lin(s, f"{a}.v", h))) * r[2]
        xn = _ln(xg, s, f"blocks.{i}.norm3")
        q = _rms(_lin(s, f"{c}.q", xn), s[f"{c}.norm_q.weight"])
        xg = xg + _lin(s, f"{c}.o", _attend(q, _rms(_lin(s, f"{c}.k", txt), s[f"{c}.norm_k.weight"]),
                                            _lin(s, f"{c}.v", txt)))
        ffn = _lin(s, f"blocks.{i}.ffn.2", F.gelu(_lin(s, f"blocks.{i}.ffn.0", _ln(xg) * (1 + r[4]) + r[3]),
                                                  approximate="tanh"))
        xg = xg + ffn * r[5]
    shift, scale = (s["head.modulation"] + e[:, None]).unbind(1)
    out = _lin(s, "head.head", _ln(xg) * (1 + scale[:, None]) + shift[:, None])[:, :math.prod(grid)]
    frames, rows, cols = grid
    return out.reshape(B, frames, rows, cols, 2, 2, 16).permute(0, 6, 1, 2, 4, 3, 5).reshape(B, 16, T, H, W)


@pytest.mark.parametrize("options", [None, {"shift_y": 3.0, "scale_x": 2.0, "scale_t": 0.5}])
def test_forward_with_streams_matches_the_equations(model, state, inputs, options):
    i = inputs
    streams = [i["source"], i["image"]]
    want = reference(state, i["x"], i["t"], i["context"], streams, options)
    transformer_options = {} if options is None else {"rope_options": options}
    with torch.no_grad():
        got = model(i["x"], i["t"], i["context"], transformer_options=transformer_options,
                    **{CONTEXT_LATENTS: streams})
    assert got.shape == (B, 16, T, H, W)
    torch.testing.assert_close(got, want, atol=TOL, rtol=TOL)


def test_the_stream_order_is_its_identity(model, state, inputs):
    """The same latent twice: as stream 1 and 2 its tokens are told apart by their turn alone."""
    i = inputs
    with torch.no_grad():
        got = model(i["x"], i["t"], i["context"], **{CONTEXT_LATENTS: [i["image"], i["image"]]})
        one = model(i["x"], i["t"], i["context"], **{CONTEXT_LATENTS: [i["image"]]})
    torch.testing.assert_close(got, reference(state, i["x"], i["t"], i["context"], [i["image"], i["image"]]),
                               atol=TOL, rtol=TOL)
    assert (got - one).abs().max() > 1e-3


def test_without_streams_it_is_the_plain_network(model, state, inputs):
    i = inputs
    with torch.no_grad():
        plain = model(i["x"], i["t"], i["context"])
        empty = model(i["x"], i["t"], i["context"], **{CONTEXT_LATENTS: []})
        streams = model(i["x"], i["t"], i["context"], **{CONTEXT_LATENTS: [i["source"]]})
    torch.testing.assert_close(plain, reference(state, i["x"], i["t"], i["context"]), atol=TOL, rtol=TOL)
    assert torch.equal(plain, empty)
    assert (streams - plain).abs().max() > 1e-3


def test_source_rotation_composes_the_angles():
    freqs = torch.zeros(1, 3, 1, 4, 2, 2)
    angles = torch.tensor([0.1, 0.2, 0.3])[:, None] * torch.ones(3, 4)
    freqs[0, :, 0, :, 0, 0], freqs[0, :, 0, :, 0, 1] = torch.cos(angles), -torch.sin(angles)
    freqs[0, :, 0, :, 1, 0], freqs[0, :, 0, :, 1, 1] = torch.sin(angles), torch.cos(angles)
    turned = source_rotation(freqs, 3, 8, 10000.0)
    total = angles + 3 * 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    torch.testing.assert_close(turned[0, :, 0, :, 1, 0], torch.sin(total))
    torch.testing.assert_close(turned[0, :, 0, :, 0, 0], torch.cos(total))
    assert source_rotation(freqs, 0, 8, 10000.0) is freqs


def test_block_patches_see_every_token(model, inputs):
    i = inputs
    seen = []

    def replace(args, extra):
        seen.append(args["img"].shape[1])
        return extra["original_block"](args)

    with torch.no_grad():
        model(i["x"], i["t"], i["context"], transformer_options={"patches_replace": {"dit": {("double_block", 0): replace}}},
              **{CONTEXT_LATENTS: [i["source"], i["image"]]})
    assert seen == [T * 2 * 3 + T * 2 * 3 + 2 * 4]  # video + source + the padded 4 x 8 image


def test_a_variant_with_its_own_forward_refuses_the_streams(state, inputs):
    class OwnForward(WanModel):
        def forward_orig(self, x, t, context, **kwargs):
            return super().forward_orig(x, t, context, **kwargs)

    net = OwnForward.from_config(WanConfig.detect_from_weights(state))
    i = inputs
    with pytest.raises(ValueError, match="in-context latents"):
        net(i["x"], i["t"], i["context"], **{CONTEXT_LATENTS: [i["image"]]})


# -- the model input (ComfyUI's WAN21.extra_conds) ------------------------------------------------

class _Model:
    def __init__(self) -> None:
        from comfy_core.families.wan.latent_format import wan21_latent_format

        self.latent_format = wan21_latent_format()

    def process_latent_in(self, latent):
        return self.latent_format.process_in(latent)


def test_extra_conds_bring_each_stream_into_model_space():
    from comfy_core.families.wan.latent_format import wan21_latent_format

    fmt = wan21_latent_format()
    mean = torch.tensor(fmt.latents_mean).view(1, 16, 1, 1, 1)
    std = torch.tensor(fmt.latents_std).view(1, 16, 1, 1, 1)
    streams = [torch.randn(1, 16, 3, 4, 6), torch.randn(1, 16, 1, 5, 2)]
    for kind in ("wan21", "wan22"):
        out = WanConditions(kind).extra_conds(_Model(), noise=torch.zeros(1, 16, 3, 4, 6), **{CONTEXT_LATENTS: streams})
        assert isinstance(out[CONTEXT_LATENTS], list) and len(out[CONTEXT_LATENTS]) == 2
        for got, latent in zip(out[CONTEXT_LATENTS], streams):
            torch.testing.assert_close(got, (latent - mean) * fmt.scale_factor / std)
    assert CONTEXT_LATENTS not in WanConditions().extra_conds(_Model(), noise=torch.zeros(1, 16, 3, 4, 6))
    for bad in (torch.zeros(1, 16, 1, 4, 6), [torch.zeros(1, 16, 4, 6)], ["latent"]):
        with pytest.raises(ConditioningError, match=CONTEXT_LATENTS):
            WanConditions().extra_conds(_Model(), noise=torch.zeros(1, 16, 3, 4, 6), **{CONTEXT_LATENTS: bad})


def test_sampling_with_streams_on_both_conditionings(tmp_path):
    """cfg > 1: positive and negative run as one batch, their stream lists concatenated element by element."""
    from comfy_core.split.diffusion_model import load_diffusion_model
    from nodes.sampling import ksampler
    from tests.fixtures.wan_files import write_tiny_wan

    model = load_diffusion_model(write_tiny_wan(tmp_path / "bernini.safetensors", "t2v"))
    g = torch.Generator().manual_seed(4)
    text = torch.randn(1, 8, 32, generator=g)
    streams = [torch.randn(1, 16, 2, 4, 6, generator=g), torch.randn(1, 16, 1, 2, 4, generator=g)]
    plain = [[text, {}]], [[torch.zeros(1, 8, 32), {}]]
    keyed = ([[text, {CONTEXT_LATENTS: streams}]], [[torch.zeros(1, 8, 32), {CONTEXT_LATENTS: streams}]])
    latent = {"samples": torch.zeros(1, 16, 2, 4, 6)}
    calls = []
    network = model.model.diffusion_model
    forward = network.forward

    def spy(x, timestep, context, **kwargs):
        calls.append((x.shape[0], [tuple(v.shape) for v in kwargs.get(CONTEXT_LATENTS) or []]))
        return forward(x, timestep, context, **kwargs)

    network.forward = spy
    try:
        out = ksampler(model, 2, 2, 4.0, "euler", "simple", *keyed, latent)[0]["samples"]
    finally:
        del network.forward
    base = ksampler(model, 2, 2, 4.0, "euler", "simple", *plain, latent)[0]["samples"]
    assert out.shape == (1, 16, 2, 4, 6) and torch.isfinite(out).all() and (out - base).abs().max() > 1e-3
    assert calls and all(c == (2, [(2, 16, 2, 4, 6), (2, 16, 1, 2, 4)]) for c in calls)
