"""MiniMax H3's Fun ControlNet-Union (comfy_core/families/minimax_h3/fun_control.py): the file's
detection and storage (bf16, int8 ConvRot), the control stream against its equations written
here (a tiny random patch in the real key layout beside the tiny DiT), strength 0 and the sigma
window, the control latent's frames and inpaint channels, and MiniMaxH3FunControlNetApply."""
from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import save_file

from comfy_core.families.minimax_h3.dit import MiniMaxH3Config, MiniMaxH3Model
from comfy_core.families.minimax_h3.fun_control import (FunControlConfig, MiniMaxH3FunControl,
                                                        MiniMaxH3FunControlPatch)
from comfy_core.latent.nested import pack_latents, unpack_latents
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.patch_files import MINIMAX_H3_FUN, detect_model_patch, load_model_patch
from comfy_core.models.quant_linear import QuantizedLinear
from comfy_core.patching.patcher import Patcher
from tests.fixtures.template_models_minimax_h3 import (HIDDEN, minimax_h3_dit_state, minimax_h3_fun_control_state,
                                                       stored_fun_control)

TEXT = 24
VIDEO_KINDS, AUDIO_KINDS = ("cond", "ref_img", "video"), ("cond_audio", "ref_audio", "audio")


# --- the equations, written here ---

def _rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, angles):  # channels i and i + R rotated by angle i
    r = angles.shape[-1]
    z = torch.complex(x[..., :r], x[..., r:2 * r]) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    return torch.cat([z.real, z.imag, x[..., 2 * r:]], dim=-1)


def _block(p, b, x, t_emb, segments, angles, heads=2):
    """A MiniMax H3 DiT block: adaLN tables per (timestep, modality) row, modulated RMS norms,
    attention with q / k norms and RoPE, SwiGLU, gated residuals."""
    table = torch.nn.functional.silu(t_emb) @ p[b + "adaln_proj.linear.weight"].T + p[b + "adaln_proj.linear.bias"]
    table = table.reshape(t_emb.shape[0] * 3, 6, HIDDEN)  # row m * 3 + modality
    per_row = torch.empty(x.shape[0], 6, HIDDEN)
    for a, z, row in segments:
        per_row[a:z] = table[row]
    shift1, scale1, gate1, shift2, scale2, gate2 = per_row.unbind(1)
    h = _rms(x, p[b + "norm1.weight"]) * (1 + scale1) + shift1
    q, k, v = (h @ p[b + "attn.qkv_proj.weight"].T).chunk(3, dim=-1)
    q, k, v = (t.reshape(x.shape[0], heads, -1) for t in (q, k, v))
    q = _rope(_rms(q, p[b + "attn.q_norm.weight"]), angles)
    k = _rope(_rms(k, p[b + "attn.k_norm.weight"]), angles)
    att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    out = torch.einsum("hqk,khd->qhd", att.softmax(-1), v).reshape(x.shape[0], -1) @ p[b + "attn.out_proj.weight"].T
    x = x + gate1 * out
    h = _rms(x, p[b + "norm2.weight"]) * (1 + scale2) + shift2
    gate, up = (h @ p[b + "mlp.fc1.weight"].T).chunk(2, dim=-1)
    return x + gate2 * ((torch.nn.functional.silu(gate) * up) @ p[b + "mlp.fc2.weight"].T)


def _linear(p, name, x):
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def _rows(layout, kinds):
    return [i for a, b, kind in layout.segments if kind in kinds for i in range(a, b)]


