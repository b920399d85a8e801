"""Wan HuMo (comfy_core/families/wan/humo.py, `WanHuMoModel` in dit.py) on tiny random files
(tests/fixtures/wan_files.py, variants "humo" (17B layout) and "humo_small" (1.7B)): detection and
family, then against HuMo's equations composed here (HuMo, arXiv 2509.08519; ComfyUI's
`HumoWanModel`): the per-frame audio projection (three Linears with ReLU, LayerNorm per token),
the audio cross-attention between the text cross-attention and the FFN where the video tokens of
latent frame f attend to frame f's audio tokens only, and the reference tokens appended after the
video's (RoPE frames after the video's, zero audio). The Wan self/cross attention are the module's
own (tested against diffusers in test_wan_dit.py); the conditions' extra channels as ComfyUI fills them."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.blocks import WanAttentionBlock
from comfy_core.families.wan.conditions import HUMO_FILL_FIRST, HUMO_FILL_REST, HUMO_FILL_SECOND, WanConditions
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanHuMoModel, WanModel
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX, tiny_wan_state_dict

TOL = 1e-4
DIM, HEADS, TOKENS, AUDIO_DIM, CHANNELS = 256, 2, 16, 32, 128


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_wan_state_dict("humo", seed=5)


@pytest.fixture(scope="module")
def model(state) -> WanModel:
    net = WanModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


def test_detection_family_and_comfy_config(state, model):
    config = WanConfig.detect_from_weights(state)
    assert (config.model_type, config.variant, config.in_dim, config.audio_token_num, config.humo_audio_channels,
            config.humo_audio_hidden, config.humo_audio_dim) == ("humo", "humo", 36, TOKENS, CHANNELS, 24, AUDIO_DIM)
    assert isinstance(model, WanHuMoModel)
    unet = config.comfy_unet_config()
    assert unet["model_type"] == "humo" and not any(k.startswith("humo_") or k == "audio_token_num" for k in unet)
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    assert default_registry().detect_diffusion_model(header).family.name == "wan21_humo"  # 1.7B: test_wan_dit.py
    wrong = dict(state, **{"blocks.1.audio_cross_attn_wrapper.audio_cross_attn.k.weight": torch.zeros(DIM, 8)})
    with pytest.raises(WanConfigError, match=r"blocks\.1\.audio_cross_attn_wrapper"):
        WanConfig.detect_from_weights(wrong)
    bad_in = dict(state, **{"audio_proj.audio_proj_glob_1.layer.weight": torch.zeros(24, 41)})
    with pytest.raises(WanConfigError, match="Whisper width"):
        WanConfig.detect_from_weights(bad_in)


def _lin(state, name, x):
    return F.linear(x, state[f"{name}.weight"], state[f"{name}.bias"])


def _project(state, audio):
    """HuMo's audio projection, composed: `[B, F, 8, 5, C]` -> `[B, F, 16, D_a]`."""
    b, f = audio.shape[:2]
    h = torch.relu(_lin(state, "audio_proj.audio_proj_glob_1.layer", audio.reshape(b, f, -1)))
    h = torch.relu(_lin(state, "audio_proj.audio_proj_glob_2.layer", h))
    tokens = _lin(state, "audio_proj.audio_proj_glob_3.layer", h).reshape(b, f, TOKENS, AUDIO_DIM)
    return F.layer_norm(tokens, (AUDIO_DIM,), state["audio_proj.audio_proj_glob_norm.layer.weight"],
                        state["audio_proj.audio_proj_glob_norm.layer.bias"], 1e-5)


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _audio_attention(state, i, x, audio_tokens):
    """`x + o(attn)`, each latent frame's video tokens on that frame's audio tokens (per head)."""
    p = f"blocks.{i}.audio_cross_attn_wrapper"
    normed = F.layer_norm(x, (DIM,), state[f"{p}.norm1_audio.weight"], state[f"{p}.norm1_audio.bias"], 1e-6)
    q = _rms(_lin(state, f"{p}.audio_cross_attn.q", normed), state[f"{p}.audio_cross_attn.norm_q.weight"])
    k = _rms(_lin(state, f"{p}.audio_cross_attn.k", audio_tokens), state[f"{p}.audio_cross_attn.norm_k.weight"])
    v = _lin(state, f"{p}.audio_cross_attn.v", audio_tokens)
    b, length, _ = x.shape
    frames = audio_tokens.shape[1] // TOKENS
    per = length // frames
    d = DIM // HEADS
    out = torch.zeros_like(x)
    for bi in range(b):
        for f in range(frames):
            for h in range(HEADS):
                qf = q[bi, f * per:(f + 1) * per, h * d:(h + 1) * d]
                kf = k[bi, f * TOKENS:(f + 1) * TOKENS, h * d:(h + 1) * d]
                vf = v[bi, f * TOKENS:(f + 1) * TOKENS, h * d:(h + 1) * d]
                weights = torch.softmax(qf @ kf.T / d ** 0.5, dim=-1)
                out[bi, f * per:(f + 1) * per, h * d:(h + 1) * d] = weights @ vf
    return x + _lin(state, f"{p}.audio_cross_attn.o", out)


