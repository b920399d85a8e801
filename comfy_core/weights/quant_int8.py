"""int8 weights: ComfyUI's `int8_tensorwise` format, plain or with the "ConvRot" rotation.

After comfy-kitchen's `TensorWiseINT8Layout` (comfy_kitchen/tensor/int8.py, eager backend in
comfy_kitchen/backends/eager/quantization.py), as ComfyUI's comfy/ops.py loads it: a layer's
`weight` is int8 `[out, in]` and `weight_scale` float32, one value for the tensor (tensor-wise)
or one per output row (`[out, 1]`, or `[out]` as some converters write it); the true weight is
`q * scale`.

ConvRot (ComfyUI 0.27, the `*_int8_convrot` releases; `comfy_quant` `{"format":
"int8_tensorwise", "convrot": true, "convrot_groupsize": G}`): before row-wise quantisation the
weight's input dimension is rotated group by group, `W_rot = W @ H^T` on each run of G inputs,
where H is the normalised *regular* Hadamard matrix of order G (a power of 4): the Kronecker
power of `h4 = [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]]`, divided by sqrt(G). An orthogonal
rotation spreads outliers over the group, so an int8 row scale loses less. H is symmetric and
orthogonal, so H @ H = I: the true weight is `W_rot @ H` (the same rotation again), and a linear
layer can rotate its input instead, `x @ W^T = (x @ H) @ W_rot^T` per group (what comfy-kitchen's
`int8_linear` does before its int8 product).

The rotation is one matrix product per group with H built once per (order, dtype, device): on
a CPU that BLAS product beats log4(G) passes of the 4x4 factor (measured in bench/quant_formats.py's
terms: 3 ms against 20 ms for 4096 rows of 64).
"""
from __future__ import annotations

import functools
import math

import torch

INT8_MAX = 127.0
DEFAULT_GROUP = 256  # comfy-kitchen's convrot_groupsize default

# The 4x4 regular Hadamard matrix (every row sums to 2): ConvRot's building block.
_H4 = ((1.0, 1.0, 1.0, -1.0), (1.0, 1.0, -1.0, 1.0), (1.0, -1.0, 1.0, 1.0), (-1.0, 1.0, 1.0, 1.0))


class ConvRotError(ValueError):
    """A ConvRot group size that is not a power of 4, or that does not divide the input width."""


def check_group(group: int, width: int | None = None) -> int:
    """`group` if it is a power of 4 (>= 4) dividing `width`, else `ConvRotError`."""
    group = int(group)
    if group < 4 or 4 ** round(math.log(group, 4)) != group:
        raise ConvRotError(f"ConvRot group size must be a power of 4 (4, 16, 64, 256, ...), got {group}")
    if width is not None and width % group:
        raise ConvRotError(f"ConvRot group size {group} does not divide the input width {width}")
    return group


def hadamard(group: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The normalised regular Hadamard matrix of order `group` (a power of 4): `[group, group]`."""
    check_group(group)
    h4 = torch.tensor(_H4, dtype=torch.float64)
    h = h4
    while h.shape[0] < group:
        h = torch.kron(h, h4)
    return (h / math.sqrt(group)).to(dtype)


@functools.lru_cache(maxsize=32)
def _hadamard_on(group: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return hadamard(group, dtype).to(device)


def rotate(x: torch.Tensor, group: int) -> torch.Tensor:
    """`x @ H` on every run of `group` values of the last dimension (H = `hadamard(group)`), as a
    new tensor in `x`'s dtype. H is symmetric and H @ H = I, so `rotate(rotate(x)) == x` up to
    rounding: the same call rotates a weight into ConvRot storage and back."""
    check_group(group, x.shape[-1])
    h = _hadamard_on(group, x.dtype, str(x.device))
    return (x.reshape(-1, group) @ h).reshape(x.shape)  # [rows * groups, group] @ [group, group]


def row_scale(scale: torch.Tensor, rows: int) -> torch.Tensor:
    """A stored int8 scale as float32, broadcastable over `[rows, in]`: `[]` (tensor-wise) or
    `[rows, 1]` (row-wise, stored `[rows, 1]` or `[rows]`)."""
    scale = scale.detach().to(torch.float32)
    if scale.numel() == 1:
        return scale.reshape(())
    if scale.numel() == rows:
        return scale.reshape(rows, 1)
    raise ValueError(f"int8 weight scale of shape {list(scale.shape)} is neither one value nor one per row "
                     f"({rows} rows)")


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, group: int | None = None) -> torch.Tensor:
    """The float32 weight `[out, in]` of int8 `q` with its scale; `group`: ConvRot's group size
    (the stored rows are rotated; rotated back here), None for plain int8."""
    w = q.to(torch.float32) * row_scale(scale, q.shape[0]).to(q.device)
    return rotate(w, group) if group else w


def quantize_int8(w: torch.Tensor, *, per_row: bool, group: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`(q int8 [out, in], scale float32)` as comfy-kitchen quantises a weight (round to nearest,
    clamp to [-128, 127]); `per_row`: one scale per output row (`[out, 1]`), else one for the
    tensor (`[]`); `group`: ConvRot (rotate first; ConvRot is always per row)."""
    w = w.detach().to(torch.float32)
    if group:
        w = rotate(w, group)
        per_row = True
    amax = w.abs().amax(dim=-1, keepdim=True) if per_row else w.abs().amax()
    scale = (amax / INT8_MAX).clamp(min=1e-30)
    q = (w / scale).round().clamp(-128.0, 127.0).to(torch.int8)
    return q, scale.to(torch.float32)


def int8_linear(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None,
                group: int | None = None) -> torch.Tensor:
    """comfy-kitchen's `int8_linear` (W8A8): the input (rotated first for ConvRot) quantised per row
    to int8, an int32 product (`torch._int_mm`), rescaled by the row and weight scales, the bias
    added; the result in the input's dtype. Less exact than a dequantised weight (the activations
    are rounded too); the CPU computes it where torch's int8 matrix product runs."""
    dtype = x.dtype
    rows = x.reshape(-1, x.shape[-1]).to(torch.float32)
    if group:
        rows = rotate(rows, group)
    a_scale = (rows.abs().amax(dim=-1, keepdim=True) / INT8_MAX).clamp(min=1e-30)  # [m, 1]
    a = (rows / a_scale).round().clamp(-128.0, 127.0).to(torch.int8)
    acc = torch._int_mm(a, q.t().contiguous())  # [m, out] int32
    w_scale = row_scale(scale, q.shape[0]).to(x.device).reshape(1, -1) if scale.numel() > 1 else \
        row_scale(scale, q.shape[0]).to(x.device)
    out = acc.to(torch.float32) * (a_scale * w_scale)
    if bias is not None:
        out = out + bias.to(torch.float32)
    return out.to(dtype).reshape(*x.shape[:-1], q.shape[0])
