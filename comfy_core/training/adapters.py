"""Trainable adapters for every trainable layer of a diffusion model, named as ComfyUI saves them.

Behaviour of today's ComfyUI's comfy_extras/nodes_train.py (`_setup_lora_adapters`,
`_create_weight_adapter`, `_create_bias_adapter`) and the `create_train` of its
comfy/weight_adapter/{lora,loha,lokr}.py, written here over our own adapter records
(comfy_core/weights/adapters.py) so that the forward-time bypass (comfy_core/patching/bypass.py)
runs them:

- a layer with a weight of two or more axes (linear, convolution) gets an adapter of the chosen
  algorithm: LoRA `up [out, rank]` (Kaiming-uniform, a=√5) and `down [rank, in·k…]` (zeros), so
  the start is the base model exactly; LoHa `w1a`, `w2a` (normal, mean 0.1), `w1b` (zeros), `w2b`
  (normal, mean 0.01); LoKr the full factors `w1 [out_l, in_m]` (zeros) and `w2 [out_k, in_n, k…]`
  (Kaiming-uniform), the dimensions split by LyCORIS's `factorization(dim, rank)`. Alpha is 1.
- a 1-D weight (a norm layer's scale) gets a full diff `diff` (zeros), every bias a `diff_b`.
- a layer the file given to resume from (`existing`: parameter name -> record, as
  `comfy_core.lora.parse_lora` gives) already adapts keeps that record's kind and values, whatever
  the algorithm; its diffs and bias diffs too (ComfyUI starts those at zero again).

The state dict (ComfyUI's LORA_MODEL) names each tensor `<module>.<name>` with ComfyUI's names:
`lora_up.weight`, `lora_down.weight` (`lora_mid.weight`), `hada_w1_a` … `hada_w2_b`
(`hada_t1`, `hada_t2`), `lokr_w1`, `lokr_w2` (or their `_a` / `_b` halves, `lokr_t2`), `alpha`,
`diff`, `diff_b`; LoraLoader reads every one of them back. The layers trained are the linear,
convolution (not transposed) and GroupNorm / LayerNorm / RMSNorm layers of the network under
`diffusion_model.` (ComfyUI's: the layers with a `weight_function`, which are those).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import nn

from comfy_core.patching.bypass import norm_kind
from comfy_core.weights.adapters import LohaAdapter, LokrAdapter, LoraAdapter, factorization

# ComfyUI's `adapter_maps` keys, in its order (comfy/weight_adapter/__init__.py); the first is the default.
ALGORITHMS = ("LoRA", "LoHa", "LoKr", "OFT")
TRAINABLE_ALGORITHMS = ("LoRA", "LoHa", "LoKr")
NETWORK_PREFIX = "diffusion_model"


class TrainingSetupError(ValueError):
    """Settings, data or a LoRA to resume from that the trainer cannot use: `input_name` is the
    TrainLoraNode input at fault, the message says what was expected and received."""

    def __init__(self, message: str, input_name: str = "model") -> None:
        super().__init__(message)
        self.input_name = input_name


@dataclass
class TrainableLayer:
    """One layer's trainable records and the state-dict tensors behind them.

    `patches` maps the layer's parameter names (`<module>.weight`, `<module>.bias`) to records the
    bypass runs (adapters whose tensors are `params`' parameters, or `("diff", (param,))`);
    `tensors` maps ComfyUI's state-dict suffixes to those tensors (and the alpha)."""

    module: str
    patches: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def parameters(self) -> list[nn.Parameter]:
        return [t for t in self.tensors.values() if isinstance(t, nn.Parameter) and t.requires_grad]


def is_trainable_layer(module: nn.Module) -> bool:
    """A linear, (non-transposed) convolution or norm layer that has a weight."""
    if getattr(module, "weight", None) is None or not isinstance(module.weight, torch.Tensor):
        return False
    return isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) or norm_kind(module) is not None


def trainable_modules(root: nn.Module) -> list[tuple[str, nn.Module]]:
    """(dotted name relative to `root`, layer) of every trainable layer of `root.diffusion_model`."""
    return [(name, m) for name, m in root.named_modules()
            if (name == NETWORK_PREFIX or name.startswith(NETWORK_PREFIX + ".")) and is_trainable_layer(m)]


def _param(tensor: torch.Tensor, dtype: torch.dtype, device: torch.device, trainable: bool = True) -> nn.Parameter:
    return nn.Parameter(tensor.detach().to(device=device, dtype=dtype).clone(), requires_grad=trainable)


