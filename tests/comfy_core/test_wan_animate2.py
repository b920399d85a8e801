"""Wan-Animate-2 (comfy_core/families/wan/animate2.py, wan_animate2.py): detection from the file's
metadata, the network against its equations composed here by hand on tiny random weights (the
pose branch's keys and values joined per frame written as one masked attention, the RoPE as complex
rotations), the pose-branch cache and the model inputs."""
from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.animate2 import (Animate2Error, PoseBranchCache, WanAnimate2Model, dequantize_tokens,
                                              quantize_tokens, with_metadata)
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel
from comfy_core.families.wan.wan_animate2 import Animate2Conditions
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX, tiny_wan_state_dict

META = {"config": json.dumps({"transformer": {"model_type": "animate2"}})}
DIM, HEADS, HEAD_DIM = 256, 2, 128
B, T, H, W = 2, 3, 4, 4  # latent: the reference slot + 2 video frames, 2 x 2 patches each


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_wan_state_dict("i2v", seed=11)


@pytest.fixture(scope="module")
def model(state) -> WanAnimate2Model:
    net = WanAnimate2Model.from_config(with_metadata(WanConfig.detect_from_weights(state), META))
    net.load_state_dict(state, strict=True)
    return net.eval()


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    clip = torch.randn(1, 3, 48, generator=g).repeat(B, 1, 1)  # one image for cond and uncond, as the node sets
    return dict(x=torch.randn(B, 36, T, H, W, generator=g), t=torch.tensor([700.0, 700.0]),
                context=torch.randn(B, 5, 32, generator=g), clip=clip,
                pose=torch.randn(1, 16, T - 1, H, W, generator=g).repeat(B, 1, 1, 1, 1),
                context_pose=torch.randn(1, 4, 32, generator=g).repeat(B, 1, 1))


def test_detection_by_metadata(state, model):
    plain = WanConfig.detect_from_weights(state)
    assert plain.model_type == "i2v"
    config = with_metadata(plain, META)
    assert (config.model_type, config.variant, config.in_dim) == ("animate2", "animate2", 36)
    assert config.comfy_unet_config()["model_type"] == "animate2"
    assert isinstance(model, WanAnimate2Model) and model.img_emb is not None
    with pytest.raises(WanConfigError, match="WanAnimate2Model"):  # never silently the plain i2v forward
        WanModel.from_config(config)
    assert with_metadata(plain, {"config": json.dumps({"transformer": {"model_type": "i2v"}})}) == plain
    with pytest.raises(WanConfigError, match="Animate 2"):
        with_metadata(WanConfig.detect_from_weights(tiny_wan_state_dict("t2v", num_layers=1)), META)
    with pytest.raises(WanConfigError, match="'s2v'"):
        with_metadata(plain, {"config": json.dumps({"transformer": {"model_type": "s2v"}})})
    with pytest.raises(WanConfigError, match="not JSON"):
        with_metadata(plain, {"config": "{"})
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    registry = default_registry()
    family = registry.detect_diffusion_model(header, metadata=META).family
    assert family.name == "wan_animate2" and family.sampling.shift == 5.0
    assert family.supported_model.__name__ == "WAN_Animate2" and family.comfy_model_class == "WAN_Animate2"
    assert registry.detect_diffusion_model(header).family.name == "wan21_i2v"


# -- the equations, by hand ---------------------------------------------------------------------

def _lin(s, name, x):
    return F.linear(x, s[f"{name}.weight"], s[f"{name}.bias"])


def _rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _ln(x, s=None, name=None):
    if name is None:
        return F.layer_norm(x, (x.shape[-1],), eps=1e-6)
    return F.layer_norm(x, (x.shape[-1],), s[f"{name}.weight"], s[f"{name}.bias"], eps=1e-5 if "img_emb" in name
                        else 1e-6)


def _angles(pos):
    """[L, 3] positions -> [L, 64] rotation angles: axes of 44, 42, 42 channels, theta 10000."""
    parts = []
    for axis, width in enumerate((44, 42, 42)):
        omega = 10000.0 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
        parts.append(pos[:, axis:axis + 1].double() * omega)
    return torch.cat(parts, dim=1)


