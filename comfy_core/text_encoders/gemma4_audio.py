"""Gemma 4 E2B / E4B's audio encoder (a conformer after Google's Universal Speech Model) and its
projector into the text tower: audio as soft tokens for TextGenerate, as ComfyUI's
`comfy/text_encoders/gemma4.py` (`Gemma4AudioEncoder`, `Gemma4AudioProjector`,
`Gemma4_Tokenizer._extract_audio_features`) runs them; written here.

Features: the waveform mixed to mono and resampled to 16 kHz (a Kaiser-windowed sinc with
ComfyUI's torchaudio parameters, `kaiser_resample`), padded with zeros to a multiple of 128
samples, 160 zeros prepended; frames
of 320 samples every 160, a periodic Hann window, a 512-point FFT's magnitude, a 128-bin HTK mel
filter bank (0..8 kHz), `log(x + 0.001)`; frames whose last sample is padding are zeroed and masked.
Soft tokens: after two stride-2 subsamplings, at most 750 (`token_count`).

The encoder (weights under `audio_model.`, ComfyUI's names; the linears' clipping scalars
optional as in the vision tower): two stride-2 3x3 convolutions over (time, mel) with a channel
LayerNorm (no bias) and ReLU each, the mask halved with them, then `input_proj_linear` over the
(mel, channel) features; conformer blocks: half-residual feed-forward (RMS norm, SiLU, RMS norm,
x 0.5), chunked local self-attention (chunks of 12, each query seeing itself and the 11 keys
before it among the valid ones; q scaled by `softplus(per_dim_scale) / (sqrt(d) ln 2)`, k by
`ln(1 + e) / ln 2`; a Transformer-XL relative-position term from sinusoidal embeddings of the
distances 12..0 through `relative_k_proj`; logits soft-capped at 50; masked at -1e9), RMS-normed
and residual, a light convolution (RMS norm, GLU, causal depthwise kernel 5, RMS norm, SiLU,
linear, residual), a second feed-forward, an output RMS norm; `output_proj` (with bias). The
projector (`audio_projector.embedding_projection`) RMS-norms without a weight and projects to the
text width.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.gemma4_vision import CLIP_BUFFERS, ClippedLinear, Gemma4VisionError, _unit_rms

PREFIX = "audio_model."
PROJECTOR = "audio_projector.embedding_projection.weight"
MARKER = PREFIX + "subsample_conv_projection.input_proj_linear.weight"
RATE, HOP, FRAME, FFT, MELS = 16000, 160, 320, 512, 128
CHUNK, PAST, FUTURE, CAP, KERNEL = 12, 12, 0, 50.0, 5  # ComfyUI's GEMMA4_AUDIO_CONFIG (PAST: context_left 13 - 1)
MAX_TOKENS = 750
EPS = 1e-6


def holds_audio(tensors: Mapping[str, Any]) -> bool:
    return MARKER in tensors and PROJECTOR in tensors


# --- features ---

def token_count(samples: int) -> int:
    """Soft tokens for `samples` samples at 16 kHz: mel frames after two stride-2 subsamplings (at most 750)."""
    frames = (samples + FRAME // 2 - (FRAME + 1)) // HOP + 1
    for _ in range(2):
        frames = (frames + 2 - 3) // 2 + 1
    return min(frames, MAX_TOKENS)


KAISER = {"zero_crossings": 121, "rolloff": 0.9568384289091556, "beta": 21.01531462440614}  # ComfyUI's


def kaiser_resample(audio: torch.Tensor, rate: int, target: int, zero_crossings: int = KAISER["zero_crossings"],
                    rolloff: float = KAISER["rolloff"], beta: float = KAISER["beta"]) -> torch.Tensor:
    """`[N, S]` from `rate` to `target` Hz by band-limited interpolation with a Kaiser-windowed
    sinc (Smith's method, as torchaudio's `sinc_interp_kaiser`, which has no build for this torch:
    the rates reduced by their gcd, cutoff `rolloff * min(rate, target)`, `ceil(S * target / rate)`
    samples out), in float64 for the kernel."""
    if rate == target:
        return audio
    divisor = math.gcd(int(rate), int(target))
    orig, new = int(rate) // divisor, int(target) // divisor
    cutoff = min(orig, new) * rolloff
    width = math.ceil(zero_crossings * orig / cutoff)
    offsets = torch.arange(-width, width + orig, dtype=torch.float64)[None, None] / orig
    phases = -torch.arange(0, new, dtype=torch.float64)[:, None, None] / new
    t = ((phases + offsets) * cutoff).clamp(-zero_crossings, zero_crossings)
    window = torch.special.i0(beta * torch.sqrt(1 - (t / zero_crossings) ** 2)) / torch.special.i0(
        torch.tensor(beta, dtype=torch.float64))
    t = t * math.pi
    kernel = (torch.where(t == 0, torch.ones_like(t), torch.sin(t) / t) * window * (cutoff / orig)).to(audio.dtype)
    length = audio.shape[-1]
    padded = F.pad(audio[:, None], (width, width + orig))
    out = F.conv1d(padded, kernel.to(audio.device), stride=orig).transpose(1, 2).reshape(audio.shape[0], -1)
    return out[:, :(new * length + orig - 1) // orig]


def resample_16k(waveform: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """`[C, S]` (or `[S]`) -> mono `[S']` float32 at 16 kHz."""
    audio = waveform.float()
    if audio.dim() > 1 and audio.shape[0] > 1:
        audio = audio.mean(dim=0, keepdim=True)
    if audio.dim() == 1:
        audio = audio[None]
    return kaiser_resample(audio, int(sample_rate), RATE)[0].contiguous()


def mel_filters() -> np.ndarray:
    """The 128-bin HTK mel filter bank `[257, 128]` of a 512-point FFT at 16 kHz."""
    top = 2595.0 * np.log10(1.0 + 8000.0 / 700.0)
    edges = 700.0 * (10.0 ** (np.linspace(0.0, top, MELS + 2) / 2595.0) - 1.0)
    bins = np.linspace(0, RATE // 2, FFT // 2 + 1)
    widths = np.diff(edges)
    slopes = edges[None, :] - bins[:, None]
    falling = -slopes[:, :-2] / widths[:-1]
    rising = slopes[:, 2:] / widths[1:]
    return np.maximum(0.0, np.minimum(falling, rising))


def log_mel(waveform: torch.Tensor, sample_rate: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One clip `[C, S]` -> (log-mel frames `[T, 128]` float32, their validity `[T]` bool)."""
    audio = resample_16k(waveform, sample_rate).numpy()
    length = len(audio)
    if length % 128:
        audio = np.pad(audio, (0, 128 - length % 128))
    valid = np.ones(len(audio), dtype=np.float32)
    valid[length:] = 0.0
    audio, valid = np.pad(audio, (HOP, 0)), np.pad(valid, (HOP, 0))
    count = (len(audio) - (FRAME + 1)) // HOP + 1
    frames = np.lib.stride_tricks.as_strided(audio, (count, FRAME + 1), (audio.strides[0] * HOP, audio.strides[0]))
    frames = frames[:, :-1].copy()
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FRAME) / FRAME)).astype(np.float32)
    magnitude = np.abs(np.fft.rfft(frames * window, n=FFT, axis=-1))
    mel = np.log(np.matmul(magnitude, mel_filters()) + np.float64(0.001)).astype(np.float32)
    mask = valid[np.arange(count) * HOP + FRAME].astype(bool)
    return torch.from_numpy(mel * mask[:, None]), torch.from_numpy(mask)


