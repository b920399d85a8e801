"""WanHuMoImageToVideo (nodes/wan_audio_nodes.py; audio maths in comfy_core/families/wan/humo.py)
against ComfyUI's behaviour composed here: Whisper's 33 hidden states grouped (means of 0-7,
8-15, 16-23, 24-31, state 32), cut to the audio's length, interpolated 50 -> 25 per second with
corners aligned, then 8-row windows per latent frame; the reference latent (zeros for negative)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from nodes.errors import NodeInputError
from nodes.wan_audio_nodes import wan_humo_image_to_video
from tests.nodes.node_context import running_node
from tests.nodes.test_wan_nodes import FakeVideoVAE, cond, frames

WIDTH = 3


def _run(*args, **kwargs):
    with running_node("WanHuMoImageToVideo", "1"):
        return wan_humo_image_to_video(*args, **kwargs)


def _encoder_output(t=20, samples=16000 * 3 // 10, layers=33, seed=0):
    g = torch.Generator().manual_seed(seed)
    states = tuple(torch.randn(1, t, WIDTH, generator=g) for _ in range(layers))
    return {"encoded_audio": states[-1], "encoded_audio_all_layers": states, "audio_samples": samples}


def _expected(output, length):
    """By hand, in NumPy."""
    states = np.stack([s[0].numpy() for s in output["encoded_audio_all_layers"]], axis=1)  # [T, 33, C]
    states = states[:(output["audio_samples"] // 640) * 2]
    groups = [states[:, 0:8].mean(1), states[:, 8:16].mean(1), states[:, 16:24].mean(1), states[:, 24:32].mean(1),
              states[:, 32]]
    t = states.shape[0]
    n = int(t / 50 * 25)
    pos = np.arange(n) * (t - 1) / (n - 1)
    feats = np.stack([np.stack([np.interp(pos, np.arange(t), g[:, c]) for c in range(WIDTH)], axis=-1)
                      for g in groups], axis=1)                                       # [n, 5, C]

    def row(i):
        return feats[i] if 0 <= i < n else np.zeros((5, WIDTH))

    windows = [np.stack([np.zeros((5, WIDTH))] * 3 + [row(i) for i in range(-2, 3)])]
    for k in range(1, (length - 1) // 4 + 1):
        windows.append(np.stack([row(i) for i in range(4 * (k - 1) - 1, 4 * k + 3)]))
    return torch.tensor(np.stack(windows)[None], dtype=torch.float32)


def test_audio_and_reference_as_comfyui():
    vae = FakeVideoVAE()
    ref = frames(2, 16, 16, seed=3)
    output = _encoder_output()                                  # 0.3 s: 15 states kept, 7 at 25/s
    pos, neg, latent = _run(cond(1.0), cond(2.0), vae, 16, 16, 13, 1, audio_encoder_output=output, ref_image=ref)
    assert latent["samples"].shape == (1, 16, 4, 2, 2)
    p, n = pos[0][1], neg[0][1]
    torch.testing.assert_close(p["audio_embed"], _expected(output, 13), atol=1e-5, rtol=1e-5)
    assert p["audio_embed"].shape == (1, 4, 8, 5, WIDTH) and torch.equal(n["audio_embed"], 0 * p["audio_embed"])
    assert torch.equal(p["reference_latents"][0], vae.latent_of(ref[:1]))
    assert torch.equal(n["reference_latents"][0], torch.zeros(1, 16, 1, 2, 2))


def test_without_inputs_zero_audio_and_reference():
    pos, neg, latent = _run(cond(), cond(), FakeVideoVAE(), 16, 32, 5, 2)
    for c in (pos[0][1], neg[0][1]):
        assert c["audio_embed"].shape == (2, 3, 8, 5, 1280) and not c["audio_embed"].any()
        assert c["reference_latents"][0].shape == (2, 16, 1, 4, 2) and not c["reference_latents"][0].any()
    assert latent["samples"].shape == (2, 16, 2, 4, 2)


def test_refusals():
    vae = FakeVideoVAE()
    with pytest.raises(NodeInputError, match="33"):
        _run(cond(), cond(), vae, 16, 16, 5, 1, audio_encoder_output=_encoder_output(layers=25))
    with pytest.raises(NodeInputError, match="audio_encoder_output"):
        _run(cond(), cond(), vae, 16, 16, 5, 1, audio_encoder_output={"nope": 1})
