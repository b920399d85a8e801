"""Linear layers that keep a quantised weight as stored and dequantise it as they run.

After ComfyUI's comfy/ops.py `mixed_precision_ops().Linear`: the weight stays in its storage
form (int8, fp8, packed fp4: a view of the file mapping where the loader can give one) with its
scales as buffers under ComfyUI's names (`weight_scale`, `weight_scale_2`, `input_scale`,
`pre_quant_scale`) and the layer's `comfy_quant` description, so the state dict is the one
ComfyUI saves. Each call turns the weight into the input's dtype for that call only (float32
maths, then cast), so only one layer's weight exists in float at a time; ConvRot int8 layers
rotate the input instead of the weight (`x @ W^T = (x @ H) @ W_rot^T`, comfy_core/weights/quant_int8.py).
`int8_matmul` (off by default) runs int8 layers as comfy-kitchen's W8A8 product (the input
rounded to int8 per row, `torch._int_mm`), ComfyUI's path on a GPU with int8 tensor cores, and
int4 `asym_w4a8_int8` layers as its W4A8 product (comfy_core/weights/quant_w4a8.py).

Patching (ComfyUI's `convert_weight` / `set_weight`, comfy_core/patching/weight_access.py): the
patcher's float32 copy of the stored weight is dequantised to the true weight, the patch maths
adds to it, and the result is kept as the layer's weight in the compute dtype, not requantised
(so a LoRA on a quantised layer loses nothing to a second rounding); the layer computes with a
plain weight while it holds one, and the patcher's restore puts the stored form back.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Collection, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from comfy_core.models.layers import Linear as HookedLinear, cast_weight_bias, own_hook_lists
from comfy_core.weights import quant_int8, quant_w4a8
from comfy_core.weights.quant_registry import INPUT_SCALES, QuantFormatError, QuantizedLayer, int8_group

log = logging.getLogger(__name__)


def _cast(tensor: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(device=like.device, dtype=like.dtype)


class QuantizedLinear(HookedLinear):
    """`nn.Linear` holding a quantised weight (see the module docstring). Set up by
    `attach_quantized`; `quant_layer` is the file's description, `compute_dtype` the dtype a
    patched weight is kept in. ComfyUI's weight hooks (comfy_core/models/layers.py) see the true
    (dequantised) weight, as its mixed-precision layers give them."""

    quant_layer: QuantizedLayer
    compute_dtype: torch.dtype = torch.float32
    int8_matmul: bool = False
    _int8: bool = False
    _group: int | None = None

    @property
    def quant_format(self) -> str:  # ComfyUI's attribute name
        return self.quant_layer.format.name

    def holds_quantized(self) -> bool:
        """Whether `weight` is the stored form (not a patched float weight)."""
        weight = self.weight
        return weight.dtype in self.quant_layer.format.storage and tuple(weight.shape) == self._stored_shape

    def _scales(self) -> dict[str, torch.Tensor]:
        fmt = self.quant_layer.format
        optional = {s: getattr(self, s) for s in fmt.optional if getattr(self, s, None) is not None}
        return {**{s: getattr(self, s) for s in fmt.scales}, **optional}

    def dequantize_weight(self, stored: torch.Tensor | None = None) -> torch.Tensor:
        """The float32 `[out, in]` true weight of the stored form (`stored`: another copy of it)."""
        stored = self.weight if stored is None else stored
        fmt = self.quant_layer.format
        return fmt.dequantize(stored, self._scales(), self.quant_layer.conf, (self.out_features, self.in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = getattr(self, "pre_quant_scale", None)
        if pre is not None:  # ModelOpt AWQ-style smoothing, as ComfyUI applies it
            x = x * pre.to(device=x.device, dtype=x.dtype)
        if self.weight_function or self.bias_function:
            true_weight = self.dequantize_weight(self.weight.to(x.device)) if self.holds_quantized() else None
            return F.linear(x, *cast_weight_bias(self, x, weight=true_weight))
        bias = _cast(self.bias, x)
        if not self.holds_quantized():
            return F.linear(x, _cast(self.weight, x), bias)
        if self._int8:
            q, scale, group = self.weight.to(x.device), self.weight_scale, self._group
            if self.int8_matmul and x.dim() >= 2:
                return quant_int8.int8_linear(x, q, scale, self.bias, group)
            if group:
                # Rotate the input, not the weight (the same product): [tokens, in] @ H per group.
                w = quant_int8.dequantize_int8(q, scale)
                return F.linear(quant_int8.rotate(x.to(torch.float32), group).to(x.dtype), w.to(x.dtype), bias)
        if self.quant_layer.format.name == quant_w4a8.FORMAT:
            s, conf, q = self._scales(), self.quant_layer.conf, self.weight.to(x.device)
            parts = (s["weight_s_rel"], s["weight_s_channel"], s.get("weight_codebook"), s.get("weight_correction"))
            if self.int8_matmul and x.dim() >= 2:
                return quant_w4a8.w4a8_linear(x, q, *parts, bias, conf)
            # Rotate the input, not the weight (as for ConvRot int8): [tokens, in] @ H per group.
            w_rot = quant_w4a8.dequantize_rotated(q, *parts, conf, (self.out_features, self.in_features))
            x_rot = quant_int8.rotate(x.to(torch.float32), quant_w4a8.groups_of(conf)[1]).to(x.dtype)
            return F.linear(x_rot, w_rot.to(x.dtype), bias)
        weight = self.dequantize_weight(self.weight.to(x.device))
        return F.linear(x, weight.to(x.dtype), bias)

    def convert_weight(self, weight: torch.Tensor, inplace: bool = False, **_kwargs: Any) -> torch.Tensor:
        """The true weight (float32 `[out, in]`) from a copy of the stored one, as the patcher makes
        it (its values in float32: exact for int8, uint8 and fp8); a weight that is already a true
        weight (another shape, for packed formats) is returned as it is."""
        fmt = self.quant_layer.format
        if tuple(weight.shape) != self._stored_shape:
            return weight
        stored = weight if weight.dtype in fmt.storage else weight.to(fmt.storage[0])
        return self.dequantize_weight(stored.to(self.weight.device)).to(weight.device)

    def set_weight(self, weight: torch.Tensor, inplace_update: bool = False, seed: int = 0,
                   return_weight: bool = False, **_kwargs: Any) -> torch.Tensor | None:
        """A true (patched) weight kept as it is, in the compute dtype (see the module docstring)."""
        kept = weight.detach().to(self.compute_dtype)
        if return_weight:
            return kept
        self.weight = nn.Parameter(kept, requires_grad=False)
        return None

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, quant_format={self.quant_format}"


def detach_quantized_weights(module: nn.Module, layers: Mapping[str, QuantizedLayer], prefix: str) -> None:
    """Before loading a module (built on meta) from a file's other tensors: take the weights of the
    quantised layers out of its state dict (`attach_quantized` gives them back as stored)."""
    for layer in layers.values():
        linear = _linear(module, layer, prefix)
        del linear._parameters["weight"]


def attach_quantized(module: nn.Module, layers: Mapping[str, QuantizedLayer], names: Collection[str],
                     read: Callable[[str], torch.Tensor], prefix: str, compute_dtype: torch.dtype) -> int:
    """Make each quantised layer of `module` a `QuantizedLinear` holding its stored weight and scales.

    `layers`: by the loader's names (`prefix` + module path); `names`: the file's tensor names
    (under the loader's names); `read(name)`: a file tensor as stored
    (a view of the file mapping where possible); `compute_dtype`: the model's dtype (a patched
    weight's). `QuantFormatError` for a layer that is not a linear layer of the built module or
    whose stored shape does not fit it. Returns how many layers were attached."""
    counts: dict[str, int] = {}
    for layer in layers.values():
        linear = _linear(module, layer, prefix)
        fmt = layer.format
        expected = fmt.stored_shape(linear.out_features, linear.in_features, layer.conf)
        weight = read(f"{layer.name}.weight")
        if tuple(weight.shape) != expected:
            raise QuantFormatError(f"quantised layer {layer.name!r} ({fmt.name}): weight stored as "
                                   f"{list(weight.shape)}, a {linear.out_features}x{linear.in_features} "
                                   f"layer stores {list(expected)}")
        group = int8_group(layer.conf) if fmt.name == "int8_tensorwise" else None
        if group:
            try:
                quant_int8.check_group(group, linear.in_features)
            except quant_int8.ConvRotError as exc:
                raise QuantFormatError(f"quantised layer {layer.name!r}: {exc}") from None
        device = linear.bias.device if linear.bias is not None else torch.device("cpu")
        own_hook_lists(linear)
        linear.__class__ = QuantizedLinear
        linear._stored_shape = expected
        linear.quant_layer = layer
        linear._int8, linear._group = fmt.name == "int8_tensorwise", group  # read once, not per call
        linear.compute_dtype = compute_dtype
        linear.weight = nn.Parameter(weight.to(device), requires_grad=False)
        sizes = fmt.scale_sizes(linear.out_features, linear.in_features)
        for name in (*fmt.scales, *fmt.optional, *INPUT_SCALES):
            key = f"{layer.name}.{name}"
            if key not in names:
                continue
            value = read(key)
            if name in sizes and value.numel() not in sizes[name]:
                # Refused now, not at the first step of sampling.
                raise QuantFormatError(f"quantised layer {layer.name!r} ({fmt.name}): {name} has {value.numel()} "
                                       f"values, a {linear.out_features}x{linear.in_features} layer has "
                                       f"{' or '.join(map(str, sizes[name]))}")
            linear.register_buffer(name, value.to(device))
        if fmt.check is not None:  # scale shapes that follow the layer's description
            fmt.check(linear.out_features, linear.in_features, layer.conf,
                      {n: b for n, b in linear.named_buffers(recurse=False)})
        linear.register_buffer("comfy_quant", layer.quant_conf_bytes())
        counts[fmt.name] = counts.get(fmt.name, 0) + 1
    log.info("quantised layers kept as stored: %s", counts)
    return sum(counts.values())


def _linear(module: nn.Module, layer: QuantizedLayer, prefix: str) -> nn.Linear:
    if not layer.name.startswith(prefix):
        raise QuantFormatError(f"quantised layer {layer.name!r} is not under {prefix!r}")
    path = layer.name[len(prefix):]
    try:
        found = module.get_submodule(path)
    except AttributeError:
        raise QuantFormatError(f"quantised layer {layer.name!r}: the detected architecture has no layer "
                               f"{path!r}") from None
    if not isinstance(found, nn.Linear):
        raise QuantFormatError(f"quantised layer {layer.name!r}: {type(found).__name__} is not a linear layer "
                               f"(ComfyUI quantises linear layers only)")
    return found


def true_weight_shapes(module: nn.Module) -> dict[str, tuple[int, int]]:
    """`{state-dict name of a quantised weight: its true [out, in]}` for the `QuantizedLinear`s of
    `module` (a packed weight's stored shape is not the shape a patch must fit; ComfyUI's
    QuantizedTensor reports its original shape)."""
    return {f"{name}.weight" if name else "weight": (layer.out_features, layer.in_features)
            for name, layer in module.named_modules() if isinstance(layer, QuantizedLinear)}