# --- the modules (ComfyUI's names) ---

class _Norm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _unit_rms(x.float(), EPS) * self.weight.float()


class _SubLayer(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False)
        self.norm = nn.LayerNorm(cout, eps=EPS, bias=False)


class _Subsampler(nn.Module):
    def __init__(self, c0: int, c1: int, width: int) -> None:
        super().__init__()
        self.layer0, self.layer1 = _SubLayer(1, c0), _SubLayer(c0, c1)
        self.input_proj_linear = nn.Linear((MELS // 4) * c1, width, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x[:, None]  # [B, 1, T, 128]
        for layer in (self.layer0, self.layer1):
            x = x * mask[:, None, :, None].to(x.dtype)
            x = F.conv2d(x, layer.conv.weight.float(), stride=2, padding=1)
            x = torch.relu(F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), layer.norm.weight.float(),
                                        None, EPS).permute(0, 3, 1, 2))
            mask = mask[:, ::2]
        batch, _, length, _ = x.shape
        x = x.permute(0, 2, 3, 1).reshape(batch, length, -1)
        return F.linear(x, self.input_proj_linear.weight.float()), mask


class _FeedForward(nn.Module):
    def __init__(self, width: int, inner: int) -> None:
        super().__init__()
        self.pre_layer_norm, self.post_layer_norm = _Norm(width), _Norm(width)
        self.ffw_layer_1, self.ffw_layer_2 = ClippedLinear(width, inner), ClippedLinear(inner, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ffw_layer_2(F.silu(self.ffw_layer_1(self.pre_layer_norm(x))))
        return x + 0.5 * self.post_layer_norm(h)


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.q_proj, self.k_proj = ClippedLinear(width, width), ClippedLinear(width, width)
        self.v_proj, self.post = ClippedLinear(width, width), ClippedLinear(width, width)
        self.per_dim_scale = nn.Parameter(torch.empty(width // heads))
        self.relative_k_proj = nn.Linear(width, width, bias=False)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """x `[B, S, W]`, valid keys `[B, S]` -> `[B, S, W]` (see the module doc)."""
        batch, length, _ = x.shape
        heads, dim = self.heads, self.head_dim
        q = self.q_proj(x).view(batch, length, heads, dim) * ((dim ** -0.5) / math.log(2)) \
            * F.softplus(self.per_dim_scale.float())
        k = self.k_proj(x).view(batch, length, heads, dim) * (math.log(1 + math.e) / math.log(2))
        v = self.v_proj(x).view(batch, length, heads, dim)
        blocks = (length + CHUNK - 1) // CHUNK
        context = CHUNK + PAST + FUTURE
        padded = blocks * CHUNK
        q = F.pad(q, (0, 0, 0, 0, 0, padded - length)).view(batch, blocks, CHUNK, heads, dim)

        def windows(t: torch.Tensor) -> torch.Tensor:  # [B, S, H, d] -> [B, blocks, context, H, d]
            t = F.pad(t, (0, 0, 0, 0, PAST, FUTURE + CHUNK - 1))
            return t.unfold(1, context, CHUNK).movedim(-1, 2)

        keys, values = windows(k), windows(v)
        queries = q.permute(0, 3, 1, 2, 4)  # [B, H, blocks, chunk, d]
        content = queries @ keys.permute(0, 3, 1, 4, 2)  # [B, H, blocks, chunk, context]
        distances = torch.arange(CHUNK, -1, -1, device=x.device, dtype=torch.float32)[:, None]
        timescales = torch.exp(torch.arange(x.shape[-1] // 2, device=x.device, dtype=torch.float32)
                               * -(math.log(10000.0) / max(x.shape[-1] // 2 - 1, 1)))
        scaled = distances * timescales[None]
        relative = F.linear(torch.cat([scaled.sin(), scaled.cos()], dim=-1), self.relative_k_proj.weight.float())
        relative = relative.view(-1, heads, dim)  # [13, H, d]
        position = (queries.reshape(batch, heads, -1, dim) @ relative.permute(1, 2, 0)).reshape(
            batch, heads, blocks, CHUNK, -1)
        # Transformer-XL's shift: query i's row over the distances becomes its row over the context
        position = F.pad(position, (0, context + 1 - position.shape[-1])).reshape(
            batch, heads, blocks, CHUNK * (context + 1))[..., :CHUNK * context].reshape(batch, heads, blocks, CHUNK,
                                                                                          context)
        logits = torch.tanh((content + position) / CAP) * CAP
        logits = logits.masked_fill(~self._allowed(length, blocks, valid), -1e9)
        out = logits.softmax(dim=-1) @ values.permute(0, 3, 1, 2, 4)
        out = out.permute(0, 2, 3, 1, 4).reshape(batch, padded, -1)[:, :length]
        return self.post(out)

    @staticmethod
    def _allowed(length: int, blocks: int, valid: torch.Tensor) -> torch.Tensor:
        """`[B, 1, blocks, chunk, context]`: query i may see key j when 0 <= i - j < 12 and j is valid."""
        device = valid.device
        query = torch.arange(length, device=device)[:, None]
        key = torch.arange(length, device=device)[None, :]
        distance = query - key
        near = (distance >= 0) & (distance < PAST)
        if FUTURE:
            near = near | ((distance < 0) & (-distance < FUTURE))
        mask = near[None] & valid[:, None, :].bool()  # [B, S, S]
        padded = blocks * CHUNK
        mask = F.pad(mask, (0, padded - length, 0, padded - length), value=False)
        mask = mask.view(mask.shape[0], blocks, CHUNK, padded)
        mask = F.pad(mask, (PAST, FUTURE), value=False)
        context = CHUNK + PAST + FUTURE
        index = (torch.arange(blocks, device=device) * CHUNK)[:, None] + torch.arange(context, device=device)[None]
        return mask.gather(-1, index[None, :, None, :].expand(mask.shape[0], -1, CHUNK, -1))[:, None]


class _LightConv(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.pre_layer_norm, self.conv_norm = _Norm(width), _Norm(width)
        self.linear_start, self.linear_end = ClippedLinear(width, 2 * width), ClippedLinear(width, width)
        self.depthwise_conv1d = nn.Conv1d(width, width, KERNEL, groups=width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.glu(self.linear_start(self.pre_layer_norm(x)), dim=-1).transpose(1, 2)
        h = F.conv1d(F.pad(h, (KERNEL - 1, 0)), self.depthwise_conv1d.weight.float(), groups=h.shape[1])
        return x + self.linear_end(F.silu(self.conv_norm(h.transpose(1, 2))))


class _Layer(nn.Module):
    def __init__(self, width: int, heads: int, inner: int) -> None:
        super().__init__()
        self.feed_forward1, self.feed_forward2 = _FeedForward(width, inner), _FeedForward(width, inner)
        self.self_attn = _Attention(width, heads)
        self.norm_pre_attn, self.norm_post_attn, self.norm_out = _Norm(width), _Norm(width), _Norm(width)
        self.lconv1d = _LightConv(width)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        x = self.feed_forward1(x)
        x = x + self.norm_post_attn(self.self_attn(self.norm_pre_attn(x), valid))
        x = self.feed_forward2(self.lconv1d(x))
        return self.norm_out(x)


class _Encoder(nn.Module):
    def __init__(self, c0: int, c1: int, width: int, depth: int, heads: int, inner: int, out: int) -> None:
        super().__init__()
        self.subsample_conv_projection = _Subsampler(c0, c1, width)
        self.layers = nn.ModuleList(_Layer(width, heads, inner) for _ in range(depth))
        self.output_proj = nn.Linear(width, out, bias=True)


class _Projector(nn.Module):
    def __init__(self, width: int, text_width: int) -> None:
        super().__init__()
        self.embedding_projection = nn.Linear(width, text_width, bias=False)


class Gemma4Audio(nn.Module):
    """The audio encoder (`audio_model`) and its projector (`audio_projector`)."""

    def __init__(self, c0: int, c1: int, width: int, depth: int, heads: int, inner: int, out: int,
                 text_width: int) -> None:
        super().__init__()
        self.audio_model = _Encoder(c0, c1, width, depth, heads, inner, out)
        self.audio_projector = _Projector(out, text_width)

    def encode(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Log-mel frames `[B, T, 128]` and their validity `[B, T]` -> encoder states `[B, T', out]`."""
        x, valid = self.audio_model.subsample_conv_projection(features.float(), mask)
        for layer in self.audio_model.layers:
            x = layer(x, valid)
        proj = self.audio_model.output_proj
        return F.linear(x, proj.weight.float(), proj.bias.float())

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """-> soft tokens `[B, T', text width]` float32."""
        projection = self.audio_projector.embedding_projection.weight.float()
        return F.linear(_unit_rms(self.encode(features, mask), EPS), projection)


def build_audio(tensors: Mapping[str, Any], read: Any, text_width: int, dtype: torch.dtype | None) -> Gemma4Audio:
    """The audio tower of a file (`tensors`: names -> shapes; `read(name) -> tensor`)."""
    from comfy_core.checkpoint.meta_build import meta_build

    def shape(key: str) -> tuple[int, ...]:
        if key not in tensors:
            raise Gemma4VisionError(f"Gemma 4 audio tower lacks {key!r}")
        return tuple(int(d) for d in tensors[key].shape)

    sub = PREFIX + "subsample_conv_projection."
    c0, c1 = shape(sub + "layer0.conv.weight")[0], shape(sub + "layer1.conv.weight")[0]
    width = shape(MARKER)[0]
    pattern = re.compile(re.escape(PREFIX) + r"layers\.(\d+)\.")
    depth = 1 + max((int(m.group(1)) for name in tensors for m in [pattern.match(name)] if m), default=-1)
    head_dim = shape(PREFIX + "layers.0.self_attn.per_dim_scale")[0]
    inner = shape(PREFIX + "layers.0.feed_forward1.ffw_layer_1.linear.weight")[0]
    out = shape(PREFIX + "output_proj.weight")[0]
    if depth < 1 or width % head_dim:
        raise Gemma4VisionError(f"Gemma 4 audio tower: {depth} layers of width {width}, heads of {head_dim}")
    with meta_build():
        module = Gemma4Audio(c0, c1, width, depth, width // head_dim, inner, out, text_width)
    state = {}
    for name, expected in module.state_dict().items():
        if name in tensors:
            tensor = read(name)
            if tuple(tensor.shape) != tuple(expected.shape):
                raise Gemma4VisionError(f"Gemma 4 key {name!r}: expected shape {tuple(expected.shape)}, "
                                        f"got {tuple(tensor.shape)}")
            state[name] = tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
        elif name.rsplit(".", 1)[-1] in CLIP_BUFFERS:
            state[name] = torch.tensor(float("inf") if name.endswith("max") else float("-inf"))
        else:
            raise Gemma4VisionError(f"Gemma 4 audio tower lacks {name!r}")
    module.load_state_dict(state, assign=True)
    module.eval()
    module.requires_grad_(False)
    return module


__all__ = ["Gemma4Audio", "build_audio", "holds_audio", "log_mel", "mel_filters", "resample_16k", "token_count"]
