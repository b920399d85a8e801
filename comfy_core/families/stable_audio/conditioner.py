"""Stable Audio's conditioning besides the text: the seconds embedders and how the network's inputs
are formed (ComfyUI's `comfy/model_base.py` `StableAudio1.extra_conds` over
`comfy/ldm/audio/embedders.py` `NumberConditioner`; stable-audio-tools `models/conditioners.py`;
diffusers' `StableAudioNumberConditioner` is the same embedder); written here.

`NumberConditioner`: a number clamped to [min, max] (0..512 seconds), normalised to 0..1, then
`[x, sin(2 pi x w), cos(2 pi x w)]` (learned frequencies `embedder.embedding.0.weights`) through a
linear layer (`embedder.embedding.1`) -> `[N, 1, width]`. The widths are read from the weights
(the released file's 768).

`StableAudioConditions.extra_conds`: `seconds_start` (default 0) and `seconds_total` (default
`int(latent frames / 21.53)`, the latent's duration) from the conditioning entry; `global_embed`
`[1, 2 width]` = both embeddings side by side; the text states followed by the two embeddings as
two more tokens become the cross-attention context (`c_crossattn`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from torch import nn

from comfy_core.models.model_conditions import ConditioningError, ModelConditions

SECONDS_MIN, SECONDS_MAX = 0.0, 512.0
FRAMES_PER_SECOND = 21.53  # ComfyUI's default `seconds_total` divisor (44100 / 2048)
START, TOTAL = "conditioner.conditioners.seconds_start.", "conditioner.conditioners.seconds_total."


class _Embedding(nn.Module):
    """`[x, sin(2 pi x w), cos(2 pi x w)]` then a linear layer (`embedding.0.weights`, `embedding.1`)."""

    def __init__(self, half: int, width: int) -> None:
        super().__init__()
        self.embedding = nn.ModuleList([nn.Module(), nn.Linear(2 * half + 1, width)])
        self.embedding[0].weights = nn.Parameter(torch.empty(half))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, None]  # [N, 1]
        freqs = x * self.embedding[0].weights.to(x.dtype)[None] * 2 * math.pi
        return self.embedding[1](torch.cat((x, freqs.sin(), freqs.cos()), dim=-1))


class NumberConditioner(nn.Module):
    """See the module docstring; `forward(values) -> [N, 1, width]`."""

    def __init__(self, half: int, width: int, min_val: float = SECONDS_MIN, max_val: float = SECONDS_MAX) -> None:
        super().__init__()
        self.min_val, self.max_val = float(min_val), float(max_val)
        self.embedder = _Embedding(half, width)

    @property
    def width(self) -> int:
        return self.embedder.embedding[1].out_features

    @classmethod
    def from_state_dict(cls, state: Mapping[str, torch.Tensor], min_val: float = SECONDS_MIN,
                        max_val: float = SECONDS_MAX) -> "NumberConditioner":
        try:
            (half,) = state["embedder.embedding.0.weights"].shape
            width = state["embedder.embedding.1.weight"].shape[0]
        except (KeyError, ValueError):
            raise ConditioningError(f"Stable Audio seconds conditioner: expected 'embedder.embedding.0.weights' "
                                    f"and 'embedder.embedding.1.weight', got {sorted(state)}") from None
        module = cls(half, width, min_val, max_val)
        module.load_state_dict(state, strict=True, assign=True)
        return module.eval()

    def forward(self, values: Sequence[float] | torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        weight = self.embedder.embedding[1].weight
        x = torch.as_tensor([float(v) for v in values], dtype=torch.float32)
        x = (x.clamp(self.min_val, self.max_val) - self.min_val) / (self.max_val - self.min_val)
        x = x.to(device=weight.device, dtype=weight.dtype)
        out = self.embedder(x).unsqueeze(1)  # [N, 1, width]
        return out if device is None else out.to(device)


def seconds_embedders(tensors: Mapping[str, torch.Tensor]) -> dict[str, NumberConditioner]:
    """The single file's two embedders (`seconds_start`, `seconds_total`), those present."""
    out = {}
    for name, prefix in (("seconds_start", START), ("seconds_total", TOTAL)):
        state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
        if state:
            out[name] = NumberConditioner.from_state_dict(state)
    return out


class StableAudioConditions(ModelConditions):
    """See the module docstring. The embedders live on the model (`model.seconds_start_embedder`,
    `model.seconds_total_embedder`, ComfyUI's attribute names)."""

    name = "stable_audio"

    def extra_conds(self, model: Any, **kwargs: Any) -> dict[str, Any]:
        start_embedder = getattr(model, "seconds_start_embedder", None)
        total_embedder = getattr(model, "seconds_total_embedder", None)
        if start_embedder is None or total_embedder is None:
            raise ConditioningError("Stable Audio: the model has no seconds embedders (the checkpoint's "
                                    "conditioner.conditioners.seconds_start / seconds_total weights)")
        noise = kwargs["noise"]
        device = kwargs.get("device") or noise.device
        start = kwargs.get("seconds_start", 0)
        total = kwargs.get("seconds_total", int(noise.shape[-1] / FRAMES_PER_SECOND))
        start_embed = start_embedder([start], device)[0]  # [1, width]
        total_embed = total_embedder([total], device)[0]
        out: dict[str, Any] = {"global_embed": torch.cat((start_embed, total_embed), dim=-1).reshape(1, -1)}
        cross = kwargs.get("cross_attn")
        if cross is not None:
            if cross.shape[-1] != start_embed.shape[-1]:
                raise ConditioningError(f"Stable Audio: the text conditioning is {cross.shape[-1]} wide, the seconds "
                                        f"embeddings {start_embed.shape[-1]} (wrong text encoder for this model?)")
            batch = cross.shape[0]
            out["c_crossattn"] = torch.cat((cross.to(device), start_embed.to(cross.dtype).repeat(batch, 1, 1),
                                            total_embed.to(cross.dtype).repeat(batch, 1, 1)), dim=1)
        return out
