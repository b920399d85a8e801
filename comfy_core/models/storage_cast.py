"""Weights stored in one dtype, computed in another: fp8 storage for the UNet.

After ComfyUI's `comfy/ops.py` (`manual_cast` and `fp8_ops`), as its UNETLoader uses them for
`weight_dtype` fp8_e4m3fn / fp8_e5m2: every parameter of the diffusion model is stored in fp8
(rounded to nearest from the file, as `Tensor.to` does), and each layer casts its weight and bias
to the dtype of its input as it runs (`cast_bias_weight(self, input)`), so the activations stay in
the compute dtype (float32 on the CPU, float16 on CUDA) and only one layer's weights exist in that
dtype at a time. `fp8_e4m3fn_fast` (ComfyUI's `fp8_optimizations`) additionally runs the linear
layers as fp8 matrix products (`torch._scaled_mm`, unit scales, input clamped to +-448 and cast to
fp8) where the GPU computes in fp8 (CUDA capability 8.9 and up); elsewhere it is plain fp8 storage.

ComfyUI picks these layer classes when it builds the model (its `operations` argument); our UNet
is built with torch's layers, so `cast_weights_at_run_time` gives the built layers the casting
classes afterwards (subclasses with the same parameters and names: state dicts, patchers and
`isinstance` checks see no difference).
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

log = logging.getLogger(__name__)

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value


def _cast(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    if tensor is None:
        return None
    return tensor.to(device=like.device, dtype=like.dtype)


class CastLinear(nn.Linear):
    """`nn.Linear` whose weight and bias are cast to the input's dtype for each call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, _cast(self.weight, x), _cast(self.bias, x))


class CastConv2d(nn.Conv2d):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(x, _cast(self.weight, x), _cast(self.bias, x))


class CastGroupNorm(nn.GroupNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, self.num_groups, _cast(self.weight, x), _cast(self.bias, x), self.eps)


class CastLayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.normalized_shape, _cast(self.weight, x), _cast(self.bias, x), self.eps)


def fp8_compute_supported(device: torch.device | str) -> bool:
    """ComfyUI's `supports_fp8_compute`: an NVIDIA GPU of capability 8.9 (Ada) or newer."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return major >= 9 or (major == 8 and minor >= 9)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """An fp8 matrix product for a float8_e4m3fn weight, or None where it does not apply.

    ComfyUI's `fp8_linear`: inputs of rank 2 or 3 only; the input is clamped to the e4m3 range,
    cast to fp8 and multiplied by the transposed weight with unit scales, the result in the
    input's dtype (the bias added there, in that dtype).
    """
    if weight.dtype != torch.float8_e4m3fn or x.dim() not in (2, 3) or not fp8_compute_supported(x.device):
        return None
    rows = x.reshape(-1, x.shape[-1]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn).contiguous()
    one = torch.ones((), device=x.device, dtype=torch.float32)
    out = torch._scaled_mm(rows, weight.t(), out_dtype=x.dtype, scale_a=one, scale_b=one,
                           bias=None if bias is None else bias.to(x.dtype))
    if isinstance(out, tuple):  # older torch returned (out, amax)
        out = out[0]
    return out.reshape(*x.shape[:-1], weight.shape[0])


class Fp8Linear(CastLinear):
    """`CastLinear` that multiplies in fp8 where the device can (see `fp8_linear`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            try:
                out = fp8_linear(x, self.weight, self.bias)
            except RuntimeError as exc:  # shapes _scaled_mm refuses (not multiples of 16): cast instead
                log.debug("fp8 matrix product not used for %s: %s", tuple(self.weight.shape), exc)
                out = None
            if out is not None:
                return out
        return super().forward(x)


_CAST_CLASSES: dict[type, type] = {nn.Linear: CastLinear, nn.Conv2d: CastConv2d, nn.GroupNorm: CastGroupNorm,
                                   nn.LayerNorm: CastLayerNorm}


def cast_weights_at_run_time(module: nn.Module, *, fp8_matrix_mult: bool = False) -> int:
    """Make every Linear, Conv2d, GroupNorm and LayerNorm of `module` cast its weights to its
    input's dtype when it runs (linear layers as `Fp8Linear` when `fp8_matrix_mult`); returns how
    many layers changed. Layers of other classes are left as they are."""
    classes = dict(_CAST_CLASSES)
    if fp8_matrix_mult:
        classes[nn.Linear] = Fp8Linear
    changed = 0
    for layer in module.modules():
        target = classes.get(type(layer))
        if target is not None:
            layer.__class__ = target
            changed += 1
    return changed


# ComfyUI's "scaled fp8" files (`sd3.5_large_fp8_scaled`, ...): a `scaled_fp8` marker under the
# diffusion model's prefix and, per layer, a `scale_weight` by which the stored fp8 weight is
# multiplied (comfy/model_detection.py, comfy/ops.py `scaled_fp8_ops`).
SCALED_FP8_MARKER = "scaled_fp8"
SCALE_WEIGHT = "scale_weight"
SCALED_STORAGE = torch.bfloat16


def is_scaled_fp8(names: object, prefix: str) -> bool:
    return prefix + SCALED_FP8_MARKER in names  # type: ignore[operator]


def dequantize_scaled_fp8(module: nn.Module, names: object, read: Callable[[str], torch.Tensor], prefix: str,
                          dtype: torch.dtype = SCALED_STORAGE) -> int:
    """Multiply every layer's stored weight by its `scale_weight` (read by name from the file)
    and keep the product in `dtype`: the true weights, so patching, LoRA and the casting layers
    see ordinary tensors. bfloat16 holds them in half the float32 memory (twice the fp8 file's;
    ComfyUI keeps fp8 and multiplies at run time). Returns how many layers were scaled."""
    count = 0
    for name, layer in module.named_modules():
        key = f"{prefix}{name}.{SCALE_WEIGHT}" if name else f"{prefix}{SCALE_WEIGHT}"
        weight = getattr(layer, "weight", None)
        if weight is None or key not in names:  # type: ignore[operator]
            continue
        scale = read(key).float()
        layer.weight = nn.Parameter((weight.float() * scale).to(dtype), requires_grad=False)
        count += 1
    log.info("scaled fp8: %d layers dequantized to %s", count, dtype)
    return count