def _rotate(x, angles):
    """x [B, L, C] as heads of 128, each channel pair a complex number turned by its angle."""
    b, l, _c = x.shape
    z = torch.view_as_complex(x.double().reshape(b, l, HEADS, HEAD_DIM // 2, 2).contiguous())
    z = z * torch.polar(torch.ones_like(angles), angles)[None, :, None]
    return torch.view_as_real(z).reshape(b, l, -1).float()


def _attend(q, k, v, mask=None):
    b = q.shape[0]
    q, k, v = (t.reshape(b, t.shape[1], HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, DIM)


def _positions(frames, start, col):
    f, y, x = torch.meshgrid(torch.arange(frames) + start, torch.arange(H // 2), torch.arange(W // 2) + col,
                             indexing="ij")
    return torch.stack([f, y, x], dim=-1).reshape(-1, 3).float()


def _embed(s, latent):
    out = F.conv3d(latent, s["patch_embedding.weight"], s["patch_embedding.bias"], stride=(1, 2, 2))
    return out.flatten(2).transpose(1, 2)


def _time(s, t):
    freqs = 10000.0 ** (-torch.arange(128, dtype=torch.float32) / 128)
    sinus = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], dim=1)
    e = _lin(s, "time_embedding.2", F.silu(_lin(s, "time_embedding.0", sinus)))
    return e, _lin(s, "time_projection.1", F.silu(e)).view(-1, 6, DIM)


def _context(s, text, clip):
    txt = _lin(s, "text_embedding.2", F.gelu(_lin(s, "text_embedding.0", text), approximate="tanh"))
    img = _ln(_lin(s, "img_emb.proj.3", F.gelu(_lin(s, "img_emb.proj.1", _ln(clip, s, "img_emb.proj.0")))), s,
              "img_emb.proj.4")
    return img, txt


def _rows(s, i, e0):
    return [r.unsqueeze(1) for r in (s[f"blocks.{i}.modulation"] + e0).unbind(1)]


def _qkv(s, i, h, angles):
    a = f"blocks.{i}.self_attn"
    return (_rotate(_rms(_lin(s, f"{a}.q", h), s[f"{a}.norm_q.weight"]), angles),
            _rotate(_rms(_lin(s, f"{a}.k", h), s[f"{a}.norm_k.weight"]), angles), _lin(s, f"{a}.v", h))


def _rest(s, i, x, y, r, img, txt):
    a = f"blocks.{i}.cross_attn"
    x = x + y * r[2]
    xn = _ln(x, s, f"blocks.{i}.norm3")
    q = _rms(_lin(s, f"{a}.q", xn), s[f"{a}.norm_q.weight"])
    out = _attend(q, _rms(_lin(s, f"{a}.k", txt), s[f"{a}.norm_k.weight"]), _lin(s, f"{a}.v", txt))
    out = out + _attend(q, _rms(_lin(s, f"{a}.k_img", img), s[f"{a}.norm_k_img.weight"]), _lin(s, f"{a}.v_img", img))
    x = x + _lin(s, f"{a}.o", out)
    ffn_in = _ln(x) * (1 + r[4]) + r[3]
    return x + _lin(s, f"blocks.{i}.ffn.2", F.gelu(_lin(s, f"blocks.{i}.ffn.0", ffn_in), approximate="tanh")) * r[5]


def reference(s, x, t, context, clip, pose, context_pose, pose_strength=1.0, reference_strength=1.0):
    frames, hw = T, (H // 2) * (W // 2)
    xg = _embed(s, x)
    xp = _embed(s, torch.cat([pose, torch.ones_like(pose[:, :4]), pose], dim=1))
    e, e0 = _time(s, t)
    _ep, e0p = _time(s, torch.ones_like(t))
    img, txt = _context(s, context, clip)
    _img_p, txt_p = _context(s, context_pose, clip)
    ang_g = _angles(_positions(frames, 0, 0))
    ang_p = _angles(_positions(frames - 1, 1, W // 2))  # frames from 1, columns right of the video's
    # generation token (frame j) may see every generation token and the tokens of pose frame j - 1
    lg, lp = xg.shape[1], xp.shape[1]
    frame_of = torch.arange(lg) // hw
    pose_frame_of = torch.arange(lp) // hw
    mask = torch.cat([torch.ones(lg, lg, dtype=torch.bool), pose_frame_of[None, :] == frame_of[:, None] - 1], dim=1)
    for i in range(2):
        r = _rows(s, i, e0)
        rp = _rows(s, i, e0p)
        hp = _ln(xp) * (1 + rp[1]) + rp[0]
        qp, kp, vp = _qkv(s, i, hp, ang_p)
        h = _ln(xg) * (1 + r[1]) + r[0]
        q, k, v = _qkv(s, i, h, ang_g)
        v = torch.cat([v[:, :hw] * reference_strength, v[:, hw:]], dim=1)
        y = _lin(s, f"blocks.{i}.self_attn.o", _attend(q, torch.cat([k, kp], 1), torch.cat([v, vp * pose_strength], 1),
                                                     mask))
        yp = _lin(s, f"blocks.{i}.self_attn.o", _attend(qp, kp, vp))
        xg = _rest(s, i, xg, y, r, img, txt)
        xp = _rest(s, i, xp, yp, rp, img, txt_p)
    shift, scale = (s["head.modulation"] + e[:, None]).unbind(1)
    out = _lin(s, "head.head", _ln(xg) * (1 + scale[:, None]) + shift[:, None])  # [B, L, 2 * 2 * 16]
    out = out.reshape(B, frames, H // 2, W // 2, 2, 2, 16).permute(0, 6, 1, 2, 4, 3, 5)
    return out.reshape(B, 16, frames, H, W)


def test_forward_matches_equations(model, state, inputs):
    i = inputs
    want = reference(state, i["x"], i["t"], i["context"], i["clip"], i["pose"], i["context_pose"],
                     pose_strength=0.7, reference_strength=1.3)
    with torch.no_grad():
        got = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"],
                    context_pose=i["context_pose"], pose_strength=0.7, reference_strength=1.3)
    assert got.shape == (B, 16, T, H, W)
    torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
    with torch.no_grad():  # the pose prompt defaults to the prompt
        default = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"])
    torch.testing.assert_close(default, reference(state, i["x"], i["t"], i["context"], i["clip"], i["pose"],
                                                  i["context"]), atol=2e-4, rtol=1e-4)


def test_without_pose_it_is_the_i2v_network(model, state, inputs):
    i2v = WanModel.from_config(WanConfig.detect_from_weights(state))
    i2v.load_state_dict(state)
    with torch.no_grad():
        got = model(inputs["x"], inputs["t"], inputs["context"], clip_fea=inputs["clip"])
        want = i2v.eval()(inputs["x"], inputs["t"], inputs["context"], clip_fea=inputs["clip"])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_block_replace_wraps_the_generation_block(model, inputs):
    i = inputs
    kwargs = dict(clip_fea=i["clip"], pose_latents=i["pose"], context_pose=i["context_pose"])
    seen = []

    def replace(args, extra):
        seen.append(sorted(args))
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 1): replace}}}
    with torch.no_grad():
        plain = model(i["x"], i["t"], i["context"], **kwargs)
        wrapped = model(i["x"], i["t"], i["context"], transformer_options=options, **kwargs)
        skipped = model(i["x"], i["t"], i["context"], transformer_options={
            "patches_replace": {"dit": {("double_block", 1): lambda args, extra: {"img": args["img"]}}}}, **kwargs)
    assert seen == [["img", "pe", "transformer_options", "txt", "vec"]]
    torch.testing.assert_close(wrapped, plain)
    assert not torch.allclose(skipped, plain)


# "default" stores the pose branch as computed: equal up to float summation order (the branch run
# with or without the generation tokens in one matmul), hence 1e-6 relative rather than 0.
@pytest.mark.parametrize("dtype, tol", [("default", 1e-6), ("int8", 0.05), ("int4", 0.5)])
def test_pose_cache_reuses_the_pose_branch(model, inputs, dtype, tol):
    i = inputs
    kwargs = dict(clip_fea=i["clip"], pose_latents=i["pose"], context_pose=i["context_pose"])
    cache = PoseBranchCache("cpu", dtype)
    with torch.no_grad():
        plain = model(i["x"], i["t"], i["context"], **kwargs)
        first = model(i["x"], i["t"], i["context"], transformer_options={"animate2_cache": cache}, **kwargs)
        assert cache.filled(2) and cache.reads == 0
        second = model(i["x"], i["t"] * 0.5, i["context"], transformer_options={"animate2_cache": cache}, **kwargs)
        assert cache.reads == 2
        plain_second = model(i["x"], i["t"] * 0.5, i["context"], **kwargs)
        # under context windows the pose branch runs alone first, then every block reads the cache
        windowed = PoseBranchCache("cpu", dtype)
        prepass = model(i["x"], i["t"], i["context"],
                        transformer_options={"animate2_cache": windowed, "context_window": object()}, **kwargs)
    torch.testing.assert_close(first, plain, atol=0, rtol=0)
    assert (second - plain_second).abs().max() <= tol * plain_second.abs().max() + 1e-6
    assert windowed.reads == 2 and (prepass - plain).abs().max() <= tol * plain.abs().max() + 1e-6
    other = i["pose"] + 1.0
    assert not cache.select(other[:1]) and len(cache.slots) == 2 and not cache.filled(2)
    assert cache.select(i["pose"][:1]) and cache.filled(2)
    fresh = copy.deepcopy({"animate2_cache": cache})["animate2_cache"]
    assert fresh.dtype == dtype and fresh.slots == [] and fresh is not cache
    cache.free()
    assert cache.memory_bytes() == 0 and cache.slots == []


def test_token_quantization_with_convrot():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 256, generator=g)
    x[..., 7] *= 100.0  # an outlier channel, which the rotation spreads over its group
    for dtype, bytes_per_value, tol in (("int8", 1, 0.02), ("int4", 0.5, 0.3)):
        values, scale, group = quantize_tokens(x, dtype)
        assert group == 256 and values.numel() * values.element_size() == x.numel() * bytes_per_value
        back = dequantize_tokens(values, scale, group, dtype, x.shape, "cpu", torch.float32)
        assert (back - x).abs().max() <= tol * x.abs().max()
    assert quantize_tokens(torch.ones(1, 3, 48), "int8")[2] == 16  # the largest power of 4 dividing 48


