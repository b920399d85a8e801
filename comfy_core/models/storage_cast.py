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

ComfyUI's "scaled fp8" files (its `scaled_fp8_ops`) are kept the same way: `keep_scaled_fp8`
gives every linear layer its fp8 weight as stored (a view of the file mapping) plus a float32
`scale_weight`, and the per-call cast applies the scale (`ScaledFp8Linear`), so a 14 B model takes
its fp8 size in memory (UNETLoader, the single-file checkpoint loader and the T5 loaders).
"""
from __future__ import annotations

import logging
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models import layers
from comfy_core.weights.stochastic_rounding import stochastic_rounding

log = logging.getLogger(__name__)

FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
FP8_E4M3_MAX = 448.0  # the largest finite float8_e4m3fn value


def _cast(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    if tensor is None:
        return None
    return tensor.to(device=like.device, dtype=like.dtype)


class CastLinear(layers.Linear):
    """A linear layer whose weight and bias are cast to the input's dtype for each call (ComfyUI's
    `manual_cast`: `comfy_cast_weights` set; its weight hooks apply too, comfy_core/models/layers.py)."""

    comfy_cast_weights = True


class CastConv1d(layers.Conv1d):
    """Audio encoders inside diffusion models (Wan 2.2 S2V's causal audio encoder)."""

    comfy_cast_weights = True


class CastConv2d(layers.Conv2d):
    comfy_cast_weights = True


class CastConv3d(layers.Conv3d):
    """Video DiTs' patch embedding (Wan's 1x2x2 `patch_embedding`)."""

    comfy_cast_weights = True


class CastGroupNorm(layers.GroupNorm):
    comfy_cast_weights = True


class CastLayerNorm(layers.LayerNorm):
    comfy_cast_weights = True


def fp8_compute_supported(device: torch.device | str) -> bool:
    """ComfyUI's `supports_fp8_compute`: an NVIDIA GPU of capability 8.9 (Ada) or newer."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    major, minor = torch.cuda.get_device_capability(device)
    return major >= 9 or (major == 8 and minor >= 9)


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               scale_weight: torch.Tensor | None = None,
               scale_input: torch.Tensor | None = None) -> torch.Tensor | None:
    """An fp8 matrix product for a float8_e4m3fn weight, or None where it does not apply.

    ComfyUI's `fp8_linear`: inputs of rank 2 or 3 only; the input is clamped to the e4m3 range
    (or, given a `scale_input`, divided by it without clamping), cast to fp8 and multiplied by the
    transposed weight with the scales (unit scales where none is given), the result in the
    input's dtype (the bias added there, in that dtype).
    """
    if weight.dtype != torch.float8_e4m3fn or x.dim() not in (2, 3) or not fp8_compute_supported(x.device):
        return None
    one = torch.ones((), device=x.device, dtype=torch.float32)
    scale_b = one if scale_weight is None else scale_weight.to(device=x.device, dtype=torch.float32)
    if scale_input is None:
        scale_a = one
        rows = x.reshape(-1, x.shape[-1]).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    else:
        scale_a = scale_input.to(device=x.device, dtype=torch.float32)
        rows = (x * (1.0 / scale_a).to(x.dtype)).reshape(-1, x.shape[-1])
    rows = rows.to(torch.float8_e4m3fn).contiguous()
    out = torch._scaled_mm(rows, weight.t(), out_dtype=x.dtype, scale_a=scale_a, scale_b=scale_b,
                           bias=None if bias is None else bias.to(x.dtype))
    if isinstance(out, tuple):  # older torch returned (out, amax)
        out = out[0]
    return out.reshape(*x.shape[:-1], weight.shape[0])


class Fp8Linear(CastLinear):
    """`CastLinear` that multiplies in fp8 where the device can (see `fp8_linear`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training and not self.weight_function and not self.bias_function:
            try:
                out = fp8_linear(x, self.weight, self.bias)
            except RuntimeError as exc:  # shapes _scaled_mm refuses (not multiples of 16): cast instead
                log.debug("fp8 matrix product not used for %s: %s", tuple(self.weight.shape), exc)
                out = None
            if out is not None:
                return out
        return super().forward(x)


_CAST_CLASSES: dict[type, type] = {nn.Linear: CastLinear, nn.Conv1d: CastConv1d, nn.Conv2d: CastConv2d,
                                   nn.Conv3d: CastConv3d, nn.GroupNorm: CastGroupNorm, nn.LayerNorm: CastLayerNorm,
                                   layers.Linear: CastLinear, layers.Conv1d: CastConv1d,
                                   layers.Conv2d: CastConv2d, layers.Conv3d: CastConv3d,
                                   layers.GroupNorm: CastGroupNorm, layers.LayerNorm: CastLayerNorm}


def cast_weights_at_run_time(module: nn.Module, *, fp8_matrix_mult: bool = False) -> int:
    """Make every Linear, Conv1d/2d/3d, GroupNorm and LayerNorm of `module` cast its weights to its
    input's dtype when it runs (linear layers as `Fp8Linear` when `fp8_matrix_mult`); returns how
    many layers changed. Layers of other classes are left as they are."""
    classes = dict(_CAST_CLASSES)
    if fp8_matrix_mult:
        classes[nn.Linear] = classes[layers.Linear] = Fp8Linear
    changed = 0
    for layer in module.modules():
        target = classes.get(type(layer))
        if target is not None:
            layers.own_hook_lists(layer)
            layer.__class__ = target
            changed += 1
    return changed


# ComfyUI's "scaled fp8" files (`sd3.5_large_fp8_scaled`, `wan2.1_*_fp8_scaled`,
# `umt5_xxl_fp8_e4m3fn_scaled`, ...): a `scaled_fp8` marker under the model's prefix and, per
# linear layer, a `scale_weight` by which the stored fp8 weight is multiplied (and a `scale_input`
# for the fp8 matrix product) (comfy/model_detection.py, comfy/ops.py `scaled_fp8_ops`).
SCALED_FP8_MARKER = "scaled_fp8"
SCALE_WEIGHT = "scale_weight"
SCALE_INPUT = "scale_input"


class ScaledFp8Error(ValueError):
    """A scaled-fp8 file whose scales this layer form cannot hold (a scale that is not one value)."""


def is_scaled_fp8(names: object, prefix: str) -> bool:
    return prefix + SCALED_FP8_MARKER in names  # type: ignore[operator]


class ScaledFp8Linear(CastLinear):
    """ComfyUI's `scaled_fp8_ops` Linear: an fp8 weight (and bias) kept as stored, the true weight
    being `weight * scale_weight`; each call casts the weight to the input's dtype and applies the
    scale there, so only this layer's weight exists in the compute dtype meanwhile.

    As ComfyUI, the scale multiplies the weight when the weight is the smaller operand and the
    input otherwise (the same product, the cheaper multiplication). `fp8_matrix_mult` (ComfyUI's
    fp8 optimisations on a GPU that computes in fp8): one `torch._scaled_mm` with the scales.

    `convert_weight` / `set_weight` are ComfyUI's patching protocol (comfy/model_patcher.py
    `get_key_weight`): the patcher works on `convert_weight(stored)` (the true weight) and stores
    its result with `set_weight` (divided by the scale, stochastically rounded back to fp8).
    """

    fp8_matrix_mult = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp8_matrix_mult and not self.training:
            try:
                out = fp8_linear(x, self.weight, self.bias, self.scale_weight, self.scale_input)
            except RuntimeError as exc:  # shapes _scaled_mm refuses: cast instead
                log.debug("scaled fp8 matrix product not used for %s: %s", tuple(self.weight.shape), exc)
                out = None
            if out is not None:
                return out
        if self.weight_function or self.bias_function:  # the hooks see the true weight, as ComfyUI's
            true_weight = _cast(self.weight, x) * self.scale_weight.to(device=x.device, dtype=x.dtype)
            return F.linear(x, *layers.cast_weight_bias(self, x, weight=true_weight))
        weight, bias = _cast(self.weight, x), _cast(self.bias, x)
        scale = self.scale_weight.to(device=x.device, dtype=x.dtype)
        if weight.numel() < x.numel():
            # In place on the cast copy; a weight already in the input's dtype is not ours to change.
            weight = weight * scale if weight.data_ptr() == self.weight.data_ptr() else weight.mul_(scale)
            return F.linear(x, weight, bias)
        return F.linear(x * scale, weight, bias)

    def convert_weight(self, weight: torch.Tensor, inplace: bool = False, **_kwargs: object) -> torch.Tensor:
        """The true weight from a copy of the stored one (ComfyUI's `convert_weight`)."""
        scale = self.scale_weight.to(device=weight.device, dtype=weight.dtype)
        if inplace:
            weight *= scale
            return weight
        return weight * scale

    def set_weight(self, weight: torch.Tensor, inplace_update: bool = False, seed: int = 0,
                   return_weight: bool = False, **_kwargs: object) -> torch.Tensor | None:
        """A true (patched) weight back into the stored form: divided by the scale and rounded to
        the layer's fp8 dtype stochastically, seeded by `seed` (ComfyUI's `set_weight`)."""
        stored = stochastic_rounding(weight / self.scale_weight.to(device=weight.device, dtype=weight.dtype),
                                     self.weight.dtype, seed=seed)
        if return_weight:
            return stored
        if inplace_update:
            self.weight.data.copy_(stored)
        else:
            self.weight = nn.Parameter(stored, requires_grad=False)
        return None


def _scalar_scale(tensor: torch.Tensor, key: str) -> torch.Tensor:
    if tensor.numel() != 1:
        raise ScaledFp8Error(f"scaled fp8: {key!r} has shape {list(tensor.shape)}; ComfyUI's scaled-fp8 layers "
                             f"take one scale per layer")
    return tensor.detach().to(torch.float32).reshape(())


def _file_scale(names: object, read: Callable[[str], torch.Tensor], key: str) -> torch.Tensor:
    """The file's scale `key` as a float32 scalar, 1 where the file has none (ComfyUI's default)."""
    if key not in names:  # type: ignore[operator]
        return torch.ones((), dtype=torch.float32)
    return _scalar_scale(read(key), key)


def scaled_storage_dtype(marker: torch.Tensor | None) -> torch.dtype:
    """The fp8 dtype the linear layers are kept in: the marker's own dtype (ComfyUI's
    `model_config.scaled_fp8`), float8_e4m3fn for a float32 marker or none."""
    if marker is None or marker.dtype not in FP8_DTYPES:
        return torch.float8_e4m3fn
    return marker.dtype


def marker_optimizations(marker: torch.Tensor | None) -> bool:
    """ComfyUI's `optimizations["fp8"]` from a scaled-fp8 marker: on unless it has two elements."""
    return marker is None or marker.numel() != 2


def keep_scaled_fp8(module: nn.Module, names: object, read: Callable[[str], torch.Tensor], prefix: str, *,
                    fp8_matrix_mult: bool | None = False, other_dtype: torch.dtype | None = None) -> int:
    """Give `module` ComfyUI's scaled-fp8 layers in place: every `nn.Linear` becomes a
    `ScaledFp8Linear` whose weight and bias are held in the marker's fp8 dtype (tensors already in
    it are kept as they are: views of the file mapping stay views) with a float32 `scale_weight`
    buffer (the file's `<layer>.scale_weight`, 1 where the file has none). The module gets
    ComfyUI's empty `scaled_fp8` marker buffer, so its state dict is what ComfyUI saves.

    `names`: the file's tensor names (`prefix + module name`), `read(name)` a tensor by name.
    `fp8_matrix_mult`: ComfyUI's fp8 optimisations: each layer also holds a `scale_input` (the
    file's, else 1) and multiplies in fp8 where the device can (a GPU of capability 8.9+).
    False for text encoders (ComfyUI builds theirs without); None: as the marker says (ComfyUI's
    diffusion models: on, unless the marker has two elements). `other_dtype`: the dtype of the
    module's other floating tensors (ComfyUI's unet_dtype for the layers `scaled_fp8_ops` leaves to
    `manual_cast`), re-read from the file where it has them at the same shape; None leaves them.
    Returns how many layers the file scales.
    """
    marker_key = prefix + SCALED_FP8_MARKER
    marker = read(marker_key) if marker_key in names else None  # type: ignore[operator]
    storage = scaled_storage_dtype(marker)
    if fp8_matrix_mult is None:
        fp8_matrix_mult = marker_optimizations(marker)
    input_scales = fp8_matrix_mult
    scaled = 0
    linear_tensors: set[str] = set()
    with torch.no_grad():
        for name, layer in module.named_modules():
            if not isinstance(layer, nn.Linear):
                continue
            base = f"{prefix}{name}." if name else prefix
            linear_tensors.update(f"{name}.{attr}" if name else attr for attr in ("weight", "bias"))
            scale = _file_scale(names, read, base + SCALE_WEIGHT)
            scaled += base + SCALE_WEIGHT in names  # type: ignore[operator]
            for attr in ("weight", "bias"):
                tensor = getattr(layer, attr)
                if tensor is not None and tensor.dtype != storage:
                    setattr(layer, attr, nn.Parameter(tensor.detach().to(storage), requires_grad=False))
            layers.own_hook_lists(layer)
            layer.__class__ = ScaledFp8Linear
            device = layer.weight.device
            layer.register_buffer(SCALE_WEIGHT, scale.to(device))
            if input_scales:
                layer.register_buffer(SCALE_INPUT, _file_scale(names, read, base + SCALE_INPUT).to(device))
            else:
                layer.scale_input = None
            layer.fp8_matrix_mult = fp8_matrix_mult
        if other_dtype is not None:
            _other_tensors_in(module, names, read, prefix, other_dtype, linear_tensors)
    module.register_buffer(SCALED_FP8_MARKER, torch.tensor([], dtype=storage))
    log.info("scaled fp8: %d linear layers kept in %s with their scales (%d scaled by the file)",
             len(linear_tensors) // 2, storage, scaled)
    return scaled


def _other_tensors_in(module: nn.Module, names: object, read: Callable[[str], torch.Tensor], prefix: str,
                      dtype: torch.dtype, skip: set[str]) -> None:
    """The module's floating tensors outside the linear layers, in `dtype`: from the file as
    stored where it has them at this shape (not rounded through fp8 first), else cast."""
    for full, tensor in [*module.named_parameters(), *module.named_buffers()]:
        if full in skip or not tensor.is_floating_point() or tensor.dtype == dtype or tensor.numel() == 0:
            continue
        key = prefix + full
        value = read(key) if key in names else None  # type: ignore[operator]
        if value is None or tuple(value.shape) != tuple(tensor.shape):
            value = tensor.detach()
        value = value.to(device=tensor.device, dtype=dtype)
        owner_name, _, attr = full.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        if attr in owner._parameters:
            owner._parameters[attr] = nn.Parameter(value, requires_grad=False)
        else:
            owner._buffers[attr] = value
