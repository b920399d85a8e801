"""Layers that answer ComfyUI's per-layer weight contract (comfy/ops.py's `CastWeightBiasOp`).

ComfyUI builds every model from its `comfy.ops` layer classes, and packs rely on what those
layers carry:

- `comfy_cast_weights`: cast weight and bias to the input's dtype and device on each call (memory
  managers set it on every layer that has it; fp8 storage sets it on the class);
- `weight_function` / `bias_function`: callables each weight / bias passes through on each call,
  in order, applied to a copy (ComfyUI's low-VRAM LoRA and the packs that patch weights that way,
  as ComfyUI-MultiGPU's DisTorch; jankhidiffusion's RAUNet copies all three from a model's
  downsampling convolution onto its own);
- `forward_comfy_cast_weights(input)`: the call with cast and hooked weights.

Our models are built from these classes (`unet_blocks.TorchOperations`), so the model's own layers
answer that contract. A layer with no hook set runs exactly as torch's (one attribute test per
call). Each layer gets its own hook lists when it is built (ComfyUI's are class-level `[]` that
its patcher replaces per layer at load, so packs append to a layer's own list there too).
Parameter initialisation stays torch's.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn


def _cast(tensor: torch.Tensor | None, like: torch.Tensor, copy: bool) -> torch.Tensor | None:
    if tensor is None:
        return None
    return tensor.to(device=like.device, dtype=like.dtype, copy=copy)


def cast_weight_bias(layer: nn.Module, x: torch.Tensor,
                     weight: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layer's weight and bias in `x`'s dtype and on its device, each passed through the
    layer's hooks in order (on a copy when there are hooks, so a hook never changes the stored
    tensor). `weight`: the true weight to start from where the stored one is not it (a scaled
    or quantised layer)."""
    weight_hooks: list[Callable] = layer.weight_function
    bias_hooks: list[Callable] = layer.bias_function
    stored = layer.weight if weight is None else weight
    out_weight = _cast(stored, x, copy=bool(weight_hooks) and stored is layer.weight)
    for hook in weight_hooks:
        out_weight = hook(out_weight)
    out_bias = _cast(layer.bias, x, copy=bool(bias_hooks))
    for hook in bias_hooks:
        out_bias = hook(out_bias)
    return out_weight, out_bias


def own_hook_lists(layer: nn.Module) -> None:
    """Give a layer built as a plain torch layer its own hook lists, before its class becomes one
    of ours (a layer made by `__class__` assignment was never built by our `__init__`)."""
    layer.__dict__.setdefault("weight_function", [])
    layer.__dict__.setdefault("bias_function", [])


class WeightHooks:
    """The mix-in (placed before the torch class in a layer's bases): ComfyUI's flags and hook
    lists, and a `forward` that takes `forward_comfy_cast_weights` when the layer asks for it."""

    comfy_cast_weights = False
    weight_function: list = []  # class-level defaults, ComfyUI's; each built layer has its own
    bias_function: list = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.weight_function = []
        self.bias_function = []

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        # ComfyUI's test in its layers' forward: inline, this runs for every layer of every step
        if self.comfy_cast_weights or self.weight_function or self.bias_function:
            return self.forward_comfy_cast_weights(*args, **kwargs)
        return super().forward(*args, **kwargs)  # type: ignore[misc]

    def forward_comfy_cast_weights(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        weight, bias = cast_weight_bias(self, x)  # type: ignore[arg-type]
        return self.forward_with(x, weight, bias, *args, **kwargs)

    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     *args: Any, **kwargs: Any) -> torch.Tensor:
        """The layer's call with the given weight and bias (each layer class says how)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how it runs with other weights")


class Linear(WeightHooks, nn.Linear):
    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, weight, bias)


class _Convolution(WeightHooks):
    """torch's convolutions all run through `_conv_forward(input, weight, bias)`."""

    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self._conv_forward(x, weight, bias)  # type: ignore[attr-defined]


class Conv1d(_Convolution, nn.Conv1d):
    pass


class Conv2d(_Convolution, nn.Conv2d):
    pass


class Conv3d(_Convolution, nn.Conv3d):
    pass


class _TransposedConvolution(WeightHooks):
    """torch's transposed convolutions: the output padding for `output_size`, then the functional
    call of their rank (`_spatial_dims`, `_functional`)."""

    _spatial_dims: int
    _functional: Callable[..., torch.Tensor]

    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     output_size: list[int] | None = None) -> torch.Tensor:
        padding = self._output_padding(x, output_size, self.stride, self.padding,  # type: ignore[attr-defined]
                                       self.kernel_size, self._spatial_dims, self.dilation)  # type: ignore[attr-defined]
        return self._functional(x, weight, bias, self.stride, self.padding, padding,  # type: ignore[attr-defined]
                                self.groups, self.dilation)  # type: ignore[attr-defined]


class ConvTranspose1d(_TransposedConvolution, nn.ConvTranspose1d):
    _spatial_dims, _functional = 1, staticmethod(F.conv_transpose1d)


class ConvTranspose2d(_TransposedConvolution, nn.ConvTranspose2d):
    _spatial_dims, _functional = 2, staticmethod(F.conv_transpose2d)


class GroupNorm(WeightHooks, nn.GroupNorm):
    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.group_norm(x, self.num_groups, weight, bias, self.eps)


class LayerNorm(WeightHooks, nn.LayerNorm):
    def forward_comfy_cast_weights(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight is None:  # no affine parameters: nothing to cast or hook
            return F.layer_norm(x, self.normalized_shape, None, None, self.eps)
        return super().forward_comfy_cast_weights(x)

    def forward_with(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


class Embedding(WeightHooks, nn.Embedding):
    """Indices are not cast: the weight stays in its own dtype unless `comfy_cast_weights`."""

    def forward_comfy_cast_weights(self, ids: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(device=ids.device, copy=bool(self.weight_function))
        for hook in self.weight_function:
            weight = hook(weight)
        return self.forward_with(ids, weight, None)

    def forward_with(self, ids: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.embedding(ids, weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                           self.sparse)