def _alpha(value: float | None, dtype: torch.dtype, device: torch.device) -> nn.Parameter:
    return _param(torch.tensor(1.0 if value is None else float(value)), dtype, device, trainable=False)


def _kaiming(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    t = torch.empty(shape, dtype=torch.float32)
    nn.init.kaiming_uniform_(t, a=math.sqrt(5), generator=generator)
    return t


def _normal(shape: tuple[int, ...], mean: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=torch.float32) + mean


def _new_adapter(algorithm: str, weight: torch.Tensor, rank: int, dtype: torch.dtype, device: torch.device,
                 generator: torch.Generator) -> tuple[Any, dict[str, torch.Tensor]]:
    """A fresh record of `algorithm` for a weight of `weight.shape`, and its named tensors."""
    out_dim, in_flat = weight.shape[0], math.prod(weight.shape[1:])
    if algorithm == "LoRA":
        up = _param(_kaiming((out_dim, rank), generator), dtype, device)
        down = _param(torch.zeros(rank, in_flat), dtype, device)
        alpha = _alpha(1.0, dtype, device)
        return (LoraAdapter(up, down, 1.0, name="trained"),
                {"lora_up.weight": up, "lora_down.weight": down, "alpha": alpha})
    if algorithm == "LoHa":
        w1a = _param(_normal((out_dim, rank), 0.1, generator), dtype, device)
        w1b = _param(torch.zeros(rank, in_flat), dtype, device)
        w2a = _param(_normal((out_dim, rank), 0.1, generator), dtype, device)
        w2b = _param(_normal((rank, in_flat), 0.01, generator), dtype, device)
        alpha = _alpha(1.0, dtype, device)
        return (LohaAdapter(w1a, w1b, w2a, w2b, 1.0, name="trained"),
                {"hada_w1_a": w1a, "hada_w1_b": w1b, "hada_w2_a": w2a, "hada_w2_b": w2b, "alpha": alpha})
    if algorithm == "LoKr":
        out_l, out_k = factorization(out_dim, rank)
        in_m, in_n = factorization(weight.shape[1], rank)
        w1 = _param(torch.zeros(out_l, in_m), dtype, device)
        w2 = _param(_kaiming((out_k, in_n, *weight.shape[2:]), generator), dtype, device)
        alpha = _alpha(1.0, dtype, device)
        return (LokrAdapter(w1, w2, None, None, None, None, None, 1.0, name="trained"),
                {"lokr_w1": w1, "lokr_w2": w2, "alpha": alpha})
    raise TrainingSetupError(f"algorithm {algorithm!r}: training here supports {', '.join(TRAINABLE_ALGORITHMS)} "
                             f"(an {algorithm} adapter is not a forward-time additive one)", "algorithm")


def _resumed_adapter(record: Any, where: str, dtype: torch.dtype,
                     device: torch.device) -> tuple[Any, dict[str, torch.Tensor]]:
    """A trainable copy of a record read from the LoRA to resume from, and its named tensors."""
    p = lambda t: None if t is None else _param(t, dtype, device)  # noqa: E731
    if isinstance(record, LoraAdapter):
        if record.dora_scale is not None or record.reshape is not None:
            raise TrainingSetupError(f"existing_lora: {where} is a DoRA or reshaping LoRA record, which training "
                                     "here cannot continue", "existing_lora")
        up, down, mid = p(record.up), p(record.down), p(record.mid)
        tensors = {"lora_up.weight": up, "lora_down.weight": down}
        if mid is not None:
            tensors["lora_mid.weight"] = mid
        tensors["alpha"] = _alpha(record.alpha if record.alpha is not None else record.rank, dtype, device)
        return LoraAdapter(up, down, record.alpha, mid, name="resumed"), tensors
    if isinstance(record, LohaAdapter):
        parts = {"hada_w1_a": p(record.w1a), "hada_w1_b": p(record.w1b), "hada_w2_a": p(record.w2a),
                 "hada_w2_b": p(record.w2b), "hada_t1": p(record.t1), "hada_t2": p(record.t2)}
        tensors = {k: v for k, v in parts.items() if v is not None}
        tensors["alpha"] = _alpha(record.alpha if record.alpha is not None else record.rank, dtype, device)
        return (LohaAdapter(parts["hada_w1_a"], parts["hada_w1_b"], parts["hada_w2_a"], parts["hada_w2_b"],
                            record.alpha, parts["hada_t1"], parts["hada_t2"], name="resumed"), tensors)
    if isinstance(record, LokrAdapter):
        parts = {"lokr_w1": p(record.w1), "lokr_w2": p(record.w2), "lokr_w1_a": p(record.w1a),
                 "lokr_w1_b": p(record.w1b), "lokr_w2_a": p(record.w2a), "lokr_w2_b": p(record.w2b),
                 "lokr_t2": p(record.t2)}
        tensors = {k: v for k, v in parts.items() if v is not None}
        if record.alpha is not None:
            tensors["alpha"] = _alpha(record.alpha, dtype, device)
        return (LokrAdapter(parts["lokr_w1"], parts["lokr_w2"], parts["lokr_w1_a"], parts["lokr_w1_b"],
                            parts["lokr_w2_a"], parts["lokr_w2_b"], parts["lokr_t2"], record.alpha, name="resumed"),
                tensors)
    raise TrainingSetupError(f"existing_lora: {where} holds a {type(record).__name__} record, which training here "
                             "cannot continue (LoRA, LoHa, LoKr and full diffs can be)", "existing_lora")


def _diff(existing: Any, shape: torch.Size, where: str, dtype: torch.dtype, device: torch.device) -> nn.Parameter:
    """A full diff parameter: zeros, or the diff the LoRA to resume from holds for it."""
    if existing is None:
        return _param(torch.zeros(shape), dtype, device)
    if not (isinstance(existing, tuple) and len(existing) == 2 and existing[0] == "diff"):
        raise TrainingSetupError(f"existing_lora: {where} holds a {type(existing).__name__} record where training "
                                 "keeps a full diff", "existing_lora")
    tensor = existing[1][0]
    if tensor.numel() != math.prod(shape):
        raise TrainingSetupError(f"existing_lora: {where} has shape {tuple(tensor.shape)}, the layer {tuple(shape)}",
                                 "existing_lora")
    return _param(tensor.reshape(shape), dtype, device)


def trainable_layers(root: nn.Module, algorithm: str, rank: int, dtype: torch.dtype, device: torch.device,
                     generator: torch.Generator, existing: Mapping[Any, Any] | None = None) -> list[TrainableLayer]:
    """The trainable records of every trainable layer of `root` (see the module docstring)."""
    if algorithm not in ALGORITHMS:
        raise TrainingSetupError(f"algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}", "algorithm")
    if not isinstance(rank, int) or rank < 1:
        raise TrainingSetupError(f"rank must be a positive integer, got {rank!r}", "rank")
    existing = dict(existing or {})
    layers: list[TrainableLayer] = []
    for name, module in trainable_modules(root):
        layer = TrainableLayer(name)
        weight_key, bias_key = f"{name}.weight", f"{name}.bias"
        if module.weight.dim() >= 2:
            old = existing.get(weight_key)
            if old is not None:
                record, tensors = _resumed_adapter(old, weight_key, dtype, device)
            else:
                record, tensors = _new_adapter(algorithm, module.weight, rank, dtype, device, generator)
            layer.patches[weight_key] = record
            layer.tensors.update(tensors)
        else:
            diff = _diff(existing.get(weight_key), module.weight.shape, weight_key, dtype, device)
            layer.patches[weight_key] = ("diff", (diff,))
            layer.tensors["diff"] = diff
        if getattr(module, "bias", None) is not None:
            diff_b = _diff(existing.get(bias_key), module.bias.shape, bias_key, dtype, device)
            layer.patches[bias_key] = ("diff", (diff_b,))
            layer.tensors["diff_b"] = diff_b
        layers.append(layer)
    return layers


def lora_state_dict(layers: list[TrainableLayer], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """ComfyUI's LORA_MODEL: `<module>.<name>` -> a detached CPU copy in `dtype`."""
    return {f"{layer.module}.{suffix}": tensor.detach().to(device="cpu", dtype=dtype).clone()
            for layer in layers for suffix, tensor in layer.tensors.items()}


def frozen_patches(layers: list[TrainableLayer]) -> dict[str, Any]:
    """The layers' records with detached copies of their tensors, for inference."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, record in layer.patches.items():
            out[key] = _detached(record)
    return out


def _detached(record: Any) -> Any:
    if isinstance(record, tuple):
        return (record[0], tuple(t.detach().clone() for t in record[1]))
    fields = {f: getattr(record, f) for f in record.__dataclass_fields__}
    fields = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
    return type(record)(**fields)
