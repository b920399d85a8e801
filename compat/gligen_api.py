"""ComfyUI's `comfy.gligen`: the GLIGEN model class packs name (TiledDiffusion imports the module
and replaces `Gligen._set_position` at load).

`Gligen` is comfy_core's `GligenModel` (comfy_core/gligen/model.py) with ComfyUI's constructor
and method parameters, whose grounding patch is built by `_set_position(boxes, masks,
positive_embeddings)` as in ComfyUI, so a pack's replacement of `_set_position` on this class
takes effect for the models built from it. Models our GLIGENLoader loads are comfy_core's class
(the pack's replacement does not reach them; the loader's grounding is ours).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from comfy_core.gligen.model import GatedSelfAttention, GligenModel

__all__ = ["Gligen", "GatedSelfAttention"]


class Gligen(GligenModel):
    """ComfyUI's `Gligen(modules, position_net, key_dim)`: one gated self-attention fuser per
    UNet transformer, and the position net."""

    def __init__(self, modules: Sequence[Any], position_net: Any, key_dim: int) -> None:
        super().__init__(modules, position_net, key_dim)

    def _set_position(self, boxes: torch.Tensor, masks: torch.Tensor,
                      positive_embeddings: torch.Tensor) -> Callable[..., torch.Tensor]:
        """The `middle_patch(x, extra_options)` grounding on these object slots."""
        return GligenModel._patch(self, boxes, masks, positive_embeddings)

    def _patch(self, boxes: torch.Tensor, masks: torch.Tensor, positive: torch.Tensor) -> Callable[..., torch.Tensor]:
        return self._set_position(boxes, masks, positive)  # the class's (or a pack's) _set_position

    def set_position(self, latent_image_shape: Sequence[int], position_params: Sequence[Sequence[Any]],
                     device: Any) -> Callable[..., torch.Tensor]:
        return super().set_position(latent_image_shape, position_params, device)

    def set_empty(self, latent_image_shape: Sequence[int], device: Any) -> Callable[..., torch.Tensor]:
        return super().set_empty(latent_image_shape, device)
