"""Wan Dancer's music features (comfy_core/families/wan/dancer_audio.py) against their defining
equations and hand-checked small cases: the Slaney mel scale and filters, framing, dB, onset
strength, MFCC (the orthonormal DCT-II written out), the CQT-to-chroma fold, the CQT's bin
frequencies and the tuning estimate on pure tones, CENS, peak picking, the autocorrelation tempo
and the beat tracker on impulse trains, and the whole feature's shape and frame-rate rule."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from comfy_core.families.wan import dancer_audio as da

SR = da.RESAMPLE_RATE


def _tone(freq: float, seconds: float = 2.0, rate: int = SR) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def test_slaney_mel_scale():
    np.testing.assert_allclose(da.hz_to_mel([0.0, 200.0 / 3, 1000.0, 6400.0]), [0.0, 1.0, 15.0, 42.0], atol=1e-9)
    freqs = np.array([10.0, 500.0, 999.0, 1000.0, 3000.0, 11025.0])
    np.testing.assert_allclose(da.mel_to_hz(da.hz_to_mel(freqs)), freqs, rtol=1e-12)


def test_mel_filter_is_an_area_normalised_triangle():
    sr, n_fft = 8000, 64
    weights = da.mel_filterbank(sr, n_fft, n_mels=1)
    lo, centre, hi = da.mel_to_hz(np.linspace(0.0, da.hz_to_mel(sr / 2), 3))
    f = np.fft.rfftfreq(n_fft, 1 / sr)
    expected = np.maximum(0, np.minimum((f - lo) / (centre - lo), (hi - f) / (hi - centre))) * 2 / (hi - lo)
    np.testing.assert_allclose(weights[0], expected, rtol=1e-6)
    bank = da.mel_filterbank(22050, 2048)
    assert bank.shape == (128, 1025) and (bank >= 0).all()
    assert (np.diff(bank.argmax(axis=1)) >= 0).all()  # centres rise with the band


def test_frames_are_centred_and_counted_per_hop():
    y = np.arange(10.0)
    frames = da.frame_signal(y, 4, 3)
    assert frames.shape == (4, 1 + 10 // 3)
    np.testing.assert_array_equal(frames[:, 0], [0, 0, 0, 1])  # two zeros of padding, then y[0..1]
    np.testing.assert_array_equal(frames[:, 2], [4, 5, 6, 7])


def test_power_to_db_and_range():
    db = da.power_to_db(np.array([1.0, 10.0, 1e-3, 0.0]), top_db=None)
    np.testing.assert_allclose(db, [0.0, 10.0, -30.0, -100.0])
    np.testing.assert_allclose(da.power_to_db(np.array([1.0, 1e-12]), top_db=80.0), [0.0, -80.0])


def test_onset_envelope_is_delayed_mean_rectified_flux():
    db = np.array([[0.0, 2.0, 1.0, 4.0, 4.0, 0.0, 3.0],
                   [1.0, 1.0, 3.0, 2.0, 6.0, 6.0, 6.0]])
    flux = [(2 + 0) / 2, (0 + 2) / 2, (3 + 0) / 2, (0 + 4) / 2, (0 + 0) / 2, (3 + 0) / 2]
    np.testing.assert_allclose(da.onset_envelope(db, n_fft=2048, hop=512), [0, 0, 0] + flux[:4])


def test_mfcc_is_the_orthonormal_dct():
    rng = np.random.default_rng(0)
    db = rng.normal(size=(128, 3))
    n = np.arange(128)
    basis = np.array([np.cos(np.pi * k * (2 * n + 1) / 256) * math.sqrt((1 if k else 0.5) * 2 / 128)
                      for k in range(20)])
    np.testing.assert_allclose(da.mfcc(db), (basis @ db).T, rtol=1e-5, atol=1e-5)


def test_cqt_to_chroma_folds_three_bins_around_each_semitone():
    fold = da.cqt_to_chroma(36, bins_per_octave=36)
    assert fold.shape == (12, 36) and (fold.sum(axis=0) == 1).all()
    assert [int(np.argmax(fold[:, b])) for b in (35, 0, 1, 2, 3, 4, 5)] == [0, 0, 0, 1, 1, 1, 2]
    np.testing.assert_array_equal(da.cqt_to_chroma(24, bins_per_octave=12), np.tile(np.eye(12), 2))
    # from A (MIDI class 9) the first bin is A
    assert int(np.argmax(da.cqt_to_chroma(12, fmin=440.0)[:, 0])) == 9


def test_sparsify_drops_the_smallest_one_percent_of_each_row():
    rows = np.array([[0.001, 0.002, 1.0, 0.5], [0.0, 0.0, 0.0, 0.0]], dtype=np.complex64)
    np.testing.assert_array_equal(da._sparsify(rows), [[0, 0, 1.0, 0.5], [0, 0, 0, 0]])


def test_halving_keeps_length_and_scales_energy():
    y = _tone(100.0, 1.0)
    half = da._halve(y[:-1])                                                   # an odd length: ceil(n / 2)
    assert half.shape == (len(y) // 2,) and half.dtype == np.float32
    ratio = np.sqrt(np.mean(half[500:-500] ** 2) / np.mean(y[1000:-1000] ** 2))
    assert ratio == pytest.approx(math.sqrt(2.0), rel=1e-3)                   # / sqrt(1/2): energy per sample kept


def test_cqt_peaks_at_the_tone_bin():
    freqs = da.C1_HZ * 2 ** (np.arange(84) / 12)
    for k in (40, 57, 69):
        cqt = da.cqt_magnitude(_tone(freqs[k], 1.0), SR, n_bins=84, bins_per_octave=12)
        assert cqt.shape == (84, 1 + SR // 512)
        assert int(np.argmax(cqt[:, 10:-10].mean(axis=1))) == k


def test_tuning_estimate_reads_a_detuned_tone():
    # piptrack's parabolic peak has a small bias on a Hann-windowed tone (a few hundredths of a bin)
    for offset in (0.0, 0.3, -0.3):  # in thirds of a semitone (36 bins an octave)
        tone = _tone(440.0 * 2 ** (offset / 36))
        assert da.estimate_tuning(tone, SR, bins_per_octave=36) == pytest.approx(offset, abs=0.05)
    assert da.estimate_tuning(np.zeros(100, dtype=np.float32), SR) == 0.0


def test_cens_of_a_tone_is_its_pitch_class_with_unit_norm():
    chroma = da.chroma_cens(_tone(440.0), SR)
    assert chroma.shape == (12, 1 + 2 * SR // 512)
    middle = chroma[:, 20:-20]
    assert (middle.argmax(axis=0) == 9).all()
    np.testing.assert_allclose(np.linalg.norm(middle, axis=0), 1.0, rtol=1e-5)
    assert np.isin(np.round(da.chroma_cens(np.zeros(4096, np.float32), SR), 6), [0.0]).all()


def test_peak_picking_windows_wait_and_delta():
    env = np.zeros(40)
    env[[5, 6, 20, 30]] = [1.0, 0.9, 0.5, 0.05]
    # 6 is inside the 30 ms wait after 5; 30 is under the 0.07 delta above its window's mean
    assert da.onset_peaks(env).tolist() == [5, 20]
    flat = np.ones(10)
    assert da.onset_peaks(flat).tolist() == []


def _impulses(period: int, frames: int = 600, phase: int = 7) -> np.ndarray:
    env = np.zeros(frames)
    env[phase::period] = 1.0
    return env


def test_tempo_of_an_impulse_train():
    rate = da.ANALYSIS_RATE / da.HOP  # frames a second
    for period in (20, 26):
        expected = 60 * rate / period
        assert da.estimate_tempo(_impulses(period), start_bpm=expected * 1.1) == pytest.approx(expected)
    assert da.estimate_tempo(np.ones(10), start_bpm=97.0) == 97.0  # too short: the start tempo


def test_beats_of_an_impulse_train_land_on_the_impulses():
    env = _impulses(20)
    bpm = 60 * da.ANALYSIS_RATE / da.HOP / 20
    beats = da.track_beats(env, bpm)
    # the backtrace starts from the last local maximum of the cumulative score, which past the last
    # impulse may sit a few frames before it: every earlier beat is an impulse, one period apart
    assert len(beats) >= 25 and set(beats[:-1].tolist()) <= set(range(7, 600, 20))
    assert np.all(np.diff(beats[:-1]) == 20) and beats[0] == 7 and 560 < beats[-1] <= 587
    assert da.track_beats(np.zeros(1), 120.0).size == 0


def test_whole_feature_shape_columns_and_rate():
    sr = 22050
    clicks = np.zeros(3 * sr, dtype=np.float32)
    for start in range(0, len(clicks), sr // 2):
        clicks[start:start + 200] = np.hanning(200)
    mixed = torch.from_numpy(np.stack([clicks, clicks * 0.5]))
    features = da.wan_dancer_features(mixed, sr)
    expected_frames = 1 + math.ceil(3 * sr * 15360 / sr) // 512  # 15360 Hz samples, one frame a hop
    assert features.shape == (1, expected_frames, 35) and features.dtype == torch.float32
    assert expected_frames == 91
    peaks, beats = features[0, :, 33], features[0, :, 34]
    assert set(peaks.unique().tolist()) <= {0.0, 1.0} and set(beats.unique().tolist()) <= {0.0, 1.0}
    assert peaks.sum() >= 4 and beats.sum() >= 3
    onsets = torch.nonzero(peaks).flatten()
    assert torch.all(onsets[1:] - onsets[:-1] >= 14)  # a click every 15 frames (0.5 s at 30 frames a second)
    torch.testing.assert_close(torch.linalg.norm(features[0, 20:-20, 21:33], dim=1), torch.ones(expected_frames - 40))
    with pytest.raises(da.DancerAudioError):
        da.wan_dancer_features(torch.zeros(1, 0), sr)


def test_fps_rule_and_prompt_text():
    assert da.dancer_fps(149, 149) == 30.0 and da.dancer_fps(223, 149) == 30.0  # 1.497 + 0.5 -> 1
    assert da.dancer_fps(224, 149) == 15.0  # 1.503 + 0.5 -> 2
    assert da.dancer_fps(298, 149) == 15.0 and da.dancer_fps(447, 149) == 10.0
    assert da.dancer_fps(745, 149) == 6.0
    assert da.fps_prompt(30.0) == ", 帧率是30fps。"
    assert da.fps_prompt(29.6) == ", 帧率是30fps。"
    assert da.fps_prompt(15.0) == " 帧率是15.0000" and da.fps_prompt(7.5) == " 帧率是7.5000"
    with pytest.raises(da.DancerAudioError, match="fewer than half"):
        da.dancer_fps(74, 149)
