"""Wan MultiTalk / InfiniteTalk (comfy_core/families/wan/multitalk.py, comfy_core/model_patches/
multitalk.py) against its equations composed here on tiny random weights (MultiTalk, arXiv 2505.22647;
InfiniteTalk, arXiv 2508.14033; behaviour of ComfyUI's `comfy/ldm/wan/model_multitalk.py`): the patch
file read by ModelPatchLoader's loader, the audio windows on the video clock, the audio projection,
the frame-wise audio cross-attention of one speaker, the two speakers' attention map and rotary
layout, and the patches' places in the Wan blocks (attn1 after the self-attention's softmax, attn2
after the text cross-attention)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from comfy_core.families.wan.blocks import WanAttentionBlock, WanSelfAttention, split_modulation, repeat_e
from comfy_core.families.wan.dit import WanConfig, WanModel
from comfy_core.families.wan.multitalk import (MultiTalkConfig, MultiTalkError, MultiTalkPatchNetwork,
                                               combine_speakers, encoder_states, project_audio,
                                               speaker_attention_map, speaker_positions)
from comfy_core.model_patches.errors import ModelPatchError
from comfy_core.model_patches.multitalk import (ATTN_MAP, AUDIO_EMBEDS, InfiniteTalkSampleWrapper,
                                                MultiTalkAttnMapPatch, MultiTalkCrossAttnPatch)
from comfy_core.model_patches.patch_files import detect_model_patch, load_model_patch
from comfy_core.patching.patcher import Patcher
from tests.fixtures.model_patch_files import write_patch_file
from tests.fixtures.template_models_wan_audio import multitalk_patch_state_dict
from tests.fixtures.wan_files import tiny_wan_state_dict

TOL = dict(atol=1e-5, rtol=1e-4)
DIM, LAYERS, FEATURES, HIDDEN, AUDIO_DIM, TOKENS = 256, 2, 16, 12, 16, 4
HEADS, HEAD = 2, 128


@pytest.fixture(scope="module")
def state() -> dict[str, torch.Tensor]:
    return multitalk_patch_state_dict(dim=DIM, layers=LAYERS, features=FEATURES, hidden=HIDDEN, audio_dim=AUDIO_DIM,
                                      tokens=TOKENS, seed=3)


@pytest.fixture(scope="module")
def network(state) -> MultiTalkPatchNetwork:
    net = MultiTalkPatchNetwork(MultiTalkConfig.detect_from_weights(state))
    net.load_state_dict(state, strict=True)
    return net.eval()


# -- composed by hand ----------------------------------------------------------------------------

def _lin(state, name, x):
    return x @ state[f"{name}.weight"].t() + state[f"{name}.bias"]


def _ln(x, state, name, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * state[f"{name}.weight"] + state[f"{name}.bias"]


def _attend(q, k, v):
    """One frame: q [S, D], k/v [M, D] -> [S, D], heads of 128, softmax(q k^T / sqrt(128)) v."""
    out = []
    for h in range(q.shape[1] // HEAD):
        sl = slice(h * HEAD, (h + 1) * HEAD)
        weights = torch.softmax(q[:, sl] @ k[:, sl].t() / math.sqrt(HEAD), dim=-1)
        out.append(weights @ v[:, sl])
    return torch.cat(out, dim=1)


def _rotate(x, pos):
    """x [N, D] (heads of 128 side by side), pos [N]: pairs (2i, 2i+1) of each head turned by pos * 1e4^(-2i/128)."""
    out = x.clone()
    for h in range(x.shape[1] // HEAD):
        for i in range(HEAD // 2):
            theta = pos * 10000.0 ** (-2 * i / HEAD)
            a, b = x[:, h * HEAD + 2 * i], x[:, h * HEAD + 2 * i + 1]
            out[:, h * HEAD + 2 * i] = a * torch.cos(theta) - b * torch.sin(theta)
            out[:, h * HEAD + 2 * i + 1] = b * torch.cos(theta) + a * torch.sin(theta)
    return out


def _window(states, frame, end):
    """The 5 states around video frame `frame` (audio padded with its first state up to `end`)."""
    t = states.shape[0]
    rows = []
    for o in range(-2, 3):
        i = frame + o
        padded = max(t, end)
        i = min(max(i, 0), padded - 1)
        rows.append(states[i] if i < t else states[0])
    return torch.stack(rows)


def _projected(state, speakers, start, length):
    """[1, F, H * tokens, D_a]: per speaker and latent frame, the window(s), the projection."""
    per_speaker, end = [], start + length
    for states in speakers:
        frames = []
        for j in range((length - 1) // 4 + 1):
            if j == 0:
                h = torch.relu(_lin(state, "audio_proj.proj1", _window(states, start, end).reshape(-1)))
            else:
                v = [start + 4 * j - 3 + n for n in range(4)]
                rows = torch.cat([_window(states, v[0], end)[:3], _window(states, v[1], end)[2:3],
                                  _window(states, v[2], end)[2:3], _window(states, v[3], end)[2:]])
                h = torch.relu(_lin(state, "audio_proj.proj1_vf", rows.reshape(-1)))
            h = torch.relu(_lin(state, "audio_proj.proj2", h))
            tokens = _lin(state, "audio_proj.proj3", h).reshape(TOKENS, AUDIO_DIM)
            frames.append(_ln(tokens, state, "audio_proj.norm"))
        per_speaker.append(torch.stack(frames))
    return torch.cat(per_speaker, dim=1)[None]


# -- the file --------------------------------------------------------------------------------------

def test_patch_file_is_read_and_built(tmp_path, state):
    config = MultiTalkConfig.detect_from_weights(state)
    assert (config.dim, config.num_layers, config.num_heads, config.features, config.intermediate_dim,
            config.out_dim, config.context_tokens) == (DIM, LAYERS, HEADS, FEATURES, HIDDEN, AUDIO_DIM, TOKENS)
    half = {k: v.half() for k, v in state.items()}
    patch = load_model_patch(write_patch_file(tmp_path / "wan2.1_infiniteTalk_multi_fp16.safetensors", half))
    assert detect_model_patch(half).name == "wan_multitalk" and isinstance(patch.model, MultiTalkPatchNetwork)
    assert torch.equal(patch.model.blocks[1].audio_cross_attn.kv_linear.weight,
                       half["blocks.1.audio_cross_attn.kv_linear.weight"])
    # stored in fp16 as the file, computed in the input's dtype (ComfyUI's manual_cast)
    x = torch.randn(1, 5, DIM)
    torch.testing.assert_close(patch.model.blocks[0].norm_x(x), F.layer_norm(
        x, (DIM,), half["blocks.0.norm_x.weight"].float(), half["blocks.0.norm_x.bias"].float()))
    wrong = dict(state, **{"blocks.1.audio_cross_attn.kv_linear.weight": torch.zeros(2 * DIM, 8)})
    with pytest.raises(MultiTalkError, match=r"blocks\.1\.audio_cross_attn\.kv_linear"):
        MultiTalkConfig.detect_from_weights(wrong)
    with pytest.raises(ModelPatchError, match="proj1_vf"):
        load_model_patch(write_patch_file(tmp_path / "bad.safetensors", {
            k: v for k, v in state.items() if not k.startswith("audio_proj.proj1_vf")}))


# -- audio ----------------------------------------------------------------------------------------

def test_encoder_states_drop_the_embedding_and_resample_to_25_per_second():
    g = torch.Generator().manual_seed(0)
    layers = tuple(torch.randn(1, 11, 3, generator=g) for _ in range(3))
    out = encoder_states(layers)                                # 11 states at 50/s -> 5 at 25/s
    n = int(11 / 50 * 25)
    pos = np.arange(n) * 10 / (n - 1)
    for layer in (1, 2):
        for c in range(3):
            want = np.interp(pos, np.arange(11), layers[layer][0, :, c].numpy())
            np.testing.assert_allclose(out[:, layer - 1, c].numpy(), want, atol=1e-6)
    assert out.shape == (n, 2, 3)
    with pytest.raises(MultiTalkError, match="one clip"):
        encoder_states((torch.zeros(2, 11, 3), torch.zeros(2, 11, 3)))
    a, b = torch.ones(3, 2, 1), 2 * torch.ones(2, 2, 1)
    first, second = combine_speakers([a, b])                    # one after the other, zeros elsewhere
    assert torch.equal(first[:, 0, 0], torch.tensor([1.0, 1, 1, 0, 0]))
    assert torch.equal(second[:, 0, 0], torch.tensor([0.0, 0, 0, 2, 2]))


@pytest.mark.parametrize("start, length, frames", [(0, 9, 12), (4, 9, 10)])  # the second runs past the audio
def test_audio_projection_follows_the_windows(network, state, start, length, frames):
    g = torch.Generator().manual_seed(start)
    speakers = [torch.randn(frames, 2, FEATURES // 2, generator=g) for _ in range(2)]
    with torch.no_grad():
        got = project_audio(network.audio_proj, speakers, start, start + length)
    assert got.shape == (1, 3, 2 * TOKENS, AUDIO_DIM)
    torch.testing.assert_close(got, _projected(state, speakers, start, length), **TOL)
    with pytest.raises(MultiTalkError, match="4k"):
        project_audio(network.audio_proj, speakers, 0, 8)
    with pytest.raises(MultiTalkError, match="features"):
        project_audio(network.audio_proj, [torch.zeros(10, 3, 4)], 0, 5)


# -- cross-attention ------------------------------------------------------------------------------

def test_one_speaker_attends_frame_by_frame(network, state):
    g = torch.Generator().manual_seed(1)
    grid = (3, 2, 3)
    x = torch.randn(1, 3 * 6, DIM, generator=g)                 # a last frame without audio (appended)
    audio = torch.randn(1, 2, TOKENS, AUDIO_DIM, generator=g)
    with torch.no_grad():
        got = network.blocks[1](x, audio, grid)
    p = "blocks.1.audio_cross_attn"
    normed = _ln(x[0], state, "blocks.1.norm_x")
    for t in range(2):
        kv = _lin(state, f"{p}.kv_linear", audio[0, t])
        q = _lin(state, f"{p}.q_linear", normed[6 * t:6 * t + 6])
        want = _lin(state, f"{p}.proj", _attend(q, kv[:, :DIM], kv[:, DIM:]))
        torch.testing.assert_close(got[0, 6 * t:6 * t + 6], want, **TOL)
    assert torch.equal(got[0, 12:], torch.zeros(6, DIM))
    batch = torch.cat([x, 2 * x])                               # a batch shares the audio
    with torch.no_grad():
        torch.testing.assert_close(network.blocks[1](batch, audio, grid)[1], network.blocks[1](2 * x, audio, grid)[0])
    with pytest.raises(MultiTalkError, match="latent frames"):
        network.blocks[1](x, audio[:, :1], grid)
    with pytest.raises(MultiTalkError, match="grid"):
        network.blocks[1](x[:, :16], audio, grid)


def test_two_speakers_map_and_rotary_layout(network, state):
    g = torch.Generator().manual_seed(2)
    grid, length = (2, 2, 3), 12
    q = torch.randn(1, length, HEADS, HEAD, generator=g)
    k = torch.randn(1, length, HEADS, HEAD, generator=g)
    masks = torch.tensor([[1, 1, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=torch.bool)
    attn_map = speaker_attention_map(q, k, grid, masks, chunk=5)
    # by hand: softmax over the first frame's 6 keys per head, mean over a speaker's keys, mean over heads
    for c in range(2):
        m = masks[c].float()
        per_head = [torch.softmax(q[0, :, h] @ k[0, :6, h].t() / math.sqrt(HEAD), -1) @ m / m.sum()
                    for h in range(HEADS)]
        torch.testing.assert_close(attn_map[0, c], torch.stack(per_head).mean(0), **TOL)
    positions = speaker_positions(attn_map)
    for t in range(length):
        c = 0 if attn_map[0, 0, t] >= attn_map[0, 1, t] else 1
        m = attn_map[0, c]
        low = 0.0 if c == 0 else 20.0
        want = (m[t] - m.min()) / (m.max() - m.min() + 1e-8) * 4 + low
        assert abs(float(positions[0, t]) - float(want)) < 1e-5

    x = torch.randn(1, length, DIM, generator=g)
    audio = torch.randn(1, 2, 2 * TOKENS, AUDIO_DIM, generator=g)
    with torch.no_grad():
        got = network.blocks[0](x, audio, grid, positions)
    p = "blocks.0.audio_cross_attn"
    normed = _ln(x[0], state, "blocks.0.norm_x")
    key_pos = torch.tensor([2.0] * TOKENS + [22.0] * TOKENS)
    for t in range(2):
        kv = _lin(state, f"{p}.kv_linear", audio[0, t])
        qt = _rotate(_lin(state, f"{p}.q_linear", normed[6 * t:6 * t + 6]), positions[0, 6 * t:6 * t + 6])
        want = _lin(state, f"{p}.proj", _attend(qt, _rotate(kv[:, :DIM], key_pos), kv[:, DIM:]))
        torch.testing.assert_close(got[0, 6 * t:6 * t + 6], want, **TOL)
    with pytest.raises(MultiTalkError, match="tokens"):
        speaker_attention_map(q, k, grid, masks[:, :4])


# -- in the Wan blocks ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wan() -> WanModel:
    sd = tiny_wan_state_dict("i2v", seed=4)
    net = WanModel.from_config(WanConfig.detect_from_weights(sd))
    net.load_state_dict(sd, strict=True)
    return net.eval()


def test_attn1_patch_sees_q_k_and_replaces_the_attention_output(wan):
    torch.manual_seed(0)
    attn = WanSelfAttention(DIM, HEADS).eval()
    for p in attn.parameters():
        p.data.normal_(0, 0.05)
    x = torch.randn(1, 6, DIM)
    freqs = wan.rope_encode(1, 4, 6, device="cpu", dtype=torch.float32)
    seen = {}

    def patch(kwargs):
        seen.update(kwargs)
        return 2 * kwargs["x"]

    with torch.no_grad():
        plain = attn(x, freqs)
        got = attn(x, freqs, {"patches": {"attn1_patch": [patch]}})
    assert seen["q"].shape == seen["k"].shape == (1, 6, HEADS, HEAD)
    torch.testing.assert_close(got, 2 * (plain - attn.o.bias) + attn.o.bias, **TOL)  # o is linear


def test_attn2_patch_runs_between_the_cross_attention_and_the_ffn(wan):
    torch.manual_seed(1)
    block = WanAttentionBlock("t2v_cross_attn", DIM, 32, HEADS, cross_attn_norm=True).eval()
    for p in block.parameters():
        p.data.normal_(0, 0.05)
    x, context, e = torch.randn(1, 6, DIM), torch.randn(1, 3, DIM), torch.randn(1, 6, DIM)
    freqs = wan.rope_encode(1, 4, 6, device="cpu", dtype=torch.float32)
    mid, delta = {}, torch.randn(1, 6, DIM)

    def patch(kwargs):
        mid["x"] = kwargs["x"]
        return kwargs["x"] + delta

    with torch.no_grad():
        got = block(x, e, freqs, context, transformer_options={"patches": {"attn2_patch": [patch]}})
        rows = split_modulation(block.modulation, e, x, 6)
        after = mid["x"] + delta
        want = torch.addcmul(after, block.ffn(torch.addcmul(repeat_e(rows[3], after), block.norm2(after),
                                                            1 + repeat_e(rows[4], after))), repeat_e(rows[5], after))
    torch.testing.assert_close(got, want, **TOL)


def test_the_patch_in_a_wan_model(wan, network):
    """Block by block with the grid and block index; audio_scale 0 leaves the model as it is;
    two speakers: the attn1 map reaches the same block's attn2 patch, which takes it away."""
    patch = Patcher(network, load_device="cpu", offload_device="cpu")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 36, 2, 4, 6, generator=g)               # grid (2, 2, 3)
    context, clip = torch.randn(1, 3, 32, generator=g), torch.randn(1, 4, 48, generator=g)
    audio = torch.randn(1, 2, 2 * TOKENS, AUDIO_DIM, generator=g)
    t = torch.tensor([500.0])

    def run(*patches, attn1=None):
        options = {AUDIO_EMBEDS: audio, "patches": {"attn2_patch": list(patches)}}
        if attn1 is not None:
            options["patches"]["attn1_patch"] = [attn1]
        with torch.no_grad():
            return wan(x, t, context, clip_fea=clip, transformer_options=options)

    calls = []

    def record(kwargs):
        options = kwargs["transformer_options"]
        calls.append((options["block_index"], options["grid_sizes"], ATTN_MAP in options))
        return kwargs["x"]

    plain = run()
    torch.testing.assert_close(run(MultiTalkCrossAttnPatch(patch, 0.0)), plain)
    one = run(MultiTalkCrossAttnPatch(patch, 1.0), record)
    assert not torch.allclose(one, plain, atol=1e-4)
    assert calls == [(0, (2, 2, 3), False), (1, (2, 2, 3), False)]
    masks = torch.tensor([[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]], dtype=torch.bool)
    calls.clear()
    two = run(record, MultiTalkCrossAttnPatch(patch, 1.0), record, attn1=MultiTalkAttnMapPatch(masks))
    assert calls == [(0, (2, 2, 3), True), (0, (2, 2, 3), False), (1, (2, 2, 3), True), (1, (2, 2, 3), False)]
    assert torch.isfinite(two).all() and not torch.allclose(two, one, atol=1e-4)


