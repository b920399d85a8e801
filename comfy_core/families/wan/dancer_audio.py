"""Wan Dancer's music features: what ComfyUI's `WanDancerEncodeAudio` (`comfy_extras/nodes_wandancer.py`)
computes from a song, one 35-wide row per feature frame (30 frames a second), for the Dancer DiT's
music encoder (comfy_core/families/wan/dancer.py). Plain numpy / scipy, no torch at import.

The algorithms are librosa's (McFee et al., "librosa: Audio and Music Signal Analysis in Python",
SciPy 2015; github.com/librosa/librosa), which ComfyUI re-wrote in numpy / scipy so as not to
depend on librosa; written here again from their definitions:

- the mel power spectrogram (Hann-windowed STFT with centred zero padding, Slaney mel filters with
  area normalisation) and `power_to_db` (10 log10, floor 1e-10, 80 dB range);
- the onset strength envelope (librosa's `onset_strength`: the mean over mel bands of the
  half-wave-rectified first difference of the dB spectrogram, delayed by `1 + n_fft / (2 hop)` frames);
- MFCC (the orthonormal DCT-II of the dB mel spectrogram, 20 coefficients);
- chroma CENS (Müller & Ewert 2011): a constant-Q transform (librosa's recursive-downsampling
  `cqt`: one FFT filter bank per octave on the signal halved each octave; 7 octaves of 36 bins
  from C1, after a tuning estimate by `piptrack`), folded to 12 pitch classes, L1-normalised,
  quantised (0.05 / 0.1 / 0.2 / 0.4 thresholds), smoothed by a 41-frame Hann window and L2-normalised;
- onset peaks (librosa's `peak_pick` with ComfyUI's windows: 30 ms max before, 100 ms mean on
  both sides, 30 ms wait, delta 0.07 on the min-max normalised envelope);
- the tempo (librosa's `tempo`: the mean windowed autocorrelation tempogram over 8 s windows times
  a log-normal prior around a start tempo, one octave wide, tempi under 320 BPM) and beats (Ellis
  2007 dynamic programming, librosa's `beat_track`: tightness 100, leading / trailing weak beats
  trimmed).

`wan_dancer_features(waveform, sample_rate)` runs ComfyUI's pipeline: the start tempo from the
song at its own rate, the song resampled to 15360 Hz (30 frames x 512 samples), the features
computed as if it were at 22050 Hz (ComfyUI's constants: the frame clock is 30 per second
whatever the analysis believes), concatenated as `[onset, mfcc(20), chroma(12), peak, beat]`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

BASE_FPS = 30
HOP = 512
N_FFT = 2048
N_MELS = 128
ANALYSIS_RATE = 22050                 # the rate the features are computed as if at (ComfyUI's model_sr)
RESAMPLE_RATE = BASE_FPS * HOP        # 15360 Hz: one hop per 1/30 s
N_MFCC = 20
FEATURE_WIDTH = 1 + N_MFCC + 12 + 1 + 1  # 35
C1_HZ = 32.70319566257483
DEFAULT_BPM = 120.0


class DancerAudioError(ValueError):
    """Audio the Dancer features cannot be computed from (empty, not one channel of samples)."""


# -- the spectrogram ------------------------------------------------------------------------------

def hz_to_mel(freqs: Any) -> np.ndarray:
    """Slaney's mel scale: 3 mels per 200 Hz below 1 kHz, logarithmic (27 mels per factor 6.4) above."""
    freqs = np.asarray(freqs, dtype=np.float64)
    linear = freqs / (200.0 / 3)
    logarithmic = 15.0 + np.log(np.maximum(freqs, 1e-30) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(freqs >= 1000.0, logarithmic, linear)


def mel_to_hz(mels: Any) -> np.ndarray:
    """The inverse of `hz_to_mel`."""
    mels = np.asarray(mels, dtype=np.float64)
    return np.where(mels >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels - 15.0)), mels * (200.0 / 3))


