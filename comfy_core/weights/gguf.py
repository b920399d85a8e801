"""GGUF files (llama.cpp's / ggml's container) read in plain torch: the header, the metadata, the
tensor table, the tensors kept quantised (views of the file mapping), and the dequantisers.

The format (ggml's `docs/gguf.md`, version 2 and 3, little endian): the magic `GGUF`, a uint32
version, uint64 tensor and key/value counts; the key/value pairs (a string key, a uint32 value
type, the value; strings are a uint64 length and UTF-8 bytes, arrays a uint32 element type, a
uint64 count and the elements); the tensor infos (name, uint32 rank, uint64 dimensions with the
fastest-varying first, uint32 ggml type, uint64 offset into the data section); then the data
section, at the next multiple of `general.alignment` (32 by default), each tensor at its offset.

A ggml tensor of type T is rows of `ne[0]` values (the first dimension), each row stored as
`ne[0] / block_size` blocks of `type_size` bytes; the torch shape is the dimensions reversed
(a weight `[out, in]` has `ne = (in, out)`). `GGUFTensor` keeps the raw bytes `[rows, row_bytes]`
(uint8, a view of the file mapping) with the type and the torch shape; `dequantize` turns them into
values. The block layouts and their dequantisation are ggml's reference ones (`ggml-quants.c`,
`dequantize_row_*`; `ggml-common.h` for the block structs), each written here as whole-tensor
torch operations in float32, with the products in ggml's order (`(d * scale) * q - dmin * m`), so
the values are those of the reference.

ComfyUI's core does not read GGUF; city96's ComfyUI-GGUF pack does (`loader.py: gguf_sd_loader`,
`dequant.py`), keeping the tensors quantised and dequantising each layer's weight as it runs.
`GGUFLinear` is that layer here.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import torch.nn.functional as F
from torch import nn

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
QK_K = 256  # values per K-quant super-block


class GGUFError(ValueError):
    """A GGUF file that cannot be read: bad magic or version, a truncated header, an unknown value
    or tensor type, a tensor outside the file (the message names the file and what is wrong)."""


class GGUFTypeError(GGUFError):
    """A tensor type this reader has no dequantiser for (names the type)."""


@dataclass(frozen=True)
class GGMLType:
    """One ggml tensor type: its id in the file, name, values per block and bytes per block."""

    id: int
    name: str
    block_size: int
    type_size: int


# ggml's `ggml_type` ids (ggml.h) and block sizes (ggml-common.h) of the types read here.
GGML_TYPES: dict[int, GGMLType] = {t.id: t for t in (
    GGMLType(0, "F32", 1, 4), GGMLType(1, "F16", 1, 2), GGMLType(2, "Q4_0", 32, 18), GGMLType(3, "Q4_1", 32, 20),
    GGMLType(6, "Q5_0", 32, 22), GGMLType(7, "Q5_1", 32, 24), GGMLType(8, "Q8_0", 32, 34),
    GGMLType(10, "Q2_K", QK_K, 84), GGMLType(11, "Q3_K", QK_K, 110), GGMLType(12, "Q4_K", QK_K, 144),
    GGMLType(13, "Q5_K", QK_K, 176), GGMLType(14, "Q6_K", QK_K, 210),
    GGMLType(24, "I8", 1, 1), GGMLType(25, "I16", 1, 2), GGMLType(26, "I32", 1, 4), GGMLType(27, "I64", 1, 8),
    GGMLType(28, "F64", 1, 8), GGMLType(30, "BF16", 1, 2),
)}
TYPES_BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES.values()}
# Types whose bytes are plain values (a torch dtype views them).
PLAIN_DTYPES: dict[str, torch.dtype] = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                                        "F64": torch.float64, "I8": torch.int8, "I16": torch.int16,
                                        "I32": torch.int32, "I64": torch.int64}


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file, as stored: `data` uint8 `[rows, row_bytes]` (a view of the file
    mapping), `type` its ggml type, `shape` the torch shape of its values (ggml's dimensions
    reversed). `dtype` is the type's name ("Q8_0", "F32", ...), as a safetensors header names dtypes,
    so detection code can read it as it reads a header entry."""

    name: str
    type: GGMLType
    shape: torch.Size
    data: torch.Tensor

    @property
    def dtype(self) -> str:
        return self.type.name

    @property
    def quantized(self) -> bool:
        return self.type.name not in PLAIN_DTYPES

    def numel(self) -> int:
        count = 1
        for d in self.shape:
            count *= int(d)
        return count

    def plain(self) -> torch.Tensor:
        """The values of an unquantised tensor (F32, F16, BF16, integers) as a view of its bytes."""
        if self.quantized:
            raise GGUFTypeError(f"GGUF tensor {self.name!r} is quantised ({self.dtype}); dequantize it")
        return self.data.reshape(-1).view(PLAIN_DTYPES[self.dtype]).reshape(self.shape)

    def select_rows(self, index: torch.Tensor) -> "GGUFTensor":
        """The tensor with its rows (first torch dimension) taken in `index` order, still quantised
        (a row is whole blocks, so rows move as bytes)."""
        rows = self.data.index_select(0, index.to(torch.long))
        return GGUFTensor(self.name, self.type, torch.Size((int(index.numel()), *self.shape[1:])), rows)


