"""JoinAudioChannels, AudioEqualizer3Band and ConditioningStableAudio (ComfyUI's nodes_audio.py,
2026; nodes/audio_extras.py). The equaliser is checked by the frequency response of its impulse
response (a numpy DFT) against what the Audio EQ Cookbook's filters promise by definition: a
shelf's full gain at DC (low) or Nyquist (high) and half of it in dB at its corner, the peaking
band's full gain at its centre and half of it at the band edges its Q gives, 0 dB elsewhere."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nodes.audio_extras import audio_equalizer_3band, conditioning_stable_audio, join_audio_channels
from nodes.errors import NodeInputError
from tests.nodes.workflow_2026 import Runner, node

RATE = 48000
FLAT = dict(low_gain_dB=0.0, low_freq=100, mid_gain_dB=0.0, mid_freq=1000, mid_q=0.707, high_gain_dB=0.0,
            high_freq=5000)
SCALE = 0.01  # the impulse's height: well inside -1..1 after +24 dB


def impulse(samples: int = RATE) -> dict:
    waveform = torch.zeros(1, 1, samples)
    waveform[..., 0] = SCALE
    return {"waveform": waveform, "sample_rate": RATE}


def response_db(out: dict, freqs: list[float]) -> np.ndarray:
    """|H(f)| in dB at arbitrary frequencies, by the DFT sum of the impulse response."""
    h = out["waveform"][0, 0].double().numpy() / SCALE
    n = np.arange(h.size)
    return np.array([20 * math.log10(abs(np.sum(h * np.exp(-2j * math.pi * f * n / RATE)))) for f in freqs])


def eq(audio: dict, **bands: float) -> dict:
    (out,) = audio_equalizer_3band(audio, **{**FLAT, **bands})
    return out


def test_low_shelf_gains_below_its_corner_only():
    db = response_db(eq(impulse(), low_gain_dB=12.0, low_freq=200), [0.0, 10.0, 200.0, 8000.0, RATE / 2])
    assert db == pytest.approx([12.0, 12.0, 6.0, 0.0, 0.0], abs=0.02)


def test_high_shelf_gains_above_its_corner_only():
    db = response_db(eq(impulse(), high_gain_dB=-8.0, high_freq=4000), [0.0, 100.0, 4000.0, RATE / 2])
    assert db == pytest.approx([0.0, 0.0, -4.0, -8.0], abs=0.02)


@pytest.mark.parametrize("q", [0.707, 2.0])
def test_peaking_band_has_its_gain_at_the_centre_and_half_at_the_edges_its_q_gives(q):
    gain, centre = 9.0, 1500.0
    # The analog prototype (s^2 + s A/Q + 1) / (s^2 + s/(A Q) + 1) has half its dB gain where
    # 1 - x^2 = +-x/Q; the bilinear transform prewarped at the centre maps x to tan(w/2) / tan(w0/2).
    half_gain = [(s / q + math.sqrt(1 / q ** 2 + 4)) / 2 for s in (-1, 1)]
    warp = math.tan(math.pi * centre / RATE)
    edges = [RATE / math.pi * math.atan(x * warp) for x in half_gain]
    db = response_db(eq(impulse(), mid_gain_dB=gain, mid_freq=centre, mid_q=q), [0.0, centre, *edges, RATE / 2])
    assert db == pytest.approx([0.0, gain, gain / 2, gain / 2, 0.0], abs=0.005)


def test_the_three_bands_add_up_in_db():
    bands = dict(low_gain_dB=6.0, low_freq=100, mid_gain_dB=-4.0, mid_freq=1000, mid_q=1.0, high_gain_dB=3.0,
                 high_freq=8000)
    freqs = [20.0, 500.0, 1000.0, 3000.0, 16000.0]
    alone = sum(response_db(eq(impulse(), **{k: v for k, v in bands.items() if not k.endswith("gain_dB") or k == g}),
                            freqs) for g in ("low_gain_dB", "mid_gain_dB", "high_gain_dB"))
    assert response_db(eq(impulse(), **bands), freqs) == pytest.approx(alone, abs=1e-3)


def test_a_sine_in_the_boosted_band_comes_out_louder_by_the_gain():
    t = torch.arange(RATE) / RATE
    sine = 0.1 * torch.sin(2 * math.pi * 50 * t).view(1, 1, -1).repeat(2, 2, 1)  # batch 2, stereo
    out = eq({"waveform": sine, "sample_rate": RATE}, low_gain_dB=6.0, low_freq=500)
    assert out["waveform"].shape == sine.shape and out["sample_rate"] == RATE
    settled = out["waveform"][..., RATE // 2:]
    ratio = settled.abs().amax(dim=-1) / sine[..., RATE // 2:].abs().amax(dim=-1)
    assert torch.allclose(ratio, torch.full_like(ratio, 10 ** (6 / 20)), atol=0.01)  # 50 Hz << 500 Hz: full gain


def test_flat_settings_leave_the_samples_and_each_band_clips_to_one():
    audio = {"waveform": torch.randn(1, 2, 1000) * 0.3, "sample_rate": 44100}
    out = eq(audio)
    assert torch.equal(out["waveform"], audio["waveform"]) and out["waveform"] is not audio["waveform"]
    loud = eq({"waveform": torch.full((1, 1, 4000), 0.9), "sample_rate": 44100}, low_gain_dB=20.0)
    assert loud["waveform"].abs().max() == 1.0 and loud["waveform"][..., -1].item() == 1.0


def test_equalizer_passes_none_and_empty_clips():
    assert audio_equalizer_3band(None, **FLAT) == (None,)
    empty = {"waveform": torch.zeros(1, 2, 0), "sample_rate": 44100}
    assert audio_equalizer_3band(empty, **{**FLAT, "low_gain_dB": 3.0})[0] is empty
    with pytest.raises(NodeInputError, match="mid_q"):
        audio_equalizer_3band(impulse(), **{**FLAT, "mid_gain_dB": 3.0, "mid_q": 0.0})


def mono(values: torch.Tensor, rate: int) -> dict:
    return {"waveform": values.view(1, 1, -1).float(), "sample_rate": rate}


def test_join_puts_left_and_right_side_by_side_cut_to_the_shorter():
    left, right = torch.arange(10.0) / 10, -torch.arange(7.0) / 10
    (out,) = join_audio_channels(mono(left, 8000), mono(right, 8000))
    assert out["sample_rate"] == 8000 and out["waveform"].shape == (1, 2, 7)
    assert torch.equal(out["waveform"][0, 0], left[:7]) and torch.equal(out["waveform"][0, 1], right)


def test_join_resamples_the_lower_rate_to_the_higher():
    t_low, t_high = torch.arange(8000) / 8000, torch.arange(16000) / 16000
    tone = lambda t: 0.5 * torch.sin(2 * math.pi * 440 * t)  # noqa: E731  well below both Nyquists
    (out,) = join_audio_channels(mono(tone(t_low), 8000), mono(tone(t_high), 16000))
    assert out["sample_rate"] == 16000 and abs(out["waveform"].shape[-1] - 16000) <= 2
    n = out["waveform"].shape[-1]
    middle = slice(1000, n - 1000)  # away from the resampler's edges
    assert torch.allclose(out["waveform"][0, 0, middle], tone(t_high)[:n][middle], atol=0.02)
    assert torch.equal(out["waveform"][0, 1], tone(t_high)[:n])


def test_join_takes_mono_only_and_passes_a_missing_side():
    stereo = {"waveform": torch.zeros(1, 2, 10), "sample_rate": 8000}
    with pytest.raises(NodeInputError, match="audio_left"):
        join_audio_channels(stereo, mono(torch.zeros(10), 8000))
    right = mono(torch.ones(5), 8000)
    assert join_audio_channels(None, right) == (right,) and join_audio_channels(right, None) == (right,)
    assert join_audio_channels(None, None) == (None,)


def test_conditioning_stable_audio_sets_the_seconds_on_copies():
    cond = torch.zeros(1, 4, 8)
    positive, negative = [[cond, {"pooled_output": None}]], [[cond, {}], [cond, {"seconds_total": 5.0}]]
    new_positive, new_negative = conditioning_stable_audio(positive, negative, 2.5, 30.0)
    assert new_positive == [[cond, {"pooled_output": None, "seconds_start": 2.5, "seconds_total": 30.0}]]
    assert [o for _, o in new_negative] == [{"seconds_start": 2.5, "seconds_total": 30.0}] * 2
    assert positive[0][1] == {"pooled_output": None} and negative[1][1] == {"seconds_total": 5.0}  # untouched
    with pytest.raises(NodeInputError, match="negative"):
        conditioning_stable_audio(positive, "nope", 0.0, 47.0)


async def test_join_then_equalize_in_a_prompt(tmp_path):
    runner = Runner(tmp_path)
    prompt = {"a": node("EmptyAudio", duration=0.5, sample_rate=8000, channels=1),
              "j": node("JoinAudioChannels", audio_left=["a", 0], audio_right=["a", 0]),
              "eq": node("AudioEqualizer3Band", audio=["j", 0], low_gain_dB=3.0, low_freq=100, mid_gain_dB=0.0,
                         mid_freq=1000, mid_q=0.707, high_gain_dB=0.0, high_freq=3000),
              "split": node("SplitAudioChannels", audio=["eq", 0]),
              "p": node("PreviewAny", source=["split", 0])}
    out = await runner.run(prompt)
    assert out.status == "success", out.error
    assert {"j", "eq", "split"} <= set(runner.ran)
