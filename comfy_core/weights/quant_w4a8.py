"""int4 weights run against int8 activations: ComfyUI's `asym_w4a8_int8` format.

After comfy-kitchen's `AsymW4A8Int8Layout` (comfy_kitchen/tensor/w4a8_int8.py, eager backend
comfy_kitchen/backends/eager/w4a8_int8.py), as ComfyUI's comfy/ops.py (`_load_quantized_module`)
loads it. A layer `[N, K]` stores:

- `weight`: int8 `[N, K / 2]`, two 4-bit codes a byte, the even column in the LOW nibble (the
  opposite of NVFP4's order);
- `weight_s_rel`: the scale of each group of `group_size` inputs relative to its row,
  `[N, K / group_size]`, float8_e4m3fn (stored as F8_E4M3 or as U8 bytes; float32 also accepted);
- `weight_s_channel`: float32 `[N]`, one scale per output row;
- optionally `weight_codebook`: float32 `[16]`, the values of the 16 codes (comfy-kitchen's
  default: a Lloyd-Max table for group-normalised Gaussian weights); without one a code `c` is
  the uniform level `c - 8`;
- optionally `weight_correction`: `[K / group_size, N]`, the asymmetric variant's per-group zero
  point (`8 * group scale + group minimum`), added after the row scale. ComfyUI's loader does not
  read this tensor (its files are the symmetric codebook kind); comfy-kitchen's layout does, and
  so does this module.

The layer description (`comfy_quant` / `_quantization_metadata`) carries `group_size` (default 16)
and `convrot_groupsize` (default 256), at the top level or under `params`. ConvRot is always on:
the stored weight is the true weight rotated by the regular Hadamard matrix on every run of
`convrot_groupsize` inputs (comfy_core/weights/quant_int8.py's `rotate`, an involution).

Decoding is two-stage, as comfy-kitchen's GEMM consumes it: each code's value times its group's
`s_rel` is rounded to the int8 grid (`round`, clamped to +-127), and that int8 weight times
`s_channel` (plus the correction) is the rotated weight; rotating it back gives the true weight.
`w4a8_linear` is comfy-kitchen's eager W4A8 product, ComfyUI's path wherever
`supports_int8_compute` holds (CPUs included in today's comfy/model_management.py): the input
rotated per group, rounded to int8 per row (`amax / 127`), an int32 product with the int8 weight,
rescaled by the row scales; with a correction it is the dequantised weight's product instead.
comfy_core/models/quant_linear.py computes with the dequantised weight by default (its input
rotated instead of the weight: `x @ W^T = rotate(x) @ W_rot^T`), as it does for int8 layers, and
with this product when the layer's `int8_matmul` is set (the product differs from the dequantised
one by the activations' int8 rounding, under 2% on the tests' layers).
"""
from __future__ import annotations

from typing import Any, Mapping

import torch

from comfy_core.weights import quant_int8

FORMAT = "asym_w4a8_int8"
DEFAULT_GROUP = 16  # comfy-kitchen's group_size default
DEFAULT_CONVROT = 256  # comfy-kitchen's convrot_groupsize default (its CUDA kernels' only size)
INT8_GRID = 127.0
# comfy-kitchen's fixed Lloyd-Max table for group-normalised Gaussian weights (what its quantiser
# writes unless a layer's rotated groups are heavy-tailed): the codebook the quantiser here uses.
GAUSSIAN_CODEBOOK = (
    -0.980602, -0.794529, -0.638165, -0.500986, -0.377321, -0.263187, -0.155210, -0.050720,
    0.052541, 0.156985, 0.265284, 0.379533, 0.502636, 0.638953, 0.794876, 0.980671,
)


class W4A8Error(ValueError):
    """A W4A8 layer whose description or tensors do not fit: a group size that is not >= 4 and a
    divisor or multiple of 16, a ConvRot size that is not a power of 4, an input width they do not
    divide, or a scale, codebook or correction of the wrong shape."""


def groups_of(conf: Mapping[str, Any]) -> tuple[int, int]:
    """`(group_size, convrot_groupsize)` from a layer description (top level first, then
    `params`, as ComfyUI reads them), checked (`W4A8Error`)."""
    params = conf.get("params") if isinstance(conf.get("params"), dict) else {}
    try:
        group = int(conf.get("group_size", params.get("group_size", DEFAULT_GROUP)))
        convrot = int(conf.get("convrot_groupsize", params.get("convrot_groupsize", DEFAULT_CONVROT)))
    except (TypeError, ValueError):
        raise W4A8Error(f"{FORMAT}: group_size / convrot_groupsize must be integers, got {dict(conf)}") from None
    if group < 4 or (16 % group and group % 16):
        raise W4A8Error(f"{FORMAT}: group_size must be >= 4 and divide 16 or be a multiple of 16, got {group}")
    try:
        quant_int8.check_group(convrot)
    except quant_int8.ConvRotError as exc:
        raise W4A8Error(f"{FORMAT}: {exc}") from None
    return group, convrot