# --- reading ---

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Cursor:
    """Sequential little-endian reads over the file mapping, `GGUFError` past its end."""

    def __init__(self, buffer: Any, path: Path) -> None:
        self.buffer, self.offset, self.path = buffer, 0, path

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        if self.offset + size > len(self.buffer):
            raise GGUFError(f"{self.path}: the GGUF header is truncated at byte {self.offset}")
        (value,) = struct.unpack_from(fmt, self.buffer, self.offset)
        self.offset += size
        return value

    def string(self) -> str:
        length = self.take("<Q")
        if self.offset + length > len(self.buffer):
            raise GGUFError(f"{self.path}: a GGUF string at byte {self.offset} runs past the end of the file")
        raw = bytes(self.buffer[self.offset:self.offset + length])
        self.offset += length
        return raw.decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            element, count = self.take("<I"), self.take("<Q")
            if element in _SCALARS:  # one unpack for the whole array (token scores, types, ...)
                fmt = _SCALARS[element]
                size = struct.calcsize(fmt) * count
                if self.offset + size > len(self.buffer):
                    raise GGUFError(f"{self.path}: a GGUF array at byte {self.offset} runs past the end of the file")
                values = list(struct.unpack_from(f"<{count}{fmt[1]}", self.buffer, self.offset))
                self.offset += size
                return values
            return [self.value(element) for _ in range(count)]
        raise GGUFError(f"{self.path}: unknown GGUF value type {kind} at byte {self.offset}")


