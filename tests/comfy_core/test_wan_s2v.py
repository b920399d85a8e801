"""Wan 2.2 S2V (comfy_core/families/wan/s2v.py, `WanS2VModel` in dit.py) on a tiny random file
(tests/fixtures/wan_files.py, variant "s2v"): detection and family, then the network against a
reference composed here from S2V's equations (Wan-Video/Wan2.2 `wan/modules/s2v/`, ComfyUI's
`WanModel_S2V`): the layer-mixed audio features through the causal conv encoder, AdaIN'd
per-frame audio cross-attention after the injected blocks, the trainable condition rows, the
reference image tokens at RoPE frame max(30, T + 9), the frame-packed motion tokens and
ComfyUI's timestep layout. The Wan blocks, head and RoPE are the module's own (tested against
diffusers in test_wan_dit.py)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.blocks import sinusoidal_embedding_1d
from comfy_core.families.wan.conditions import WanConditions
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel, WanS2VModel
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX, tiny_wan_state_dict

TOL = 1e-4
DIM, HEADS, TOKENS, AUDIO_DIM, LAYERS = 256, 2, 2, 32, 3


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_wan_state_dict("s2v", seed=3)


@pytest.fixture(scope="module")
def model(state) -> WanModel:
    net = WanModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


def test_detection_family_and_comfy_config(state, model):
    config = WanConfig.detect_from_weights(state)
    assert (config.model_type, config.variant, config.audio_dim, config.num_audio_token, config.audio_layers,
            config.enable_adain, config.cond_dim) == ("s2v", "s2v", AUDIO_DIM, TOKENS, LAYERS, True, 16)
    assert isinstance(model, WanS2VModel)
    unet = config.comfy_unet_config()
    assert unet["model_type"] == "s2v" and "audio_dim" not in unet and "cond_dim" not in unet
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    assert default_registry().detect_diffusion_model(header).family.name == "wan22_s2v"
    fewer = {k: v for k, v in state.items() if not k.startswith("audio_injector.injector.11.")}
    with pytest.raises(WanConfigError, match="11 audio injectors"):
        WanConfig.detect_from_weights(fewer)


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _attend(q, k, v, heads):
    b, n, c = q.shape
    d = c // heads
    q, k, v = (t.reshape(b, -1, heads, d).transpose(1, 2) for t in (q, k, v))
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)
    return (w @ v).transpose(1, 2).reshape(b, n, c)


def _audio_tokens(sd, audio_embed, frames):
    """The causal audio encoder: (global [B, T, C], local [B, T, n + 1, C])."""
    p = "casual_audio_encoder."
    w = F.silu(sd[p + "weights"])                                        # [1, L, 1, 1]
    feats = audio_embed[..., :4 * frames]                                # [B, L, D_a, 4T]
    mixed = (feats * w).sum(1) / w.sum(1)                                # [B, D_a, 4T]

    def conv(name, x, stride):
        return F.conv1d(F.pad(x, (2, 0), mode="replicate"), sd[f"{p}encoder.{name}.conv.weight"],
                        sd[f"{p}encoder.{name}.conv.bias"], stride=stride)

    def norm_act(x):  # over channels of [B, C, T]
        return F.silu(F.layer_norm(x.transpose(1, 2), (x.shape[1],), eps=1e-6)).transpose(1, 2)

    def tail(x):
        return norm_act(conv("conv3", norm_act(conv("conv2", norm_act(x), 2)), 2)).transpose(1, 2)  # [B, T, C]

    local = conv("conv1_local", mixed, 1)
    q = DIM // 4
    heads = [tail(local[:, h * q:(h + 1) * q]) for h in range(TOKENS)]
    pad = sd[p + "encoder.padding_tokens"][0, 0].expand_as(heads[0])
    glob = tail(conv("conv1_global", mixed, 1))
    glob = F.linear(glob, sd[p + "encoder.final_linear.weight"], sd[p + "encoder.final_linear.bias"])
    return glob, torch.stack(heads + [pad], dim=2)


def _reference(model, sd, x, t, context, audio_embed, ref, motion, control):
    b, _, frames, h, w = x.shape
    glob, local = _audio_tokens(sd, audio_embed, frames)
    rows = sd["trainable_cond_mask.weight"]

    def patch(conv, latent, stride):
        return F.conv3d(latent, sd[conv + ".weight"], sd[conv + ".bias"], stride=stride).flatten(2).transpose(1, 2)

    video = patch("patch_embedding", x, (1, 2, 2)) + patch("cond_encoder", control, (1, 2, 2)) + rows[0]
    seq = video.shape[1]
    reference = patch("patch_embedding", ref, (1, 2, 2)) + rows[1]
    packed = torch.zeros(b, 16, 19, h, w)
    packed[:, :, -motion.shape[2]:] = motion[:, :, -19:]
    motion_tokens = torch.cat([patch("frame_packer.proj", packed[:, :, 18:], (1, 2, 2)),
                               patch("frame_packer.proj_2x", packed[:, :, 16:18], (2, 4, 4)),
                               patch("frame_packer.proj_4x", packed[:, :, :16], (4, 8, 8))], dim=1) + rows[2]
    tokens = torch.cat([video, reference, motion_tokens], dim=1)
    freqs = torch.cat([model.rope_encode(frames, h, w), model.rope_encode(1, h, w, t_start=max(30, frames + 9)),
                       model.rope_encode(1, h, w, t_start=-1),
                       model.rope_encode(1, h, w, t_start=-3, steps_h=h // 4, steps_w=w // 4),
                       model.rope_encode(4, h, w, t_start=-19, steps_h=h // 8, steps_w=w // 8)], dim=1)
    # ComfyUI's layout: one row per video frame, 0 for the reference, each doubled, three zeros
    per_frame = torch.cat([t[:, None].repeat(1, frames), torch.zeros(b, 1)], dim=1)
    rows_t = torch.cat([per_frame.repeat_interleave(2, dim=1), torch.zeros(b, 3)], dim=1)
    e = model.time_embedding(sinusoidal_embedding_1d(256, rows_t.flatten())).reshape(b, -1, DIM)
    e0 = model.time_projection(e).unflatten(2, (6, DIM))
    ctx = model.text_embedding(context)
    for i, block in enumerate(model.blocks):
        tokens = block(tokens, e=e0, freqs=freqs, context=ctx, context_img_len=None)
        if i == 0:  # ComfyUI's first injection layer (block 0 -> injector 0); the next is block 4
            p = "audio_injector."
            per_frame_tokens = tokens[:, :seq].reshape(b * frames, seq // frames, DIM)
            shift, scale = F.linear(F.silu(glob.reshape(b * frames, DIM)), sd[p + "injector_adain_layers.0.linear.weight"],
                                    sd[p + "injector_adain_layers.0.linear.bias"]).chunk(2, dim=1)
            query = F.layer_norm(per_frame_tokens, (DIM,), eps=1e-5) * (1 + scale[:, None]) + shift[:, None]
            audio = local.reshape(b * frames, TOKENS + 1, DIM)

            def lin(name, v):
                return F.linear(v, sd[f"{p}injector.0.{name}.weight"], sd[f"{p}injector.0.{name}.bias"])

            out = _attend(_rms(lin("q", query), sd[p + "injector.0.norm_q.weight"]),
                          _rms(lin("k", audio), sd[p + "injector.0.norm_k.weight"]), lin("v", audio), HEADS)
            tokens = torch.cat([tokens[:, :seq] + lin("o", out).reshape(b, seq, DIM), tokens[:, seq:]], dim=1)
    return model.unpatchify(model.head(tokens, e), (frames, h // 2, w // 2))


def _inputs(seed=5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, 2, 8, 8, generator=g)
    context = torch.randn(1, 6, 32, generator=g)
    audio_embed = torch.randn(1, LAYERS, AUDIO_DIM, 12, generator=g)      # more frames than 4T: cut
    ref = torch.randn(1, 16, 1, 8, 8, generator=g)
    motion = torch.randn(1, 16, 5, 8, 8, generator=g)                    # fewer than 19: zero-padded
    control = torch.randn(1, 16, 2, 8, 8, generator=g)
    return x, context, audio_embed, ref, motion, control


def test_forward_equals_the_composed_equations(model, state):
    x, context, audio_embed, ref, motion, control = _inputs()
    t = torch.tensor([700.0])
    with torch.no_grad():
        ours = model(x, t, context, audio_embed=audio_embed, reference_latent=ref, reference_motion=motion,
                     control_video=control)
        want = _reference(model, state, x, t, context, audio_embed, ref, motion, control)
    assert ours.shape == x.shape
    torch.testing.assert_close(ours, want, atol=TOL, rtol=TOL)


def test_audio_moves_the_output_and_plain_inputs_run(model):
    x, context, audio_embed, *_ = _inputs(6)
    t = torch.tensor([500.0])
    with torch.no_grad():
        silent = model(x, t, context, audio_embed=torch.zeros_like(audio_embed))
        spoken = model(x, t, context, audio_embed=audio_embed)
        bare = model(x, t, context)
    assert (spoken - silent).abs().max() > 1e-3
    assert bare.shape == x.shape and torch.isfinite(bare).all()


def test_conditions_give_the_s2v_inputs_in_model_space():
    class Model:
        latent_format = type("F", (), {"channels": 16})()

        @staticmethod
        def process_latent_in(v):
            return v * 2.0

    noise = torch.zeros(1, 16, 2, 4, 4)
    ref, motion, control = torch.ones(1, 16, 1, 4, 4), torch.ones(1, 16, 3, 4, 4), torch.ones(1, 16, 2, 4, 4)
    audio = torch.ones(1, 3, 8, 8)
    out = WanConditions("s2v").extra_conds(Model(), noise=noise, reference_latents=[ref * 5, ref],
                                           reference_motion=motion, control_video=control, audio_embed=audio)
    assert out["reference_latent"].shape == (1, 16, 1, 4, 4) and torch.equal(out["reference_latent"], ref * 2)
    assert torch.equal(out["reference_motion"], motion * 2) and torch.equal(out["control_video"], control * 2)
    assert out["audio_embed"] is audio