def _hint_rows(hint):  # [1, C, T, H, W] -> one row per 1x2x2 patch, channel-major inside the patch
    _, c, t, h, w = hint.shape
    return torch.stack([torch.stack([hint[0, ch, k, 2 * y + i, 2 * x + j] for ch in range(c) for i in range(2)
                                     for j in range(2)])
                        for k in range(t) for y in range(h // 2) for x in range(w // 2)])


def _init_stream(p, h0, hint, layout):
    rows = torch.zeros(h0.shape[0], 49 * 4)
    target = _hint_rows(hint)
    rows[_rows(layout, ("video",)), :target.shape[1]] = target
    c = h0.clone()
    video = _rows(layout, VIDEO_KINDS)
    c[video] = _linear(p, "control_proj_in", rows[video])  # keyframe rows: a zero row
    return _linear(p, "control_blocks.0.before_proj", c) + h0


def _skip(p, i, c, layout):
    skip = _linear(p, f"control_blocks.{i}.after_proj", c)
    skip[_rows(layout, AUDIO_KINDS)] = 0
    return skip


# --- fixtures ---

class FakeVae:
    """The video VAE's interface: frames [F, H, W, 3] -> a latent of the target's shape (recorded)."""

    def __init__(self, latent_shape, seed=5):
        self.latent_shape = latent_shape
        self.calls = []
        self.seed = seed

    def spacial_compression_encode(self):
        return 16

    def decode(self, latent):
        raise AssertionError("the control patch only encodes")

    def encode(self, frames):
        self.calls.append(frames.clone())
        g = torch.Generator().manual_seed(self.seed + len(self.calls))
        return torch.randn(self.latent_shape, generator=g) + frames.mean()


class Recorder:
    """A `("double_block", i)` replacement that runs the block and keeps its args, input and output."""

    def __init__(self):
        self.seen = []

    def __call__(self, args, extra):
        out = extra["original_block"](args)
        self.seen.append((dict(args), args["img"].clone(), out["img"].clone()))
        return out


class Fixed:
    """A replacement returning a given output (the reference's block output)."""

    def __init__(self, img):
        self.img = img

    def __call__(self, args, extra):
        return {"img": self.img}


@pytest.fixture(scope="module")
def dit():
    state = minimax_h3_dit_state(seed=1, text_dim=TEXT)
    model = MiniMaxH3Model(MiniMaxH3Config.detect_from_weights(state))
    model.load_state_dict(state)
    return model.eval()


def _control(seed=4):
    state = minimax_h3_fun_control_state(seed=seed)
    shapes = {k: v for k, v in state.items()}
    config = FunControlConfig.detect_from_weights(shapes, {"control_blocks_places": "[0, 1]"})
    net = MiniMaxH3FunControl(config)
    net.load_state_dict(state)
    return Patcher(net.eval()), state


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    video, audio = torch.randn(1, 24, 2, 4, 6, generator=g), torch.randn(1, 32, 2, 5, generator=g)
    text, key = torch.randn(1, 6, TEXT, generator=g), torch.randn(1, 24, 1, 4, 6, generator=g)
    payload = {"keyframes": [{"resolved_frame_index": 4, "latent": key}], "cond_video_latents": [key], "seed": 7}
    return video, audio, text, payload


def _run(dit, replace, sigma=0.6):
    video, audio, text, payload = _inputs()
    packed, shapes = pack_latents([video, audio])
    options = {"patches_replace": {"dit": replace}, "sigmas": torch.tensor([sigma])}
    with torch.no_grad():
        out = dit(packed, torch.tensor([sigma * 1000.0]), text, latent_shapes=shapes, minimax_payload=payload,
                  transformer_options=options)
    return unpack_latents(out, shapes)


def _patch(model_patch, vae, strength=0.7, sigma_start=1.0, sigma_end=0.0, **kw):
    video = torch.rand(3, 64, 96, 3, generator=torch.Generator().manual_seed(2))
    kw.setdefault("control_video", video)
    return MiniMaxH3FunControlPatch(model_patch, vae, kw["control_video"], kw.get("mask"), kw.get("source_video"),
                                    strength, sigma_start, sigma_end)


def _replace(patch, previous=None):
    previous = previous or {}
    return {("double_block", i): patch.block_patch(i, previous.get(("double_block", i))) for i in (0, 1)}


# --- the stream against the equations ---

def test_the_control_stream_matches_its_equations_inside_the_dit(dit):
    model_patch, p = _control()
    vae = FakeVae((1, 24, 2, 4, 6))
    strength = 0.7
    patch = _patch(model_patch, vae, strength)
    rec0, rec1 = Recorder(), Recorder()
    got_v, got_a = _run(dit, _replace(patch, {("double_block", 0): rec0, ("double_block", 1): rec1}))

    (args, h0, o0), = rec0.seen
    (_, h1, o1), = rec1.seen
    layout, t_emb, segments, angles = args["layout"], args["t_emb"], args["mod_segments"], args["rope_freqs"]
    hint = patch.control_latent((1, 24, 2, 4, 6))
    c = _init_stream(p, h0, hint, layout)
    c = _block(p, "control_blocks.0.", c, t_emb, segments, angles)
    torch.testing.assert_close(h1, o0 + strength * _skip(p, 0, c, layout), atol=1e-4, rtol=1e-4)
    c = _block(p, "control_blocks.1.", c, t_emb, segments, angles)
    final = o1 + strength * _skip(p, 1, c, layout)
    # the same DiT with block 1 giving the reference's output: the final layer sees the same sequence
    want_v, want_a = _run(dit, {("double_block", 1): Fixed(final)})
    torch.testing.assert_close(got_v, want_v, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(got_a, want_a, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(got_v, _run(dit, {})[0], atol=1e-3)  # the control changed the prediction


def test_the_dit_block_reference_is_the_dits_block(dit):
    # the reference block above is the DiT's own block (so the test reads the control blocks)
    rec = Recorder()
    _run(dit, {("double_block", 0): rec})
    (args, h0, o0), = rec.seen
    p = {k[len("blocks.0."):]: v for k, v in dit.state_dict().items() if k.startswith("blocks.0.")}
    want = _block(p, "", h0, args["t_emb"], args["mod_segments"], args["rope_freqs"])
    torch.testing.assert_close(o0, want, atol=1e-4, rtol=1e-4)


def test_strength_zero_and_outside_the_window_give_the_unpatched_output_exactly(dit):
    model_patch, _ = _control()
    plain_v, plain_a = _run(dit, {})
    v, a = _run(dit, _replace(_patch(model_patch, FakeVae((1, 24, 2, 4, 6)), strength=0.0)))
    assert torch.equal(v, plain_v) and torch.equal(a, plain_a)
    # active for sigma in [sigma_end, sigma_start] = [0.2, 0.5]
    vae = FakeVae((1, 24, 2, 4, 6))
    window = _patch(model_patch, vae, sigma_start=0.5, sigma_end=0.2)
    v, a = _run(dit, _replace(window), sigma=0.6)
    assert torch.equal(v, plain_v) and torch.equal(a, plain_a) and not vae.calls  # nothing encoded
    inside_v, _ = _run(dit, _replace(window), sigma=0.3)
    plain_inside_v, _ = _run(dit, {}, sigma=0.3)
    assert len(vae.calls) == 1 and not torch.allclose(inside_v, plain_inside_v, atol=1e-3)
    _run(dit, _replace(window), sigma=0.25)
    assert len(vae.calls) == 1  # the hint is kept for the same latent shape


def test_the_control_latent_frames_and_inpaint_channels():
    model_patch, _ = _control()
    vae = FakeVae((1, 24, 7, 4, 6))  # 7 latent frames: 22 pixel frames
    video = torch.rand(30, 40, 40, 3)
    patch = _patch(model_patch, vae, control_video=video)
    hint = patch.control_latent((1, 24, 7, 4, 6))
    assert hint.shape == (1, 24, 7, 4, 6)
    frames = vae.calls[0]
    assert frames.shape == (22, 64, 96, 3)  # the first 22 frames at 96 x 64 (centre crop of the 40 x 40)
    short = _patch(model_patch, FakeVae((1, 24, 7, 4, 6)), control_video=video[:3])
    short.control_latent((1, 24, 7, 4, 6))
    held = short.vae.calls[0]
    assert torch.equal(held[2], held[21])  # a short clip holds its last frame

    mask = torch.zeros(22, 64, 96)
    mask[:, :32] = 1.0  # regenerate the top half
    source = torch.rand(22, 64, 96, 3)
    vae = FakeVae((1, 24, 7, 4, 6))
    inpaint = _patch(model_patch, vae, control_video=None, mask=mask, source_video=source)
    hint = inpaint.control_latent((1, 24, 7, 4, 6))
    assert hint.shape == (1, 49, 7, 4, 6)
    assert torch.equal(hint[:, :24], torch.zeros(1, 24, 7, 4, 6))  # no control video: zeros
    masked = vae.calls[0]
    assert torch.equal(masked[:, :32], torch.zeros(22, 32, 96, 3)) and torch.equal(masked[:, 32:], source[:, 32:])
    visibility = hint[0, 24]
    assert torch.allclose(visibility[:, :2], torch.zeros(7, 2, 6)) and torch.allclose(visibility[:, 2:],
                                                                                       torch.ones(7, 2, 6))


def test_post_norm_inpaint_fills_the_holes_with_the_vae_zero_pixel():
    state = minimax_h3_fun_control_state(seed=4)
    config = FunControlConfig.detect_from_weights(state, {"control_blocks_places": "[0, 1]",
                                                          "inpaint_masked_pixel_mode": "post_norm"})
    net = MiniMaxH3FunControl(config)
    net.load_state_dict(state)
    vae = FakeVae((1, 24, 2, 4, 6))
    mask = torch.ones(5, 64, 96)
    patch = _patch(Patcher(net), vae, control_video=None, mask=mask)
    patch.control_latent((1, 24, 2, 4, 6))
    assert torch.allclose(vae.calls[0], torch.tensor([0.485, 0.456, 0.406]).expand(5, 64, 96, 3))


# --- the file ---

def _write(tmp_path, int8, metadata=None, blocks=2, name="minimax_h3_fun_controlnet_union.safetensors"):
    tensors, meta = stored_fun_control(minimax_h3_fun_control_state(seed=4, blocks=blocks), int8)
    if metadata is not None:
        meta = metadata
    path = tmp_path / name
    save_file(tensors, str(path), metadata=meta)
    return path


def test_the_bf16_file_loads_with_its_float32_input_projection(tmp_path):
    state = minimax_h3_fun_control_state(seed=4)
    assert detect_model_patch(state).name == MINIMAX_H3_FUN
    patch = load_model_patch(_write(tmp_path, int8=False))
    net = patch.model
    assert isinstance(net, MiniMaxH3FunControl) and net.injection_layers == (0, 1)
    assert net.control_proj_in.weight.dtype == torch.float32
    assert net.control_blocks[1].attn.qkv_proj.weight.dtype == torch.bfloat16
    assert not hasattr(net.control_blocks[1], "before_proj")
    torch.testing.assert_close(net.control_blocks[0].before_proj.weight.float(),
                               state["control_blocks.0.before_proj.weight"].bfloat16().float())


def test_the_int8_convrot_file_keeps_its_layers_and_computes_their_weights(tmp_path):
    patch = load_model_patch(_write(tmp_path, int8=True))
    net = patch.model
    qkv = net.control_blocks[0].attn.qkv_proj
    assert isinstance(qkv, QuantizedLinear) and qkv.weight.dtype == torch.int8
    assert not isinstance(net.control_blocks[0].adaln_proj.linear, QuantizedLinear)
    # a float network holding the dequantised weights computes the same stream
    dense = {}
    for name, value in net.state_dict().items():
        layer = net.get_submodule(name.rsplit(".", 1)[0])
        if isinstance(layer, QuantizedLinear):
            if name.endswith(".weight"):
                dense[name] = layer.dequantize_weight().float()
            elif name.endswith(".bias"):
                dense[name] = value.float()
        elif value.is_floating_point():
            dense[name] = value.float()
    ref = MiniMaxH3FunControl(net.config)
    ref.load_state_dict(dense)
    from comfy_core.families.minimax_h3.layout import build_layout

    layout = build_layout(4, 2, 4, 6, 3)
    g = torch.Generator().manual_seed(0)
    h = torch.randn(layout.seq_len, HIDDEN, generator=g)
    t_emb = torch.randn(2, 16, generator=g)
    segments = [(0, layout.seq_len, 0)]
    angles = torch.randn(layout.seq_len, 6, generator=g)
    hint = torch.randn(1, 24, 2, 4, 6, generator=g)
    with torch.no_grad():
        got = net.step(0, net.init_stream(h, hint, layout, t_emb), t_emb, segments, angles)
        want = ref.step(0, ref.init_stream(h, hint, layout, t_emb), t_emb, segments, angles)
    torch.testing.assert_close(got[1], want[1], atol=1e-4, rtol=1e-4)


def test_placement_and_form_come_from_the_metadata_or_the_block_count(tmp_path):
    assert load_model_patch(_write(tmp_path, False, metadata={})).model.injection_layers == (0, 25)
    five = load_model_patch(_write(tmp_path, False, metadata={}, blocks=5, name="five.safetensors")).model
    assert five.injection_layers == (0, 10, 20, 30, 40)
    curve = load_model_patch(_write(tmp_path, False, metadata={"control_blocks_places": "[0, 1]",
                                                               "minimax_h3_fun_controlnet": "adaln_basis"},
                                    name="curve.safetensors")).model
    assert curve.config.use_adaln_curves and curve.control_blocks[0].adaln_proj.linear.weight.dtype == torch.float32
    assert not curve.control_blocks[0].adaln_proj.apply_silu
    with pytest.raises(ModelPatchError, match="control_blocks_places"):
        load_model_patch(_write(tmp_path, False, metadata={"control_blocks_places": json.dumps([0, 1, 2])},
                                name="bad.safetensors"))


# --- the node ---

@pytest.fixture(scope="module")
def patcher(dit):
    from comfy_core.families.minimax_h3 import definition
    from comfy_core.patching.model import ModelPatcher

    family = definition()
    return ModelPatcher(family.components.build_model(dit, family, "flow", False))


def test_the_node_patches_the_injection_blocks_of_a_clone(patcher):
    from nodes.errors import NodeInputError
    from nodes.minimax_h3_nodes import minimax_h3_fun_controlnet_apply

    model_patch, _ = _control()
    video = torch.rand(3, 64, 96, 3)
    vae = FakeVae((1, 24, 2, 4, 6))
    assert minimax_h3_fun_controlnet_apply(patcher, model_patch, vae, 0.0, 0.0, 1.0, control_video=video)[0] is patcher
    assert minimax_h3_fun_controlnet_apply(patcher, model_patch, vae, 1.0, 0.0, 1.0)[0] is patcher
    previous = patcher.clone()
    previous.set_block_replace("dit", ("double_block", 1), Recorder())
    out, = minimax_h3_fun_controlnet_apply(previous, model_patch, vae, 0.5, 0.2, 0.8, control_video=video)
    assert out is not previous
    replace = out.model_options["transformer_options"]["patches_replace"]["dit"]
    assert sorted(replace) == [("double_block", 0), ("double_block", 1)]
    assert isinstance(replace[("double_block", 1)].previous, Recorder)  # an earlier replacement still runs
    sampling = patcher.get_model_object("model_sampling")
    control = replace[("double_block", 0)].control
    assert control.sigma_start == pytest.approx(float(sampling.percent_to_sigma(0.2)))
    assert control.sigma_end == pytest.approx(float(sampling.percent_to_sigma(0.8)))
    assert "patches_replace" not in patcher.model_options.get("transformer_options", {})
    with pytest.raises(NodeInputError, match="model_patch"):
        minimax_h3_fun_controlnet_apply(patcher, object(), vae, 1.0, 0.0, 1.0, control_video=video)
