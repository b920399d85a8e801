"""ComfyUI's `comfy.weight_adapter` for node packs: its LoRA / LoHa / LoKr / GLoRA / OFT / BOFT adapter
classes over our LoRA parser and adapters (comfy_core/lora/loader.py, comfy_core/weights/adapters.py).

`XAdapter.load(x, lora, alpha, dora_scale, loaded_keys=None)` reads the record of layer `x` from
a LoRA state dict with our parser (every spelling it knows: kohya, diffusers, PEFT, ...), adds
the file keys it used to `loaded_keys`, and returns an adapter of that class, or None when the
layer is not of its kind (ComfyUI's protocol: the loader tries each class of `adapters`). An
adapter holds ComfyUI's `loaded_keys` and `weights` tuple and our adapter, whose maths both
`calculate_weight` (ComfyUI's call, inside `comfy.lora.calculate_weight`) and `apply_to` (our
patchers' protocol) run, so an adapter a pack builds is a patch our patchers apply.

The training-side classes (`create_train`, `to_train`, `*Diff`) are not here
(tests/compat/test_comfy_surface.py says why).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, Optional

import torch

from comfy_core.weights import adapters as core
from comfy_core.weights.adapters import factorization  # noqa: F401  (comfy.weight_adapter.lokr's)
from comfy_core.weights.function import identity
from compat.lora_api import pad_tensor_to_shape, weight_decompose  # noqa: F401  (comfy.weight_adapter.base's)

log = logging.getLogger(__name__)


class WeightAdapterBase:
    """ComfyUI's adapter base: `name`, `loaded_keys`, `weights`; `load` and `calculate_weight`."""

    name: str
    loaded_keys: set[str]
    weights: tuple
    _core_class: type = object

    def __init__(self, loaded_keys: set[str], weights: tuple, adapter: Any = None) -> None:
        self.loaded_keys = loaded_keys
        self.weights = weights
        self.adapter = adapter if adapter is not None else core.adapter_from_legacy(self.name, weights)

    @classmethod
    def load(cls, x: str, lora: Mapping[str, torch.Tensor], alpha: float | None, dora_scale: Any,
             loaded_keys: set[str] | None = None) -> Optional["WeightAdapterBase"]:
        """This class's adapter for layer `x` of `lora`, or None when `x` holds no record of its kind."""
        from comfy_core.lora.loader import parse_lora

        if loaded_keys is None:
            loaded_keys = set()
        own = {k: v for k, v in lora.items() if k.startswith(x)}
        parsed = parse_lora(own, {x: "weight"})
        adapter = parsed.patches.get("weight")
        if not isinstance(adapter, cls._core_class):
            return None
        if alpha is not None and hasattr(adapter, "alpha"):
            adapter.alpha = float(alpha)  # the caller's alpha wins, as ComfyUI's loaders pass it
        if dora_scale is not None and hasattr(adapter, "dora_scale"):
            adapter.dora_scale = dora_scale
        loaded_keys.update(set(own) - set(parsed.unmatched))
        return cls(loaded_keys, cls._weights_of(adapter), adapter)

    @staticmethod
    def _weights_of(adapter: Any) -> tuple:
        raise NotImplementedError

    def calculate_weight(self, weight: torch.Tensor, key: str, strength: float, strength_model: float,
                         offset: Any, function: Callable | None, intermediate_dtype: torch.dtype = torch.float32,
                         original_weight: torch.Tensor | None = None) -> torch.Tensor:
        """`weight` (already narrowed to `offset` by the caller) with this delta added at `strength`;
        a record that does not fit the weight is logged and the weight returned unchanged (ComfyUI's)."""
        try:
            return self.adapter.apply_to(weight, strength, function or identity)
        except Exception as exc:  # ComfyUI logs and keeps the weight
            log.error("ERROR %s %s %s", self.name, key, exc)
            return weight

    def apply_to(self, weight: torch.Tensor, strength: float, function: Callable) -> torch.Tensor:
        """Our patchers' protocol (comfy_core.weights.entries.WeightAdapter)."""
        return self.adapter.apply_to(weight, strength, function)

    def cache_signature(self) -> Any:
        method = getattr(self.adapter, "cache_signature", None)
        return None if method is None else method()


class LoRAAdapter(WeightAdapterBase):
    """`weights = (up, down, alpha, mid, dora_scale, reshape)`."""

    name = "lora"
    _core_class = core.LoraAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.up, a.down, a.alpha, a.mid, a.dora_scale, None)


class LoHaAdapter(WeightAdapterBase):
    """`weights = (w1a, w1b, alpha, w2a, w2b, t1, t2, dora_scale)`."""

    name = "loha"
    _core_class = core.LohaAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.w1a, a.w1b, a.alpha, a.w2a, a.w2b, a.t1, a.t2, None)


class LoKrAdapter(WeightAdapterBase):
    """`weights = (w1, w2, alpha, w1a, w1b, w2a, w2b, t2, dora_scale)`."""

    name = "lokr"
    _core_class = core.LokrAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.w1, a.w2, a.alpha, a.w1a, a.w1b, a.w2a, a.w2b, a.t2, None)


class GLoRAAdapter(WeightAdapterBase):
    """`weights = (a1, a2, b1, b2, alpha, dora_scale)`."""

    name = "glora"
    _core_class = core.GloraAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.a1, a.a2, a.b1, a.b2, a.alpha, None)


class OFTAdapter(WeightAdapterBase):
    """`weights = (blocks, rescale, alpha, dora_scale)`, `blocks` [k, n, n]; alpha is OFT's norm constraint."""

    name = "oft"
    _core_class = core.OftAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.blocks, a.rescale, a.alpha, None)


class BOFTAdapter(WeightAdapterBase):
    """`weights = (blocks, rescale, alpha, dora_scale)`, `blocks` [m, k, b, b]."""

    name = "boft"
    _core_class = core.BoftAdapter

    @staticmethod
    def _weights_of(a: Any) -> tuple:
        return (a.blocks, a.rescale, a.alpha, None)


# ComfyUI's order: the loader tries each class in turn
adapters: list[type[WeightAdapterBase]] = [LoRAAdapter, LoHaAdapter, LoKrAdapter, GLoRAAdapter, OFTAdapter, BOFTAdapter]
adapter_maps: dict[str, type[WeightAdapterBase]] = {"LoRA": LoRAAdapter, "LoHa": LoHaAdapter, "LoKr": LoKrAdapter,
                                                    "OFT": OFTAdapter}


def tucker_weight(wa: torch.Tensor, wb: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """A Tucker-decomposed weight: core `t` [r_a, r_b, ...] with factors `wa` [r_a, out] and
    `wb` [r_b, in] → [out, in, ...] (LyCORIS's LoHa / LoKr Tucker form)."""
    return torch.einsum("ij...,ip,jr->pr...", t, wa, wb)


def tucker_weight_from_conv(up: torch.Tensor, down: torch.Tensor, mid: torch.Tensor) -> torch.Tensor:
    """A LoCon delta with a Tucker core: `up` [out, r(,1,1)], `down` [r, in(,1,1)], `mid`
    [r, r, kh, kw] → [out, in, kh, kw] (unscaled)."""
    return torch.einsum("mn...,im,nj->ij...", mid, up.flatten(start_dim=1), down.flatten(start_dim=1))
