"""MultiTalk / InfiniteTalk for Wan 2.1: audio-driven talking video from one or two speakers.

Papers: Kong et al. 2025, "Let Them Talk: Audio-Driven Multi-Person Conversational Video
Generation" (MultiTalk, arXiv 2505.22647) and Yang et al. 2025, "InfiniteTalk: Audio-driven Video
Generation for Sparse-Frame Video Dubbing" (arXiv 2508.14033). The patch file
(`model_patches/wan2.1_infiniteTalk_{single,multi}_fp16.safetensors`) holds an audio projection
and one audio cross-attention per Wan block; ComfyUI loads it in its ModelPatchLoader and applies
it with WanInfiniteTalkToVideo (`comfy/ldm/wan/model_multitalk.py`, `comfy_extras/
nodes_model_patch.py` `MultiTalkModelPatch`, `comfy_extras/nodes_wan.py`); behaviour read there,
written here. The sampling glue (block patches, wrappers) is comfy_core/model_patches/multitalk.py.

Audio features. The audio encoder's hidden states after its input embedding (wav2vec2 base: 12
layers of C = 768) at 50 per second, interpolated linearly to 25 per second (the video's frame
rate): `[T, L, C]` per speaker. For video frames `start .. end-1`, frame i takes the 5 states
around it, `clamp(start + i + (-2..2), 0, T' - 1)`, where T' is T, or `end` when the audio is
shorter (then padded with its first state, most likely silence): `[N, 5, L, C]` for N = end -
start frames (N = 4k + 1). Latent frame 0 is video frame 0 with its 5 states; latent frame j >= 1
covers video frames 4j-3 .. 4j and takes 8 states: the first frame's window positions 0..2, the
two middle frames' centres and the last frame's positions 2..4.

Audio projection (`audio_proj`), per latent frame and speaker, flattened states a:

    h = ReLU(proj1(a))  (latent frame 0)      h = ReLU(proj1_vf(a))  (the others)
    tokens = LayerNorm(reshape(proj3(ReLU(proj2(h))), [32, D_a]))      (norm: eps 1e-5, affine)

and the speakers' tokens are concatenated per frame: `audio_embeds` `[1, F, speakers * 32, D_a]`.

Audio cross-attention (block i, after the text cross-attention, added with `audio_scale`), on
the video tokens x `[B, N_t * S, D]` (frame-major, S = N_h * N_w tokens per latent frame):

    y = proj(attn(q_linear(LN_i(x)) per frame t, k/v = kv_linear(audio_embeds[t])))

each latent frame's tokens attend to that frame's audio tokens only (heads of 128 channels, no
q/k norm, biases on every projection). A last latent frame without audio (the grid has one frame
more than the audio: an appended frame) gets zero.

Two speakers: each video token is given to a speaker by where it looks in the first frame.
The block's self-attention queries (normed, rotated) against the first latent frame's keys,
softmax over those S keys per head, summed over speaker c's mask (the node's mask at the token
grid) and divided by the mask's size, averaged over heads: `m_c[t]` (ComfyUI averages two head
halves; odd head counts drop the last head). m_c is min-max normalised to the rotary range
[0, 4] for speaker 1 and [20, 24] for speaker 2, and token t takes its dominant speaker's value
as a 1-D rotary position for its query; the audio keys are rotated to the middle of their
speaker's range (2 for the first half of the audio tokens, 22 for the second). Rotary: pairs
(2i, 2i+1) turned by `pos * 10000^(-2i / d)`, in float32.

Every width and the block count are read from the file (ComfyUI fixes 40 blocks, 40 heads, 32
tokens; these are what the released files hold): `audio_proj.proj1.weight` `[I, 5 * L * C]`,
`proj1_vf.weight` `[I, 8 * L * C]`, `proj2.weight` `[I, I]`, `proj3.weight` `[32 * D_a, I]`,
`norm.weight` `[D_a]`; `blocks.N.norm_x.{weight,bias}` `[D]`, `blocks.N.audio_cross_attn.
q_linear` `[D, D]`, `.kv_linear` `[2D, D_a]`, `.proj` `[D, D]` (all with biases).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.families.wan.blocks import attention
from comfy_core.models.weight_shapes import count_numbered, shape_reader

MULTITALK_MARKER = "audio_proj.proj1.weight"  # ComfyUI's ModelPatchLoader test for this kind
AUDIO_WINDOW = 5          # states around each video frame
VAE_SCALE = 4             # video frames per latent frame after the first
LATTER_WINDOW = AUDIO_WINDOW + VAE_SCALE - 1  # 8 states per later latent frame
HEAD_DIM = 128            # Wan's heads (ComfyUI fixes 40 heads for the 5120-wide 14B)
AUDIO_FPS = 50            # wav2vec2: one state per 320 samples at 16 kHz
VIDEO_FPS = 25            # InfiniteTalk's frame rate
CLASS_RANGE = 24          # the two-speaker rotary layout (ComfyUI's class_range / class_interval)
CLASS_INTERVAL = 4
ROPE_BASE = 10000.0
NORM_EPS = 1e-5           # torch's LayerNorm default, which the patch's norms use


class MultiTalkError(ValueError):
    """A MultiTalk patch file whose tensors disagree, or inputs its equations cannot take."""


@dataclass(frozen=True)
class MultiTalkConfig:
    """The patch's shape: Wan width `dim` and `num_layers` blocks, the audio features per state
    (`features` = layers x width of the encoder), the projection's hidden width, the audio token
    width and the tokens per frame and speaker."""

    dim: int = 5120
    num_layers: int = 40
    features: int = 12 * 768
    intermediate_dim: int = 512
    out_dim: int = 768
    context_tokens: int = 32

    @property
    def num_heads(self) -> int:
        return self.dim // HEAD_DIM

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = "") -> "MultiTalkConfig":
        """From the shapes listed in the module docstring; every block's shapes are checked.
        Raises `MultiTalkError` naming the key otherwise."""
        shape = shape_reader(tensors, prefix, MultiTalkError, "MultiTalk")
        inter, fan_in = shape("audio_proj.proj1.weight")
        if fan_in % AUDIO_WINDOW:
            raise MultiTalkError(f"MultiTalk: {prefix}audio_proj.proj1.weight takes {fan_in} inputs, not "
                                 f"{AUDIO_WINDOW} states of equal width")
        features = fan_in // AUDIO_WINDOW
        out_dim = shape("audio_proj.norm.weight")[0]
        proj3 = shape("audio_proj.proj3.weight")
        if proj3[0] % out_dim:
            raise MultiTalkError(f"MultiTalk: {prefix}audio_proj.proj3.weight gives {proj3[0]} outputs, not a "
                                 f"multiple of the {out_dim}-wide tokens")
        dim = shape("blocks.0.norm_x.weight")[0]
        if dim % HEAD_DIM:
            raise MultiTalkError(f"MultiTalk: width {dim} is not a multiple of the {HEAD_DIM}-channel heads")
        layers = count_numbered(tensors, prefix, "blocks", MultiTalkError, "MultiTalk")
        expected: dict[str, tuple[int, ...]] = {
            "audio_proj.proj1.bias": (inter,), "audio_proj.proj1_vf.weight": (inter, LATTER_WINDOW * features),
            "audio_proj.proj1_vf.bias": (inter,), "audio_proj.proj2.weight": (inter, inter),
            "audio_proj.proj2.bias": (inter,), "audio_proj.proj3.weight": (proj3[0], inter),
            "audio_proj.proj3.bias": (proj3[0],), "audio_proj.norm.bias": (out_dim,)}
        for i in range(layers):
            block = f"blocks.{i}."
            expected.update({f"{block}norm_x.weight": (dim,), f"{block}norm_x.bias": (dim,),
                             f"{block}audio_cross_attn.q_linear.weight": (dim, dim),
                             f"{block}audio_cross_attn.q_linear.bias": (dim,),
                             f"{block}audio_cross_attn.kv_linear.weight": (2 * dim, out_dim),
                             f"{block}audio_cross_attn.kv_linear.bias": (2 * dim,),
                             f"{block}audio_cross_attn.proj.weight": (dim, dim),
                             f"{block}audio_cross_attn.proj.bias": (dim,)})
        for key, want in expected.items():
            if shape(key) != want:
                raise MultiTalkError(f"MultiTalk: {prefix}{key} has shape {shape(key)}, expected {want}")
        return cls(dim=dim, num_layers=layers, features=features, intermediate_dim=inter, out_dim=out_dim,
                   context_tokens=proj3[0] // out_dim)


class MultiTalkAudioProjection(nn.Module):
    """Audio windows -> per-frame audio tokens (see the module docstring)."""

    def __init__(self, config: MultiTalkConfig, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        factory = {"dtype": dtype, "device": device}
        self.config = config
        inter = config.intermediate_dim
        self.proj1 = nn.Linear(AUDIO_WINDOW * config.features, inter, **factory)
        self.proj1_vf = nn.Linear(LATTER_WINDOW * config.features, inter, **factory)
        self.proj2 = nn.Linear(inter, inter, **factory)
        self.proj3 = nn.Linear(inter, config.context_tokens * config.out_dim, **factory)
        self.norm = nn.LayerNorm(config.out_dim, eps=NORM_EPS, **factory)

    def forward(self, first: torch.Tensor, latter: torch.Tensor) -> torch.Tensor:
        """first `[H, 1, 5, L, C]`, latter `[H, n, 8, L, C]` (H speakers) -> `[H, 1 + n, tokens, D_a]`."""
        h = first.shape[0]
        a = torch.relu(self.proj1(first.reshape(h, first.shape[1], -1)))       # [H, 1, I]
        b = torch.relu(self.proj1_vf(latter.reshape(h, latter.shape[1], -1)))  # [H, n, I]
        hidden = torch.relu(self.proj2(torch.cat([a, b], dim=1)))               # [H, F, I]
        tokens = self.proj3(hidden).unflatten(-1, (self.config.context_tokens, self.config.out_dim))
        return self.norm(tokens)


def rotate_1d(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x `[..., L, H, d]` with pairs (2i, 2i+1) turned by `positions[..., L] * base^(-2i/d)`,
    computed in float32, returned in x's dtype."""
    d = x.shape[-1]
    freqs = ROPE_BASE ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)  # [d/2]
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None, None] * freqs      # [..., L, 1, d/2]
    cos, sin = angles.cos(), angles.sin()
    pairs = x.float().unflatten(-1, (d // 2, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1)
    return out.flatten(-2).to(x.dtype)


def speaker_positions(attn_map: torch.Tensor) -> torch.Tensor:
    """`[B, 2, L]` speaker attention of each token -> `[B, L]` rotary positions: each speaker's
    map min-max normalised into its range ([0, 4], [20, 24]), the dominant speaker's value."""
    if attn_map.ndim != 3 or attn_map.shape[1] != 2:
        raise MultiTalkError(f"MultiTalk: two speakers need a [batch, 2, tokens] attention map, got "
                             f"{tuple(attn_map.shape)}")
    ranges = ((0.0, float(CLASS_INTERVAL)), (float(CLASS_RANGE - CLASS_INTERVAL), float(CLASS_RANGE)))
    scaled = []
    for c, (low, high) in enumerate(ranges):
        m = attn_map[:, c]
        lo, hi = m.amin(dim=1, keepdim=True), m.amax(dim=1, keepdim=True)
        scaled.append((m - lo) / (hi - lo + 1e-8) * (high - low) + low)
    return torch.where(attn_map[:, 0] >= attn_map[:, 1], scaled[0], scaled[1])


class MultiTalkAttention(nn.Module):
    """Frame-wise cross-attention from the video tokens to the audio tokens (module docstring)."""

    def __init__(self, dim: int, audio_dim: int, num_heads: int, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        factory = {"dtype": dtype, "device": device}
        self.dim, self.num_heads, self.head_dim = dim, num_heads, dim // num_heads
        self.q_linear = nn.Linear(dim, dim, **factory)
        self.kv_linear = nn.Linear(audio_dim, 2 * dim, **factory)
        self.proj = nn.Linear(dim, dim, **factory)

    def forward(self, x: torch.Tensor, audio: torch.Tensor, grid: Sequence[int],
                positions: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """x `[B, L, D]` (normed), audio `[F, M, D_a]` (or `[1, F, M, D_a]`), grid `(N_t, N_h, N_w)`,
        positions `[B, >= N_t * S]` (two speakers) or None -> `[B, L, D]`."""
        if audio.ndim == 4:
            if audio.shape[0] != 1:
                raise MultiTalkError(f"MultiTalk: audio embeddings for one video expected, got {tuple(audio.shape)}")
            audio = audio[0]
        b, length, width = x.shape
        frames, per_frame = int(grid[0]), int(grid[1]) * int(grid[2])
        if length != frames * per_frame:
            raise MultiTalkError(f"MultiTalk: {length} video tokens do not fit the latent grid {tuple(grid)}")
        if audio.shape[0] == frames - 1:  # a last frame with no audio (an appended reference): zeros
            frames -= 1
        elif audio.shape[0] != frames:
            raise MultiTalkError(f"MultiTalk: audio embeddings for {audio.shape[0]} latent frames, the video has "
                                 f"{frames}")
        n, d = self.num_heads, self.head_dim
        video = x[:, :frames * per_frame]
        q = self.q_linear(video).view(b, frames * per_frame, n, d)
        k, v = self.kv_linear(audio.to(x.dtype)).view(frames, audio.shape[1], 2, n, d).unbind(2)  # [F, M, n, d]
        if positions is not None:
            if positions.ndim != 2 or positions.shape[0] != b or positions.shape[1] < frames * per_frame:
                raise MultiTalkError(f"MultiTalk: speaker positions {tuple(positions.shape)} for "
                                     f"{(b, frames * per_frame)} video tokens")
            q = rotate_1d(q, positions[:, :frames * per_frame])
            half = audio.shape[1] // 2
            key_pos = torch.full((audio.shape[1],), (CLASS_RANGE - CLASS_INTERVAL + CLASS_RANGE) / 2.0)
            key_pos[:half] = CLASS_INTERVAL / 2.0
            k = rotate_1d(k, key_pos)
        # one attention per (sample, latent frame): [B * F, S, n*d] against [B * F, M, n*d]
        q = q.reshape(b * frames, per_frame, n * d)
        k = k.reshape(frames, -1, n * d).repeat(b, 1, 1)
        v = v.reshape(frames, -1, n * d).repeat(b, 1, 1)
        out = self.proj(attention(q, k, v, n, transformer_options)).reshape(b, frames * per_frame, width)
        if length > frames * per_frame:
            out = torch.cat([out, out.new_zeros(b, length - frames * per_frame, width)], dim=1)
        return out


class MultiTalkBlock(nn.Module):
    """One block's audio cross-attention and its input LayerNorm (`norm_x`)."""

    def __init__(self, config: MultiTalkConfig, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.audio_cross_attn = MultiTalkAttention(config.dim, config.out_dim, config.num_heads, dtype=dtype,
                                                   device=device)
        self.norm_x = nn.LayerNorm(config.dim, eps=NORM_EPS, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor, audio: torch.Tensor, grid: Sequence[int],
                positions: torch.Tensor | None = None,
                transformer_options: dict[str, Any] | None = None) -> torch.Tensor:
        """The audio residual (before `audio_scale`) for the video tokens x `[B, L, D]`."""
        return self.audio_cross_attn(self.norm_x(x), audio, grid, positions, transformer_options)


class MultiTalkPatchNetwork(nn.Module):
    """The patch file's network: `audio_proj` and one `MultiTalkBlock` per Wan block (ComfyUI's
    `MultiTalkModelPatch`)."""

    def __init__(self, config: MultiTalkConfig, dtype: Any = None, device: Any = None) -> None:
        super().__init__()
        self.config = config
        self.audio_proj = MultiTalkAudioProjection(config, dtype=dtype, device=device)
        self.blocks = nn.ModuleList([MultiTalkBlock(config, dtype=dtype, device=device)
                                     for _ in range(config.num_layers)])


# -- audio features -------------------------------------------------------------------------------

def encoder_states(all_layers: Sequence[torch.Tensor]) -> torch.Tensor:
    """An audio encoder's hidden states (`encoded_audio_all_layers`: the embedding output then
    each layer's, each `[1, T, C]` at 50 per second) -> `[T', L, C]` at 25 per second, the
    embedding output dropped, interpolated linearly with aligned corners."""
    if len(all_layers) < 2 or any(s.ndim != 3 or s.shape[0] != 1 for s in all_layers):
        raise MultiTalkError("MultiTalk: the audio encoder's hidden states of one clip ([1, T, C] each, at least 2) "
                             f"expected, got {[tuple(s.shape) for s in all_layers]}")
    states = torch.cat([s.float() for s in all_layers[1:]])                       # [L, T, C]
    frames = int(states.shape[1] / float(AUDIO_FPS) * VIDEO_FPS)
    if frames < 1:
        raise MultiTalkError(f"MultiTalk: {states.shape[1]} audio states are shorter than one video frame")
    resampled = F.interpolate(states.transpose(1, 2), size=frames, mode="linear", align_corners=True)
    return resampled.permute(2, 0, 1)                                             # [T', L, C]


def combine_speakers(speakers: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Two speakers' states one after the other (ComfyUI's "add" layout): each padded with zeros
    to the sum of the lengths, speaker 1 in front, speaker 2 after it. One speaker: unchanged."""
    if len(speakers) < 2:
        return list(speakers)
    total = sum(s.shape[0] for s in speakers)
    out, offset = [], 0
    for s in speakers:
        full = s.new_zeros((total, *s.shape[1:]))
        full[offset:offset + s.shape[0]] = s
        out.append(full)
        offset += s.shape[0]
    return out


def audio_windows(speakers: Sequence[torch.Tensor], start: int, end: int) -> torch.Tensor:
    """`[T, L, C]` per speaker -> `[H, end - start, 5, L, C]`: the 5 states around each video
    frame (module docstring; audio shorter than `end` padded with its first state)."""
    offsets = torch.arange(AUDIO_WINDOW) - AUDIO_WINDOW // 2
    out = []
    for states in speakers:
        if end > states.shape[0]:
            states = torch.cat([states, states[:1].expand(end - states.shape[0], *states.shape[1:])])
        index = (torch.arange(start, end)[:, None] + offsets[None]).clamp(0, states.shape[0] - 1)
        out.append(states[index])
    return torch.stack(out)


def split_windows(windows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`[H, N, 5, L, C]` (N = 4k + 1 video frames) -> the first latent frame's window
    `[H, 1, 5, L, C]` and the later latent frames' 8 states `[H, k, 8, L, C]`."""
    frames = windows.shape[1]
    if (frames - 1) % VAE_SCALE:
        raise MultiTalkError(f"MultiTalk: {frames} video frames are not 4k + 1 (one latent frame, then 4 per frame)")
    mid = AUDIO_WINDOW // 2
    groups = windows[:, 1:].unflatten(1, ((frames - 1) // VAE_SCALE, VAE_SCALE))   # [H, k, 4, 5, L, C]
    first = groups[:, :, 0, :mid + 1]                                              # [H, k, 3, L, C]
    middle = groups[:, :, 1:-1, mid]                                               # [H, k, 2, L, C]
    last = groups[:, :, -1, mid:]                                                  # [H, k, 3, L, C]
    return windows[:, :1], torch.cat([first, middle, last], dim=2)


def project_audio(projection: MultiTalkAudioProjection, speakers: Sequence[torch.Tensor], start: int,
                  end: int) -> torch.Tensor:
    """The `audio_embeds` `[1, F, H * tokens, D_a]` of video frames `start .. end-1` (F latent
    frames), computed in float32 on the projection's device (the loader's layers cast their
    stored weights to it, as ComfyUI's `manual_cast` layers do for its float32 features)."""
    features = projection.config.features
    for states in speakers:
        if states.ndim != 3 or states.shape[1] * states.shape[2] != features:
            raise MultiTalkError(f"MultiTalk: the patch takes {features} audio features per state, the audio "
                                 f"encoder gives {tuple(states.shape[1:])}")
    first, latter = split_windows(audio_windows(speakers, start, end))
    device = projection.proj1.weight.device
    tokens = projection(first.to(device, torch.float32), latter.to(device, torch.float32))
    return torch.cat(list(tokens.split(1)), dim=2)                                  # [1, F, H * tokens, D_a]


# -- two speakers ---------------------------------------------------------------------------------

def speaker_attention_map(q: torch.Tensor, k: torch.Tensor, grid: Sequence[int], masks: torch.Tensor,
                          chunk: int = 4096) -> torch.Tensor:
    """How much each video token attends to each speaker in the first latent frame: q, k `[B, L,
    n, d]` (the self-attention's, normed and rotated), masks `[classes, S]` over the first frame's
    S tokens -> `[B, classes, L]` (module docstring), queries taken `chunk` at a time."""
    b, length, heads, d = q.shape
    per_frame = int(grid[1]) * int(grid[2])
    if masks.ndim != 2 or masks.shape[1] != per_frame:
        raise MultiTalkError(f"MultiTalk: speaker masks of {tuple(masks.shape[1:])} tokens for a first frame of "
                             f"{per_frame} tokens")
    if heads < 2:
        raise MultiTalkError("MultiTalk: the speaker map averages two halves of the heads; the model has one head")
    used = 2 * (heads // 2)
    ref_k = k[:, :per_frame, :used].float().permute(0, 2, 3, 1)                # [B, h, d, S]
    weights = masks.to(device=q.device, dtype=torch.float32)                    # [c, S]
    weights = weights.t() / (weights.sum(dim=1) + 1e-8)                         # [S, c]
    out = q.new_zeros((b, masks.shape[0], length), dtype=torch.float32)
    for lo in range(0, length, chunk):
        part = q[:, lo:lo + chunk, :used].float().transpose(1, 2) / math.sqrt(d)  # [B, h, t, d]
        scores = part @ ref_k                                                      # [B, h, t, S]
        scores = (scores - scores.amax(dim=-1, keepdim=True)).exp()
        probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-8)
        out[:, :, lo:lo + chunk] = (probs @ weights).mean(dim=1).transpose(1, 2)   # [B, c, t]
    return out


__all__ = ["AUDIO_FPS", "MULTITALK_MARKER", "VIDEO_FPS", "MultiTalkAttention", "MultiTalkAudioProjection",
           "MultiTalkBlock", "MultiTalkConfig", "MultiTalkError", "MultiTalkPatchNetwork", "audio_windows",
           "combine_speakers", "encoder_states", "project_audio", "rotate_1d", "speaker_attention_map",
           "speaker_positions", "split_windows"]
