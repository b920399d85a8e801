"""ComfyUI's newer audio nodes of comfy_extras/nodes_audio.py (2026: JoinAudioChannels,
AudioEqualizer3Band, ConditioningStableAudio), declared as ComfyUI's V3 schema renders them
(graph/v3_schema.py); behaviour read from that file (Comfy-Org/ComfyUI@3fa38fd9cc20446bc3486e8306e8013121775397)
and its comfy/audio.py, written here.

* JoinAudioChannels: two mono clips as the left and right channels of one stereo clip; clips at
  different rates are joined at the higher rate (the other resampled, comfy_core.video.audio_resample:
  FFmpeg's resampler, as AudioConcat here, not ComfyUI's sinc taps), the longer one is cut to
  the shorter's length; a missing (None) side gives the other side unchanged.
* AudioEqualizer3Band: a low shelf (slope Q 0.707 at `low_freq`), a peaking band (`mid_freq`,
  `mid_q`) and a high shelf (Q 0.707 at `high_freq`), each a biquad of Robert Bristow-Johnson's
  "Audio EQ Cookbook" run as a causal IIR filter from rest along the samples (scipy's `lfilter`),
  a band with 0 dB skipped, and the signal clipped into -1..1 after each band, as ComfyUI's
  `bass_biquad` / `equalizer_biquad` / `treble_biquad` do (ComfyUI forms the coefficients in the
  waveform's float32; here they and the filter run in float64: samples differ by ~1e-4 at most).
* ConditioningStableAudio: sets `seconds_start` and `seconds_total` on every entry of both
  conditionings (Stable Audio's seconds embedders read them:
  comfy_core/families/stable_audio/conditioner.py).
"""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from graph.v3_schema import Float, Int, Output, Socket, v3_node
from nodes import checks
from nodes._media_files import media_errors
from nodes.errors import NodeInputError

if TYPE_CHECKING:
    import torch

MODULE = "comfy_extras.nodes_audio"
SHELF_Q = 0.707  # ComfyUI's fixed slope for both shelves

log = logging.getLogger(__name__)


def _audio(audio: Any, name: str) -> tuple["torch.Tensor", int]:
    from comfy_core.video.audio_frames import check_audio

    with media_errors(name):
        return check_audio(audio, name)


# -- biquads (RBJ Audio EQ Cookbook) ---------------------------------------------------------------

def _shelf_terms(sample_rate: float, freq: float, gain_db: float, q: float) -> tuple[float, float, float, float]:
    """A = 10^(gain/40), cos(w0), alpha = sin(w0) / 2Q, 2 sqrt(A) alpha."""
    w0 = 2.0 * math.pi * freq / sample_rate
    amp = 10.0 ** (gain_db / 40.0)
    alpha = math.sin(w0) / (2.0 * q)
    return amp, math.cos(w0), alpha, 2.0 * math.sqrt(amp) * alpha


def low_shelf(sample_rate: float, freq: float, gain_db: float, q: float = SHELF_Q) -> tuple[list, list]:
    """(b, a) of the cookbook's low shelf: `gain_db` below `freq`, 0 dB far above it."""
    amp, cos, _alpha, k = _shelf_terms(sample_rate, freq, gain_db, q)
    b = [amp * ((amp + 1) - (amp - 1) * cos + k), 2 * amp * ((amp - 1) - (amp + 1) * cos),
         amp * ((amp + 1) - (amp - 1) * cos - k)]
    a = [(amp + 1) + (amp - 1) * cos + k, -2 * ((amp - 1) + (amp + 1) * cos), (amp + 1) + (amp - 1) * cos - k]
    return b, a


def high_shelf(sample_rate: float, freq: float, gain_db: float, q: float = SHELF_Q) -> tuple[list, list]:
    """(b, a) of the cookbook's high shelf: `gain_db` above `freq`, 0 dB far below it."""
    amp, cos, _alpha, k = _shelf_terms(sample_rate, freq, gain_db, q)
    b = [amp * ((amp + 1) + (amp - 1) * cos + k), -2 * amp * ((amp - 1) + (amp + 1) * cos),
         amp * ((amp + 1) + (amp - 1) * cos - k)]
    a = [(amp + 1) - (amp - 1) * cos + k, 2 * ((amp - 1) - (amp + 1) * cos), (amp + 1) - (amp - 1) * cos - k]
    return b, a


def peaking(sample_rate: float, freq: float, gain_db: float, q: float) -> tuple[list, list]:
    """(b, a) of the cookbook's peaking EQ: `gain_db` at `freq`, bandwidth set by `q`."""
    amp, cos, alpha, _k = _shelf_terms(sample_rate, freq, gain_db, q)
    return [1 + alpha * amp, -2 * cos, 1 - alpha * amp], [1 + alpha / amp, -2 * cos, 1 - alpha / amp]


def run_biquad(waveform: "torch.Tensor", b: list, a: list) -> "torch.Tensor":
    """`waveform` [..., S] through the filter (b, a) along the samples from rest, clipped to -1..1.
    Computed on the CPU in float64 (scipy's IIR loop), returned in the input's dtype and device."""
    import numpy as np
    import scipy.signal
    import torch

    samples = waveform.detach().to("cpu", torch.float64).numpy()
    filtered = scipy.signal.lfilter(np.asarray(b, np.float64), np.asarray(a, np.float64), samples, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(filtered)).to(waveform).clamp(-1.0, 1.0)


