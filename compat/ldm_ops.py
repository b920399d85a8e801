"""ComfyUI's `comfy.ops` layer classes for node packs, written here (behaviour of ComfyUI's
comfy/ops.py): torch layers whose weights can be cast to the input's dtype and device per call
and transformed by `weight_function` / `bias_function` hooks.

- `CastWeightBiasOp`: the mix-in flags (`comfy_cast_weights`, `weight_function`, `bias_function`).
- `disable_weight_init`: `Linear`, `Conv1d/2d/3d`, `GroupNorm`, `LayerNorm`, `ConvTranspose1d/2d`,
  `Embedding`, `RMSNorm`, `conv_nd`; `reset_parameters` does nothing (weights come from a file),
  and `forward` casts only when `comfy_cast_weights` is set or a weight/bias function exists.
- `manual_cast`: the same classes with `comfy_cast_weights = True` (weights stored in one dtype,
  computed in the input's).
- `fp8_ops`, `scaled_fp8_ops(...)`, `pick_operations(...)` as ComfyUI chooses them.

These classes satisfy the `operations` argument of our model constructors
(`comfy_core.models.unet_blocks.TorchOperations` is the default), so a pack's subclass (as
ComfyUI-GGUF's `GGMLOps(comfy.ops.manual_cast)`) builds our UNet's layers.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from compat.device_dtypes import cast_to


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, *args, **kwargs)


def cast_to_input(weight: torch.Tensor, input: torch.Tensor, non_blocking: bool = False, copy: bool = True) -> torch.Tensor:
    """`weight` in `input`'s dtype and on its device (a copy by default)."""
    return cast_to(weight, input.dtype, input.device, non_blocking=non_blocking, copy=copy)


def cast_bias_weight(s: torch.nn.Module, input: torch.Tensor | None = None, dtype: Any = None, device: Any = None,
                     bias_dtype: Any = None, offloadable: bool = False) -> tuple:
    """The layer's `(weight, bias)` cast to `dtype`/`device` (default: the input's), each passed
    through the layer's `weight_function` / `bias_function` hooks in order (copied first, so a
    hook never changes the stored tensor). With `offloadable` a third item, the offload stream
    (None: this engine casts synchronously), as newer ComfyUI returns it."""
    if input is not None:
        dtype = input.dtype if dtype is None else dtype
        bias_dtype = dtype if bias_dtype is None else bias_dtype
        device = input.device if device is None else device
    bias = None
    if getattr(s, "bias", None) is not None:
        functions = getattr(s, "bias_function", [])
        bias = cast_to(s.bias, bias_dtype, device, copy=len(functions) > 0)
        for f in functions:
            bias = f(bias)
    functions = getattr(s, "weight_function", [])
    weight = cast_to(s.weight, dtype, device, copy=len(functions) > 0)
    for f in functions:
        weight = f(weight)
    if offloadable:
        return weight, bias, None
    return weight, bias


def uncast_bias_weight(s: torch.nn.Module, weight: torch.Tensor, bias: torch.Tensor | None, offload_stream: Any) -> None:
    """Release what `cast_bias_weight(..., offloadable=True)` made: nothing to wait for here
    (casts are synchronous), so the tensors are simply dropped by the caller."""
    return None


class CastWeightBiasOp:
    comfy_cast_weights = False
    weight_function: list = []
    bias_function: list = []


def _wants_cast(layer: Any) -> bool:
    return layer.comfy_cast_weights or len(layer.weight_function) > 0 or len(layer.bias_function) > 0


class _CastingLayer(CastWeightBiasOp):
    """What every layer below shares (placed before the torch class in its bases): no parameter
    initialisation (weights come from a file), and a `forward` that takes the casting path
    (`forward_comfy_cast_weights`) when the layer asks for it, else the torch layer's own."""

    def reset_parameters(self) -> None:
        return None

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _wants_cast(self):
            return self.forward_comfy_cast_weights(*args, **kwargs)
        return super().forward(*args, **kwargs)


