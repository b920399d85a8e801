"""LoRA-family weight adapters: low-rank and structured deltas added to a weight.

Each adapter implements the patchers' `WeightAdapter` protocol,
`apply_to(weight, strength, function) -> weight`, on an fp32 copy of the original weight:

    weight += function(strength * delta)          (DoRA re-normalises afterwards)

- `LoraAdapter`: Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"
  (arXiv:2106.09685): `delta = (alpha / rank) · up @ down`; with `mid` the LoCon/LyCORIS Tucker
  form for convolutions, `delta[o,i,h,w] = Σ_ab up[o,a] mid[a,b,h,w] down[b,i]`; with
  `dora_scale` the DoRA magnitude re-normalisation (Liu et al. 2024, arXiv:2402.09353).
- `LohaAdapter`: LoHa, the Hadamard product of two low-rank products (Hyeon-Woo et al. 2022,
  "FedPara", arXiv:2108.06098, as used by LyCORIS): `delta = (alpha/rank) (w1a@w1b) ⊙ (w2a@w2b)`.
- `LokrAdapter`: LoKr, a Kronecker product of two factors, each optionally low-rank
  (LyCORIS, Yeh et al. 2024, arXiv:2309.14859): `delta = (alpha/rank) kron(w1, w2)`.
- `OftAdapter`: OFT, an orthogonal rotation of the weight's output rows in blocks (Qiu et al.
  2023, "Controlling Text-to-Image Diffusion by Orthogonal Finetuning", arXiv:2306.07280):
  each block's `R = (I + Q)(I - Q)^-1` (Cayley) of the skew-symmetric `Q = B - Bᵀ`, its norm
  capped at `alpha` (alpha is a constraint here, not a scale); `W' = blockdiag(R)ᵀ W`.
- `BoftAdapter`: BOFT, the butterfly-factorised OFT (Liu et al. 2024, "Parameter-Efficient
  Orthogonal Finetuning via Butterfly Factorization", arXiv:2311.06243): `m` factors, each a
  block-diagonal rotation applied to the rows permuted by a butterfly stride, times `rescale`.
- `GloraAdapter`: GLoRA (Chavan et al. 2023, "One-for-All: Generalized LoRA",
  arXiv:2306.07967, LyCORIS's form): `delta = (alpha/rank) (W a1 a2 + b1 b2)` (older LyCORIS
  files: `b2 b1 + W a2 a1`).

The formulas follow the papers and the LyCORIS file conventions that ComfyUI reads
(comfy/weight_adapter/{lora,loha,lokr,oft,boft,glora}.py), including ComfyUI's use of the
strength for OFT and BOFT (it scales the rotation's difference from I and the delta again, so
`strength` s gives `s²` of the delta; at 1 the rotation exactly); the code is written here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable

import torch

from comfy_core.weights.errors import PatchDataError
from comfy_core.weights.function import Function, identity


def _fit(delta: torch.Tensor, weight: torch.Tensor, what: str) -> torch.Tensor:
    """Reshape a delta to the weight's shape (linear LoRA on a 1x1 conv and the like); sizes must agree."""
    if delta.numel() != weight.numel():
        raise PatchDataError(
            f"{what}: delta of shape {tuple(delta.shape)} does not fit weight of shape {tuple(weight.shape)}")
    return delta.reshape(weight.shape)