def test_a_context_window_takes_its_pose_frames(model, inputs):
    """A 3-frame window [3, 4, 5] of a 6-frame latent: pose frames 3 and 4 (of 5) go with its generation
    frames 4 and 5, its frame 3 is the reference slot."""
    i = inputs
    pose = torch.randn(1, 16, 5, H, W, generator=torch.Generator().manual_seed(9)).repeat(B, 1, 1, 1, 1)
    window = type("Window", (), {"index_list": [3, 4, 5]})()
    kwargs = dict(clip_fea=i["clip"], context_pose=i["context_pose"])
    with torch.no_grad():
        windowed = model(i["x"], i["t"], i["context"], pose_latents=pose,
                         transformer_options={"context_window": window}, **kwargs)
        direct = model(i["x"], i["t"], i["context"], pose_latents=pose[:, :, 3:5], **kwargs)
    torch.testing.assert_close(windowed, direct, atol=0, rtol=0)


def test_wrong_pose_latents_are_refused(model, inputs):
    i = inputs
    with pytest.raises(Animate2Error, match="expected 2 latent frames"):
        model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"][:, :, :1])
    with pytest.raises(Animate2Error, match="2 x latent"):
        model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"][:, :8])


class _Model:
    latent_format = type("Fmt", (), {"channels": 16})()

    @staticmethod
    def process_latent_in(latent):
        return latent * 2.0


def test_conditions_carry_the_pose_inputs():
    clip = type("Out", (), {"penultimate_hidden_states": torch.ones(1, 3, 48)})()
    pose = torch.ones(1, 16, 2, 4, 4)
    text = torch.zeros(1, 4, 32)
    out = Animate2Conditions().extra_conds(_Model(), noise=torch.zeros(1, 16, 3, 4, 4), pose_video_latent=pose,
                                           clip_vision_output_pose=clip, cross_attn_pose=text, pose_strength=1.0,
                                           reference_strength=0.5)
    assert torch.equal(out["pose_latents"], pose * 2.0) and out["clip_fea_pose"] is clip.penultimate_hidden_states
    assert out["context_pose"] is text and out["reference_strength"] == 0.5 and "pose_strength" not in out
    with pytest.raises(ValueError, match="5-D"):
        Animate2Conditions().extra_conds(_Model(), noise=torch.zeros(1, 16, 3, 4, 4), pose_video_latent=pose[0])