class _RMSNorm(torch.nn.Module):
    """`x / rms(x) * weight` over the last `normalized_shape` dims (Zhang & Sennrich 2019)."""

    def __init__(self, normalized_shape: Any, eps: float | None = None, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = (torch.nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
                       if elementwise_affine else None)
        self.bias = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class disable_weight_init:  # noqa: N801 - ComfyUI's name
    class Linear(_CastingLayer, torch.nn.Linear):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight, bias = cast_bias_weight(self, input)
            return F.linear(input, weight, bias)

    class Conv1d(_CastingLayer, torch.nn.Conv1d):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight, bias = cast_bias_weight(self, input)
            return self._conv_forward(input, weight, bias)

    class Conv2d(_CastingLayer, torch.nn.Conv2d):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight, bias = cast_bias_weight(self, input)
            return self._conv_forward(input, weight, bias)

    class Conv3d(_CastingLayer, torch.nn.Conv3d):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight, bias = cast_bias_weight(self, input)
            return self._conv_forward(input, weight, bias)

    class GroupNorm(_CastingLayer, torch.nn.GroupNorm):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight, bias = cast_bias_weight(self, input)
            return F.group_norm(input, self.num_groups, weight, bias, self.eps)

    class LayerNorm(_CastingLayer, torch.nn.LayerNorm):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            if self.weight is not None:
                weight, bias = cast_bias_weight(self, input)
            else:
                weight = bias = None
            return F.layer_norm(input, self.normalized_shape, weight, bias, self.eps)

    class RMSNorm(_CastingLayer, _RMSNorm):
        def forward_comfy_cast_weights(self, input: torch.Tensor) -> torch.Tensor:
            weight = cast_bias_weight(self, input)[0] if self.weight is not None else None
            return F.rms_norm(input, self.normalized_shape, weight, self.eps)

    class ConvTranspose2d(_CastingLayer, torch.nn.ConvTranspose2d):
        def forward_comfy_cast_weights(self, input: torch.Tensor, output_size: Any = None) -> torch.Tensor:
            padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                           2, self.dilation)
            weight, bias = cast_bias_weight(self, input)
            return F.conv_transpose2d(input, weight, bias, self.stride, self.padding, padding, self.groups,
                                      self.dilation)

    class ConvTranspose1d(_CastingLayer, torch.nn.ConvTranspose1d):
        def forward_comfy_cast_weights(self, input: torch.Tensor, output_size: Any = None) -> torch.Tensor:
            padding = self._output_padding(input, output_size, self.stride, self.padding, self.kernel_size,
                                           1, self.dilation)
            weight, bias = cast_bias_weight(self, input)
            return F.conv_transpose1d(input, weight, bias, self.stride, self.padding, padding, self.groups,
                                      self.dilation)

    class Embedding(_CastingLayer, torch.nn.Embedding):
        def reset_parameters(self) -> None:
            self.bias = None
            return None

        def forward_comfy_cast_weights(self, input: torch.Tensor, out_dtype: Any = None) -> torch.Tensor:
            output_dtype = out_dtype
            if self.weight.dtype in (torch.float16, torch.bfloat16):
                out_dtype = None  # half-precision tables are looked up as stored, then cast
            weight, _bias = cast_bias_weight(self, device=input.device, dtype=out_dtype)
            return F.embedding(input, weight, self.padding_idx, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.sparse).to(dtype=output_dtype)

        def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
            if _wants_cast(self):
                return self.forward_comfy_cast_weights(*args, **kwargs)
            kwargs.pop("out_dtype", None)  # only the casting path takes it
            return torch.nn.Embedding.forward(self, *args, **kwargs)

    @classmethod
    def conv_nd(cls, dims: int, *args: Any, **kwargs: Any) -> torch.nn.Module:
        if dims == 2:
            return cls.Conv2d(*args, **kwargs)
        if dims == 3:
            return cls.Conv3d(*args, **kwargs)
        raise ValueError(f"unsupported dimensions: {dims}")


def _casting(base: type) -> type:
    return type(base.__name__, (base,), {"comfy_cast_weights": True, "__module__": __name__,
                                         "__qualname__": f"manual_cast.{base.__name__}"})


class manual_cast(disable_weight_init):  # noqa: N801 - ComfyUI's name
    Linear = _casting(disable_weight_init.Linear)
    Conv1d = _casting(disable_weight_init.Conv1d)
    Conv2d = _casting(disable_weight_init.Conv2d)
    Conv3d = _casting(disable_weight_init.Conv3d)
    GroupNorm = _casting(disable_weight_init.GroupNorm)
    LayerNorm = _casting(disable_weight_init.LayerNorm)
    ConvTranspose2d = _casting(disable_weight_init.ConvTranspose2d)
    ConvTranspose1d = _casting(disable_weight_init.ConvTranspose1d)
    RMSNorm = _casting(disable_weight_init.RMSNorm)
    Embedding = _casting(disable_weight_init.Embedding)


class fp8_ops(manual_cast):  # noqa: N801 - ComfyUI's name
    """ComfyUI's fast-fp8 matrix path needs `torch._scaled_mm` on an fp8-capable GPU; here fp8
    weights are cast to the input's dtype (manual cast), which is what ComfyUI falls back to."""


class UnsupportedOperations(NotImplementedError):
    """An `comfy.ops` variant this engine does not build."""


# ComfyUI's flag for the optional `cublas_ops` package's half-precision Linear (CUDA only); that
# path is not part of this engine, as in a ComfyUI install without the package.
CUBLAS_IS_AVAILABLE = False

_FP8_DTYPES = tuple(getattr(torch, name) for name in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, name))


def fp8_linear(self: Any, input: torch.Tensor) -> torch.Tensor | None:  # noqa: A002 - ComfyUI's names
    """ComfyUI's fast fp8 matrix multiply of a Linear layer: None (the caller casts the weight
    instead) when the layer's weights are not fp8; fp8 weights need `torch._scaled_mm` on a CUDA GPU
    with fp8 support, which this engine does not use (its fp8 layers cast, `fp8_ops`), so those
    raise UnsupportedOperations."""
    if getattr(getattr(self, "weight", None), "dtype", None) not in _FP8_DTYPES:
        return None
    raise UnsupportedOperations("comfy.ops.fp8_linear: the fp8 matrix multiply needs torch._scaled_mm on a CUDA GPU "
                                "with fp8 support; this engine casts fp8 weights to the input's dtype instead")


def scaled_fp8_ops(fp8_matrix_mult: bool = False, scale_input: bool = False, override_dtype: Any = None) -> type:
    raise UnsupportedOperations("comfy.ops.scaled_fp8_ops (scaled fp8 checkpoints with per-tensor scale_weight) "
                                "is not supported by this engine")


def pick_operations(weight_dtype: Any, compute_dtype: Any, load_device: Any = None, disable_fast_fp8: bool = False,
                    fp8_optimizations: bool = False, scaled_fp8: Any = None) -> type:
    """ComfyUI's rule: `disable_weight_init` when weights are stored in the compute dtype (or no
    compute dtype is given), else `manual_cast`; scaled fp8 is not supported here."""
    if scaled_fp8 is not None:
        return scaled_fp8_ops(override_dtype=scaled_fp8)
    if compute_dtype is None or weight_dtype == compute_dtype:
        return disable_weight_init
    return manual_cast