def test_sample_wrapper_holds_the_motion_frames_for_the_run():
    """OUTER_SAMPLE: an APPLY_MODEL wrapper in the run's options only (the model input's first
    frames = the motion latent in model space); extending puts the motion latent back in front."""
    from types import SimpleNamespace

    from comfy_core.wrappers import WrappersMP

    from comfy_core.families.wan.latent_format import wan21_latent_format
    from comfy_core.sampling.guider import process_latent_in

    motion = torch.randn(1, 16, 1, 2, 2)
    network = MultiTalkPatchNetwork(MultiTalkConfig(dim=DIM, num_layers=1, features=FEATURES, intermediate_dim=4,
                                                    out_dim=4, context_tokens=2))
    guider = SimpleNamespace(model_options={"transformer_options": {}},
                             model_patcher=SimpleNamespace(model=SimpleNamespace(latent_format=wan21_latent_format()),
                                                           load_device="cpu"))
    seen = {}

    def executor(*args, **kwargs):
        options = guider.model_options["transformer_options"]
        (first,) = options["wrappers"][WrappersMP.APPLY_MODEL]["MultiTalk_apply_model"]
        seen["input"] = first(lambda x, *a, **k: x, torch.zeros(2, 16, 3, 2, 2))
        return torch.ones(1, 16, 3, 2, 2)

    executor.class_obj = guider
    for extend in (False, True):
        wrapper = InfiniteTalkSampleWrapper(motion, Patcher(network), is_extend=extend)
        out = wrapper(executor)
        in_model_space = process_latent_in(wan21_latent_format(), motion)
        assert not torch.equal(in_model_space, motion)
        assert torch.equal(seen["input"][:, :, :1], in_model_space.expand(2, -1, -1, -1, -1))
        assert not seen["input"][:, :, 1:].any()
        assert torch.equal(out[:, :, :1], motion if extend else torch.ones(1, 16, 1, 2, 2))
        assert guider.model_options == {"transformer_options": {}}  # the run's copy only