def equalize(waveform: "torch.Tensor", sample_rate: int, low_gain_dB: float, low_freq: float, mid_gain_dB: float,
             mid_freq: float, mid_q: float, high_gain_dB: float, high_freq: float) -> "torch.Tensor":
    """Low shelf, then peaking mid band, then high shelf; a 0 dB band is left out."""
    out = waveform.clone()
    if low_gain_dB != 0:
        out = run_biquad(out, *low_shelf(sample_rate, float(low_freq), low_gain_dB))
    if mid_gain_dB != 0:
        out = run_biquad(out, *peaking(sample_rate, float(mid_freq), mid_gain_dB, mid_q))
    if high_gain_dB != 0:
        out = run_biquad(out, *high_shelf(sample_rate, float(high_freq), high_gain_dB))
    return out


# -- nodes -----------------------------------------------------------------------------------------

@v3_node("JoinAudioChannels", display_name="Join Audio Channels", category="audio", python_module=MODULE,
         description="Joins left and right mono audio channels into a stereo audio.",
         inputs=[Socket("audio_left", "AUDIO"), Socket("audio_right", "AUDIO")],
         outputs=[Output("AUDIO", "audio")])
def join_audio_channels(audio_left: Any, audio_right: Any) -> tuple[Any]:
    """Left and right mono clips -> one stereo clip `[B, 2, S]` (see the module docstring)."""
    import torch

    from comfy_core.video.audio_resample import resample

    if audio_left is None or audio_right is None:
        return (audio_right if audio_left is None else audio_left,)
    left, left_rate = _audio(audio_left, "audio_left")
    right, right_rate = _audio(audio_right, "audio_right")
    for name, waveform in (("audio_left", left), ("audio_right", right)):
        if waveform.shape[1] != 1:
            raise NodeInputError(name, "mono audio (1 channel)", f"{waveform.shape[1]} channel(s)")
    rate = max(left_rate, right_rate)
    if left_rate < rate:
        left = resample(left, left_rate, rate)
    elif right_rate < rate:
        right = resample(right, right_rate, rate)
    length = min(left.shape[-1], right.shape[-1])
    if left.shape[-1] != right.shape[-1]:
        log.info("JoinAudioChannels: trimming both channels to %d samples", length)
    if left.shape[0] != right.shape[0]:
        raise NodeInputError("audio_right", f"a batch of {left.shape[0]} clip(s), as audio_left", f"{right.shape[0]}")
    return ({"waveform": torch.cat((left[..., :length], right[..., :length]), dim=1), "sample_rate": rate},)


@v3_node("AudioEqualizer3Band", display_name="Audio Equalizer (3-Band)", category="audio", python_module=MODULE,
         experimental=True, search_aliases=["eq", "bass boost", "treble boost", "equalizer"],
         inputs=[Socket("audio", "AUDIO"),
                 Float("low_gain_dB", default=0.0, min=-24.0, max=24.0, step=0.1,
                       tooltip="Gain for Low frequencies (Bass)"),
                 Int("low_freq", default=100, min=20, max=500, tooltip="Cutoff frequency for Low shelf"),
                 Float("mid_gain_dB", default=0.0, min=-24.0, max=24.0, step=0.1,
                       tooltip="Gain for Mid frequencies"),
                 Int("mid_freq", default=1000, min=200, max=4000, tooltip="Center frequency for Mids"),
                 Float("mid_q", default=0.707, min=0.1, max=10.0, step=0.1, tooltip="Q factor (bandwidth) for Mids"),
                 Float("high_gain_dB", default=0.0, min=-24.0, max=24.0, step=0.1,
                       tooltip="Gain for High frequencies (Treble)"),
                 Int("high_freq", default=5000, min=1000, max=15000, tooltip="Cutoff frequency for High shelf")],
         outputs=[Output("AUDIO")])
def audio_equalizer_3band(audio: Any, low_gain_dB: float, low_freq: int, mid_gain_dB: float, mid_freq: int,
                          mid_q: float, high_gain_dB: float, high_freq: int) -> tuple[Any]:
    """The clip through the three bands (see the module docstring); None and empty clips pass."""
    if audio is None:
        return (None,)
    if isinstance(audio, dict) and getattr(audio.get("waveform"), "shape", (1,))[-1] == 0:
        return (audio,)
    waveform, rate = _audio(audio, "audio")
    if mid_q <= 0:
        raise NodeInputError("mid_q", "a Q factor > 0", str(mid_q))
    out = equalize(waveform, rate, low_gain_dB, low_freq, mid_gain_dB, mid_freq, mid_q, high_gain_dB, high_freq)
    return ({"waveform": out, "sample_rate": rate},)


def _set_seconds(conditioning: list, start: float, total: float) -> list:
    # ComfyUI's node_helpers.conditioning_set_values: copies, the inputs untouched
    return [[cond, {**options, "seconds_start": start, "seconds_total": total}] for cond, options in conditioning]


@v3_node("ConditioningStableAudio", category="model/conditioning/stable audio", python_module=MODULE,
         inputs=[Socket("positive", "CONDITIONING"), Socket("negative", "CONDITIONING"),
                 Float("seconds_start", default=0.0, min=0.0, max=1000.0, step=0.1),
                 Float("seconds_total", default=47.0, min=0.0, max=1000.0, step=0.1)],
         outputs=[Output("CONDITIONING", "positive"), Output("CONDITIONING", "negative")])
def conditioning_stable_audio(positive: list, negative: list, seconds_start: float,
                              seconds_total: float) -> tuple[list, list]:
    """Both conditionings with the clip's start and total duration in seconds."""
    positive = checks.conditioning(positive, "positive")
    negative = checks.conditioning(negative, "negative")
    return (_set_seconds(positive, seconds_start, seconds_total), _set_seconds(negative, seconds_start, seconds_total))
