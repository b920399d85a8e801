"""WanSoundImageToVideo / WanSoundImageToVideoExtend (nodes/wan_audio_nodes.py) and S2V's audio
windows (comfy_core/families/wan/s2v_audio.py): the hidden states on the video clock, sampled at
16 fps half-to-even, cut per clip; the reference, motion and control latents the model reads;
the extension's continuation; refusals. A fake Wan-like VAE (tests/nodes/test_wan_nodes.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from comfy_core.families.wan.s2v_audio import s2v_audio_embed
from nodes.errors import NodeInputError
from nodes.wan_audio_nodes import wan_sound_image_to_video, wan_sound_image_to_video_extend
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames


def _states(layers=3, t=10, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, t, d, generator=g) for _ in range(layers))


def _expected_embed(states, latent_frames, offset):
    """By hand: interpolate each layer's states 50 -> 30 per second (corners aligned), take state
    round_half_even(i * 30 / 16) for video frame i (zeros past the end), cut 4 * latent_frames."""
    feats = torch.cat(states).numpy()                          # [L, T, D]
    t = feats.shape[1]
    n = int(t / 50 * 30)
    pos = np.arange(n) * (t - 1) / (n - 1)
    interp = np.stack([[np.interp(pos, np.arange(t), layer[:, c]) for c in range(layer.shape[1])]
                       for layer in feats], axis=0)            # [L, D, n]
    frames_per_clip = 4 * latent_frames
    clips = int(n / (frames_per_clip * 30 / 16)) + 1
    cols = []
    for i in range(clips * frames_per_clip):
        j = int(np.round(i * 30 / 16))
        cols.append(interp[:, :, j] if j < n else np.zeros(interp.shape[:2]))
    full = np.stack(cols, axis=-1)[None]                       # [1, L, D, F]
    return torch.tensor(full[..., offset:offset + frames_per_clip], dtype=torch.float32)


def test_audio_windows_follow_the_video_clock():
    states = _states(t=40)                                     # 0.8 s: 24 states at 30/s
    embed, offset = s2v_audio_embed(states, 2, 0)
    assert embed.shape == (1, 3, 4, 8) and offset == 8
    torch.testing.assert_close(embed, _expected_embed(states, 2, 0), atol=1e-5, rtol=1e-5)
    second, offset = s2v_audio_embed(states, 2, 8)
    torch.testing.assert_close(second, _expected_embed(states, 2, 8), atol=1e-5, rtol=1e-5)
    assert offset == 16
    beyond, same = s2v_audio_embed(states, 2, 1000)
    assert beyond is None and same == 1000


def _run(fn, name, *args, **kwargs):
    with running_node(name, "1"):
        return fn(*args, **kwargs)


def test_sound_image_to_video_sets_every_s2v_input():
    vae = FakeVideoVAE()
    states = _states(t=40)
    ref, motion, control = frames(1, 16, 16, seed=1), frames(5, 16, 16, seed=2), frames(3, 16, 16, seed=3)
    pos, neg, latent = _run(wan_sound_image_to_video, "WanSoundImageToVideo", cond(1.0), cond(2.0), vae, 16, 16, 5,
                            1, {"encoded_audio_all_layers": states}, ref, control, motion)
    assert latent["samples"].shape == (1, 16, 2, 2, 2)
    p, n = pos[0][1], neg[0][1]
    torch.testing.assert_close(p["audio_embed"], _expected_embed(states, 2, 0), atol=1e-5, rtol=1e-5)
    assert torch.count_nonzero(n["audio_embed"]) == 0 and n["audio_embed"].shape == p["audio_embed"].shape
    assert torch.equal(p["reference_latents"][0], vae.latent_of(ref)) and len(n["reference_latents"]) == 1
    padded = torch.cat([torch.full((68, 16, 16, 3), 0.5), motion])  # grey in front up to 73 frames
    assert torch.equal(p["reference_motion"], vae.latent_of(padded)[:, :, -19:])
    assert p["reference_motion"].shape[2] == 19
    from nodes.wan_nodes import _format
    nothing = _format(16).process_out(torch.zeros(1, 16, 2, 2, 2))
    encoded = vae.latent_of(control)                                # 3 frames -> 1 latent frame
    assert torch.equal(p["control_video"][:, :, :1], encoded) and torch.equal(p["control_video"][:, :, 1:],
                                                                               nothing[:, :, 1:])
    assert p["keep"] == 1.0 and n["keep"] == 2.0
    bare_pos, _, _ = _run(wan_sound_image_to_video, "WanSoundImageToVideo", cond(), cond(), vae, 16, 16, 5, 1)
    assert set(bare_pos[0][1]) == {"keep", "control_video"} and torch.equal(bare_pos[0][1]["control_video"], nothing)


def test_extend_continues_after_the_video_latent():
    vae = FakeVideoVAE()
    states = _states(t=60)
    video = torch.randn(1, 16, 3, 2, 4)
    pos, neg, latent = _run(wan_sound_image_to_video_extend, "WanSoundImageToVideoExtend", cond(), cond(), vae, 5,
                            {"samples": video}, {"encoded_audio_all_layers": states})
    assert latent["samples"].shape == (1, 16, 2, 2, 4)          # the video latent's size, 5 frames
    torch.testing.assert_close(pos[0][1]["audio_embed"], _expected_embed(states, 2, 12), atol=1e-5, rtol=1e-5)
    assert torch.equal(pos[0][1]["reference_motion"], video) and torch.equal(neg[0][1]["reference_motion"], video)


def test_refusals():
    vae = FakeVideoVAE()
    with pytest.raises(NodeInputError, match="audio_encoder_output"):
        _run(wan_sound_image_to_video, "WanSoundImageToVideo", cond(), cond(), vae, 16, 16, 5, 1, {"nope": 1})
    with pytest.raises(NodeInputError, match="length"):
        _run(wan_sound_image_to_video, "WanSoundImageToVideo", cond(), cond(), vae, 16, 16, 6, 1)
    with pytest.raises(NodeInputError, match="video_latent"):
        _run(wan_sound_image_to_video_extend, "WanSoundImageToVideoExtend", cond(), cond(), vae, 5,
             {"samples": torch.zeros(1, 48, 2, 2, 2)})
