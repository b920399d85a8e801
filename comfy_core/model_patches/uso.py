"""USO's style projector (ByteDance 2025, "USO: Unified Style and Subject-Driven Generation via
Disentangled and Reward Learning"; ComfyUI's `SigLIPMultiFeatProjModel` and
`UsoStyleProjectorPatch` in `comfy_extras/nodes_model_patch.py`, behaviour read, code written here).

A Flux patch file (`feature_embedder.*`) that turns three layers of a SigLIP image tower into
style tokens in Flux's hidden width, prepended to the text stream after the input projections:

    for the layer pairs (high: penultimate, mid: all_hidden_states[:, -11], low: [:, -20]):
        e = silu(Linear_{T->S}(h^T))^T         h [B, T, W] -> e [B, S, W]  (mixes the T tokens)
        e = LayerNorm_W(e)
        e = Linear_{W->D}(e)                    [B, S, D]
    tokens = cat(high, mid, low)                [B, 3S, D]

The released projector reads 729 SigLIP-so400m tokens (384 px, 14 px patches) of width 1152 and
gives 3 x 64 tokens of Flux's 3072; every width here is read from the weights. The patch runs at
Flux's `post_input` point: `txt = cat(tokens, txt)` and `txt_ids = cat(zeros, txt_ids)`, so the
style tokens sit at RoPE position 0 like the text.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.model_patches.errors import ModelPatchError

USO_PREFIX = "feature_embedder."
USO_MARKER = USO_PREFIX + "mid_layer_norm.bias"  # ComfyUI's test for this patch kind
LEVELS = ("high", "mid", "low")
# Which SigLIP layers feed which level (ComfyUI's USOStyleReference): all_hidden_states indices.
LOW_LAYER, MID_LAYER = -20, -11


@dataclass(frozen=True)
class UsoProjectorConfig:
    """The projector's widths: SigLIP tokens in, style tokens out (per level), SigLIP width,
    Flux hidden width (ComfyUI's `SigLIPMultiFeatProjModel` with its layer norms on)."""

    siglip_tokens: int = 729
    style_tokens: int = 64
    siglip_width: int = 1152
    hidden_size: int = 3072

    @classmethod
    def detect_from_weights(cls, tensors: Mapping[str, Any], prefix: str = USO_PREFIX) -> "UsoProjectorConfig":
        """Widths from `{level}_embedding_linear.0.weight` `[S, T]` and `{level}_projection.weight`
        `[D, W]`, equal over the three levels, and the layer norms `[W]`.
        Raises `ModelPatchError` naming the key when the weights are incomplete or disagree."""
        def shape(name: str) -> tuple[int, ...]:
            info = tensors.get(prefix + name)
            if info is None:
                raise ModelPatchError(f"USO projector: no {prefix}{name}")
            return tuple(info.shape)

        found = set()
        for level in LEVELS:
            style, tokens = _matrix(shape, f"{level}_embedding_linear.0.weight")
            hidden, width = _matrix(shape, f"{level}_projection.weight")
            found.add((tokens, style, width, hidden))
            norm = shape(f"{level}_layer_norm.weight")
            if norm != (width,):
                raise ModelPatchError(f"USO projector: {prefix}{level}_layer_norm.weight is {list(norm)}, "
                                      f"the projection takes {width}")
        if len(found) != 1:
            raise ModelPatchError(f"USO projector: the three levels' widths differ ({sorted(found)})")
        tokens, style, width, hidden = found.pop()
        return cls(siglip_tokens=tokens, style_tokens=style, siglip_width=width, hidden_size=hidden)


def _matrix(shape: Any, name: str) -> tuple[int, int]:
    dims = shape(name)
    if len(dims) != 2:
        raise ModelPatchError(f"USO projector: {name} is {list(dims)}, not a matrix")
    return dims[0], dims[1]


class UsoStyleProjector(nn.Module):
    """The three-level projector (module docstring); state-dict names are ComfyUI's, without
    the file's `feature_embedder.` prefix."""

    def __init__(self, config: UsoProjectorConfig) -> None:
        super().__init__()
        self.config = config
        for level in LEVELS:
            setattr(self, f"{level}_embedding_linear",
                    nn.Sequential(nn.Linear(config.siglip_tokens, config.style_tokens), nn.SiLU()))
            setattr(self, f"{level}_layer_norm", nn.LayerNorm(config.siglip_width))
            setattr(self, f"{level}_projection", nn.Linear(config.siglip_width, config.hidden_size, bias=True))

    def _level(self, level: str, hidden: torch.Tensor) -> torch.Tensor:
        """`[B, T, W]` -> `[B, S, D]` for one level."""
        tokens = getattr(self, f"{level}_embedding_linear")(hidden.transpose(1, 2)).transpose(1, 2)  # [B, S, W]
        return getattr(self, f"{level}_projection")(getattr(self, f"{level}_layer_norm")(tokens))

    def forward(self, siglip_layers: torch.Tensor) -> torch.Tensor:
        """`siglip_layers` `[3, B, T, W]` (low, mid, high = penultimate) -> `[B, 3S, D]` (high, mid, low),
        computed in the weights' dtype."""
        config = self.config
        if siglip_layers.ndim != 4 or siglip_layers.shape[0] != 3:
            raise ModelPatchError(f"USO projector: expects [3, B, tokens, width] SigLIP states, got "
                                  f"{list(siglip_layers.shape)}")
        if tuple(siglip_layers.shape[2:]) != (config.siglip_tokens, config.siglip_width):
            raise ModelPatchError(
                f"USO projector: expects {config.siglip_tokens} SigLIP tokens of width {config.siglip_width}, got "
                f"{siglip_layers.shape[2]} of width {siglip_layers.shape[3]} (another CLIP vision model?)")
        dtype = self.high_projection.weight.dtype
        x = siglip_layers.to(dtype)
        return torch.cat([self._level("high", x[2]), self._level("mid", x[1]), self._level("low", x[0])], dim=1)


def uso_style_layers(clip_vision_output: Any) -> torch.Tensor:
    """The SigLIP states USO reads, stacked `[3, B, T, W]`: `all_hidden_states[:, -20]`,
    `all_hidden_states[:, -11]` and `penultimate_hidden_states` (ComfyUI's USOStyleReference).
    Raises `ModelPatchError` for an output without every layer's states (a CLIP, not SigLIP,
    encoder) or with fewer than 20 layers."""
    states = getattr(clip_vision_output, "all_hidden_states", None)
    penultimate = getattr(clip_vision_output, "penultimate_hidden_states", None)
    if not isinstance(states, torch.Tensor) or states.ndim != 4 or not isinstance(penultimate, torch.Tensor):
        raise ModelPatchError("USO style reference: the CLIP vision output has no all_hidden_states "
                              "[B, layers, tokens, width] (USO needs a SigLIP vision model)")
    if states.shape[1] < -LOW_LAYER:
        raise ModelPatchError(f"USO style reference: the SigLIP model has {states.shape[1]} layers; USO reads layer "
                              f"{LOW_LAYER} so needs at least {-LOW_LAYER}")
    return torch.stack((states[:, LOW_LAYER], states[:, MID_LAYER], penultimate))


class UsoStyleProjectorPatch:
    """Flux `post_input` patch: style tokens from `model_patch` (a patcher over a
    `UsoStyleProjector`) prepended to `txt`, zero position ids prepended to `txt_ids`.

    The tokens depend only on the image and the weights, so they are computed once per device
    and dtype and kept (ComfyUI recomputes them at every call, with the same result). One
    reference image serves a larger batch (cond and uncond batched together) by repetition, where
    ComfyUI's concatenation fails; any other batch mismatch is an error."""

    def __init__(self, model_patch: Any, encoded_image: torch.Tensor) -> None:
        self.model_patch = model_patch
        self.encoded_image = encoded_image  # [3, B, T, W]
        self._tokens: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}

    def __deepcopy__(self, memo: dict) -> "UsoStyleProjectorPatch":
        return self  # a clone of the MODEL shares it (deep-copying would copy the projector's weights)

    def style_tokens(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        key = (torch.device(device), dtype)
        if key not in self._tokens:
            with torch.no_grad(), self.model_patch.applied(device) as projector:
                self._tokens[key] = projector(self.encoded_image.to(device=device, dtype=dtype)).to(dtype)
        return self._tokens[key]

    def __call__(self, kwargs: dict) -> dict:
        txt, txt_ids = kwargs["txt"], kwargs["txt_ids"]
        tokens = self.style_tokens(txt.device, txt.dtype)  # [B', 3S, D]
        if tokens.shape[-1] != txt.shape[-1]:
            raise ModelPatchError(f"USO style reference: the projector gives tokens of width {tokens.shape[-1]}, "
                                  f"the model's text stream is {txt.shape[-1]} wide (not the Flux model it was made for)")
        if tokens.shape[0] != txt.shape[0]:
            if txt.shape[0] % tokens.shape[0]:
                raise ModelPatchError(f"USO style reference: {tokens.shape[0]} reference images for a batch of "
                                      f"{txt.shape[0]}")
            tokens = tokens.repeat(txt.shape[0] // tokens.shape[0], 1, 1)
        zeros = torch.zeros(tokens.shape[0], tokens.shape[1], 3, dtype=txt_ids.dtype, device=txt_ids.device)
        return {**kwargs, "txt": torch.cat([tokens, txt], dim=1), "txt_ids": torch.cat([zeros, txt_ids], dim=1)}

    def to(self, device_or_dtype: Any) -> "UsoStyleProjectorPatch":
        """ComfyUI's `model_patches_to`: the image states follow a device move."""
        if isinstance(device_or_dtype, torch.device):
            self.encoded_image = self.encoded_image.to(device_or_dtype)
        return self

    def models(self) -> list[Any]:
        """The patcher to load beside the model (ComfyUI's `model_patches_models`)."""
        return [self.model_patch]


__all__ = ["USO_MARKER", "USO_PREFIX", "UsoProjectorConfig", "UsoStyleProjector", "UsoStyleProjectorPatch",
           "uso_style_layers"]