def read_gguf(path: str | Path) -> tuple[dict[str, GGUFTensor], dict[str, Any]]:
    """A GGUF file -> (name -> `GGUFTensor`, metadata key -> value), tensors in file order.

    The file is memory-mapped (a private copy-on-write mapping): tensors are views of it, read
    from disk when used, and keep the mapping alive. `GGUFError` for a file that is not GGUF or is
    damaged; `GGUFTypeError` for a tensor type without a dequantiser here.
    """
    path = Path(path)
    with open(path, "rb") as handle:
        try:
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        except ValueError:  # an empty file cannot be mapped
            raise GGUFError(f"{path}: empty file, not GGUF") from None
    cursor = _Cursor(mapping, path)
    if bytes(mapping[:4]) != MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {bytes(mapping[:4])!r})")
    cursor.offset = 4
    version = cursor.take("<I")
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    tensor_count, kv_count = cursor.take("<Q"), cursor.take("<Q")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = cursor.value(cursor.take("<I"))
    infos = []
    for _ in range(tensor_count):
        name = cursor.string()
        rank = cursor.take("<I")
        dims = [cursor.take("<Q") for _ in range(rank)]
        type_id, offset = cursor.take("<I"), cursor.take("<Q")
        if type_id not in GGML_TYPES:
            raise GGUFTypeError(f"{path}: tensor {name!r} has ggml type {type_id}, which this reader cannot "
                                f"dequantise (known: {', '.join(t.name for t in GGML_TYPES.values())})")
        infos.append((name, dims, GGML_TYPES[type_id], offset))
    alignment = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT))
    data_start = -(-cursor.offset // alignment) * alignment
    file_bytes = torch.frombuffer(mapping, dtype=torch.uint8)
    tensors: dict[str, GGUFTensor] = {}
    for name, dims, ggml_type, offset in infos:
        row_length = int(dims[0]) if dims else 1
        if row_length % ggml_type.block_size:
            raise GGUFError(f"{path}: tensor {name!r}: rows of {row_length} values are not whole "
                            f"{ggml_type.name} blocks of {ggml_type.block_size}")
        rows = 1
        for d in dims[1:]:
            rows *= int(d)
        row_bytes = row_length // ggml_type.block_size * ggml_type.type_size
        start = data_start + offset
        if start + rows * row_bytes > len(mapping):
            raise GGUFError(f"{path}: tensor {name!r} extends past the end of the file")
        data = file_bytes[start:start + rows * row_bytes].view(rows, row_bytes)
        tensors[name] = GGUFTensor(name, ggml_type, torch.Size(reversed([int(d) for d in dims])), data)
    return tensors, metadata


# --- dequantisation (ggml-quants.c `dequantize_row_*`) ---

def _f16(blocks: torch.Tensor, start: int) -> torch.Tensor:
    """[n, 1] float32 from the float16 at byte `start` of each block [n, type_size]."""
    return blocks[:, start:start + 2].contiguous().view(torch.float16).float()


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """uint8 [..., k] -> [..., 2k]: the low 4 bits of every byte, then the high 4 bits."""
    return torch.cat((packed & 0x0F, packed >> 4), dim=-1)


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    # block_q4_0: d (f16), qs[16]; value j: (low nibble of qs[j] - 8) * d, value j+16: (high nibble - 8) * d
    return (_nibbles(b[:, 2:18]).to(torch.int16) - 8).float() * _f16(b, 0)


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    # block_q4_1: d, m (f16), qs[16]; value = q * d + m
    return _nibbles(b[:, 4:20]).float() * _f16(b, 0) + _f16(b, 2)


def _q5_high_bits(b: torch.Tensor, start: int) -> torch.Tensor:
    """[n, 32] 0 / 16: bit j of the block's uint32 `qh` (at byte `start`) as the fifth bit of value j."""
    qh = b[:, start:start + 4].to(torch.int64)
    bits = qh[:, 0] | (qh[:, 1] << 8) | (qh[:, 2] << 16) | (qh[:, 3] << 24)  # [n]
    return ((bits[:, None] >> torch.arange(32, device=b.device)) & 1).to(torch.int16) << 4


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    # block_q5_0: d, qh (uint32), qs[16]; value = ((nibble | fifth bit) - 16) * d
    q = _nibbles(b[:, 6:22]).to(torch.int16) | _q5_high_bits(b, 2)
    return (q - 16).float() * _f16(b, 0)


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    # block_q5_1: d, m, qh, qs[16]; value = (nibble | fifth bit) * d + m
    q = _nibbles(b[:, 8:24]).to(torch.int16) | _q5_high_bits(b, 4)
    return q.float() * _f16(b, 0) + _f16(b, 2)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    # block_q8_0: d (f16), qs[32] int8; value = q * d
    return b[:, 2:34].contiguous().view(torch.int8).float() * _f16(b, 0)


def _k_scales_mins(scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K packed 6-bit scales and mins (12 bytes -> 8 of each; ggml's `get_scale_min_k4`):
    sub-blocks 0..3 from the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); sub-blocks 4..7
    from the nibbles of bytes 8..11 with the top 2 bits of bytes 0..3 / 4..7 above them."""
    s = scales.to(torch.int16)
    low, high, mixed = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = torch.cat((low & 63, (mixed & 0x0F) | ((low >> 6) << 4)), dim=1)
    mn = torch.cat((high & 63, (mixed >> 4) | ((high >> 6) << 4)), dim=1)
    return sc.float(), mn.float()


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    # block_q4_K: d, dmin (f16), scales[12], qs[128]; 8 sub-blocks of 32, each 64 values from 32 bytes
    # (low nibbles then high nibbles): value = (d * sc) * q - dmin * m
    n = b.shape[0]
    sc, mn = _k_scales_mins(b[:, 4:16])
    d, m = _f16(b, 0) * sc, _f16(b, 2) * mn  # [n, 8]
    q = _nibbles(b[:, 16:144].reshape(n, 4, 32)).reshape(n, 8, 32).float()
    return (d[:, :, None] * q - m[:, :, None]).reshape(n, QK_K)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    # block_q5_K: d, dmin, scales[12], qh[32], qs[128]; sub-block i's fifth bit is bit i of qh[l]
    n = b.shape[0]
    sc, mn = _k_scales_mins(b[:, 4:16])
    d, m = _f16(b, 0) * sc, _f16(b, 2) * mn
    low = _nibbles(b[:, 48:176].reshape(n, 4, 32)).reshape(n, 8, 32).to(torch.int16)
    qh = b[:, 16:48].to(torch.int16)  # [n, 32]
    high = ((qh[:, None, :] >> torch.arange(8, device=b.device)[None, :, None]) & 1) << 4  # [n, 8, 32]
    return (d[:, :, None] * (low | high).float() - m[:, :, None]).reshape(n, QK_K)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    # block_q6_K: ql[128], qh[64], scales[16] int8, d (f16); two halves of 128 values, each from 64
    # ql bytes (values l and l+64: low / high nibble of ql[l]; l+32, l+96: of ql[l+32]) and 32 qh
    # bytes (2 bits each for l, l+32, l+64, l+96); value = (d * scale[16-group]) * (q - 32)
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 2, 32).to(torch.int16)  # [n, half, 32-byte group, l]
    qh = b[:, 128:192].reshape(n, 2, 1, 32).to(torch.int16)
    low = torch.cat((ql & 0x0F, ql >> 4), dim=2)  # [n, half, 4, 32]: values l, l+32, l+64, l+96
    high = (qh >> torch.tensor([0, 2, 4, 6], device=b.device)[None, None, :, None]) & 3
    q = ((low | (high << 4)) - 32).float().reshape(n, 16, 16)  # 16 groups of 16 values
    scales = b[:, 192:208].contiguous().view(torch.int8).float()  # [n, 16]
    return ((_f16(b, 208) * scales)[:, :, None] * q).reshape(n, QK_K)


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    # block_q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin; 16 groups of 16:
    # 2-bit values, shift 0/2/4/6 over 32-byte halves; value = (d * sc) * q - dmin * m
    n = b.shape[0]
    s = b[:, 0:16].to(torch.int16)
    d = _f16(b, 80) * (s & 0x0F).float()
    m = _f16(b, 82) * (s >> 4).float()
    qs = b[:, 16:80].reshape(n, 2, 1, 32).to(torch.int16)
    q = ((qs >> torch.tensor([0, 2, 4, 6], device=b.device)[None, None, :, None]) & 3).reshape(n, 16, 16).float()
    return (d[:, :, None] * q - m[:, :, None]).reshape(n, QK_K)


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    # block_q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales), d; value = (d * (sc - 32)) * q where
    # q is the 2-bit value minus 4 unless its hmask bit is set
    n = b.shape[0]
    raw = b[:, 96:108].to(torch.int32)
    aux = [raw[:, 4 * i] | (raw[:, 4 * i + 1] << 8) | (raw[:, 4 * i + 2] << 16) | (raw[:, 4 * i + 3] << 24)
           for i in range(3)]
    kmask1, kmask2 = 0x03030303, 0x0F0F0F0F
    words = [(aux[0] & kmask2) | (((aux[2] >> 0) & kmask1) << 4), (aux[1] & kmask2) | (((aux[2] >> 2) & kmask1) << 4),
             ((aux[0] >> 4) & kmask2) | (((aux[2] >> 4) & kmask1) << 4),
             ((aux[1] >> 4) & kmask2) | (((aux[2] >> 6) & kmask1) << 4)]
    sc = torch.stack([(w >> (8 * k)) & 0xFF for w in words for k in range(4)], dim=1)  # [n, 16]
    sc = (sc.to(torch.int16).to(torch.int8).to(torch.int16) - 32).float()
    d = _f16(b, 108) * sc  # [n, 16]
    qs = b[:, 32:96].reshape(n, 2, 1, 32).to(torch.int16)
    low = ((qs >> torch.tensor([0, 2, 4, 6], device=b.device)[None, None, :, None]) & 3).reshape(n, 8, 32)
    hm = b[:, 0:32].to(torch.int16)  # [n, 32]
    bit = (hm[:, None, :] >> torch.arange(8, device=b.device)[None, :, None]) & 1  # [n, 8, 32]
    q = (low - torch.where(bit == 1, 0, 4)).reshape(n, 16, 16).float()
    return (d[:, :, None] * q).reshape(n, QK_K)


_DEQUANTIZERS = {"Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0, "Q2_K": _q2_k,
                 "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}


def dequantize(tensor: GGUFTensor, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    """The values of `tensor` in its torch shape, as `dtype` (computed in float32 as ggml's
    reference does, then cast), on `device` (the raw bytes are moved there first)."""
    data = tensor.data if device is None else tensor.data.to(device)
    name = tensor.type.name
    if name in PLAIN_DTYPES:
        values = data.reshape(-1).view(PLAIN_DTYPES[name])
        return values.reshape(tensor.shape).to(dtype)
    blocks = data.reshape(-1, tensor.type.type_size)
    values = _DEQUANTIZERS[name](blocks)  # [blocks, block_size] float32
    return values.reshape(tensor.shape).to(dtype)


def dequantize_rows(tensor: GGUFTensor, index: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[len(index), ...] the values of the rows `index` only (a token table's lookup)."""
    return dequantize(tensor.select_rows(index.reshape(-1).to(tensor.data.device)), dtype)


# --- layers that keep their weight quantised ---

class GGUFLinear(nn.Module):
    """A linear layer whose weight stays a GGUF tensor (`qweight`: the raw bytes, a uint8 buffer,
    with the ggml type and torch shape beside it), dequantised to the input's dtype for each call
    (ComfyUI-GGUF's `GGMLLayer` / `dequantize_tensor`); the bias, if any, as stored."""

    def __init__(self, weight: GGUFTensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        if len(weight.shape) != 2:
            raise GGUFError(f"GGUF tensor {weight.name!r}: a linear weight needs 2 dimensions, got {tuple(weight.shape)}")
        self.out_features, self.in_features = (int(d) for d in weight.shape)
        self.register_buffer("qweight", weight.data)
        self.gguf_type = weight.type
        self.gguf_name = weight.name
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=False)

    def gguf_weight(self) -> GGUFTensor:
        return GGUFTensor(self.gguf_name, self.gguf_type, torch.Size((self.out_features, self.in_features)),
                          self.qweight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = dequantize(self.gguf_weight(), x.dtype, x.device)
        bias = None if self.bias is None else self.bias.to(device=x.device, dtype=x.dtype)
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, type={self.gguf_type.name}"


def quantized_names(tensors: Mapping[str, Any]) -> list[str]:
    """The names of the quantised GGUF tensors among `tensors` (a state dict that may mix them)."""
    return [name for name, t in tensors.items() if isinstance(t, GGUFTensor) and t.quantized]


__all__ = ["GGMLType", "GGML_TYPES", "GGUFError", "GGUFLinear", "GGUFTensor", "GGUFTypeError", "PLAIN_DTYPES",
           "TYPES_BY_NAME", "dequantize", "dequantize_rows", "quantized_names", "read_gguf"]
