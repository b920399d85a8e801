"""Wan 2.2 Animate, the first Animate release (comfy_core/families/wan/animate.py, wan22_animate.py):
detection by ComfyUI's marker and the family, the network where ComfyUI's reduces to the plain i2v
network (no pose, no face; zeroed adapter outputs), the pose embedding against the plain network
fed the pose through its own (linear) patch embedding, the face block against attention written
here, the face encoder's frame rule, and the model inputs (ComfyUI's `WAN22_Animate.extra_conds`).
Side by side with ComfyUI 0.3.64's own `AnimateWanModel`: tests/comfy_core/test_wan_animate1_parity.py."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from comfy_core.families import default_registry
from comfy_core.families.wan.animate import AnimateWanModel, FaceBlock, FaceEncoder
from comfy_core.families.wan.dit import WanConfig, WanConfigError, WanModel
from comfy_core.families.wan.wan22_animate import AnimateConditions
from tests.fixtures.wan_animate1_files import tiny_animate_state_dict
from tests.fixtures.wan_files import SINGLE_FILE_PREFIX

TOL = 1e-4
LAYERS = 10  # two face blocks (after main blocks 0 and 5)


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return tiny_animate_state_dict(seed=3, num_layers=LAYERS)


@pytest.fixture(scope="module")
def model(state) -> AnimateWanModel:
    net = AnimateWanModel.from_config(WanConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


def _plain(state) -> WanModel:
    i2v = {k: v for k, v in state.items()
           if not k.startswith(("pose_patch_embedding", "motion_encoder", "face_encoder", "face_adapter"))}
    net = WanModel.from_config(WanConfig.detect_from_weights(i2v))
    net.load_state_dict(i2v, strict=True)
    return net.eval()


def _inputs(seed: int = 4, b: int = 1, t: int = 3):
    g = torch.Generator().manual_seed(seed)
    return dict(x=torch.randn(b, 36, t, 8, 8, generator=g), t=torch.full((b,), 600.0),
                context=torch.randn(b, 5, 32, generator=g), clip=torch.randn(b, 3, 48, generator=g))


def test_detection_family_and_comfy_config(state, model):
    config = WanConfig.detect_from_weights(state)
    assert (config.model_type, config.variant, config.in_dim, config.motion_encoder_dim) == (
        "animate", "animate", 36, 512)
    assert isinstance(model, AnimateWanModel) and model.img_emb is not None
    with pytest.raises(WanConfigError, match="AnimateWanModel"):  # the family's build picks the class
        WanModel.from_config(config)
    assert isinstance(default_registry().get("wan22_animate").architecture.build(config), AnimateWanModel)
    assert len(model.face_adapter.fuser_blocks) == LAYERS // 5
    unet = config.comfy_unet_config()
    assert unet["model_type"] == "animate" and "motion_encoder_dim" not in unet
    registry = default_registry()
    header = {SINGLE_FILE_PREFIX + k: torch.empty(v.shape, device="meta") for k, v in state.items()}
    family = registry.detect_diffusion_model(header).family
    assert family.name == "wan22_animate" and family.comfy_model_class == "WAN22_Animate"
    assert family.supported_model.__name__ == "WAN22_Animate" and family.sampling.shift == 8.0
    assert family.geometry.latent_channels == 16


def test_inconsistent_animate_weights_are_refused(state):
    no_pose = {k: v for k, v in state.items() if not k.startswith("pose_patch_embedding")}
    with pytest.raises(WanConfigError, match="Animate.*pose_patch_embedding"):
        WanConfig.detect_from_weights(no_pose)
    extra_block = dict(state)
    for k in [k for k in state if k.startswith("face_adapter.fuser_blocks.0.")]:
        extra_block[k.replace("blocks.0.", "blocks.2.")] = state[k]
    with pytest.raises(WanConfigError, match="3 face adapter blocks for 10"):
        WanConfig.detect_from_weights(extra_block)


def test_without_pose_and_face_it_is_the_plain_i2v_network(model, state):
    i = _inputs()
    with torch.no_grad():
        ours = model(i["x"], i["t"], i["context"], clip_fea=i["clip"])
        plain = _plain(state)(i["x"], i["t"], i["context"], clip_fea=i["clip"])
    assert torch.equal(ours, plain)


def test_pose_is_the_patch_embedding_of_the_next_frame(state):
    """With the pose embedding set to the patch embedding's latent columns (no bias), pose frame j
    adds what the same values in latent frame j + 1's first 16 channels add (the conv is linear);
    pose frames past the end are dropped."""
    s = dict(state)
    s["pose_patch_embedding.weight"] = state["patch_embedding.weight"][:, :16].clone()
    s["pose_patch_embedding.bias"] = torch.zeros_like(state["pose_patch_embedding.bias"])
    net = AnimateWanModel.from_config(WanConfig.detect_from_weights(s))
    net.load_state_dict(s, strict=True)
    net.eval()
    i = _inputs(t=3)
    pose = torch.randn(1, 16, 4, 8, 8, generator=torch.Generator().manual_seed(8))  # 4 frames: 2 dropped
    shifted = i["x"].clone()
    shifted[:, :16, 1:3] += pose[:, :, :2]
    with torch.no_grad():
        ours = net(i["x"], i["t"], i["context"], clip_fea=i["clip"], pose_latents=pose)
        plain = _plain(state)(shifted, i["t"], i["context"], clip_fea=i["clip"])
    assert (ours - plain).abs().max().item() < TOL


def test_zeroed_face_adapter_outputs_leave_the_plain_network(state):
    s = dict(state)
    for k in [k for k in state if ".linear2." in k]:
        s[k] = torch.zeros_like(state[k])
    net = AnimateWanModel.from_config(WanConfig.detect_from_weights(s))
    net.load_state_dict(s, strict=True)
    net.eval()
    i = _inputs(t=2)
    faces = torch.rand(1, 3, 1, 512, 512, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        ours = net(i["x"], i["t"], i["context"], clip_fea=i["clip"], face_pixel_values=faces)
        plain = _plain(state)(i["x"], i["t"], i["context"], clip_fea=i["clip"])
    assert (ours - plain).abs().max().item() < TOL


def test_face_block_is_per_frame_attention_to_the_face_tokens():
    torch.manual_seed(0)
    dim, heads, frames, tokens, faces_n = 64, 2, 3, 4, 5
    block = FaceBlock(dim, heads, torch.nn, {})
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(2, frames * tokens, dim)
    faces = torch.randn(2, frames, faces_n, dim)
    d = dim // heads

    def ln(v):
        return (v - v.mean(-1, keepdim=True)) / torch.sqrt(v.var(-1, unbiased=False, keepdim=True) + 1e-6)

    def rms(v, w):
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    q = ln(x) @ block.linear1_q.weight.T + block.linear1_q.bias
    kv = ln(faces) @ block.linear1_kv.weight.T + block.linear1_kv.bias
    expected = torch.zeros_like(x)
    for b in range(2):
        for f in range(frames):
            rows = slice(f * tokens, (f + 1) * tokens)
            outs = []
            for h in range(heads):
                qh = rms(q[b, rows, h * d:(h + 1) * d], block.q_norm.weight)
                kh = rms(kv[b, f, :, h * d:(h + 1) * d], block.k_norm.weight)
                vh = kv[b, f, :, dim + h * d:dim + (h + 1) * d]
                outs.append(torch.softmax(qh @ kh.T / math.sqrt(d), dim=-1) @ vh)
            expected[b, rows] = torch.cat(outs, -1)
    expected = expected @ block.linear2.weight.T + block.linear2.bias
    with torch.no_grad():
        assert (block(x, faces) - expected).abs().max().item() < TOL


@pytest.mark.parametrize("frames", [1, 4, 5, 9])
def test_face_encoder_frames_and_causality(frames):
    """T motion codes -> (T + 3) // 4 frames of 4 heads + the padding token; causal: a change in
    the last code leaves the earlier outputs."""
    torch.manual_seed(1)
    enc = FaceEncoder(16, 32, torch.nn, {})
    for p in enc.parameters():
        torch.nn.init.normal_(p, std=0.05)
    motion = torch.randn(2, frames, 16)
    with torch.no_grad():
        out = enc(motion)
        assert out.shape == (2, (frames + 3) // 4, 5, 32)
        assert torch.equal(out[:, :, 4], enc.padding_tokens.expand(2, out.shape[1], 1, 32)[:, :, 0])
        if frames >= 5:
            changed = motion.clone()
            changed[:, -1] += 1.0
            assert torch.equal(enc(changed)[:, :-1], out[:, :-1])


class _Model:
    latent_format = SimpleNamespace(channels=16)

    @staticmethod
    def process_latent_in(latent):
        return latent * 2.0 + 1.0


def test_conditions_map_the_comfy_keys():
    faces = torch.rand(1, 3, 5, 512, 512)
    pose = torch.randn(1, 16, 2, 4, 4)
    out = AnimateConditions().extra_conds(_Model(), face_video_pixels=faces, pose_video_latent=pose)
    assert out["face_pixel_values"] is faces
    assert torch.equal(out["pose_latents"], pose * 2.0 + 1.0)
    assert AnimateConditions().extra_conds(_Model()) == {}
