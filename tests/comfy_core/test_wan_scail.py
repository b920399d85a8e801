"""SCAIL / SCAIL-2 on Wan 2.1 (comfy_core/families/wan/scail.py, wan21_scail.py, wan21_scail2.py):
detection and families, the network against its equations composed here by hand on tiny random
weights in the release's key layout (ComfyUI's `SCAILWanModel` / `SCAIL2WanModel`: references in
front along time, the mask embeddings added, the pose tokens appended with their stretched and
moved RoPE positions, animation and replacement modes), the plain i2v network when no SCAIL input
is given, and the model inputs (ComfyUI's `WAN21_SCAIL` / `WAN21_SCAIL2` extra_conds, concat_cond,
scale_latent_inpaint)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel
from comfy_core.families.wan.scail import WanSCAILModel
from comfy_core.families.wan.wan21_scail import SCAILConditions
from comfy_core.families.wan.wan21_scail2 import SCAIL2Conditions
from tests.fixtures.template_models_wan_scail import tiny_scail_state_dict
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX

TOL = 1e-4
DIM, HEADS, HEAD_DIM = 256, 2, 128
B, T, H, W = 2, 2, 8, 8  # video latent: 2 frames of 4 x 4 patches
HP, WP = 4, 4  # the pose latent: half the size


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_scail_state_dict(seed=5)


@pytest.fixture(scope="module")
def model(state) -> WanSCAILModel:
    net = WanSCAILModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


@pytest.fixture(scope="module")
def inputs() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(9)

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    return dict(x=rnd(B, 20, T, H, W), t=torch.tensor([700.0, 700.0]), context=rnd(B, 5, 32), clip=rnd(B, 3, 48),
                pose=rnd(B, 20, T, HP, WP), sam=(rnd(B, 28, T, HP, WP) > 0).float(),
                ref=rnd(B, 20, 2, H, W), ref_mask=(rnd(B, 28, 2 + T, H, W) > 0).float())


def test_detection_families_and_comfy_config(state, model):
    config = WanConfig.detect_from_weights(state)
    assert (config.model_type, config.variant, config.in_dim, config.mask_in_dim) == ("scail2", "scail2", 20, 28)
    assert isinstance(model, WanSCAILModel) and model.img_emb is not None and model.patch_embedding_mask is not None
    assert config.comfy_unet_config()["model_type"] == "scail2" and "mask_in_dim" not in config.comfy_unet_config()
    registry = default_registry()
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    family = registry.detect_diffusion_model(header).family
    assert (family.name, family.comfy_model_class, family.supported_model.__name__) == (
        "wan21_scail2", "WAN21_SCAIL2", "WAN21_SCAIL2")
    assert family.sampling.shift == 8.0 and family.supported_model.unet_config["model_type"] == "scail2"
    v1 = tiny_scail_state_dict(seed=5, version=1)
    assert WanConfig.detect_from_weights(v1).model_type == "scail"
    header1 = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in v1.items()}
    assert registry.detect_diffusion_model(header1).family.name == "wan21_scail"
    bad = dict(state)
    bad["patch_embedding_pose.weight"] = torch.zeros(DIM, 16, 1, 2, 2)
    with pytest.raises(WanConfigError, match="patch_embedding_pose"):
        WanConfig.detect_from_weights(bad)
    plain = {k: v for k, v in state.items() if not k.startswith(("patch_embedding_pose", "patch_embedding_mask"))}
    assert WanConfig.detect_from_weights(plain).model_type == "i2v"


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
    b, l, _c = x.shape
    z = torch.view_as_complex(x.double().reshape(b, l, HEADS, HEAD_DIM // 2, 2).contiguous())
    z = z * torch.polar(torch.ones_like(angles), angles)[None, :, None]
    return torch.view_as_real(z).reshape(b, l, -1).float()


def _attend(q, k, v):
    b = q.shape[0]
    q, k, v = (t.reshape(b, t.shape[1], HEADS, HEAD_DIM).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    return (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, -1, DIM)


def _grid(frames, rows, cols, f0=0.0, y0=0.0, x0=0.0, sy=1.0, sx=1.0):
    """Positions of a frames x rows x cols token grid: frame f0 + i, row y0 + j * sy, column x0 + k * sx."""
    f, y, x = torch.meshgrid(torch.arange(frames, dtype=torch.float64) + f0,
                             torch.arange(rows, dtype=torch.float64) * sy + y0,
                             torch.arange(cols, dtype=torch.float64) * sx + x0, indexing="ij")
    return torch.stack([f, y, x], dim=-1).reshape(-1, 3)


def _conv(s, name, latent):
    out = F.conv3d(latent, s[f"{name}.weight"], s[f"{name}.bias"], stride=(1, 2, 2))
    return out.flatten(2).transpose(1, 2)


def _time(s, t):
    freqs = 10000.0 ** (-torch.arange(128, dtype=torch.float32) / 128)
    sinus = torch.cat([torch.cos(t[:, None] * freqs), torch.sin(t[:, None] * freqs)], dim=1)
    e = _lin(s, "time_embedding.2", F.silu(_lin(s, "time_embedding.0", sinus)))
    return e, _lin(s, "time_projection.1", F.silu(e)).view(-1, 6, DIM)


def reference(s, x, t, context, clip, pose=None, sam=None, ref=None, ref_mask=None, replacement=False):
    """ComfyUI's SCAIL-2 forward, written out: tokens of [references, video] (+ mask embedding),
    then the pose tokens (+ mask embedding); full attention with 3-D RoPE; video tokens out."""
    n_ref = 0 if ref is None else ref.shape[2]
    main_in = x if ref is None else torch.cat([ref, x], dim=2)
    tokens = _conv(s, "patch_embedding", main_in)
    if ref_mask is not None:
        tokens = tokens + _conv(s, "patch_embedding_mask", ref_mask)
    rows, cols = H // 2, W // 2
    if replacement:
        video_start = max(n_ref - 1, 0)
        pos = [_grid(n_ref, rows, cols, 0, 120.0, 0)] if n_ref else []
        pos.append(_grid(T, rows, cols, video_start))
        pose_start = video_start
    else:
        pos = [_grid(n_ref + T, rows, cols)]
        pose_start = n_ref
    n_pose = 0
    if pose is not None:
        pose_tokens = _conv(s, "patch_embedding_pose", pose)
        if sam is not None:
            pose_tokens = pose_tokens + _conv(s, "patch_embedding_mask", sam)
        n_pose = pose_tokens.shape[1]
        tokens = torch.cat([tokens, pose_tokens], dim=1)
        sy, sx = H / HP, W / WP  # the pose grid stretched over the video's, at the cells' midpoints
        pos.append(_grid(pose.shape[2], HP // 2, WP // 2, pose_start, (sy - 1) / 2, 120.0 + (sx - 1) / 2, sy, sx))
    angles = _angles(torch.cat(pos))
    e, e0 = _time(s, t)
    txt = _lin(s, "text_embedding.2", F.gelu(_lin(s, "text_embedding.0", context), approximate="tanh"))
    img = _ln(_lin(s, "img_emb.proj.3", F.gelu(_lin(s, "img_emb.proj.1", _ln(clip, s, "img_emb.proj.0")))), s,
              "img_emb.proj.4")
    xg = tokens
    for i in range(2):
        r = [v.unsqueeze(1) for v in (s[f"blocks.{i}.modulation"] + e0).unbind(1)]
        a = f"blocks.{i}.self_attn"
        h = _ln(xg) * (1 + r[1]) + r[0]
        q = _rotate(_rms(_lin(s, f"{a}.q", h), s[f"{a}.norm_q.weight"]), angles)
        k = _rotate(_rms(_lin(s, f"{a}.k", h), s[f"{a}.norm_k.weight"]), angles)
        xg = xg + _lin(s, f"{a}.o", _attend(q, k, _lin(s, f"{a}.v", h))) * r[2]
        c = f"blocks.{i}.cross_attn"
        xn = _ln(xg, s, f"blocks.{i}.norm3")
        q = _rms(_lin(s, f"{c}.q", xn), s[f"{c}.norm_q.weight"])
        out = _attend(q, _rms(_lin(s, f"{c}.k", txt), s[f"{c}.norm_k.weight"]), _lin(s, f"{c}.v", txt))
        k_img = _rms(_lin(s, f"{c}.k_img", img), s[f"{c}.norm_k_img.weight"])
        out = out + _attend(q, k_img, _lin(s, f"{c}.v_img", img))
        xg = xg + _lin(s, f"{c}.o", out)
        ffn = _lin(s, f"blocks.{i}.ffn.2", F.gelu(_lin(s, f"blocks.{i}.ffn.0", _ln(xg) * (1 + r[4]) + r[3]),
                                                  approximate="tanh"))
        xg = xg + ffn * r[5]
    shift, scale = (s["head.modulation"] + e[:, None]).unbind(1)
    out = _lin(s, "head.head", _ln(xg) * (1 + scale[:, None]) + shift[:, None])
    if n_pose:
        out = out[:, :-n_pose]
    frames = n_ref + T
    out = out.reshape(B, frames, rows, cols, 2, 2, 16).permute(0, 6, 1, 2, 4, 3, 5).reshape(B, 16, frames, H, W)
    return out[:, :, n_ref:]


@pytest.mark.parametrize("replacement", [False, True])
def test_forward_matches_equations(model, state, inputs, replacement):
    i = inputs
    want = reference(state, i["x"], i["t"], i["context"], i["clip"], i["pose"], i["sam"], i["ref"], i["ref_mask"],
                     replacement=replacement)
    with torch.no_grad():
        got = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"], sam_latents=i["sam"],
                    reference_latent=i["ref"], ref_mask_latents=i["ref_mask"], ref_mask_flag=not replacement)
    assert got.shape == (B, 16, T, H, W)
    torch.testing.assert_close(got, want, atol=TOL, rtol=TOL)


def test_animation_mode_is_the_default_and_pose_alone(model, state, inputs):
    i = inputs
    with torch.no_grad():
        default = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"],
                        reference_latent=i["ref"][:, :, :1])
        flagged = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"],
                        reference_latent=i["ref"][:, :, :1], ref_mask_flag=True)
    torch.testing.assert_close(default, flagged, atol=0, rtol=0)
    want = reference(state, i["x"], i["t"], i["context"], i["clip"], i["pose"], ref=i["ref"][:, :, :1])
    torch.testing.assert_close(default, want, atol=TOL, rtol=TOL)


def test_without_scail_inputs_it_is_the_plain_i2v_network(model, state, inputs):
    """No pose, reference or masks: exactly the Wan 2.1 i2v DiT on the 20 input channels (ComfyUI's
    SCAIL forward adds nothing then)."""
    i = inputs
    plain_state = {k: v for k, v in state.items() if not k.startswith(("patch_embedding_pose", "patch_embedding_mask"))}
    plain = WanModel.from_config(WanConfig.detect_from_weights(plain_state))
    plain.load_state_dict(plain_state, strict=True)
    with torch.no_grad():
        got = model(i["x"], i["t"], i["context"], clip_fea=i["clip"])
        want = plain.eval()(i["x"], i["t"], i["context"], clip_fea=i["clip"])
    assert torch.equal(got, want)


def test_scail_one_weights_refuse_mask_inputs(inputs):
    state = tiny_scail_state_dict(seed=2, version=1)
    net = WanSCAILModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    assert net.patch_embedding_mask is None
    i = inputs
    with torch.no_grad():
        out = net(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"])
        assert out.shape == (B, 16, T, H, W)
        with pytest.raises(ValueError, match="SCAIL-2 input"):
            net(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"], sam_latents=i["sam"])


def test_block_replace_patch_sees_every_token(model, inputs):
    i = inputs
    seen = []

    def replace(args, extra):
        seen.append(args["img"].shape[1])
        return extra["original_block"](args)

    options = {"patches_replace": {"dit": {("double_block", 1): replace}}}
    with torch.no_grad():
        patched = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"],
                        reference_latent=i["ref"], transformer_options=options)
        plain = model(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=i["pose"],
                      reference_latent=i["ref"])
    assert seen == [(2 + T) * 16 + T * 4]  # references + video + pose tokens
    torch.testing.assert_close(patched, plain, atol=0, rtol=0)


# -- the model inputs ---------------------------------------------------------------------------

class _Model(SimpleNamespace):
    def process_latent_in(self, latent):
        return latent * 2.0 + 1.0


def test_conditions_map_the_comfy_keys():
    g = torch.Generator().manual_seed(1)
    primary, extra = torch.randn(1, 16, 1, 4, 4, generator=g), torch.randn(1, 16, 1, 4, 4, generator=g)
    pose = torch.randn(1, 16, 3, 2, 2, generator=g)
    driving = torch.rand(1, 3, 28, 2, 2, generator=g)
    ref_mask = torch.rand(1, 2 + 3, 28, 4, 4, generator=g)
    states = torch.randn(1, 3, 48, generator=g)
    model = _Model()
    out = SCAIL2Conditions().extra_conds(
        model, reference_latents=[primary, extra], pose_video_latent=pose, driving_mask_28ch=driving,
        ref_mask_28ch=ref_mask, ref_mask_flag=False,
        clip_vision_output=SimpleNamespace(penultimate_hidden_states=states))
    ref = out["reference_latent"]
    assert ref.shape == (1, 20, 2, 4, 4)
    torch.testing.assert_close(ref[:, :16, 0:1], extra * 2 + 1)  # additional references first
    torch.testing.assert_close(ref[:, :16, 1:2], primary * 2 + 1)  # the primary next to the video
    assert torch.equal(ref[:, 16:], torch.ones(1, 4, 2, 4, 4))
    assert torch.equal(out["pose_latents"][:, :16], pose * 2 + 1) and torch.equal(out["pose_latents"][:, 16:],
                                                                                 torch.ones(1, 4, 3, 2, 2))
    assert torch.equal(out["sam_latents"], driving.movedim(1, 2)) and out["sam_latents"].shape == (1, 28, 3, 2, 2)
    assert torch.equal(out["ref_mask_latents"], ref_mask.movedim(1, 2))
    assert out["ref_mask_flag"] is False and out["clip_fea"] is states
    one = SCAILConditions().extra_conds(model, pose_video_latent=pose, driving_mask_28ch=driving, ref_mask_flag=True)
    assert set(one) == {"pose_latents"}  # SCAIL-Preview takes no masks
    assert not SCAILConditions().image_to_video and SCAILConditions().scale_latent_inpaint is None


def test_history_mask_and_clean_anchor():
    model = SimpleNamespace(diffusion_model=SimpleNamespace(patch_embedding=SimpleNamespace(weight=torch.zeros(8, 20))))
    noise = torch.randn(2, 16, 3, 4, 4)
    conditions = SCAIL2Conditions()
    assert torch.equal(conditions.concat_cond(model, noise=noise), torch.zeros(2, 4, 3, 4, 4))
    mask = torch.ones(1, 1, 3, 4, 4)
    mask[:, :, :1] = 0.0  # the anchored first latent frame of a continued chunk
    history = conditions.concat_cond(model, noise=noise, denoise_mask=mask.expand(1, 16, 3, 4, 4))
    want = torch.zeros(2, 4, 3, 4, 4)
    want[:, :, 0] = 1.0
    assert torch.equal(history, want)
    latent = torch.randn(1, 16, 3, 4, 4)
    assert conditions.scale_latent_inpaint(None, torch.tensor(0.7), torch.randn_like(latent), latent) is latent
    scail_one = SCAILConditions().concat_cond(model, noise=noise, denoise_mask=mask)
    assert torch.equal(scail_one, torch.zeros(2, 4, 3, 4, 4))  # SCAIL-Preview: no history mask


def test_a_scaled_fp8_file_loads_as_scail2_and_runs(tmp_path, inputs):
    """ComfyUI's scaled-fp8 storage (fp8 linear weights with their scales) through the loader's own path."""
    from safetensors.torch import save_file

    from comfy_core.split.diffusion_model import load_diffusion_model
    from tests.fixtures.wan_template_models import _scaled

    state = tiny_scail_state_dict(seed=5)
    path = tmp_path / "wan2.1_14B_SCAIL_2_fp8_scaled.safetensors"
    save_file({k: v.contiguous() for k, v in _scaled(state).items()}, str(path))
    model = load_diffusion_model(path)
    network = model.model.diffusion_model
    assert model.model.family.name == "wan21_scail2" and isinstance(network, WanSCAILModel)
    i = inputs
    with torch.no_grad():
        got = network(i["x"][:1], i["t"][:1], i["context"][:1], clip_fea=i["clip"][:1], pose_latents=i["pose"][:1],
                      sam_latents=i["sam"][:1], reference_latent=i["ref"][:1], ref_mask_latents=i["ref_mask"][:1])
    assert got.shape == (1, 16, T, H, W) and torch.isfinite(got).all()
