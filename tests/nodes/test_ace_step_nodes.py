"""ACE-Step 1.5's nodes (nodes/ace_step_nodes.py): the empty latent's length, the text encoder node on the
reduced ACE-Step encoders (what it passes on; a CLIP of another family is refused), and ReferenceTimbreAudio."""
from __future__ import annotations

import pytest
import torch

from nodes.ace_step_nodes import empty_ace_step15_latent_audio, reference_timbre_audio, text_encode_ace_step15
from nodes.errors import NodeInputError
from tests.fixtures.ace_step_files import TEXT_DIM, tiny_lm_state_dict, tiny_text_state_dict, write_safetensors

DEFAULTS = dict(seed=5, bpm=120, duration=1.0, timesignature="4", language="en", keyscale="E minor",
                generate_audio_codes=True, cfg_scale=2.0, temperature=0.85, top_p=0.9, top_k=0, min_p=0.0)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    from comfy_core.split.text_encoder_files import load_text_encoders

    folder = tmp_path_factory.mktemp("ace_nodes")
    return load_text_encoders([write_safetensors(folder / "qwen_0.6b_ace15.safetensors", tiny_text_state_dict()),
                               write_safetensors(folder / "qwen_1.7b_ace15.safetensors", tiny_lm_state_dict())], "ace")


def test_empty_latent_has_25_frames_a_second():
    (latent,) = empty_ace_step15_latent_audio(10.0, 1)
    assert latent["type"] == "audio" and latent["samples"].shape == (1, 64, 250)
    assert not latent["samples"].any()
    assert empty_ace_step15_latent_audio(2.02, 3)[0]["samples"].shape == (3, 64, 50)  # round(50.5): 50
    with pytest.raises(NodeInputError, match="seconds"):
        empty_ace_step15_latent_audio(0.5, 1)


def test_text_encode_gives_states_lyrics_and_codes(clip):
    (conditioning,) = text_encode_ace_step15(clip, "lofi beat", "[verse]\nhm", **DEFAULTS)
    states, extra = conditioning[0]
    assert states.shape[-1] == TEXT_DIM and extra["conditioning_lyrics"].shape[-1] == TEXT_DIM
    assert len(extra["audio_codes"][0]) == 5  # 1 s: 5 codes
    (again,) = text_encode_ace_step15(clip, "lofi beat", "[verse]\nhm", **DEFAULTS)
    assert again[0][1]["audio_codes"] == extra["audio_codes"]
    (other,) = text_encode_ace_step15(clip, "lofi beat", "[verse]\nhm", **{**DEFAULTS, "seed": 6})
    assert other[0][1]["audio_codes"] != extra["audio_codes"]
    (plain,) = text_encode_ace_step15(clip, "lofi beat", "[verse]\nhm", **{**DEFAULTS, "generate_audio_codes": False})
    assert "audio_codes" not in plain[0][1]
    torch.testing.assert_close(plain[0][0], states)


def test_text_encode_refuses_other_clips_and_bad_choices(clip):
    with pytest.raises(NodeInputError, match="clip"):
        text_encode_ace_step15(object(), "x", "", **DEFAULTS)
    with pytest.raises(NodeInputError, match="timesignature"):
        text_encode_ace_step15(clip, "x", "", **{**DEFAULTS, "timesignature": "5"})


def test_reference_audio_appends_to_the_conditioning():
    base = [[torch.zeros(1, 2, 3), {"a": 1}]]
    first, second = torch.randn(1, 64, 7), torch.randn(1, 64, 9)
    (once,) = reference_timbre_audio(base, {"samples": first})
    (twice,) = reference_timbre_audio(once, {"samples": second})
    assert [t.shape[-1] for t in twice[0][1]["reference_audio_timbre_latents"]] == [7, 9]
    assert "reference_audio_timbre_latents" not in base[0][1] and once[0][1]["a"] == 1
    assert reference_timbre_audio(base, None)[0] is base
    with pytest.raises(NodeInputError, match="latent"):
        reference_timbre_audio(base, {"samples": torch.zeros(1, 4, 8, 8)})
