"""ACE-Step 1's nodes: EmptyAceStepLatentAudio's latent (ComfyUI's length rule) and
TextEncodeAceStepAudio over the all-in-one checkpoint's CLIP (UMT5-base states, lyric ids,
`lyrics_strength`), then the checkpoint's model and VAE on that conditioning."""
from __future__ import annotations

import pytest
import torch

from nodes.ace_step_nodes import empty_ace_step_latent_audio, text_encode_ace_step
from nodes.errors import NodeInputError
from tests.fixtures.ace1_files import TEXT_DIM, write_ace1_checkpoint


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from comfy_core.loading import load_checkpoint

    return load_checkpoint(write_ace1_checkpoint(tmp_path_factory.mktemp("ace1") / "ace_step_v1_3.5b.safetensors"))


def test_empty_latent_is_16_rows_of_4096_samples():
    (latent,) = empty_ace_step_latent_audio(2.0, 3)
    assert latent["samples"].shape == (3, 8, 16, 21) and latent["type"] == "audio"  # int(2 * 44100 / 4096)
    assert not latent["samples"].any()
    with pytest.raises(NodeInputError):
        empty_ace_step_latent_audio(0.5, 1)


def test_text_encode_sets_lyrics_and_strength_then_samples_and_decodes(loaded):
    model, clip, vae = loaded
    (cond,) = text_encode_ace_step(clip, "rock, electric guitar", "\n", 0.6)
    states, options = cond[0]
    assert states.shape[0] == 1 and states.shape[2] == TEXT_DIM
    assert options["lyrics_strength"] == 0.6 and options["conditioning_lyrics"].tolist() == [[261, 2, 2]]
    (sung,) = text_encode_ace_step(clip, "pop", "la la la", 1.0)  # [en] la [SPACE] la [SPACE] la, line end
    assert sung[0][1]["conditioning_lyrics"].tolist() == [[261, 259, 494, 2, 494, 2, 494, 2]]
    weighted = clip.tokenize("pop", lyrics="(la)")["lyrics"]  # ComfyUI's weights reach the lyric tokens
    assert weighted == [[(261, 1.0), (259, pytest.approx(1.1)), (494, pytest.approx(1.1)), (2, pytest.approx(1.1))]]
    assert [t for t, _ in clip.tokenize("pop", lyrics="(la)", disable_weights=True)["lyrics"][0]] == [261, 259, 5,
                                                                                                       494, 6, 2]
    with pytest.raises(NodeInputError):
        text_encode_ace_step(object(), "pop", "", 1.0)

    from comfy_core.sampling.ksampler import sample

    (latent,) = empty_ace_step_latent_audio(1.0, 1)
    torch.manual_seed(0)
    noise = torch.randn_like(latent["samples"])
    samples = sample(model, noise, 2, 1.0, "euler", "simple", cond, cond, latent["samples"], disable_pbar=True)
    audio = vae.decode(samples)
    assert samples.shape == (1, 8, 16, 10) and audio.shape == (1, 10 * 4096, 2) and torch.isfinite(audio).all()