def check_width(in_features: int, conf: Mapping[str, Any]) -> None:
    """`W4A8Error` unless 16, the group size and the ConvRot size all divide `in_features`."""
    group, convrot = groups_of(conf)
    for name, size in (("16", 16), ("group_size", group), ("convrot_groupsize", convrot)):
        if in_features % size:
            raise W4A8Error(f"{FORMAT}: the input width {in_features} is not a multiple of {name} ({size})")


def scale_shapes(out_features: int, in_features: int, conf: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shape each of a layer's scale tensors must have."""
    group, _ = groups_of(conf)
    return {"weight_s_rel": (out_features, in_features // group), "weight_s_channel": (out_features,),
            "weight_codebook": (16,), "weight_correction": (in_features // group, out_features)}


def check_scales(out_features: int, in_features: int, conf: Mapping[str, Any],
                 scales: Mapping[str, torch.Tensor]) -> None:
    """`W4A8Error` unless the layer's width fits its description and each scale present has its
    shape (`s_channel` may also be stored `[N, 1]`)."""
    check_width(in_features, conf)
    for name, shape in scale_shapes(out_features, in_features, conf).items():
        value = scales.get(name)
        if value is None:
            continue
        fits = tuple(value.shape) == shape or (name == "weight_s_channel" and value.numel() == shape[0])
        if not fits:
            raise W4A8Error(f"{FORMAT}: {name} has shape {list(value.shape)}, a {out_features}x{in_features} "
                            f"layer has {list(shape)}")


def _float(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    t = t.detach()
    if t.dtype == torch.uint8:  # fp8 scales stored as bytes (ComfyUI views U8 as float8_e4m3fn)
        t = t.view(torch.float8_e4m3fn)
    return t.to(device=device, dtype=torch.float32)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """int8 (or uint8) `[N, K / 2]` -> the 4-bit codes `[N, K]` as uint8, the even column from the
    low nibble."""
    b = packed.view(torch.uint8) if packed.dtype == torch.int8 else packed
    codes = torch.empty(b.shape[0], 2 * b.shape[1], dtype=torch.uint8, device=b.device)
    codes[:, 0::2] = b & 0x0F
    codes[:, 1::2] = b >> 4
    return codes


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes `[N, K]` (0..15) -> int8 `[N, K / 2]`, the even column in the low nibble."""
    codes = codes.to(torch.uint8)
    return ((codes[:, 0::2] & 0x0F) | ((codes[:, 1::2] & 0x0F) << 4)).view(torch.int8)


def int8_weight(packed: torch.Tensor, s_rel: torch.Tensor, codebook: torch.Tensor | None,
                group: int) -> torch.Tensor:
    """The int8 grid weight `[N, K]` of the codes: each code's value (its codebook entry, or
    `code - 8`) times its group's relative scale, rounded and clamped to +-127. Computed as a
    table of the 16 grid levels of each group (`[N, K / group, 16]`), then one gather by code."""
    codes = unpack_codes(packed)
    n, k = codes.shape
    book = (_float(codebook, packed.device).reshape(16) if codebook is not None
            else torch.arange(16, dtype=torch.float32, device=packed.device) - 8.0)
    rel = _float(s_rel, packed.device).reshape(n, k // group, 1)
    levels = (book.reshape(1, 1, 16) * rel).round().clamp(-INT8_GRID, INT8_GRID).to(torch.int8)  # [N, G, 16]
    index = codes.long() + (torch.arange(k, device=packed.device) // group * 16).reshape(1, k)  # into [N, G * 16]
    return levels.reshape(n, -1).gather(1, index)


def dequantize_rotated(packed: torch.Tensor, s_rel: torch.Tensor, s_channel: torch.Tensor,
                       codebook: torch.Tensor | None, correction: torch.Tensor | None,
                       conf: Mapping[str, Any], shape: tuple[int, int]) -> torch.Tensor:
    """The float32 rotated weight `W_rot` `[N, K]` (the true weight is `rotate(W_rot)`, and
    `x @ W^T = rotate(x) @ W_rot^T`: a layer may rotate its input instead)."""
    n, k = shape
    if tuple(packed.shape) != (n, k // 2) or k % 2:
        raise W4A8Error(f"{FORMAT}: weight of shape {list(packed.shape)} is not the [N, K / 2] storage of "
                        f"{list(shape)}")
    check_scales(n, k, conf, {"weight_s_rel": s_rel, "weight_s_channel": s_channel,
                              **({"weight_codebook": codebook} if codebook is not None else {}),
                              **({"weight_correction": correction} if correction is not None else {})})
    group, _ = groups_of(conf)
    grid = int8_weight(packed, s_rel, codebook, group).to(torch.float32)
    rotated = grid * _float(s_channel, packed.device).reshape(n, 1)
    if correction is not None:  # [K / group, N] zero points, one per group of a row
        shift = _float(correction, packed.device).t().reshape(n, k // group, 1)
        rotated = (rotated.reshape(n, k // group, group) + shift).reshape(n, k)
    return rotated


def dequantize_w4a8(packed: torch.Tensor, s_rel: torch.Tensor, s_channel: torch.Tensor,
                    codebook: torch.Tensor | None, correction: torch.Tensor | None,
                    conf: Mapping[str, Any], shape: tuple[int, int]) -> torch.Tensor:
    """The float32 true weight `shape` (`[N, K]`) of a stored W4A8 layer."""
    rotated = dequantize_rotated(packed, s_rel, s_channel, codebook, correction, conf, shape)
    return quant_int8.rotate(rotated, groups_of(conf)[1])


def quantize_w4a8(w: torch.Tensor, conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A float weight `[N, K]` -> `{weight, weight_s_rel, weight_s_channel, weight_codebook}` in
    comfy-kitchen's default (symmetric, codebook) layout, without its refinements (no per-tensor
    codebook fit, no least-squares group scales): rotate, normalise each group by its absmax,
    row scale `max |codebook level * group scale| / 127`, `s_rel` rounded to fp8, and each weight
    given the code whose int8 grid level is nearest. For tests and benchmarks."""
    w = w.detach().to(torch.float32)
    n, k = w.shape
    check_width(k, conf)
    group, convrot = groups_of(conf)
    grouped = quant_int8.rotate(w, convrot).reshape(n, k // group, group)
    book = torch.tensor(GAUSSIAN_CODEBOOK, dtype=torch.float32)
    group_scale = grouped.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8)  # [N, G, 1]
    top = (book.abs().max() * group_scale).amax(dim=(1, 2))  # the largest level a row reaches
    s_channel = (top / INT8_GRID).clamp(min=1e-8)  # [N]
    s_rel = (group_scale.squeeze(-1) / s_channel[:, None]).to(torch.float8_e4m3fn)  # [N, G]
    levels = (book.reshape(1, 1, 16) * s_rel.to(torch.float32).unsqueeze(-1)).round().clamp(-INT8_GRID, INT8_GRID)
    target = grouped / s_channel.reshape(n, 1, 1)  # in int8 grid units
    codes = (target.unsqueeze(-1) - levels.unsqueeze(2)).abs().argmin(dim=-1)  # [N, G, group]
    return {"weight": pack_codes(codes.reshape(n, k)), "weight_s_rel": s_rel,
            "weight_s_channel": s_channel.contiguous(), "weight_codebook": book}


def w4a8_linear(x: torch.Tensor, packed: torch.Tensor, s_rel: torch.Tensor, s_channel: torch.Tensor,
                codebook: torch.Tensor | None, correction: torch.Tensor | None, bias: torch.Tensor | None,
                conf: Mapping[str, Any]) -> torch.Tensor:
    """comfy-kitchen's eager W4A8 product `x @ W^T + bias` (see the module doc), in `x`'s dtype."""
    n, k = packed.shape[0], packed.shape[1] * 2
    if x.shape[-1] != k:
        raise W4A8Error(f"{FORMAT}: input width {x.shape[-1]} does not match the layer's {k}")
    if correction is not None:
        w = dequantize_w4a8(packed, s_rel, s_channel, codebook, correction, conf, (n, k))
        return torch.nn.functional.linear(x, w.to(x.dtype), None if bias is None else bias.to(x.dtype))
    group, convrot = groups_of(conf)
    q = int8_weight(packed, s_rel, codebook, group)  # [N, K]
    # As comfy-kitchen: the rotation and the rounding in the input's dtype, the scales in float32.
    rows = quant_int8.rotate(x.reshape(-1, k), convrot)  # [M, K]
    a_scale = (rows.abs().amax(dim=-1, keepdim=True).to(torch.float32) / INT8_GRID).clamp(min=1e-30)  # [M, 1]
    divisor = a_scale.to(rows.dtype)
    divisor = torch.where(divisor == 0, torch.finfo(rows.dtype).tiny, divisor)  # 1e-30 is 0 in float16
    a = (rows / divisor).round().clamp(-128.0, 127.0).to(torch.int8)
    acc = torch._int_mm(a, q.t().contiguous())  # [M, N] int32
    out = (acc.to(torch.float32) * (a_scale * _float(s_channel, x.device).reshape(1, n))).to(x.dtype)
    if bias is not None:
        out = out + bias.to(device=x.device, dtype=x.dtype)
    return out.reshape(*x.shape[:-1], n)
