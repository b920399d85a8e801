"""ComfyUI's quantised weight formats, keyed by the file's own description of each layer.

After ComfyUI's comfy/quant_ops.py (`QUANT_ALGOS`), comfy/ops.py (`mixed_precision_ops`,
`_load_quantized_module`) and comfy/utils.py (`convert_old_quants`): a quantised file says, per
linear layer, how its weight is stored, in one of two equivalent ways:

- a `<layer>.comfy_quant` tensor: uint8 bytes of a JSON object, e.g. `{"format": "nvfp4"}` or
  `{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}`;
- the safetensors metadata `_quantization_metadata`: JSON `{"layers": {<layer>: {<the same>}}}`
  with the layer names as the file spells them (ComfyUI turns it into the former, and the
  metadata wins where both are present).

Each format keeps `<layer>.weight` in its storage dtype plus scale tensors next to it
(`weight_scale`, NVFP4's `weight_scale_2`, and the optional `input_scale` / `pre_quant_scale`).
The formats read here, one module per family: `float8_e4m3fn`, `float8_e5m2`, `mxfp8`
(comfy_core/weights/quant_fp8.py), `nvfp4` (quant_fp4.py), `int8_tensorwise` with or without
ConvRot (quant_int8.py), the int4 `asym_w4a8_int8` (quant_w4a8.py: `weight_s_rel`,
`weight_s_channel` and the optional `weight_codebook` / `weight_correction`). ComfyUI's other int4
formats (`convrot_w4a4`, `awq_w4a16`) are recognised and refused by name (`QuantFormatError`).

`QuantizedHeader` presents such a file to the loaders: for detection, each quantised weight
under its true (padded) shape and the file's float dtype with the scales hidden, so a quantised
file is detected as its float original; for loading, without the quantised layers' tensors,
which the layers then take as stored (comfy_core/models/quant_linear.py).
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any, Callable, Iterable, Mapping

import torch

from comfy_core.weights import quant_fp4, quant_fp8, quant_gguf, quant_int8, quant_w4a8
from comfy_core.weights.quant_blocks import padded_scale_shape

COMFY_QUANT = "comfy_quant"
METADATA_KEY = "_quantization_metadata"
INPUT_SCALES = ("input_scale", "pre_quant_scale")  # optional, for the matrix products and AWQ smoothing

Dequantize = Callable[[torch.Tensor, Mapping[str, torch.Tensor], Mapping[str, Any], tuple[int, int]], torch.Tensor]
Quantize = Callable[[torch.Tensor, Mapping[str, Any]], dict[str, torch.Tensor]]


class QuantFormatError(ValueError):
    """A quantised layer the formats do not explain: an unknown or unsupported format, a missing
    scale, a malformed `comfy_quant` description, or a stored shape that does not fit the layer."""


@dataclasses.dataclass(frozen=True)
class QuantFormat:
    """One of ComfyUI's `QUANT_ALGOS` entries, as this runtime reads it.

    `storage`: the weight's stored dtype(s); `scales`: the tensors next to the weight it needs;
    `optional`: those it reads when present (passed to `dequantize` with the others);
    `padded(out, in)`: the weight's storage rows and columns (columns in values: `pack` values per
    stored element); `dequantize(weight, scales, conf, (out, in))` -> float32 `[out, in]`;
    `quantize(w, conf)` -> `{suffix: tensor}` as ComfyUI's quantiser writes it (tests, benchmarks).
    """

    name: str
    storage: tuple[torch.dtype, ...]
    scales: tuple[str, ...]
    dequantize: Dequantize
    quantize: Quantize
    padded: Callable[[int, int], tuple[int, int]] = lambda out_f, in_f: (out_f, in_f)
    pack: int = 1
    # `(out, in)` -> {scale: the element counts it may have}; checked when a layer is attached.
    scale_sizes: Callable[[int, int], Mapping[str, tuple[int, ...]]] = lambda out_f, in_f: {"weight_scale": (1,)}
    # Formats whose storage depends on the layer's description (GGUF's ggml type): `(out, in, conf)`
    # -> stored shape, and `(stored, conf)` -> values shape.
    storage_of: Callable[[int, int, Mapping[str, Any]], tuple[int, int]] | None = None
    values_of: Callable[[tuple[int, ...], Mapping[str, Any]], tuple[int, ...]] | None = None
    optional: tuple[str, ...] = ()
    # Formats whose scale shapes depend on the layer's description: `(out, in, conf, {scale: tensor})`
    # raises `QuantFormatError` when a layer's tensors do not fit it (checked when a layer is attached).
    check: Callable[[int, int, Mapping[str, Any], Mapping[str, torch.Tensor]], None] | None = None

    def stored_shape(self, out_features: int, in_features: int, conf: Mapping[str, Any] | None = None
                     ) -> tuple[int, int]:
        if self.storage_of is not None:
            return self.storage_of(out_features, in_features, conf or {})
        rows, cols = self.padded(out_features, in_features)
        return rows, cols // self.pack

    def logical_shape(self, stored: tuple[int, ...], conf: Mapping[str, Any] | None = None) -> tuple[int, ...]:
        """The (padded) `[out, in]` a stored weight holds: what detection sees."""
        if self.values_of is not None and len(stored) == 2:
            return self.values_of(tuple(stored), conf or {})
        return (stored[0], stored[1] * self.pack) if len(stored) == 2 else tuple(stored)


def int8_group(conf: Mapping[str, Any]) -> int | None:
    """ConvRot's group size from a layer's description (top level or under `params`, as ComfyUI
    reads it), None for plain int8."""
    params = conf.get("params") if isinstance(conf.get("params"), dict) else {}
    if not conf.get("convrot", params.get("convrot", False)):
        return None
    return int(conf.get("convrot_groupsize", params.get("convrot_groupsize", quant_int8.DEFAULT_GROUP)))


def _block_scale_sizes(block: int, padded: Callable[[int, int], tuple[int, int]], tensor_scale: bool
                       ) -> Callable[[int, int], Mapping[str, tuple[int, ...]]]:
    def sizes(out_f: int, in_f: int) -> Mapping[str, tuple[int, ...]]:
        rows, cols = padded(out_f, in_f)
        prow, pcol = padded_scale_shape(rows, cols // block)
        return {"weight_scale": (prow * pcol,), **({"weight_scale_2": (1,)} if tensor_scale else {})}
    return sizes


def _fp8(dtype: torch.dtype) -> QuantFormat:
    def dequantize(q: torch.Tensor, scales: Mapping[str, torch.Tensor], _conf: Mapping[str, Any],
                   _shape: tuple[int, int]) -> torch.Tensor:
        return quant_fp8.dequantize_fp8(q, scales["weight_scale"])

    def quantize(w: torch.Tensor, _conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        q, scale = quant_fp8.quantize_fp8(w, dtype)
        return {"weight": q, "weight_scale": scale}

    return QuantFormat(str(dtype).removeprefix("torch."), (dtype,), ("weight_scale",), dequantize, quantize)


def _mx_dequantize(q: torch.Tensor, scales: Mapping[str, torch.Tensor], _conf: Mapping[str, Any],
                   shape: tuple[int, int]) -> torch.Tensor:
    return quant_fp8.dequantize_mxfp8(q, scales["weight_scale"], shape)


def _mx_quantize(w: torch.Tensor, _conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    q, scales = quant_fp8.quantize_mxfp8(w)
    return {"weight": q, "weight_scale": scales}


def _nv_dequantize(q: torch.Tensor, scales: Mapping[str, torch.Tensor], _conf: Mapping[str, Any],
                   shape: tuple[int, int]) -> torch.Tensor:
    return quant_fp4.dequantize_nvfp4(q, scales["weight_scale"], scales["weight_scale_2"], shape)


def _nv_quantize(w: torch.Tensor, _conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    packed, blocks, tensor_scale = quant_fp4.quantize_nvfp4(w)
    return {"weight": packed, "weight_scale": blocks, "weight_scale_2": tensor_scale}


def _int8_dequantize(q: torch.Tensor, scales: Mapping[str, torch.Tensor], conf: Mapping[str, Any],
                     _shape: tuple[int, int]) -> torch.Tensor:
    return quant_int8.dequantize_int8(q, scales["weight_scale"], int8_group(conf))


def _int8_quantize(w: torch.Tensor, conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    group = int8_group(conf)
    q, scale = quant_int8.quantize_int8(w, per_row=bool(group) or bool(conf.get("per_row", False)), group=group)
    return {"weight": q, "weight_scale": scale}


def _w4a8_dequantize(q: torch.Tensor, scales: Mapping[str, torch.Tensor], conf: Mapping[str, Any],
                     shape: tuple[int, int]) -> torch.Tensor:
    try:
        return quant_w4a8.dequantize_w4a8(q, scales["weight_s_rel"], scales["weight_s_channel"],
                                          scales.get("weight_codebook"), scales.get("weight_correction"), conf, shape)
    except quant_w4a8.W4A8Error as exc:
        raise QuantFormatError(str(exc)) from None


def _w4a8_check(out_f: int, in_f: int, conf: Mapping[str, Any], scales: Mapping[str, torch.Tensor]) -> None:
    try:
        quant_w4a8.check_scales(out_f, in_f, conf, scales)
    except quant_w4a8.W4A8Error as exc:
        raise QuantFormatError(str(exc)) from None


def _gguf_dequantize(q: torch.Tensor, _scales: Mapping[str, torch.Tensor], conf: Mapping[str, Any],
                     shape: tuple[int, int]) -> torch.Tensor:
    return quant_gguf.dequantize_blocks(q, conf, shape)


def _gguf_quantize(_w: torch.Tensor, _conf: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    raise QuantFormatError("GGUF files are written by GGUF tools (gguf-py, llama.cpp), not quantised here")


FORMATS: Mapping[str, QuantFormat] = {f.name: f for f in (
    _fp8(torch.float8_e4m3fn),
    _fp8(torch.float8_e5m2),
    QuantFormat("mxfp8", (torch.float8_e4m3fn,), ("weight_scale",), _mx_dequantize, _mx_quantize,
                quant_fp8.padded_mx_shape,
                scale_sizes=_block_scale_sizes(quant_fp8.MX_BLOCK, quant_fp8.padded_mx_shape, False)),
    QuantFormat("nvfp4", (torch.uint8,), ("weight_scale", "weight_scale_2"), _nv_dequantize, _nv_quantize,
                quant_fp4.padded_nv_shape, pack=2,
                scale_sizes=_block_scale_sizes(quant_fp4.NV_BLOCK, quant_fp4.padded_nv_shape, True)),
    QuantFormat("int8_tensorwise", (torch.int8,), ("weight_scale",), _int8_dequantize, _int8_quantize,
                scale_sizes=lambda out_f, in_f: {"weight_scale": (1, out_f)}),
    # int4 codes against int8 activations (comfy_core/weights/quant_w4a8.py); the scale shapes follow
    # the layer's group size, so `check` (not `scale_sizes`) fits them to the layer.
    QuantFormat(quant_w4a8.FORMAT, (torch.int8,), ("weight_s_rel", "weight_s_channel"), _w4a8_dequantize,
                quant_w4a8.quantize_w4a8, pack=2, scale_sizes=lambda out_f, in_f: {},
                optional=("weight_codebook", "weight_correction"), check=_w4a8_check),
    # Not one of ComfyUI's formats: GGUF diffusion models read natively (comfy_core/weights/quant_gguf.py).
    QuantFormat(quant_gguf.FORMAT, (torch.uint8,), (), _gguf_dequantize, _gguf_quantize,
                scale_sizes=lambda out_f, in_f: {}, storage_of=quant_gguf.stored_shape,
                values_of=quant_gguf.values_shape),
)}

# The safetensors names of the storage dtypes (header dtype -> torch dtype).
_STORED_DTYPES = {"I8": torch.int8, "U8": torch.uint8, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
                  "int8": torch.int8, "uint8": torch.uint8, "float8_e4m3fn": torch.float8_e4m3fn,
                  "float8_e5m2": torch.float8_e5m2}

# ComfyUI formats this runtime recognises but does not read (int4 weights, ComfyUI 0.28+).
UNSUPPORTED = ("convrot_w4a4", "awq_w4a16")


@dataclasses.dataclass(frozen=True)
class QuantizedLayer:
    """A linear layer stored quantised: `name` (the loader's tensor names, without the trailing
    '.'), its `format` and its JSON description `conf`."""

    name: str
    format: QuantFormat
    conf: Mapping[str, Any]

    def tensor_names(self, present: Iterable[str]) -> list[str]:
        """The file's tensors of this layer that the format owns (the weight, its scales, the
        description), of those `present`."""
        present = set(present)
        owned = ("weight", *self.format.scales, *self.format.optional, *INPUT_SCALES, COMFY_QUANT)
        return [f"{self.name}.{s}" for s in owned if f"{self.name}.{s}" in present]

    def quant_conf_bytes(self) -> torch.Tensor:
        """The `comfy_quant` tensor ComfyUI writes for this layer."""
        return torch.tensor(list(json.dumps(dict(self.conf)).encode("utf-8")), dtype=torch.uint8)


def parse_conf(raw: Any, where: str) -> dict[str, Any]:
    """A layer description (uint8 JSON bytes, a JSON string, or a dict) -> dict with a known format."""
    try:
        if isinstance(raw, torch.Tensor):
            raw = bytes(raw.detach().to(torch.uint8).reshape(-1).tolist()).decode("utf-8")
        conf = json.loads(raw) if isinstance(raw, str) else raw
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuantFormatError(f"{where}: not a JSON layer description ({exc})") from None
    if not isinstance(conf, dict):
        raise QuantFormatError(f"{where}: a layer description must be a JSON object, got {conf!r}")
    name = conf.get("format")
    if name in UNSUPPORTED:
        raise QuantFormatError(f"{where}: ComfyUI's {name!r} (int4) weights are not supported here; "
                               f"supported: {sorted(FORMATS)}")
    if name not in FORMATS:
        raise QuantFormatError(f"{where}: unknown quantisation format {name!r}; known: {sorted(FORMATS)}")
    if name == "int8_tensorwise" and int8_group(conf):
        quant_int8.check_group(int8_group(conf))
    if name == quant_w4a8.FORMAT:
        try:
            quant_w4a8.groups_of(conf)
        except quant_w4a8.W4A8Error as exc:
            raise QuantFormatError(f"{where}: {exc}") from None
    if name == quant_gguf.FORMAT:
        try:
            quant_gguf.ggml_type(conf)
        except ValueError as exc:
            raise QuantFormatError(f"{where}: {exc}") from None
    return conf


def quantized_layers(names: Mapping[str, Any], metadata: Mapping[str, str] | None,
                     read: Callable[[str], torch.Tensor],
                     ours: Callable[[str], str | None] = lambda stored: stored) -> dict[str, QuantizedLayer]:
    """`{layer name: QuantizedLayer}` for a file's tensors `names` (name -> header info).

    `metadata`: the file's safetensors metadata (its `_quantization_metadata`); `read(name)` a
    tensor by name (the `comfy_quant` bytes); `ours(stored)`: the loader's name for a name as the
    file spells it (metadata layer names are the file's), None when the view does not hold it.
    Every layer's weight and scales must be there (`QuantFormatError` names what is missing)."""
    confs: dict[str, dict[str, Any]] = {}
    suffix = "." + COMFY_QUANT
    for name in names:
        if name.endswith(suffix):
            confs[name[:-len(suffix)]] = parse_conf(read(name), name)
    raw = (metadata or {}).get(METADATA_KEY)
    if raw:
        try:
            described = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise QuantFormatError(f"safetensors metadata {METADATA_KEY!r} is not JSON ({exc})") from None
        if not isinstance(described, dict) or not isinstance(described.get("layers"), dict):
            raise QuantFormatError(f"safetensors metadata {METADATA_KEY!r} must be {{\"layers\": {{...}}}}")
        for stored, conf in described["layers"].items():
            layer = ours(f"{stored}.weight")
            if layer is None:
                continue  # a layer of another component of the file
            confs[layer[:-len(".weight")]] = parse_conf(conf, f"{METADATA_KEY} layer {stored!r}")
    layers = {}
    for layer, conf in confs.items():
        fmt = FORMATS[conf["format"]]
        missing = [f"{layer}.{s}" for s in ("weight", *fmt.scales) if f"{layer}.{s}" not in names]
        if missing:
            raise QuantFormatError(f"quantised layer {layer!r} ({fmt.name}): missing {missing}")
        stored = names[f"{layer}.weight"].dtype
        if _STORED_DTYPES.get(stored) not in fmt.storage:
            raise QuantFormatError(f"quantised layer {layer!r} ({fmt.name}): weight stored as {stored}, the format "
                                   f"stores {[str(d).removeprefix('torch.') for d in fmt.storage]}")
        layers[layer] = QuantizedLayer(layer, fmt, conf)
    return layers


def float_dtype_name(names: Mapping[str, Any], skip: Iterable[str]) -> str:
    """The safetensors dtype most of a file's other floating tensors have ("BF16" when none):
    the dtype a quantised file's float original had, which detection and dtype choice see."""
    skip = set(skip)
    counts = Counter(info.dtype for name, info in names.items()
                     if name not in skip and info.dtype in ("F16", "BF16", "F32"))
    return counts.most_common(1)[0][0] if counts else "BF16"


class QuantizedHeader:
    """A checkpoint view (`tensors`, `read`, ... as the loaders use it) in which quantised layers
    look as the loaders need them: `for_detection` shows each quantised weight at its (padded)
    true shape in the file's float dtype and hides the scales and descriptions; `for_loading`
    hides the quantised layers' tensors altogether (the layers read them themselves). Everything
    else is the underlying view's."""

    def __init__(self, base: Any, tensors: Mapping[str, Any], dequantized: Mapping[str, QuantizedLayer]) -> None:
        self.base = base
        self.tensors = tensors
        self._dequantized = dequantized

    @classmethod
    def for_detection(cls, base: Any, layers: Mapping[str, QuantizedLayer]) -> "QuantizedHeader":
        owned = {n for layer in layers.values() for n in layer.tensor_names(base.tensors)}
        weights = {f"{name}.weight": layer for name, layer in layers.items()}
        dtype = float_dtype_name(base.tensors, owned)
        tensors = {}
        for name, info in base.tensors.items():
            if name in weights:
                shape = weights[name].format.logical_shape(tuple(info.shape), weights[name].conf)
                tensors[name] = dataclasses.replace(info, dtype=dtype, shape=shape)
            elif name not in owned:
                tensors[name] = info
        return cls(base, tensors, weights)

    @classmethod
    def for_loading(cls, base: Any, layers: Mapping[str, QuantizedLayer]) -> "QuantizedHeader":
        owned = {n for layer in layers.values() for n in layer.tensor_names(base.tensors)}
        return cls(base, {n: i for n, i in base.tensors.items() if n not in owned}, {})

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def keys(self) -> Iterable[str]:
        return self.tensors.keys()

    def read(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor:
        layer = self._dequantized.get(name)
        if layer is None:
            return self.base.read(name, dtype)
        out_f, in_f = self.tensors[name].shape
        value = dequantize_stored(layer, self.base.read_stored, (out_f, in_f), self.base.tensors)
        return value.to(dtype or torch.float32)

    def __getattr__(self, attr: str) -> Any:  # path, metadata, read_stored, stored_view, file_bytes, ...
        return getattr(self.base, attr)

    def __enter__(self) -> "QuantizedHeader":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def dequantize_stored(layer: QuantizedLayer, read: Callable[[str], torch.Tensor],
                      shape: tuple[int, int], present: Iterable[str] | None = None) -> torch.Tensor:
    """The float32 `[out, in]` weight of `layer`, its tensors read by `read(name)`; the format's
    optional tensors are read where `present` (the file's names) holds them, or, without
    `present`, where `read` does not raise `KeyError`."""
    scales = {s: read(f"{layer.name}.{s}") for s in layer.format.scales}
    for s in layer.format.optional:
        name = f"{layer.name}.{s}"
        if present is not None:
            if name in present:
                scales[s] = read(name)
            continue
        try:
            scales[s] = read(name)
        except KeyError:
            pass
    return layer.format.dequantize(read(f"{layer.name}.weight"), scales, layer.conf, shape)