def test_audio_projection_equations(model, state):
    audio = torch.randn(2, 3, 8, 5, CHANNELS, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model.audio_proj(audio)
    torch.testing.assert_close(got, _project(state, audio), atol=TOL, rtol=TOL)
    with pytest.raises(ValueError, match="audio_embed must be"):
        model.audio_proj(torch.zeros(1, 3, 8, 4, CHANNELS))


def test_block_adds_frame_audio_attention_before_the_ffn(model, state):
    g = torch.Generator().manual_seed(2)
    block = model.blocks[1]
    plain = WanAttentionBlock("t2v_cross_attn", DIM, 96, HEADS, qk_norm=True, cross_attn_norm=True)
    plain.load_state_dict({k: v for k, v in block.state_dict().items() if "audio_cross_attn_wrapper" not in k})
    frames, per = 2, 4
    x = torch.randn(1, frames * per, DIM, generator=g)
    e = 0.3 * torch.randn(1, 6, DIM, generator=g)
    context = torch.randn(1, 5, DIM, generator=g)
    freqs = model.rope_encode(frames, 4, 4)
    audio = torch.randn(1, frames * TOKENS, AUDIO_DIM, generator=g)
    # the FFN's gate closed: the plain block gives the tokens after the two attentions
    closed = e.clone()
    closed[:, 5] = -block.modulation[0, 5].detach()
    with torch.no_grad():
        x1 = plain(x, closed, freqs, context)
        x2 = _audio_attention(state, 1, x1, audio)
        torch.testing.assert_close(block(x, closed, freqs, context, audio=audio), x2, atol=TOL, rtol=TOL)
        # the open gate: the FFN on the tokens after the audio attention
        mod = block.modulation.detach() + e
        hidden = F.layer_norm(x2, (DIM,), eps=1e-6) * (1 + mod[:, 4:5]) + mod[:, 3:4]
        ffn = _lin(state, "blocks.1.ffn.2", F.gelu(_lin(state, "blocks.1.ffn.0", hidden), approximate="tanh"))
        torch.testing.assert_close(block(x, e, freqs, context, audio=audio), x2 + ffn * mod[:, 5:6],
                                   atol=TOL, rtol=TOL)
        torch.testing.assert_close(block(x, e, freqs, context), plain(x, e, freqs, context), atol=TOL, rtol=TOL)
        with pytest.raises(ValueError, match="cannot be split"):
            block(x[:, :7], e, freqs[:, :7], context, audio=audio)


def test_model_appends_reference_tokens_and_pads_their_audio(model, state):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(1, 36, 2, 4, 4, generator=g)
    ref = torch.randn(1, 36, 1, 4, 4, generator=g)
    context = torch.randn(1, 5, 32, generator=g)
    t = torch.tensor([700.0])
    audio = torch.randn(1, 2, 8, 5, CHANNELS, generator=g)
    plain = WanModel.from_config(WanConfig(**{**WanConfig.detect_from_weights(state).params(), "model_type": "t2v"}))
    plain.load_state_dict({k: v for k, v in state.items() if "audio" not in k}, strict=True)
    plain.eval()
    seen = []
    hook = model.blocks[0].register_forward_pre_hook(lambda mod, args, kwargs: seen.append(kwargs.get("audio")),
                                                     with_kwargs=True)
    try:
        with torch.no_grad():
            # without audio, the reference is the plain DiT's frames appended along T
            torch.testing.assert_close(model(x, t, context, reference_latent=ref),
                                       plain(x, t, context, time_dim_concat=ref), atol=TOL, rtol=TOL)
            spoken = model(x, t, context, audio_embed=audio, reference_latent=ref)
    finally:
        hook.remove()
    padded = torch.cat([audio, torch.zeros(1, 1, 8, 5, CHANNELS)], dim=1)
    torch.testing.assert_close(seen[-1], _project(state, padded).reshape(1, 3 * TOKENS, AUDIO_DIM), atol=TOL, rtol=TOL)
    assert spoken.shape == (1, 16, 2, 4, 4)
    assert (spoken - model(x, t, context, reference_latent=ref)).abs().max() > 1e-3


class _Model:
    latent_format = type("F", (), {"channels": 16})()

    def __init__(self, in_dim: int) -> None:
        self.diffusion_model = type("D", (), {"patch_embedding": torch.nn.Conv3d(in_dim, 4, (1, 2, 2))})()

    @staticmethod
    def process_latent_in(v):
        return v * 2.0


def test_conditions_fill_humo_inputs_as_comfyui():
    noise = torch.zeros(2, 16, 3, 4, 4)
    ref = torch.ones(1, 16, 1, 4, 4)
    audio = torch.ones(1, 3, 8, 5, CHANNELS)
    conds = WanConditions("humo")
    big, small = _Model(36), _Model(16)
    concat = conds.concat_cond(big, noise=noise)
    assert concat.shape == (2, 20, 3, 4, 4) and torch.equal(concat[:, :4], torch.zeros(2, 4, 3, 4, 4))
    for frame, values in ((0, HUMO_FILL_FIRST), (1, HUMO_FILL_SECOND), (2, HUMO_FILL_REST)):
        assert torch.equal(concat[0, 4:, frame, 1, 2], torch.tensor(values))
    assert conds.concat_cond(small, noise=noise) is None
    out = conds.extra_conds(big, noise=noise, reference_latents=[ref * 5, ref], audio_embed=audio)
    assert out["audio_embed"] is audio
    full = out["reference_latent"]
    assert full.shape == (1, 36, 1, 4, 4)
    assert torch.equal(full[:, :16], torch.zeros(1, 16, 1, 4, 4)) and torch.equal(full[:, 16:20], torch.ones(1, 4, 1, 4, 4))
    assert torch.equal(full[:, 20:], ref * 2)
    assert torch.equal(conds.extra_conds(small, noise=noise, reference_latents=[ref])["reference_latent"], ref * 2)
