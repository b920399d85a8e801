"""AUTOMATIC1111 hypernetworks (the "Hypernetwork" training of AUTOMATIC1111's
stable-diffusion-webui, after NovelAI's 2022 "hypernetworks" for Stable Diffusion): small MLPs
added to the attention keys and values, `k + strength * mlp_k(k)`, `v + strength * mlp_v(v)`,
picked by the key width (one pair per width: 320, 640, 768, 1280, ...).

File format (`.pt`, a pickled dict, read with `weights_only`): integer keys (the width) map to a
pair of state dicts (keys, values) of a `Sequential` whose parameterised layers are
`linear.N.weight/bias`, each optionally followed by a LayerNorm (`is_layer_norm`); top-level
flags `activation_func` ("linear", "relu", "leakyrelu", "elu", "swish" (hard swish), "tanh",
"sigmoid", "softsign", "mish"), `activate_output` (activate after the last linear too),
`use_dropout` / `last_layer_dropout`. Reading follows ComfyUI's
comfy_extras/nodes_hypernetwork.py: the parameterised layers in the file's order, a LayerNorm
consuming the next one when `is_layer_norm`. Dropout is an identity at inference and is left out
(ComfyUI 0.3.64 leaves its Dropout(0.3) layers in training mode, so its results are random there).

The network is kept as tensors and run functionally in the dtype and device of the attention
input, so the patch needs no `.to()` and is never mutated.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F

from comfy_core.model_patches.errors import ModelPatchError

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor] | None] = {
    "linear": None,
    "relu": F.relu,
    "leakyrelu": F.leaky_relu,
    "elu": F.elu,
    "swish": F.hardswish,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softsign": F.softsign,
    "mish": F.mish,
}


@dataclass(frozen=True)
class Layer:
    """One step of the MLP: "linear" (weight [out, in], bias), "norm" (LayerNorm weight, bias),
    or "act" (the activation by name)."""

    kind: str
    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None
    activation: str = ""


def run_layers(layers: tuple[Layer, ...], x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        if layer.kind == "linear":
            x = F.linear(x, layer.weight.to(x), layer.bias.to(x))
        elif layer.kind == "norm":
            x = F.layer_norm(x, (layer.weight.shape[0],), layer.weight.to(x), layer.bias.to(x))
        else:
            x = ACTIVATIONS[layer.activation](x)
    return x


def _stems(state: Mapping[str, Any]) -> list[str]:
    """The parameterised layers' names (`linear.N`) in file order (numeric order if all are `*.N`)."""
    stems = [k[: -len(".weight")] for k in state if k.endswith(".weight")]
    numbered = [re.search(r"(\d+)$", s) for s in stems]
    if all(numbered):
        stems.sort(key=lambda s: int(re.search(r"(\d+)$", s).group(1)))
    return stems


def build_layers(state: Mapping[str, torch.Tensor], activation: str, layer_norm: bool,
                 activate_output: bool) -> tuple[Layer, ...]:
    """The MLP of one state dict (see the module docstring)."""
    stems = _stems(state)
    layers: list[Layer] = []
    i = 0
    while i < len(stems):
        last = i == len(stems) - 1 or (layer_norm and i == len(stems) - 2)
        name = stems[i]
        if f"{name}.bias" not in state:
            raise ModelPatchError(f"hypernetwork layer {name!r} has a weight but no bias")
        layers.append(Layer("linear", state[f"{name}.weight"].detach().float(), state[f"{name}.bias"].detach().float()))
        if activation != "linear" and (not last or activate_output):
            layers.append(Layer("act", activation=activation))
        if layer_norm:
            i += 1
            if i >= len(stems):
                raise ModelPatchError(f"hypernetwork: is_layer_norm is set but {name!r} has no LayerNorm after it")
            norm = stems[i]
            layers.append(Layer("norm", state[f"{norm}.weight"].detach().float(), state[f"{norm}.bias"].detach().float()))
        i += 1
    return tuple(layers)


class Hypernetwork:
    """`attn1_patch` / `attn2_patch(q, k, v, extra_options) -> (q, k', v')` for the widths it has."""

    def __init__(self, networks: dict[int, tuple[tuple[Layer, ...], tuple[Layer, ...]]], strength: float,
                 source: Any = None) -> None:
        self.networks = networks
        self.strength = float(strength)
        self.source = source

    def __deepcopy__(self, memo: dict) -> "Hypernetwork":
        return self  # immutable

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra_options: dict) -> tuple:
        pair = self.networks.get(k.shape[-1])
        if pair is None:
            return q, k, v
        return q, k + run_layers(pair[0], k) * self.strength, v + run_layers(pair[1], v) * self.strength

    def cache_signature(self) -> tuple | None:
        """The file's identity (path, mtime, size) and the strength, or None without a source."""
        return None if self.source is None else ("Hypernetwork", self.source, self.strength)


def hypernetwork_from_state(sd: Mapping[Any, Any], strength: float, source: Any = None) -> Hypernetwork:
    """A `Hypernetwork` from a loaded A1111 hypernetwork dict (see the module docstring)."""
    activation = sd.get("activation_func", "linear")
    if activation not in ACTIVATIONS:
        raise ModelPatchError(f"hypernetwork activation_func {activation!r} is not supported "
                              f"(supported: {', '.join(ACTIVATIONS)})")
    layer_norm = bool(sd.get("is_layer_norm", False))
    activate_output = bool(sd.get("activate_output", False))
    networks: dict[int, tuple[tuple[Layer, ...], tuple[Layer, ...]]] = {}
    for key, value in sd.items():
        try:
            width = int(key)
        except (TypeError, ValueError):
            continue
        if not isinstance(value, (list, tuple)) or len(value) < 2 or not all(isinstance(s, Mapping) for s in value[:2]):
            raise ModelPatchError(f"hypernetwork entry {key!r} is not a pair of state dicts")
        networks[width] = (build_layers(value[0], activation, layer_norm, activate_output),
                           build_layers(value[1], activation, layer_norm, activate_output))
    if not networks:
        raise ModelPatchError("not an AUTOMATIC1111 hypernetwork: no width entries (e.g. 768: [keys, values])")
    return Hypernetwork(networks, strength, source)