def mel_filterbank(sr: float, n_fft: int, n_mels: int = N_MELS, fmin: float = 0.0,
                   fmax: float | None = None) -> np.ndarray:
    """Triangular filters `[n_mels, 1 + n_fft // 2]` between `n_mels + 2` mel-spaced edges, each
    scaled by `2 / (upper edge - lower edge)` (Slaney's equal-area normalisation)."""
    fmax = sr / 2.0 if fmax is None else fmax
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None] - lower) / (centre - lower)
    falling = (upper - bins[None]) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling)) * (2.0 / (upper - lower))
    return weights.astype(np.float32)


def frame_signal(y: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    """Centred frames `[n_fft, 1 + len(y) // hop]` of `y` zero-padded by `n_fft // 2` on both sides."""
    padded = np.pad(np.asarray(y), n_fft // 2)
    count = 1 + (len(padded) - n_fft) // hop
    index = np.arange(n_fft)[:, None] + hop * np.arange(count)[None]
    return padded[index]


def stft_magnitude(y: np.ndarray, n_fft: int = N_FFT, hop: int = HOP) -> np.ndarray:
    """|STFT| `[1 + n_fft // 2, frames]` with a periodic Hann window."""
    import scipy.fft
    import scipy.signal

    window = scipy.signal.get_window("hann", n_fft, fftbins=True)[:, None]
    return np.abs(scipy.fft.rfft(window * frame_signal(y, n_fft, hop), axis=0).astype(np.complex64))


def mel_spectrogram(y: np.ndarray, sr: float, n_fft: int = N_FFT, hop: int = HOP, n_mels: int = N_MELS) -> np.ndarray:
    """The mel power spectrogram `[n_mels, frames]` (float32)."""
    power = stft_magnitude(y, n_fft, hop) ** 2
    return (mel_filterbank(sr, n_fft, n_mels) @ power).astype(np.float32)


def power_to_db(power: np.ndarray, amin: float = 1e-10, top_db: float | None = 80.0, ref: float = 1.0) -> np.ndarray:
    """`10 log10(max(amin, S) / max(amin, ref))`, floored `top_db` below its maximum."""
    db = 10.0 * np.log10(np.maximum(amin, power)) - 10.0 * np.log10(max(amin, ref))
    if top_db is not None:
        db = np.maximum(db, db.max() - top_db)
    return db


def onset_envelope(mel_db: np.ndarray, n_fft: int = N_FFT, hop: int = HOP) -> np.ndarray:
    """Onset strength per frame: mean over bands of `max(0, S[:, t] - S[:, t - 1])`, delayed by
    `1 + n_fft // (2 hop)` frames (zeros in front), as long as the spectrogram."""
    flux = np.maximum(0.0, np.diff(mel_db, axis=1)).mean(axis=0)
    delay = 1 + n_fft // (2 * hop)
    return np.concatenate([np.zeros(delay, dtype=flux.dtype), flux])[:mel_db.shape[1]]


def mfcc(mel_db: np.ndarray, n_mfcc: int = N_MFCC) -> np.ndarray:
    """`[frames, n_mfcc]`: the orthonormal DCT-II of each frame's dB mel spectrum."""
    import scipy.fft

    return scipy.fft.dct(mel_db, type=2, norm="ortho", axis=0)[:n_mfcc].T.astype(np.float32)


# -- tuning and the constant-Q transform ----------------------------------------------------------

def piptrack(y: np.ndarray, sr: float, n_fft: int = N_FFT, hop: int = HOP, fmin: float = 150.0,
             fmax: float = 4000.0, threshold: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Parabolically interpolated spectral peaks (librosa's `piptrack`): for each bin that is a
    local maximum over frequency of the magnitude above `threshold` x the frame's maximum, between
    `fmin` and `fmax`, the frequency `(k + shift) sr / n_fft` and magnitude `S + shift dS/2`, with
    `shift = -(S[k+1] - S[k-1]) / 2 / (S[k+1] + S[k-1] - 2 S[k])` where `|numerator| < |denominator|`."""
    mag = stft_magnitude(y, n_fft, hop).astype(np.float64)
    freqs = np.fft.rfftfreq(n_fft, 1.0 / sr)[:mag.shape[0]]
    up, down = np.roll(mag, -1, axis=0), np.roll(mag, 1, axis=0)
    curvature = up + down - 2 * mag
    slope = (up - down) / 2.0
    shift = np.zeros_like(mag)
    ok = np.abs(slope) < np.abs(curvature)
    shift[ok] = -slope[ok] / curvature[ok]
    shift[0], shift[-1] = 0, 0
    gated = mag * (mag > threshold * mag.max(axis=0, keepdims=True))
    peak = np.zeros(gated.shape, dtype=bool)
    peak[1:-1] = (gated[1:-1] > gated[:-2]) & (gated[1:-1] >= gated[2:])
    peak[-1] = gated[-1] > gated[-2]
    band = ((freqs >= max(fmin, 0.0)) & (freqs < min(fmax, sr / 2.0)))[:, None]
    rows, cols = np.nonzero(peak & band)
    pitches, mags = np.zeros_like(mag), np.zeros_like(mag)
    pitches[rows, cols] = (rows + shift[rows, cols]) * sr / n_fft
    mags[rows, cols] = mag[rows, cols] + 0.5 * np.gradient(mag, axis=0)[rows, cols] * shift[rows, cols]
    return pitches, mags


def estimate_tuning(y: np.ndarray, sr: float, bins_per_octave: int = 12, resolution: float = 0.01) -> float:
    """The tuning offset in fractions of a bin (-0.5 .. 0.5): the most common deviation from
    12-TET of the strong `piptrack` pitches (magnitude at least their median), in a histogram of
    `resolution`-wide bins. 0 for a signal shorter than one FFT or without pitches."""
    if len(y) < N_FFT:
        return 0.0
    pitches, mags = piptrack(y, sr)
    voiced = pitches > 0
    if not voiced.any():
        return 0.0
    strong = pitches[(mags >= np.median(mags[voiced])) & voiced]
    if strong.size == 0:
        return 0.0
    residual = np.mod(bins_per_octave * np.log2(strong / (440.0 / 16)), 1.0)
    residual[residual >= 0.5] -= 1.0
    counts, edges = np.histogram(residual, np.linspace(-0.5, 0.5, int(np.ceil(1.0 / resolution)) + 1))
    return float(edges[np.argmax(counts)])


def _halve(y: np.ndarray) -> np.ndarray:
    """`y` at half its rate, `ceil(len / 2)` samples, energy kept (`/ sqrt(1/2)`): a Kaiser (beta 6.5)
    windowed-sinc low-pass polyphase resampler, as librosa's soxr one does it closely."""
    import scipy.signal

    count = int(np.ceil(len(y) / 2))
    taps = scipy.signal.firwin(321, 0.48, window=("kaiser", 6.5))
    out = scipy.signal.resample_poly(y.astype(np.float32), 1, 2, window=taps)
    out = out[:count] if len(out) >= count else np.pad(out, (0, count - len(out)))
    return (out / np.sqrt(0.5)).astype(np.float32)


def _sparsify(basis: np.ndarray, quantile: float = 0.01) -> np.ndarray:
    """Each row with its smallest magnitudes, together under `quantile` of the row's L1 norm, zeroed."""
    mags = np.abs(basis)
    norms = mags.sum(axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    ordered = np.sort(mags, axis=1)
    first_kept = np.argmin(np.cumsum(ordered / norms, axis=1) < quantile, axis=1)
    floor = ordered[np.arange(len(basis)), first_kept][:, None]
    return np.where(mags >= floor, basis, 0)


def cqt_magnitude(y: np.ndarray, sr: float, hop: int = HOP, fmin: float = C1_HZ, n_bins: int = 84,
                  bins_per_octave: int = 12, tuning: float = 0.0) -> np.ndarray:
    """|CQT| `[n_bins, frames]` (librosa's `cqt` by recursive downsampling): bin k at
    `fmin 2^((k + tuning) / bins_per_octave)` with filter length `Q sr / f_k` (Q from the bins'
    relative bandwidth); each octave, from the top, is a Hann-windowed complex-exponential filter
    bank (L1-normalised, centred in a power-of-two FFT, scaled by length / FFT size, sparsified)
    applied to the STFT of the signal at that octave's rate (the signal halved, and the hop, while
    the hop is even); the result divided by `sqrt(length)`."""
    import scipy.fft
    import scipy.signal

    freqs = fmin * 2.0 ** (tuning / bins_per_octave) * 2.0 ** (np.arange(n_bins) / bins_per_octave)
    logf = np.log2(freqs)
    octaves_per_bin = np.empty_like(freqs)
    octaves_per_bin[0], octaves_per_bin[-1] = logf[1] - logf[0], logf[-1] - logf[-2]
    octaves_per_bin[1:-1] = (logf[2:] - logf[:-2]) / 2.0
    ratio = 2.0 ** (2.0 * octaves_per_bin)  # the band's upper over lower edge, a bin either side
    alpha = (ratio - 1.0) / (ratio + 1.0)
    lengths = sr / (alpha * freqs)  # Q sr / f with Q = 1 / alpha
    per_octave = min(bins_per_octave, n_bins)
    signal, rate, step = y.astype(np.float32), float(sr), int(hop)
    responses = []
    for octave in range(int(np.ceil(n_bins / bins_per_octave))):
        top = n_bins - per_octave * octave
        chosen = slice(max(0, top - per_octave), top)
        oct_freqs, oct_lengths = freqs[chosen], rate / (alpha[chosen] * freqs[chosen])
        n_fft = int(2.0 ** np.ceil(np.log2(oct_lengths.max())))
        basis = np.zeros((len(oct_freqs), n_fft), dtype=np.complex64)
        for row, (length, freq) in enumerate(zip(oct_lengths, oct_freqs)):
            t = np.arange(int(-length // 2), int(length // 2), dtype=float)
            wave = np.exp(2j * np.pi * freq * t / rate).astype(np.complex64)
            wave *= scipy.signal.get_window("hann", len(wave), fftbins=True)
            wave /= max(np.abs(wave).sum(), np.finfo(np.float32).tiny)
            start = (n_fft - len(wave)) // 2
            basis[row, start:start + len(wave)] = wave
        basis *= (oct_lengths / n_fft)[:, None]
        spectral = _sparsify(scipy.fft.fft(basis, n=n_fft, axis=1)[:, :n_fft // 2 + 1]) * np.sqrt(sr / rate)
        stft = scipy.fft.rfft(frame_signal(signal, n_fft, step), axis=0)
        responses.append(spectral @ stft)
        if step % 2 == 0:
            step //= 2
            rate /= 2.0
            signal = _halve(signal)
    frames = min(r.shape[1] for r in responses)
    out = np.concatenate([r[:, :frames] for r in reversed(responses)], axis=0)[-n_bins:]
    return (np.abs(out) / np.sqrt(lengths)[:, None]).astype(np.float32)


def cqt_to_chroma(n_bins: int, bins_per_octave: int = 12, n_chroma: int = 12, fmin: float = C1_HZ) -> np.ndarray:
    """`[n_chroma, n_bins]`: each group of `bins_per_octave / n_chroma` CQT bins (centred on a
    semitone) summed into its pitch class, class 0 = C (rolled by `fmin`'s MIDI pitch class)."""
    merge = bins_per_octave // n_chroma
    fold = np.roll(np.repeat(np.eye(n_chroma), merge, axis=1), -(merge // 2), axis=1)
    fold = np.tile(fold, int(np.ceil(n_bins / bins_per_octave)))[:, :n_bins]
    midi_class = np.mod(12 * np.log2(fmin / 440.0) + 69, 12)
    return np.roll(fold, int(np.round(midi_class * n_chroma / 12.0)), axis=0).astype(np.float32)


def chroma_cens(y: np.ndarray, sr: float, hop: int = HOP, n_octaves: int = 7, bins_per_octave: int = 36,
                smooth: int = 41) -> np.ndarray:
    """Chroma Energy Normalized Statistics `[12, frames]` (module docstring)."""
    import scipy.ndimage
    import scipy.signal

    n_bins = n_octaves * bins_per_octave
    tuning = estimate_tuning(y, sr, bins_per_octave=bins_per_octave)
    cqt = cqt_magnitude(y, sr, hop, C1_HZ, n_bins, bins_per_octave, tuning)
    chroma = cqt_to_chroma(n_bins, bins_per_octave) @ cqt
    chroma = chroma / np.maximum(np.abs(chroma).sum(axis=0, keepdims=True), np.finfo(chroma.dtype).tiny)
    quantised = sum(0.25 * (chroma > step) for step in (0.4, 0.2, 0.1, 0.05)).astype(chroma.dtype)
    window = scipy.signal.get_window("hann", smooth + 2, fftbins=False)
    smoothed = scipy.ndimage.convolve(quantised, (window / window.sum())[None], mode="constant")
    norm = np.sqrt((smoothed ** 2).sum(axis=0, keepdims=True))
    return smoothed / np.maximum(norm, np.finfo(smoothed.dtype).tiny)


# -- onsets, tempo and beats ----------------------------------------------------------------------

def onset_peaks(envelope: np.ndarray, sr: float = ANALYSIS_RATE, hop: int = HOP, pre_max: float = 0.03,
                post_max: float = 0.0, pre_avg: float = 0.10, post_avg: float = 0.10, wait: float = 0.03,
                delta: float = 0.07) -> np.ndarray:
    """Frames `n` of the min-max normalised envelope that are the maximum of
    `[n - pre_max, n + post_max]`, at least `delta` above the mean of `[n - pre_avg, n + post_avg]`
    (windows in seconds, to frames by truncation, the "post" ends exclusive plus one frame), and at
    least `wait` after the previous peak (librosa's `peak_pick`)."""
    x = envelope - envelope.min()
    if x.max() > 0:
        x = x / x.max()
    frames = lambda seconds: int(seconds * sr / hop)  # noqa: E731
    before_max, after_max = frames(pre_max), frames(post_max) + 1
    before_avg, after_avg, gap = frames(pre_avg), frames(post_avg) + 1, frames(wait)
    n, total, peaks = 0, len(x), []
    while n < total:
        lo = 0 if n == 0 else max(0, n - before_max)
        is_peak = x[n] >= x[lo:min(n + after_max, total)].max()
        if is_peak:
            lo = 0 if n == 0 else max(0, n - before_avg)
            is_peak = x[n] >= x[lo:min(n + after_avg, total)].mean() + delta
        if is_peak:
            peaks.append(n)
            n += gap + 1
        else:
            n += 1
    return np.asarray(peaks, dtype=np.int32)


def estimate_tempo(envelope: np.ndarray, sr: float = ANALYSIS_RATE, hop: int = HOP, start_bpm: float = DEFAULT_BPM,
                   std_bpm: float = 1.0, max_tempo: float = 320.0, window_seconds: float = 8.0) -> float:
    """BPM maximising `log1p(1e6 mean_t(A[lag, t])) - 0.5 ((log2 bpm - log2 start) / std)^2` over
    lags, where `A[:, t]` is the autocorrelation of the Hann-windowed envelope around frame t
    (`window_seconds` long, linear ramps to zero beyond the ends), each frame's divided by its
    largest value, and `bpm = 60 sr / (hop lag)` below `max_tempo`. `start_bpm` for fewer than 20 frames."""
    import scipy.fft
    import scipy.signal

    if len(envelope) < 20:
        return float(start_bpm)
    win = min(int(np.round(window_seconds * sr / hop)), len(envelope))
    padded = np.pad(envelope, win // 2, mode="linear_ramp", end_values=(0, 0))
    frames = padded[np.arange(win)[:, None] + np.arange(len(envelope))[None]]
    frames = frames * scipy.signal.get_window("hann", win, fftbins=True)[:, None]
    size = scipy.fft.next_fast_len(2 * win - 1)
    spectrum = np.abs(scipy.fft.rfft(frames, n=size, axis=0)) ** 2
    tempogram = scipy.fft.irfft(spectrum, n=size, axis=0)[:win]
    peak = np.abs(tempogram).max(axis=0)
    tempogram[:, peak > 0] /= peak[peak > 0]
    strength = np.maximum(tempogram.mean(axis=1), 0)
    bpms = np.full(win, np.inf)
    bpms[1:] = 60.0 * sr / (hop * np.arange(1.0, win))
    with np.errstate(divide="ignore", invalid="ignore"):
        prior = -0.5 * ((np.log2(bpms) - np.log2(start_bpm)) / std_bpm) ** 2
    first_allowed = int(np.argmax(bpms < max_tempo))
    if first_allowed > 0:
        prior[:first_allowed] = -np.inf
    score = np.log1p(1e6 * strength) + prior
    return float(bpms[1 + int(np.argmax(score[1:]))])


def quick_tempo(y: np.ndarray, sr: float, hop: int = HOP, start_bpm: float = DEFAULT_BPM) -> float:
    """The tempo of `y` at its own rate `sr` (ComfyUI's start tempo): the onset envelope of its
    log-mel spectrogram (no dB range floor) through `estimate_tempo`; 120 for under 10 hops of audio."""
    if len(y) < hop * 10:
        return DEFAULT_BPM
    log_mel = 10.0 * np.log10(np.maximum(1e-10, mel_spectrogram(y, sr, N_FFT, hop)))
    return estimate_tempo(onset_envelope(log_mel, N_FFT, hop), sr, hop, start_bpm)


def track_beats(envelope: np.ndarray, bpm: float, sr: float = ANALYSIS_RATE, hop: int = HOP,
                tightness: float = 100.0, trim: bool = True) -> np.ndarray:
    """Beat frames by Ellis's dynamic programme: local score = the envelope (over its standard
    deviation) convolved with a Gaussian of `period / 32`; `cum[i] = local[i] + max_{j in [i - 2p, i - p/2]}
    (cum[j] - tightness log(( i - j) / p)^2)`; backtracked from the last local maximum of `cum` at
    least half their median; beats before the first / after the last frame whose local score
    exceeds half the RMS of the beats' smoothed local scores dropped (`trim`)."""
    import scipy.signal

    period = float(np.round(sr / hop * 60.0 / bpm))
    if period <= 0 or len(envelope) < 2:
        return np.zeros(0, dtype=np.int32)
    std = np.std(envelope, ddof=1)
    normalised = envelope / std if std > 0 else envelope
    offsets = np.arange(-period, period + 1)
    local = scipy.signal.convolve(normalised, np.exp(-0.5 * (offsets * 32.0 / period) ** 2), mode="same")
    p = int(period)
    cum = np.zeros(len(local))
    back = np.full(len(local), -1, dtype=np.int64)
    cum[0] = local[0]
    threshold, started = 0.01 * local.max(), False
    for i in range(1, len(local)):
        candidates = np.arange(int(i - np.round(p / 2.0)), int(i - 2 * p - 1), -1)
        candidates = candidates[candidates >= 0]
        best, where = -np.inf, -1
        if candidates.size:
            scores = cum[candidates] - tightness * (np.log(i - candidates) - np.log(p)) ** 2
            k = int(np.argmax(scores))  # the first of equal maxima, as the scan from i - p/2 down
            best, where = scores[k], int(candidates[k])
        cum[i] = local[i] + (best if where >= 0 else 0.0)
        if not started and local[i] < threshold:
            back[i] = -1
        else:
            back[i] = where
            started = True
    maxima = np.zeros(len(cum), dtype=bool)
    maxima[1:-1] = (cum[1:-1] > cum[:-2]) & (cum[1:-1] >= cum[2:])
    maxima[-1] = cum[-1] > cum[-2]
    if maxima.any():
        good = np.flatnonzero(maxima & (cum >= 0.5 * np.median(cum[maxima])))
        tail = int(good[-1]) if good.size else -1
    else:
        tail = len(cum) - 1
    beats = np.zeros(len(local), dtype=bool)
    seen: set[int] = set()
    while tail >= 0 and tail not in seen:
        beats[tail] = True
        seen.add(tail)
        tail = int(back[tail])
    if trim and beats.any():
        smooth = np.convolve(local[beats], np.hanning(5))[2:len(local) + 2]
        floor = 0.5 * np.sqrt(np.mean(smooth ** 2))
        strong = np.flatnonzero(local > floor)
        if strong.size == 0:
            beats[:] = False
        else:
            beats[:strong[0]] = False
            beats[strong[-1] + 1:] = False
    return np.flatnonzero(beats).astype(np.int32)


# -- the whole feature ----------------------------------------------------------------------------

def music_features(y: np.ndarray, start_bpm: float = DEFAULT_BPM, sr: float = ANALYSIS_RATE,
                   hop: int = HOP) -> np.ndarray:
    """`[frames, 35]` float32 for the mono signal `y` (one frame per hop): onset envelope, 20 MFCCs,
    12 CENS chroma, onset peak and beat indicators."""
    db = power_to_db(mel_spectrogram(y, sr, N_FFT, hop))
    envelope = onset_envelope(db, N_FFT, hop)
    chroma = chroma_cens(y, sr, hop).T
    if chroma.shape[0] != len(envelope):
        raise DancerAudioError(f"Wan Dancer: the chroma has {chroma.shape[0]} frames, the onsets {len(envelope)}")
    peaks = np.zeros_like(envelope, dtype=np.float32)
    peaks[onset_peaks(envelope, sr, hop)] = 1.0
    beats = np.zeros_like(envelope, dtype=np.float32)
    beats[track_beats(envelope, estimate_tempo(envelope, sr, hop, start_bpm), sr, hop)] = 1.0
    return np.concatenate([envelope[:, None], mfcc(db), chroma, peaks[:, None], beats[:, None]],
                          axis=-1).astype(np.float32)


def wan_dancer_features(waveform: Any, sample_rate: int) -> Any:
    """ComfyUI's WanDancerEncodeAudio features of one clip `waveform` `[channels, samples]` (a
    torch tensor; channels averaged) -> float32 tensor `[1, frames, 35]` at 30 frames a second."""
    import torch

    from comfy_core.models.ltx_audio_vae import sinc_resample

    if waveform.ndim != 2 or waveform.shape[-1] == 0:
        raise DancerAudioError(f"Wan Dancer: the audio must be [channels, samples] with samples, got "
                               f"{tuple(waveform.shape)}")
    mono = waveform.float().mean(dim=0) if waveform.shape[0] > 1 else waveform.float()[0]
    start_bpm = quick_tempo(mono.cpu().numpy().astype(np.float32), sample_rate)
    resampled = sinc_resample(mono[None].cpu(), int(sample_rate), RESAMPLE_RATE)[0].numpy()
    return torch.from_numpy(music_features(resampled, start_bpm)).unsqueeze(0)


def dancer_fps(feature_frames: int, video_frames: int) -> float:
    """ComfyUI's rate of the video: 30 over the feature frames per video frame rounded half up
    (`30 / int(frames / video_frames + 0.5)`)."""
    ratio = int(feature_frames / video_frames + 0.5)
    if ratio < 1:
        raise DancerAudioError(f"Wan Dancer: {feature_frames} audio frames ({feature_frames / BASE_FPS:.2f} s) are "
                               f"fewer than half the {video_frames} video frames: give a longer audio clip or fewer "
                               f"frames")
    return float(BASE_FPS / ratio)


def fps_prompt(fps: float) -> str:
    """The text the template appends to the prompt: ", 帧率是30fps。" at 30 fps, else " 帧率是{fps:.4f}"
    ("the frame rate is", the reference pipeline's wording)."""
    if int(fps + 0.5) == BASE_FPS:
        return ", 帧率是30fps。"
    return f" 帧率是{fps:.4f}"
