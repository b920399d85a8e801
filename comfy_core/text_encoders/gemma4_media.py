"""Gemma 4 12B's encoder-free media embedders ("gemma4_unified": no vision tower, no audio
conformer): images and audio as soft tokens for TextGenerate, as ComfyUI's `comfy/text_encoders/
gemma4.py` runs them (`Gemma4UnifiedVisionEmbedder`, `Gemma4RMSNormProjector`, `Gemma4UnifiedBase.
preprocess_embed`, `Gemma4UnifiedSDTokenizer`) and transformers' `Gemma4UnifiedVisionEmbedder` /
`Gemma4UnifiedMultimodalEmbedder` compute them; written here.

Weights (ComfyUI's names in the file, besides the text model): `vision_model.{patch_ln1, patch_dense,
patch_ln2, pos_norm}.{weight, bias}` (layer norms and a linear with biases), `vision_model.
pos_embedding` [table, 2, width] (a factorised 2-D position table: one row per x, one per y),
`multi_modal_projector.embedding_projection.weight` and `audio_projector.embedding_projection.weight`
(no biases). Shapes give the cell size (`patch_dense`'s input is cell^2 x 3: 48 px, ComfyUI's
`model_patch_size`, 16-px patches merged 3 x 3), the widths, the table's rows and the audio frame
(the audio projector's input: 640 samples, 40 ms at 16 kHz).

Images: prepared as for E2B / E4B (`gemma4_vision.prepare_image`: uint8, bicubic resize keeping the
aspect to at most `max_soft_tokens` x 9 patches of 16 px, sides multiples of 48, then 0..1). The
image is cut into 48 x 48 cells in raster order (rows of cells, then columns), each flattened row by
row with the channels last (what ComfyUI's `_patches_merge` of the 3 x 3 16-px patches gives), at
position (x, y) = (cell column, cell row); no padding cells. Each cell: LayerNorm (eps 1e-5) ->
`patch_dense` -> LayerNorm, plus the table's x row for x (axis 0) and y row for y (axis 1) ->
LayerNorm; the projector RMS-normalises without a weight (eps 1e-6) and projects to the text width.
One soft token per cell (at most 280), not scaled by sqrt(width).

Audio: mono at 16 kHz (`gemma4_audio.resample_16k`, ComfyUI's Kaiser sinc), zero-padded to whole
640-sample frames, at most 750 frames (30 s); each frame is one soft token: the projector's
weightless RMS norm and linear. The prompt's audio turn has `min(ceil(samples / 640), 750)`
`<|audio|>` tokens (the 16 kHz sample count ComfyUI computes from the input's length and rate).

The soft tokens replace the prompt's `<|image|>` / `<|audio|>` run at consecutive positions (the
tokenizer's image / audio items, `gemma4_load.py`); for the 12B (ComfyUI's `vision_bidirectional`,
transformers' `use_bidirectional_attention="vision"`) an image's soft tokens attend to each other
both ways in the prompt's pass, in every block (`gemma4.attention_biases`); audio stays causal.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.text_encoders.gemma4_vision import Gemma4VisionError

VISION_PREFIX = "vision_model."
VISION_MARKER = VISION_PREFIX + "patch_dense.weight"
VISION_PROJECTOR = "multi_modal_projector.embedding_projection.weight"
AUDIO_PROJECTOR = "audio_projector.embedding_projection.weight"
CONFORMER_MARKER = "audio_model.subsample_conv_projection.input_proj_linear.weight"  # E2B / E4B's audio tower
LAYER_NORM_EPS, RMS_EPS = 1e-5, 1e-6  # torch's LayerNorm default (ComfyUI's and transformers' layers); the projector's
AUDIO_FRAME = 640  # ComfyUI's audio_samples_per_token
MAX_AUDIO_TOKENS = 750  # ComfyUI's cap (30 s)


def holds_unified_vision(tensors: Mapping[str, Any]) -> bool:
    """Whether a file's tensors (names) hold the 12B's encoder-free image embedder."""
    return VISION_MARKER in tensors


def holds_unified_audio(tensors: Mapping[str, Any]) -> bool:
    """Whether a file's tensors (names) hold the 12B's encoder-free audio projector (an audio
    projector without E2B / E4B's conformer)."""
    return AUDIO_PROJECTOR in tensors and CONFORMER_MARKER not in tensors


def audio_frame_of(tensors: Mapping[str, Any]) -> int:
    """The samples per audio soft token of a file with the encoder-free audio projector (its input width)."""
    return int(tensors[AUDIO_PROJECTOR].shape[1])


# --- preparation ---

def image_cells(pixels: torch.Tensor, cell: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Images `[B, 3, H, W]` (sides multiples of `cell`) -> cells `[B, N, cell * cell * 3]` (raster
    order, each row-major with the channels last) and their (x, y) positions `[B, N, 2]`."""
    batch, channels, height, width = pixels.shape
    if height % cell or width % cell:
        raise ValueError(f"gemma4: a {height}x{width} image is not whole {cell}-px cells (the tokenizer's "
                         "preparation gives multiples of 48)")
    rows, cols = height // cell, width // cell
    cells = pixels.reshape(batch, channels, rows, cell, cols, cell).permute(0, 2, 4, 3, 5, 1)
    cells = cells.reshape(batch, rows * cols, cell * cell * channels)
    y, x = torch.meshgrid(torch.arange(rows, device=pixels.device), torch.arange(cols, device=pixels.device),
                          indexing="ij")
    positions = torch.stack([x.flatten(), y.flatten()], dim=-1)[None].expand(batch, -1, -1)
    return cells, positions


def audio_token_count(samples: int, frame: int = AUDIO_FRAME) -> int:
    """`<|audio|>` tokens for `samples` samples at 16 kHz (ComfyUI's unified `_audio_token_count`)."""
    return min((samples + frame - 1) // frame, MAX_AUDIO_TOKENS)


def audio_frames(waveform: torch.Tensor, sample_rate: int,
                 frame: int = AUDIO_FRAME) -> tuple[torch.Tensor, torch.Tensor]:
    """A clip `[C, S]` (or `[S]`) -> raw 16 kHz frames `[T, frame]` float32 (zero-padded, at most
    750) and their validity `[T]` (all true)."""
    from comfy_core.text_encoders.gemma4_audio import resample_16k

    audio = resample_16k(waveform, sample_rate)  # [S'] float32
    pad = (-audio.shape[0]) % frame
    if pad:
        audio = F.pad(audio, (0, pad))
    frames = audio.reshape(-1, frame)[:MAX_AUDIO_TOKENS]
    return frames, torch.ones(frames.shape[0], dtype=torch.bool)


# --- the modules (ComfyUI's names) ---

def _unit_rms(x: torch.Tensor, eps: float = RMS_EPS) -> torch.Tensor:
    return x * torch.pow(x.pow(2).mean(-1, keepdim=True) + eps, -0.5)


def _layer_norm(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x.float(), norm.normalized_shape, norm.weight.float(), norm.bias.float(), LAYER_NORM_EPS)


class _Projector(nn.Module):
    def __init__(self, width: int, text_width: int) -> None:
        super().__init__()
        self.embedding_projection = nn.Linear(width, text_width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[..., width] -> [..., text width] float32: weightless RMS norm, then the projection."""
        return F.linear(_unit_rms(x.float()), self.embedding_projection.weight.float())


class _Embedder(nn.Module):
    def __init__(self, cell: int, width: int, table: int) -> None:
        super().__init__()
        patch_dim = cell * cell * 3
        self.patch_ln1 = nn.LayerNorm(patch_dim, eps=LAYER_NORM_EPS)
        self.patch_dense = nn.Linear(patch_dim, width)
        self.patch_ln2 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.pos_embedding = nn.Parameter(torch.empty(table, 2, width))
        self.pos_norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)


class Gemma4UnifiedVision(nn.Module):
    """The 12B's image embedder (`vision_model`) and its projector (`multi_modal_projector`)."""

    def __init__(self, cell: int, width: int, table: int, text_width: int) -> None:
        super().__init__()
        self.cell = cell
        self.vision_model = _Embedder(cell, width, table)
        self.multi_modal_projector = _Projector(width, text_width)

    def forward(self, pixels: torch.Tensor, max_soft_tokens: int | None = None) -> torch.Tensor:
        """Prepared images `[B, H, W, 3]` in 0..1 -> soft tokens `[B, cells, text width]` float32
        (`max_soft_tokens` shaped the preparation; the embedder pads nothing)."""
        embed = self.vision_model
        cells, positions = image_cells(pixels.movedim(-1, 1).float(), self.cell)
        table = embed.pos_embedding
        if int(positions.max()) >= table.shape[0]:
            raise Gemma4VisionError(f"gemma4: an image of {int(positions[..., 0].max()) + 1} x "
                                    f"{int(positions[..., 1].max()) + 1} cells exceeds the position table "
                                    f"({table.shape[0]} rows)")
        x = _layer_norm(embed.patch_ln1, cells)
        x = F.linear(x, embed.patch_dense.weight.float(), embed.patch_dense.bias.float())
        x = _layer_norm(embed.patch_ln2, x)
        table = table.float()
        x = x + table[positions[..., 0], 0] + table[positions[..., 1], 1]  # x row of axis 0, y row of axis 1
        return self.multi_modal_projector(_layer_norm(embed.pos_norm, x))


class Gemma4UnifiedAudio(nn.Module):
    """The 12B's audio projector (`audio_projector`): raw waveform frames into the text width."""

    def __init__(self, frame: int, text_width: int) -> None:
        super().__init__()
        self.frame = frame
        self.audio_projector = _Projector(frame, text_width)

    def forward(self, frames: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Frames `[B, T, frame]` (and their validity `[B, T]`) -> soft tokens `[B, T, text width]`
        float32 (the valid frames of the first clip when some are not)."""
        out = self.audio_projector(frames)
        if mask is not None and not bool(mask.all()):
            out = out[:, mask[0].bool()]
        return out


# --- loading ---

def _read(tensors: Mapping[str, Any], read: Any, module: nn.Module, dtype: torch.dtype | None,
          what: str) -> None:
    state = {}
    for name, expected in module.state_dict().items():
        if name not in tensors:
            raise Gemma4VisionError(f"Gemma 4 12B {what} lacks {name!r}")
        tensor = read(name)
        if tuple(tensor.shape) != tuple(expected.shape):
            raise Gemma4VisionError(f"Gemma 4 key {name!r}: expected shape {tuple(expected.shape)}, "
                                    f"got {tuple(tensor.shape)}")
        state[name] = tensor.to(dtype) if dtype is not None and tensor.is_floating_point() else tensor
    module.load_state_dict(state, assign=True)
    module.eval()
    module.requires_grad_(False)


def _shape(tensors: Mapping[str, Any], key: str, what: str) -> tuple[int, ...]:
    if key not in tensors:
        raise Gemma4VisionError(f"Gemma 4 12B {what} lacks {key!r}")
    return tuple(int(d) for d in tensors[key].shape)


def build_unified_vision(tensors: Mapping[str, Any], read: Any, text_width: int,
                         dtype: torch.dtype | None) -> Gemma4UnifiedVision:
    """The image embedder of a file (`tensors`: names -> shapes; `read(name) -> tensor`)."""
    from comfy_core.checkpoint.meta_build import meta_build

    what = "image embedder"
    width, patch_dim = _shape(tensors, VISION_MARKER, what)
    cell = math.isqrt(patch_dim // 3)
    if cell * cell * 3 != patch_dim:
        raise Gemma4VisionError(f"Gemma 4 key {VISION_MARKER!r}: {patch_dim} inputs are not square RGB cells")
    table = _shape(tensors, VISION_PREFIX + "pos_embedding", what)[0]
    projector = _shape(tensors, VISION_PROJECTOR, what)
    if projector != (text_width, width):
        raise Gemma4VisionError(f"Gemma 4 key {VISION_PROJECTOR!r}: expected shape {(text_width, width)}, "
                                f"got {projector}")
    with meta_build():
        module = Gemma4UnifiedVision(cell, width, table, text_width)
    _read(tensors, read, module, dtype, what)
    return module


def build_unified_audio(tensors: Mapping[str, Any], read: Any, text_width: int,
                        dtype: torch.dtype | None) -> Gemma4UnifiedAudio:
    """The audio projector of a file (`tensors`: names -> shapes; `read(name) -> tensor`)."""
    from comfy_core.checkpoint.meta_build import meta_build

    rows, frame = _shape(tensors, AUDIO_PROJECTOR, "audio projector")
    if rows != text_width:
        raise Gemma4VisionError(f"Gemma 4 key {AUDIO_PROJECTOR!r}: expected {text_width} rows, got {rows}")
    with meta_build():
        module = Gemma4UnifiedAudio(frame, text_width)
    _read(tensors, read, module, dtype, "audio projector")
    return module


__all__ = ["AUDIO_FRAME", "AUDIO_PROJECTOR", "Gemma4UnifiedAudio", "Gemma4UnifiedVision", "MAX_AUDIO_TOKENS",
           "VISION_MARKER", "VISION_PROJECTOR", "audio_frame_of", "audio_frames", "audio_token_count",
           "build_unified_audio", "build_unified_vision", "holds_unified_audio", "holds_unified_vision",
           "image_cells"]