def pad_to_shape(weight: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """`weight` in the top-left corner of zeros of `shape` (ComfyUI's `pad_tensor_to_shape`: a
    LoRA that widens its layer, as BFL's Flux control LoRAs widen `img_in`); `weight` itself when
    it already has that shape. Raises `PatchDataError` when `shape` is smaller on some axis or has
    another number of axes."""
    shape = tuple(int(n) for n in shape)
    if tuple(weight.shape) == shape:
        return weight
    if len(shape) != weight.dim() or any(n < have for n, have in zip(shape, weight.shape)):
        raise PatchDataError(f"cannot widen a weight of shape {tuple(weight.shape)} to {shape}")
    padded = weight.new_zeros(shape)
    padded[tuple(slice(0, n) for n in weight.shape)] = weight
    return padded


def _scale(alpha: float | None, rank: int) -> float:
    return 1.0 if alpha is None else float(alpha) / rank


def lora_delta(up: torch.Tensor, down: torch.Tensor, mid: torch.Tensor | None = None) -> torch.Tensor:
    """`up @ down` as a flat `[out, in·kh·kw]` matrix (unscaled); `mid` is the Tucker core."""
    up2 = up.flatten(start_dim=1)  # [out, r]
    if mid is None:
        return up2 @ down.flatten(start_dim=1)  # [out, in·kh·kw]
    down2 = down.flatten(start_dim=1)  # [r_b, in]
    core = torch.einsum("abhw,bi->aihw", mid, down2)  # [r_a, in, kh, kw]
    return up2 @ core.flatten(start_dim=1)


def dora_renormalise(weight: torch.Tensor, patched: torch.Tensor, dora_scale: torch.Tensor,
                     strength: float) -> torch.Tensor:
    """DoRA: rescale `patched` so its per-column (or per-output-row) norm equals `dora_scale`.

    Liu et al. 2024 (arXiv:2402.09353), `W' = m · (W + ΔW) / ‖W + ΔW‖`. Files store `m` either as
    `[1, in, ...]` (norm over every axis but the input axis, the paper's column norm) or as
    `[out, 1, ...]` (norm per output row). `strength` interpolates between W and W'.
    """
    out_axis = dora_scale.shape[0] == patched.shape[0] and patched.shape[0] != 1
    if out_axis:
        norm = patched.reshape(patched.shape[0], -1).norm(dim=1)  # [out]
        norm = norm.reshape(patched.shape[0], *[1] * (patched.dim() - 1))
    else:
        norm = patched.transpose(0, 1).reshape(patched.shape[1], -1).norm(dim=1)  # [in]
        norm = norm.reshape(1, patched.shape[1], *[1] * (patched.dim() - 2))
    result = patched * (dora_scale.reshape(norm.shape) / norm)
    if strength != 1.0:
        result = weight + strength * (result - weight)
    return result


class _FileRecord:
    """Where an adapter's tensors came from, for signatures that survive re-reading the file.

    `source` names the file's state (path, mtime, size); with `name` (file and layer) it fixes
    every tensor of the adapter. Without a source an adapter is known by identity only.
    """

    source: Hashable | None
    name: str

    def cache_signature(self) -> Hashable | None:
        if self.source is None:
            return None
        return (type(self).__name__, self.source, self.name)


@dataclass(eq=False)
class LoraAdapter(_FileRecord):
    """A (LoCon / DoRA) LoRA record for one weight; `eq=False` keeps identity-based signatures."""

    up: torch.Tensor  # [out, r] or [out, r, 1, 1]
    down: torch.Tensor  # [r, in] or [r, in, kh, kw]
    alpha: float | None = None
    mid: torch.Tensor | None = None  # [r, r, kh, kw]
    dora_scale: torch.Tensor | None = None
    name: str = ""
    source: Hashable | None = None
    # The weight's shape after this LoRA (a `.reshape_weight` record: the weight zero-padded to it
    # first, ComfyUI's LoRA `reshape`); None: the weight keeps its shape.
    reshape: tuple[int, ...] | None = None

    @property
    def rank(self) -> int:
        return self.down.shape[0]

    def delta(self, weight: torch.Tensor) -> torch.Tensor:
        """The scaled delta `(alpha/rank)·up@down` in `weight`'s shape, dtype and device (after
        any `reshape`)."""
        up, down = (t.to(weight.device, weight.dtype) for t in (self.up, self.down))
        mid = None if self.mid is None else self.mid.to(weight.device, weight.dtype)
        return _fit(lora_delta(up, down, mid), weight, f"LoRA {self.name!r}") * _scale(self.alpha, self.rank)

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        if self.reshape is not None:
            weight = pad_to_shape(weight, self.reshape)
        if self.dora_scale is None and self.mid is None and function is identity and weight.is_contiguous():
            # The common case without temporaries: weight += (strength·alpha/rank) up @ down, in place.
            up2 = self.up.flatten(start_dim=1).to(weight.device, weight.dtype)  # [out, r]
            down2 = self.down.flatten(start_dim=1).to(weight.device, weight.dtype)  # [r, in·kh·kw]
            flat = weight.view(weight.shape[0], -1)  # [out, in·kh·kw]
            if up2.shape[0] == flat.shape[0] and down2.shape[1] == flat.shape[1]:
                flat.addmm_(up2, down2, alpha=strength * _scale(self.alpha, self.rank))
                return weight
        delta = self.delta(weight)
        if self.dora_scale is None:
            weight += function(strength * delta)
            return weight
        patched = weight + function(delta)
        return dora_renormalise(weight, patched, self.dora_scale.to(weight.device, weight.dtype), strength)


@dataclass(eq=False)
class LohaAdapter(_FileRecord):
    """A LoHa record: two low-rank products multiplied elementwise (optional Tucker cores)."""

    w1a: torch.Tensor  # [out, r], or [r, out] with t1
    w1b: torch.Tensor  # [r, in·kh·kw], or [r, in] with t1
    w2a: torch.Tensor
    w2b: torch.Tensor
    alpha: float | None = None
    t1: torch.Tensor | None = None  # [r, r, kh, kw]
    t2: torch.Tensor | None = None
    name: str = ""
    source: Hashable | None = None

    @property
    def rank(self) -> int:
        return self.w1b.shape[0]

    def delta(self, weight: torch.Tensor) -> torch.Tensor:
        cast = lambda t: None if t is None else t.to(weight.device, weight.dtype)  # noqa: E731
        m1 = _hada_factor(cast(self.w1a), cast(self.w1b), cast(self.t1))
        m2 = _hada_factor(cast(self.w2a), cast(self.w2b), cast(self.t2))
        return _fit(m1 * m2, weight, f"LoHa {self.name!r}") * _scale(self.alpha, self.rank)

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        weight += function(strength * self.delta(weight))
        return weight


def _hada_factor(a: torch.Tensor, b: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor:
    if t is None:
        return a @ b  # [out, in·kh·kw]
    # LyCORIS Tucker form: a is [r, out], b is [r, in], t is [r, r, kh, kw].
    return torch.einsum("ijhw,jr,ip->prhw", t, b, a)  # [out, in, kh, kw]


@dataclass(eq=False)
class LokrAdapter(_FileRecord):
    """A LoKr record: `kron(w1, w2)`, each factor full or a low-rank product (w2 maybe Tucker)."""

    w1: torch.Tensor | None = None
    w2: torch.Tensor | None = None
    w1a: torch.Tensor | None = None
    w1b: torch.Tensor | None = None
    w2a: torch.Tensor | None = None
    w2b: torch.Tensor | None = None
    t2: torch.Tensor | None = None
    alpha: float | None = None
    name: str = ""
    source: Hashable | None = None

    def __post_init__(self) -> None:
        if self.w1 is None and (self.w1a is None or self.w1b is None):
            raise PatchDataError(f"LoKr {self.name!r}: needs lokr_w1 or both lokr_w1_a and lokr_w1_b")
        if self.w2 is None and (self.w2a is None or self.w2b is None):
            raise PatchDataError(f"LoKr {self.name!r}: needs lokr_w2 or both lokr_w2_a and lokr_w2_b")

    @property
    def rank(self) -> int | None:
        """The rank of the low-rank factor, which alpha scales against (None: both factors full)."""
        if self.w1b is not None:
            return self.w1b.shape[0]
        if self.w2b is not None:
            return self.w2b.shape[0]
        return None

    def delta(self, weight: torch.Tensor) -> torch.Tensor:
        cast = lambda t: None if t is None else t.to(weight.device, weight.dtype)  # noqa: E731
        w1 = cast(self.w1) if self.w1 is not None else cast(self.w1a) @ cast(self.w1b)
        if self.w2 is not None:
            w2 = cast(self.w2)
        elif self.t2 is not None:
            w2 = torch.einsum("ijhw,ip,jr->prhw", cast(self.t2), cast(self.w2a), cast(self.w2b))
        else:
            w2 = cast(self.w2a) @ cast(self.w2b)
        if w2.dim() == 4 and w1.dim() == 2:
            w1 = w1[:, :, None, None]  # kron over the kernel axes keeps w2's kernel
        rank = self.rank
        scale = 1.0 if rank is None else _scale(self.alpha, rank)
        return _fit(torch.kron(w1, w2), weight, f"LoKr {self.name!r}") * scale

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        weight += function(strength * self.delta(weight))
        return weight


def cayley_rotations(blocks: torch.Tensor, constraint: float | None) -> torch.Tensor:
    """Orthogonal matrices `(I + Q)(I - Q)^-1` for the skew-symmetric `Q = B - Bᵀ` of each block
    `B` (`blocks` [..., n, n]); with a positive `constraint`, Q is first scaled down so that its
    norm (over all blocks together) is at most the constraint (LyCORIS's OFT/BOFT). fp32 inverse."""
    q = blocks - blocks.transpose(-1, -2)
    if constraint is not None and constraint > 0:
        norm = torch.linalg.vector_norm(q) + 1e-8
        if norm > constraint:
            q = q * (constraint / norm)
    eye = torch.eye(blocks.shape[-1], device=blocks.device, dtype=blocks.dtype)
    return ((eye + q) @ torch.linalg.inv((eye - q).float()).to(q.dtype))


@dataclass(eq=False)
class OftAdapter(_FileRecord):
    """An OFT record: `k` rotation blocks of size `n` over the weight's `k·n` output rows."""

    blocks: torch.Tensor  # [k, n, n]
    rescale: torch.Tensor | None = None  # loaded but, as in ComfyUI's OFT, not applied
    alpha: float | None = None  # the norm constraint (0 or None: none)
    name: str = ""
    source: Hashable | None = None

    def delta(self, weight: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
        """`(blockdiag(R)ᵀ - I) W` with R moved toward I by `strength` (ComfyUI: `R·s - s·I`)."""
        k, n, _ = self.blocks.shape
        if k * n != weight.shape[0]:
            raise PatchDataError(f"OFT {self.name!r}: {k} blocks of {n} rows do not cover a weight of "
                                 f"shape {tuple(weight.shape)}")
        r = cayley_rotations(self.blocks.to(weight.device, weight.dtype), self.alpha)  # [k, n, n]
        eye = torch.eye(n, device=weight.device, dtype=weight.dtype)
        rows = weight.reshape(k, n, *weight.shape[1:])  # [k, n, ...]
        # out[k, m, ...] = sum_n (s·R - s·I)[k, n, m] · W[k, n, ...]
        return torch.einsum("knm,kn...->km...", strength * r - strength * eye, rows).reshape(weight.shape)

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        weight += function(strength * self.delta(weight, strength))
        return weight


@dataclass(eq=False)
class BoftAdapter(_FileRecord):
    """A BOFT record: `m` butterfly factors of `k` rotation blocks of size `b` each."""

    blocks: torch.Tensor  # [m, k, b, b]
    rescale: torch.Tensor | None = None  # [out, 1, ...]: multiplies the rotated weight
    alpha: float | None = None  # the norm constraint
    name: str = ""
    source: Hashable | None = None

    def rotated(self, weight: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
        """The weight's rows through every butterfly factor (each rotation moved toward I by
        `strength` when it is not 1), times `rescale`."""
        m, k, b, _ = self.blocks.shape
        if k * b != weight.shape[0] or b % 2:
            raise PatchDataError(f"BOFT {self.name!r}: {k} blocks of {b} rows do not cover a weight of "
                                 f"shape {tuple(weight.shape)}")
        r = cayley_rotations(self.blocks.to(weight.device, weight.dtype), self.alpha)  # [m, k, b, b]
        eye = torch.eye(b, device=weight.device, dtype=weight.dtype)
        out = weight
        for i in range(m):
            rot = r[i] if strength == 1 else r[i] * strength + (1 - strength) * eye  # [k, b, b]
            stride = 2 ** i * (b // 2)
            # rows grouped (., 2, stride) are interleaved to (., stride, 2): the butterfly's pairing
            perm = out.unflatten(0, (-1, 2, stride)).transpose(1, 2).flatten(0, 2)
            perm = torch.einsum("kij,kj...->ki...", rot, perm.unflatten(0, (-1, b)))  # [k, b, ...]
            out = perm.flatten(0, 1).unflatten(0, (-1, stride, 2)).transpose(1, 2).flatten(0, 2)
        if self.rescale is not None:
            out = out * self.rescale.to(weight.device, weight.dtype)
        return out

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        delta = self.rotated(weight, strength) - weight
        weight += function(strength * delta)
        return weight


@dataclass(eq=False)
class GloraAdapter(_FileRecord):
    """A GLoRA record: `a1`, `a2` act on the weight itself, `b1`, `b2` add a low-rank term."""

    a1: torch.Tensor
    a2: torch.Tensor
    b1: torch.Tensor
    b2: torch.Tensor
    alpha: float | None = None
    name: str = ""
    source: Hashable | None = None

    def layout(self, weight: torch.Tensor) -> tuple[bool, int]:
        """(older LyCORIS layout?, rank), from the factors' shapes as ComfyUI tells them apart."""
        a1, a2, b1, b2 = self.a1.shape, self.a2.shape, self.b1.shape, self.b2.shape
        old = b2[1] == b1[0] == a1[0] == a2[1]
        rank = a1[0] if old else None
        if b2[0] == b1[1] == a1[1] == a2[0]:
            if not (old and a2[0] == weight.shape[0] and weight.shape[0] == weight.shape[1]):
                old, rank = False, a2[0]
        flat = lambda shape: (shape[0], math.prod(shape[1:]))  # noqa: E731 -- as the factors are flattened
        (a1r, a1c), (a2r, a2c), (b1r, b1c), (b2r, b2c) = flat(a1), flat(a2), flat(b1), flat(b2)
        cols = math.prod(weight.shape[1:])
        if old:  # b2 b1 + W a2 a1
            fits = a2r == cols and a1c == cols and b2r * b1c == weight.numel()
        else:  # W a1 a2 + b1 b2, a1 and a2 acting on the input channels
            fits = weight.dim() >= 2 and a1r == weight.shape[1] and a2c == weight.shape[1] \
                and b1r * b2c == weight.numel()
        if rank is None or not fits:
            raise PatchDataError(f"GLoRA {self.name!r}: factor shapes {tuple(a1)}, {tuple(a2)}, {tuple(b1)}, "
                                 f"{tuple(b2)} do not fit a weight of shape {tuple(weight.shape)}")
        return old, rank

    def delta(self, weight: torch.Tensor) -> torch.Tensor:
        old, rank = self.layout(weight)
        a1, a2, b1, b2 = (t.flatten(start_dim=1).to(weight.device, weight.dtype)
                          for t in (self.a1, self.a2, self.b1, self.b2))
        if old:
            delta = b2 @ b1 + (weight.flatten(start_dim=1) @ a2) @ a1
        elif weight.dim() > 2:  # the factors act on the input-channel axis of a convolution
            delta = torch.einsum("oi...,ij->oj...", torch.einsum("oi...,ij->oj...", weight, a1), a2)
            delta = delta.reshape(weight.shape) + (b1 @ b2).reshape(weight.shape)
        else:
            delta = (weight @ a1) @ a2 + b1 @ b2
        return _fit(delta, weight, f"GLoRA {self.name!r}") * _scale(self.alpha, rank)

    def apply_to(self, weight: torch.Tensor, strength: float, function: Function) -> torch.Tensor:
        weight += function(strength * self.delta(weight))
        return weight


def adapter_from_legacy(kind: str, args: tuple, name: str = "") -> Any:
    """An adapter from ComfyUI's older tuple patch values, which some node packs still build:
    `("lora", (up, down, alpha, mid, dora_scale[, reshape]))`,
    `("loha", (w1a, w1b, alpha, w2a, w2b, t1, t2[, dora_scale]))`,
    `("lokr", (w1, w2, alpha, w1a, w1b, w2a, w2b, t2[, dora_scale]))`, and ComfyUI's adapter
    tuples `("oft" | "boft", (blocks, rescale, alpha, dora_scale))`,
    `("glora", (a1, a2, b1, b2, alpha, dora_scale))`.
    A DoRA scale on the LyCORIS kinds is not supported and raises."""
    args = tuple(args) + (None,) * 9
    if kind == "lora":
        up, down, alpha, mid, dora = args[:5]
        return LoraAdapter(up, down, _alpha(alpha), mid, dora, name)
    if kind == "loha":
        if args[7] is not None:
            raise PatchDataError(f"LoHa {name!r}: DoRA scale on LoHa is not supported")
        w1a, w1b, alpha, w2a, w2b, t1, t2 = args[:7]
        return LohaAdapter(w1a, w1b, w2a, w2b, _alpha(alpha), t1, t2, name)
    if kind == "lokr":
        if args[8] is not None:
            raise PatchDataError(f"LoKr {name!r}: DoRA scale on LoKr is not supported")
        w1, w2, alpha, w1a, w1b, w2a, w2b, t2 = args[:8]
        return LokrAdapter(w1, w2, w1a, w1b, w2a, w2b, t2, _alpha(alpha), name)
    if kind in ("oft", "boft"):
        blocks, rescale, alpha, dora = args[:4]
        if dora is not None:
            raise PatchDataError(f"{kind.upper()} {name!r}: DoRA scale on {kind.upper()} is not supported")
        cls = OftAdapter if kind == "oft" else BoftAdapter
        return cls(blocks, rescale, _alpha(alpha), name)
    if kind == "glora":
        a1, a2, b1, b2, alpha, dora = args[:6]
        if dora is not None:
            raise PatchDataError(f"GLoRA {name!r}: DoRA scale on GLoRA is not supported")
        return GloraAdapter(a1, a2, b1, b2, _alpha(alpha), name)
    raise PatchDataError(f"weight patch {name!r}: unknown patch kind {kind!r}")


def _alpha(value: float | torch.Tensor | None) -> float | None:
    if isinstance(value, torch.Tensor):
        return float(value.float().item())
    return None if value is None else float(value)


def factorization(dimension: int, factor: int = -1) -> tuple[int, int]:
    """LyCORIS's split of `dimension` into `(m, n)`, `m * n == dimension`, `m <= n` (the LoKr
    factor shapes): `(factor, dimension // factor)` when `factor` divides `dimension` and its
    square does not exceed it, else the most balanced divisor pair whose smaller part is at most
    `factor` (any size for -1)."""
    if factor > 0 and dimension % factor == 0 and dimension >= factor * factor:
        m, n = factor, dimension // factor
        return (m, n) if m <= n else (n, m)
    limit = dimension if factor < 0 else factor
    best = (1, dimension)
    for m in range(2, math.isqrt(dimension) + 1):
        if m > limit:
            break
        if dimension % m == 0:
            best = (m, dimension // m)
    return best
